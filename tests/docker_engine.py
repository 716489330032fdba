"""A real Docker engine for the image tests, installed and started by the test set-up itself.

- :func:`ensure_engine` makes ``docker info`` answer: it installs Debian's ``docker.io`` (and
  ``debootstrap``, for the stand-in base) with apt-get when ``dockerd`` is missing, starts
  ``dockerd`` when no engine answers, and waits until it does. Debian bookworm has no buildx
  package: docker.io's own 20.10 client runs BuildKit (``sglpatch.ship.image_builder.find_builder``).
- :class:`Engine` stops only what it started.
- :func:`private_engine` starts a throw-away second engine (own data root on a size-limited tmpfs,
  own socket, the default engine's ``docker0`` bridge) for tests that kill an engine or fill its
  disk, so the shared engine and its cached images never suffer.

Failures raise :class:`EngineError` with one line that names the cause; the image tests turn it
into a failure (never a skip).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from sglpatch.ship.image import Builder, find_builder

APT_PACKAGES = ("docker.io", "debootstrap")
READY_TIMEOUT = 90.0


class EngineError(RuntimeError):
    """The engine cannot be had: the message is one line naming the cause."""


def _say(progress: Callable[[str], None] | None, message: str) -> None:
    if progress:
        progress(message)


def _answers(builder: Builder, host: str | None = None) -> bool:
    env = {**os.environ, **({"DOCKER_HOST": host} if host else {})}
    out = subprocess.run(
        [builder.client, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, env=env
    )
    return out.returncode == 0 and bool(out.stdout.strip())


def apt_install(packages: tuple[str, ...], progress=None) -> None:
    if os.geteuid() != 0:
        raise EngineError(
            f"installing {', '.join(packages)} needs root (apt-get): run the tests as root or install them first"
        )
    if shutil.which("apt-get") is None:
        raise EngineError(f"apt-get is missing: install {', '.join(packages)} by hand")
    _say(progress, f"installing {' '.join(packages)} from Debian (apt-get, one time)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ):
        out = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            last = (out.stderr or out.stdout).strip().splitlines()
            raise EngineError(f"`{' '.join(argv[:2])}` failed: {last[-1] if last else out.returncode}")


def compose_cli(progress=None) -> str:
    """Debian's docker-compose (v1, the Python tool these machines have), installed if missing."""
    if shutil.which("docker-compose") is None:
        apt_install(("docker-compose",), progress)
    return shutil.which("docker-compose")


class Engine:
    """The engine the image tests use; ``stop()`` ends it only if :func:`ensure_engine` started it."""

    def __init__(self, builder: Builder, proc: subprocess.Popen | None, log: Path | None, host: str | None = None):
        self.builder = builder
        self.proc = proc
        self.log = log
        self.host = host  # DOCKER_HOST of a private engine; None: the default one

    @property
    def started_here(self) -> bool:
        return self.proc is not None

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.host:
            env["DOCKER_HOST"] = self.host
        return env

    def docker(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.builder.client, *args], capture_output=True, text=True, env=self.env(), check=check, timeout=timeout
        )

    def answers(self) -> bool:
        return _answers(self.builder, self.host)

    def kill(self) -> None:
        """SIGKILL the engine this object started and its containerd (a crash, for the tests that
        need one); both run in the session it was started in."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _start_dockerd(args: list[str], log: Path, builder: Builder, host: str | None, progress=None) -> subprocess.Popen:
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise EngineError("dockerd is not installed (apt-get install docker.io)")
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            [dockerd, *args], stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()
            raise EngineError(
                f"dockerd exited with code {proc.returncode} at start-up: "
                f"{tail[-1] if tail else 'no output'} (log: {log})"
            )
        if _answers(builder, host):
            return proc
        time.sleep(0.5)
    proc.kill()
    proc.wait()
    raise EngineError(f"dockerd did not answer within {READY_TIMEOUT:.0f}s (log: {log})")


def ensure_engine(progress=None) -> Engine:
    """The default engine, answering: installed and started here when it is not already."""
    if shutil.which("dockerd") is None or shutil.which("debootstrap") is None:
        apt_install(APT_PACKAGES, progress)
    try:
        builder = find_builder()
    except Exception as exc:  # sglpatch's UserError: one line already
        raise EngineError(str(exc)) from None
    if _answers(builder):
        return Engine(builder, None, None)
    log = Path(tempfile.gettempdir()) / "sglpatch-dockerd.log"
    _say(progress, f"starting dockerd (log: {log})")
    start = time.monotonic()
    proc = _start_dockerd([], log, builder, None, progress)
    _say(progress, f"dockerd answers after {time.monotonic() - start:.1f}s")
    return Engine(builder, proc, log)


@contextlib.contextmanager
def private_engine(workdir: Path, *, disk_mb: int | None = None, progress=None) -> Iterator[Engine]:
    """A second, throw-away engine whose data root is ``workdir/data`` (a tmpfs of ``disk_mb``
    when given, so its disk can really fill up). It shares the default engine's ``docker0``
    bridge and leaves iptables to that engine."""
    default = ensure_engine(progress)
    data, exec_root = workdir / "data", workdir / "exec"
    host = f"unix://{workdir}/docker.sock"
    engine = None
    with sized_dir(data, disk_mb, "a private engine"):
        try:
            proc = _start_dockerd(
                [
                    "--data-root",
                    str(data),
                    "--exec-root",
                    str(exec_root),
                    "--pidfile",
                    str(workdir / "docker.pid"),
                    "-H",
                    host,
                    "-b",
                    "docker0",
                    "--iptables=false",
                    "--ip-masq=false",
                ],
                workdir / "dockerd.log",
                default.builder,
                host,
                progress,
            )
            engine = Engine(default.builder, proc, workdir / "dockerd.log", host)
            yield engine
        finally:
            if engine is not None:
                engine.stop()


@contextlib.contextmanager
def sized_dir(path: Path, disk_mb: int | None, what: str) -> Iterator[Path]:
    """``path``, made; a tmpfs of ``disk_mb`` when given, so its disk can really fill up."""
    path.mkdir(parents=True)
    if not disk_mb:
        yield path
        return
    out = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={disk_mb}m", "tmpfs", str(path)], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise EngineError(f"cannot mount a {disk_mb} MB tmpfs for {what}: {out.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)

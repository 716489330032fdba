"""The real SGLang runtime of a maintained line, for tests: a pinned venv plus one overlay per wheel.

- One ``Runtime`` per line (production: SGLang 0.5.9; latest: 0.5.23; ``sglpatch.queue.line``). Its venv
  (``<cache>/runtime/sglang-<version>``, about 11 GB) holds that release's dependencies exactly as
  pinned in ``tests/runtime-requirements-<version>.txt`` and no ``sglang``; it is built once (a few
  minutes) and reused while its stamp file matches the requirements. A half-built venv has no stamp
  and is rebuilt.
- The ``sglang`` package of a test comes from a *variant*: ``"patched"`` (the line's overlay wheel
  that ``sglpatch.ship.build.build`` produces from this repository), ``"pristine"`` (upstream's wheel of
  the line's release from PyPI, sha256-verified), or a path to any sglang wheel. Each wheel is installed once with
  ``pip install --no-deps --target <cache>/runtime/overlays/<wheel sha256>`` and put first on
  ``PYTHONPATH`` of every process a test starts; SGLang's spawned processes inherit it.
  Both wheels come from ``sglpatch`` (``build.build`` and ``source.release_artifact``).
- Without a CUDA device the CPU harness (``tests/smoke/cpu_harness``, test-only) is active in all
  of those processes.

Standard library only: this module runs inside pytest, whose interpreter has no torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

VARIANTS = ("patched", "pristine")

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
HARNESS_DIR = TESTS_DIR / "smoke" / "cpu_harness"
STAMP = ".sglpatch-complete"
RESULT_MARKER = "SGLPATCH_RESULT "


def requirements_file(version: str) -> Path:
    """The pinned dependency set of SGLang ``version``'s runtime venv."""
    return TESTS_DIR / f"runtime-requirements-{version}.txt"


def line_names() -> list[str]:
    """Every maintained line, production first, read from the checkout without sglpatch: tests are
    parametrized with it at import, where the code under test must not run (a mutant of
    sglpatch.queue.line would break the collection instead of failing a test); test_lines checks that
    sglpatch.queue.line.all_lines agrees."""
    return [
        "production",
        *sorted(
            p.parent.name for p in (REPO_ROOT / "lines").glob("*/upstream.toml") if not p.parent.name.startswith(".")
        ),
    ]


# Variables that would point the runtime at another Python or another sglang.
_SCRUB = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "VIRTUAL_ENV",
    "PYTHONNOUSERSITE",
    "SGLPATCH_OBSERVE",
    "SGLPATCH_CPU_HARNESS",
    "SGLPATCH_STUB_LIBCUDA",
)


def cache_dir() -> Path:
    """``$SGLPATCH_CACHE`` or ``~/.cache/sglpatch`` (the project's one rule, sglpatch.cache)."""
    from sglpatch.cache import cache_dir as project_cache_dir

    return project_cache_dir()


def _stderr_progress(message: str) -> None:
    sys.__stderr__.write(f"[sglang runtime] {message}\n")
    sys.__stderr__.flush()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _load_harness_module(name: str):
    """Import a stdlib-only module of the harness package into pytest's process by file path."""
    path = HARNESS_DIR / "sglpatch_cpu_harness" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_sglpatch_harness_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _locked(path: Path, progress: Callable[[str], None] | None = None) -> Iterator[None]:
    """An exclusive lock between pytest sessions sharing the cache (other engineers, CI)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress:
                progress(f"waiting for another session holding {path}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def gpu_available() -> bool:
    """Cheap check (no torch): an NVIDIA device node and driver are present."""
    return Path("/dev/nvidiactl").exists() and shutil.which("nvidia-smi") is not None


# --------------------------------------------------------------------------------------------
# Processes


class RunResult(subprocess.CompletedProcess):
    """``subprocess.CompletedProcess`` plus ``leftovers``: processes of the run's session that were
    still alive a grace period after the script exited (they are killed afterwards)."""

    leftovers: list[str]

    def result(self):
        """The JSON object the script printed with :func:`emit` (last one), or None."""
        found = None
        for line in self.stdout.splitlines():
            if line.startswith(RESULT_MARKER):
                found = json.loads(line[len(RESULT_MARKER) :])
        return found

    def describe(self, tail: int = 12000) -> str:
        return (
            f"exit code {self.returncode}\n{sglang_errors(self.stderr)}"
            f"--- stdout (tail) ---\n{self.stdout[-tail:]}"
            f"\n--- stderr (tail) ---\n{self.stderr[-tail:]}"
        )


def sglang_errors(log: str) -> str:
    """The tracebacks SGLang's processes logged ("Scheduler hit an exception: Traceback ...",
    "... warmup error: Traceback ..."), each up to its exception line; "" if none."""
    found = []
    for match in re.finditer(
        r"(?m)^.*(?:hit an exception|error): Traceback \(most recent call last\):\n"
        r"(?:[ \t].*\n|\n)*?(?:\S.*\n)",
        log + "\n",
    ):
        found.append(match.group(0))
    return "".join(f"--- SGLang error ---\n{block}" for block in found)


class RunTimeout(subprocess.TimeoutExpired):
    def __str__(self) -> str:
        out = (self.stdout or "")[-4000:]
        err = (self.stderr or "")[-8000:]
        return (
            f"runtime script timed out after {self.timeout:.0f}s (process group killed)\n"
            f"--- stdout (tail) ---\n{out}\n--- stderr (tail) ---\n{err}"
        )


def _session_members(sid: int) -> list[tuple[int, str]]:
    """Live (non-zombie) processes whose session id is ``sid``: (pid, command line)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[3]) != sid or fields[0] in ("Z", "X"):
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError, IndexError):
            continue
        members.append((int(entry), cmdline))
    return members


def reap_session(sid: int, grace: float = 10.0) -> list[str]:
    """Wait up to ``grace`` seconds for the processes of session ``sid`` to end by themselves;
    SIGKILL the rest and return their descriptions (empty: nothing was left behind)."""
    deadline = time.monotonic() + grace
    members = _session_members(sid)
    while members and time.monotonic() < deadline:
        time.sleep(0.2)
        members = _session_members(sid)
    for pid, _ in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return [f"pid {pid}: {cmd}" for pid, cmd in members]


def _kill_group(proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerStartError(RuntimeError):
    """``sglang.launch_server`` exited or never became ready; the message carries its log,
    ``leftovers`` what of its session was still alive afterwards (then killed)."""

    def __init__(self, message: str, leftovers: list[str]):
        super().__init__(message)
        self.leftovers = leftovers


class Server:
    """A running ``python -m sglang.launch_server`` in its own session; use as a context manager."""

    def __init__(self, proc: subprocess.Popen, base_url: str, log_path: Path, workdir: Path):
        self.proc = proc
        self.base_url = base_url
        self.log_path = log_path
        self.workdir = workdir
        self.leftovers: list[str] | None = None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def request(self, path: str, payload: dict | None = None, timeout: float = 300):
        """GET (payload None) or POST JSON to the server; returns the decoded JSON answer."""
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(self.base_url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                body = resp.read().decode()
        except urllib.error.HTTPError as exc:
            raise AssertionError(
                f"{path}: HTTP {exc.code}: {exc.read().decode(errors='replace')}"
                f"\n--- server log (tail) ---\n{self.log()[-6000:]}"
            ) from None
        return json.loads(body) if body else None

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/model_info", timeout=5) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                leftovers = self.stop()
                raise ServerStartError(
                    f"sglang.launch_server exited with code {self.proc.returncode} before it was "
                    f"ready\n{sglang_errors(self.log())}--- server log (tail) ---\n"
                    f"{self.log()[-12000:]}",
                    leftovers,
                )
            if "The server is fired up and ready to roll!" in self.log() and self._answers():
                return
            time.sleep(0.5)
        leftovers = self.stop()
        raise ServerStartError(
            f"sglang.launch_server not ready after {timeout:.0f}s\n--- server log (tail) ---\n{self.log()[-12000:]}",
            leftovers,
        )

    def stop(self, grace: float = 20.0) -> list[str]:
        """SIGTERM the server, then reap its session; returns what had to be SIGKILLed."""
        if self.leftovers is not None:
            return self.leftovers
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _kill_group(self.proc)
                self.proc.wait()
        self.leftovers = reap_session(self.proc.pid, grace=10.0)
        _ACTIVE.discard(self.proc)
        return self.leftovers

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


_ACTIVE: set[subprocess.Popen] = set()


def kill_all_active() -> None:
    """Last-resort cleanup (end of session, interrupted run): kill every session we started."""
    for proc in list(_ACTIVE):
        _kill_group(proc)
        with contextlib.suppress(Exception):
            proc.wait(timeout=10)
        reap_session(proc.pid, grace=0)
        _ACTIVE.discard(proc)


# --------------------------------------------------------------------------------------------
# The runtime


class Runtime:
    """A line's SGLang venv plus variant overlays and the CPU harness. Create with :meth:`ensure`."""

    def __init__(
        self, cache: Path | None = None, progress: Callable[[str], None] | None = None, line: str = "production"
    ):
        from sglpatch.queue.line import find_line
        from sglpatch.upstream.pin import read_pin

        self.line = find_line(REPO_ROOT, line)
        self.pin = read_pin(self.line.root)
        self.sglang_version = self.pin.version
        self.requirements = requirements_file(self.sglang_version)
        if not self.requirements.is_file():
            raise RuntimeError(
                f"the {line} line pins SGLang {self.sglang_version} but there is no "
                f"{self.requirements.name}: make it from `pip freeze --all` of a real "
                f"`pip install sglang=={self.sglang_version}` (see docs/testing.md)"
            )
        self.home = (cache or cache_dir()) / "runtime"
        self.venv = self.home / f"sglang-{self.sglang_version}"
        self.python = self.venv / "bin" / "python"
        self.progress = progress or _stderr_progress
        self.cpu_harness = not gpu_available()
        # seconds a script's processes get to end by themselves after it exits (SGLang's children
        # die with their parent, asynchronously) before they count as left behind
        self.leftover_grace = 10.0
        self.stub_libcuda: Path | None = None
        self._wheels: dict[str, Path] = {}
        self._overlays: dict[Path, Path] = {}

    # -- set-up ---------------------------------------------------------------------------

    def _stamp_content(self) -> str:
        return json.dumps(
            {
                "requirements_sha256": _sha256(self.requirements),
                "python": sys.version.split()[0],
            },
            sort_keys=True,
        )

    def is_complete(self) -> bool:
        """The stamp (written last) matches, and the venv's interpreter still resolves."""
        stamp = self.venv / STAMP
        return stamp.is_file() and stamp.read_text() == self._stamp_content() and self.python.exists()

    def ensure(self) -> Runtime:
        with _locked(self.home / ".lock", self.progress):
            if not self.is_complete():
                self._build_venv()
            if self.cpu_harness:
                self.stub_libcuda = self.build_stub()
        return self

    def _site_packages(self) -> Path:
        return self.venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"

    def _build_venv(self) -> None:
        start = time.monotonic()
        if self.venv.exists():
            self.progress(f"{self.venv} is incomplete or outdated (stamp mismatch): rebuilding")
            shutil.rmtree(self.venv)
        self.progress(
            f"creating SGLang {self.sglang_version}'s runtime venv at {self.venv} "
            "(one time: about 11 GB, several minutes)"
        )
        subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)
        log = self.home / f"sglang-{self.sglang_version}.install.log"
        with open(log, "w") as fh:
            proc = subprocess.Popen(
                [
                    str(self.python),
                    "-m",
                    "pip",
                    "install",
                    "--no-deps",
                    "--no-input",
                    "--progress-bar",
                    "off",
                    "-r",
                    str(self.requirements),
                ],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            _ACTIVE.add(proc)
            try:
                last_report = time.monotonic()
                while proc.poll() is None:
                    time.sleep(1)
                    if time.monotonic() - last_report >= 20:
                        last_report = time.monotonic()
                        self.progress(f"  pip install: {time.monotonic() - start:.0f}s, {_pip_status(log)}")
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                _ACTIVE.discard(proc)
        if proc.returncode != 0:
            raise RuntimeError(
                f"pip install of {self.requirements.name} failed (exit {proc.returncode});"
                f" log: {log}\n{log.read_text()[-6000:]}"
            )
        check = subprocess.run([str(self.python), "-m", "pip", "check"], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"pip check failed in {self.venv}:\n{check.stdout}{check.stderr}")
        (self.venv / STAMP).write_text(self._stamp_content())
        self.progress(f"runtime venv ready in {time.monotonic() - start:.0f}s")

    def build_stub(self) -> Path:
        """The CPU harness's stub libcuda.so.1 for this venv's native libraries (built once)."""
        stub = _load_harness_module("libcuda_stub")
        return stub.build_stub(self._site_packages(), self.home / "cpu_harness", self._stamp_content())

    # -- variants -------------------------------------------------------------------------

    def wheel(self, variant: str | os.PathLike) -> Path:
        """The sglang wheel of a variant: "patched", "pristine" or a path to a wheel."""
        key = str(variant)
        if key not in self._wheels:
            if key == "patched":
                self._wheels[key] = self._patched_wheel()
            elif key == "pristine":
                self._wheels[key] = self._pristine_wheel()
            elif key.endswith(".whl") and Path(key).is_file():
                self._wheels[key] = Path(key).resolve()
            else:
                raise ValueError(f"unknown variant {variant!r}: use one of {VARIANTS} or a wheel path")
        return self._wheels[key]

    def _python_tag(self) -> str:
        """The venv's CPython tag: platform-wheel releases ship one overlay per CPython."""
        return f"cp{sys.version_info[0]}{sys.version_info[1]}"

    def _patched_wheel(self) -> Path:
        from sglpatch.ship.build import build

        self.progress(f"building the {self.line.name} line's overlay wheel (sglpatch.ship.build.build)")
        wheels = [Path(path) for path, _ in build(self.line.root).wheels]
        fits = [w for w in wheels if "-py3-none-any" in w.name or f"-{self._python_tag()}-" in w.name]
        if not fits:
            raise RuntimeError(
                f"no overlay wheel of the {self.line.name} line fits Python "
                f"{self._python_tag()}: {[w.name for w in wheels]}"
            )
        return fits[0].resolve()

    def _pristine_wheel(self) -> Path:
        from sglpatch.upstream.source import release_artifact

        kind = f"wheel-{self._python_tag()}"
        kind = kind if self.pin.artifact(kind) else "wheel"
        return Path(release_artifact(self.pin.version, kind, self.pin))  # sha256 from the pin, cached

    def overlay(self, variant: str | os.PathLike) -> Path:
        """The directory holding the variant's ``sglang`` package (installed once per wheel)."""
        wheel = self.wheel(variant)
        if wheel not in self._overlays:
            digest = _sha256(wheel)
            target = self.home / "overlays" / digest
            with _locked(self.home / ".lock-overlays", self.progress):
                if not (target / "sglang" / "__init__.py").is_file():
                    self.progress(f"installing overlay {wheel.name} -> {target}")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    tmp = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=target.parent))
                    try:
                        subprocess.run(
                            [
                                str(self.python),
                                "-m",
                                "pip",
                                "install",
                                "--no-deps",
                                "--no-input",
                                "--target",
                                str(tmp),
                                str(wheel),
                            ],
                            check=True,
                            capture_output=True,
                            text=True,
                        )
                        if target.exists():
                            shutil.rmtree(target)
                        os.replace(tmp, target)  # atomic: a half-made overlay is never seen
                    except subprocess.CalledProcessError as exc:
                        raise RuntimeError(f"overlay install of {wheel} failed:\n{exc.stdout}{exc.stderr}") from None
                    finally:
                        shutil.rmtree(tmp, ignore_errors=True)
            self._overlays[wheel] = target
        return self._overlays[wheel]

    # -- running --------------------------------------------------------------------------

    def env(
        self, variant: str | os.PathLike | None, extra: Mapping[str, str] | None = None, *, harness: bool | None = None
    ) -> dict[str, str]:
        """Environment for a runtime process: variant overlay first on the path, then the harness
        directory (its sitecustomize activates the CPU harness when ``harness``; default: no GPU).
        ``variant=None``: no sglang at all (e.g. the model builders, which need only torch)."""
        harness = self.cpu_harness if harness is None else harness
        env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
        path = [] if variant is None else [str(self.overlay(variant))]
        env["PYTHONPATH"] = os.pathsep.join(path + [str(HARNESS_DIR)])
        env["VIRTUAL_ENV"] = str(self.venv)
        env["PATH"] = os.pathsep.join([str(self.venv / "bin"), env.get("PATH", "")])
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONNOUSERSITE"] = "1"
        if harness:
            if self.stub_libcuda is None:
                raise RuntimeError("CPU harness requested but its stub libcuda.so.1 was not built")
            harness_env = _load_harness_module("__init__").ENV
            env.update(harness_env)
            env["SGLPATCH_CPU_HARNESS"] = "1"
            env["SGLPATCH_STUB_LIBCUDA"] = str(self.stub_libcuda)
        env.update(extra or {})
        return env

    def run(
        self,
        script: str,
        *,
        variant: str | None,
        timeout: float = 600,
        env: Mapping[str, str] | None = None,
        harness: bool | None = None,
    ) -> RunResult:
        """Run Python source ``script`` in the runtime (variant first on the path, harness active),
        in a fresh session; capture stdout/stderr as text. The script is a file ``main.py`` in a
        temporary working directory, so SGLang's spawned workers can re-import it (guard engine
        code with ``if __name__ == "__main__":``). Processes the script leaves behind are recorded
        in ``result.leftovers`` and killed. On timeout the whole session is killed and
        :class:`RunTimeout` (a ``subprocess.TimeoutExpired``) is raised with the output."""
        workdir = Path(tempfile.mkdtemp(prefix="sglpatch-run-"))
        try:
            main = workdir / "main.py"
            main.write_text(textwrap.dedent(script))
            out_path, err_path = workdir / "stdout.txt", workdir / "stderr.txt"
            args = [str(self.python), str(main)]
            with open(out_path, "w") as out, open(err_path, "w") as err:
                proc = subprocess.Popen(
                    args,
                    cwd=workdir,
                    env=self.env(variant, env, harness=harness),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            _ACTIVE.add(proc)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                proc.wait()
                reap_session(proc.pid, grace=0)
                raise RunTimeout(
                    args, timeout, out_path.read_text(errors="replace"), err_path.read_text(errors="replace")
                ) from None
            except BaseException:  # KeyboardInterrupt: never leave SGLang running
                _kill_group(proc)
                proc.wait()
                reap_session(proc.pid, grace=0)
                raise
            finally:
                _ACTIVE.discard(proc)
            leftovers = reap_session(proc.pid, grace=self.leftover_grace)
            result = RunResult(
                args, proc.returncode, out_path.read_text(errors="replace"), err_path.read_text(errors="replace")
            )
            result.leftovers = leftovers
            return result
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def launch_server(
        self,
        args: list[str],
        *,
        variant: str,
        timeout: float = 600,
        env: Mapping[str, str] | None = None,
        harness: bool | None = None,
    ) -> Server:
        """Start ``python -m sglang.launch_server <args> --host 127.0.0.1 --port <free>`` in its own
        session and wait until it logs that it is ready (after its warm-up request, unless
        ``--skip-server-warmup``) and answers ``/model_info``. Raises
        :class:`ServerStartError` with the server log if it exits or times out first."""
        workdir = Path(tempfile.mkdtemp(prefix="sglpatch-server-"))
        port = free_port()
        log_path = workdir / "server.log"
        cmd = [str(self.python), "-m", "sglang.launch_server", *args, "--host", "127.0.0.1", "--port", str(port)]
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                cmd,
                cwd=workdir,
                env=self.env(variant, env, harness=harness),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _ACTIVE.add(proc)
        server = Server(proc, f"http://127.0.0.1:{port}", log_path, workdir)
        try:
            server.wait_ready(timeout)
        except BaseException:
            server.stop()
            raise
        return server


def emit_snippet() -> str:
    """Python source defining ``emit(obj)``: print one result line that :meth:`RunResult.result`
    reads back."""
    return f"def emit(obj):\n    import json, sys\n    print({RESULT_MARKER!r} + json.dumps(obj), flush=True)\n"


def _pip_status(path: Path) -> str:
    """A short summary of pip's log so far for the progress line."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 65536))
            lines = [ln.strip() for ln in fh.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    if not lines:
        return "starting"
    last = lines[-1]
    if last.startswith("Installing collected packages:"):
        return f"unpacking {last.count(',') + 1} packages into the venv"
    return last[:110]

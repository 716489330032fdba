"""Test-only images built here from Debian and PyPI, since Docker Hub is unreachable.

- :func:`debian_image`: a Debian bookworm root file system made with ``debootstrap`` (python3,
  pip, CA certificates), imported with ``docker import``. The root file system tarball is cached
  under ``$SGLPATCH_CACHE/images`` so a second engine imports it without a second debootstrap.
- :func:`standin_base`: ``tests/image/standin-base.Dockerfile`` on that image, the stand-in for
  upstream's ``lmsysorg/sglang:<tag>-cu130`` (docs/deploy.md lists how it differs). Built once per
  content: its tag carries a label with the sha256 of everything that went into it.
- :func:`router_base`: that image plus this machine's CA certificates, the stand-in for
  ``debian:bookworm-slim`` under docker/router/Dockerfile (pip behind this workplace's proxy).
- :func:`trap_base`: a Debian image whose ``python3`` is a shell script, for the failure tests
  (a step that never ends, a step that fills the disk).

Every build streams its output to a log file and reports its steps through ``progress``.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from docker_engine import Engine, EngineError

TESTS_DIR = Path(__file__).resolve().parent
STANDIN_DOCKERFILE = TESTS_DIR / "image" / "standin-base.Dockerfile"
HARNESS_DIR = TESTS_DIR / "smoke" / "cpu_harness"
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")

DEBIAN_SUITE = "bookworm"  # python3 3.11, as the runtime pins (cp311 wheels)
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# libnuma1: sgl_kernel's common_ops links it (upstream's image installs libnuma-dev)
DEBIAN_PACKAGES = ("python3", "python3-pip", "ca-certificates", "libnuma1")
KEY_LABEL = "sglpatch.test.key"


def _key(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()


def _image_key(engine: Engine, ref: str) -> str | None:
    out = engine.docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{KEY_LABEL}"}}}}', ref, check=False)
    return out.stdout.strip() if out.returncode == 0 else None


def _has_image(engine: Engine, ref: str) -> bool:
    return engine.docker("image", "inspect", ref, check=False).returncode == 0


def build_with_log(engine: Engine, argv: list[str], log: Path, progress=None, what: str = "") -> None:
    """Run a docker build, its output into ``log``; report each step as it starts."""
    start = time.monotonic()
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env={**engine.env(), "DOCKER_BUILDKIT": "1"},
            stdin=subprocess.DEVNULL,
        )
        for line in proc.stdout:
            fh.write(line)
            step = re.match(r"#\d+ (\[\s*\d+/\d+\] .{0,90})", line)
            if step and progress:
                progress(f"  {what} {time.monotonic() - start:5.0f}s {step.group(1)}")
        code = proc.wait()
    if code != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise EngineError(f"building {what} failed (exit {code}): {' | '.join(tail)} (log: {log})")
    if progress:
        progress(f"{what} built in {time.monotonic() - start:.0f}s")


def _rootfs_tarball(cache: Path, progress=None) -> Path:
    key = _key(DEBIAN_SUITE, DEBIAN_MIRROR, *DEBIAN_PACKAGES)[:12]
    tarball = cache / "images" / f"debian-{DEBIAN_SUITE}-{key}.tar"
    if tarball.is_file():
        return tarball
    if shutil.which("debootstrap") is None:
        raise EngineError("debootstrap is not installed (apt-get install debootstrap)")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sglpatch-rootfs-", dir=tarball.parent) as tmp:
        rootfs = Path(tmp) / "rootfs"
        if progress:
            progress(f"debootstrap {DEBIAN_SUITE} ({', '.join(DEBIAN_PACKAGES)}), one time, about a minute")
        out = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(DEBIAN_PACKAGES)}",
                DEBIAN_SUITE,
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            last = (out.stderr or out.stdout).strip().splitlines()
            raise EngineError(f"debootstrap {DEBIAN_SUITE} failed: {last[-1] if last else out.returncode}")
        partial = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], check=True)
        partial.replace(tarball)  # atomic: a half-written tarball is never seen
    if progress:
        progress(f"Debian root file system ready in {time.monotonic() - start:.0f}s: {tarball}")
    return tarball


def debian_image(engine: Engine, cache: Path, progress=None) -> str:
    tarball = _rootfs_tarball(cache, progress)
    ref = f"sglpatch-test/debian:{tarball.stem.split('-', 1)[1]}"
    if not _has_image(engine, ref):
        with open(tarball, "rb") as fh:
            out = subprocess.run(
                [engine.builder.client, "import", "-", ref], stdin=fh, capture_output=True, text=True, env=engine.env()
            )
        if out.returncode != 0:
            raise EngineError(f"docker import of {tarball.name} failed: {out.stderr.strip()}")
    return ref


def _copy_host_cas(dest: Path) -> None:
    """This machine's CA certificates into ``dest/ca-certificates`` (pip behind this workplace's proxy)."""
    (dest / "ca-certificates").mkdir()
    for cert in sorted(HOST_CA_DIR.glob("*.crt")) if HOST_CA_DIR.is_dir() else ():
        shutil.copy(cert, dest / "ca-certificates" / cert.name)


def _standin_context(dest: Path, requirements: Path, sglang: Path, stub_libcuda: Path) -> None:
    shutil.copy(requirements, dest / "runtime-requirements.txt")
    shutil.copy(sglang, dest / sglang.name)
    shutil.copytree(HARNESS_DIR, dest / "cpu_harness", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(stub_libcuda, dest / "libcuda.so.1")
    _copy_host_cas(dest)


def _tree_digest(root: Path) -> str:
    parts = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        parts += [str(path.relative_to(root)), hashlib.sha256(path.read_bytes()).hexdigest()]
    return _key(*parts)


def standin_base(
    engine: Engine,
    *,
    cache: Path,
    upstream_tag: str,
    requirements: Path,
    sglang: Path,
    stub_libcuda: Path,
    progress=None,
) -> str:
    """The stand-in for ``lmsysorg/sglang:<upstream_tag>-cu130``, built if its inputs changed.
    ``sglang`` is the release's sdist (installed editable, as upstream's image) or, for a
    wheel-only release, its cp311 wheel."""
    debian = debian_image(engine, cache, progress)
    ref = f"sglpatch-test/sglang:{upstream_tag}-cu130-standin"
    with tempfile.TemporaryDirectory(prefix="sglpatch-standin-") as tmp:
        context = Path(tmp)
        _standin_context(context, requirements, sglang, stub_libcuda)
        key = _key(STANDIN_DOCKERFILE.read_text(), debian, _tree_digest(context))
        if _image_key(engine, ref) == key:
            return ref
        if progress:
            progress(f"building the stand-in base {ref} (one time: about 11 GB, a few minutes)")
        log = cache / "images" / f"standin-base-{upstream_tag}.build.log"
        kind = "SGLANG_WHEEL" if sglang.suffix == ".whl" else "SGLANG_SDIST"
        build_with_log(
            engine,
            [
                engine.builder.client,
                "build",
                "--progress",
                "plain",
                "--file",
                str(STANDIN_DOCKERFILE),
                "--build-arg",
                f"DEBIAN_IMAGE={debian}",
                "--build-arg",
                f"{kind}={sglang.name}",
                "--label",
                f"{KEY_LABEL}={key}",
                "--tag",
                ref,
                str(context),
            ],
            log,
            progress,
            what="stand-in base",
        )
    return ref


def router_base(engine: Engine, cache: Path, progress=None) -> str:
    """Debian bookworm (python3, pip) trusting this machine's CAs: the router image's base here."""
    debian = debian_image(engine, cache, progress)
    ref = "sglpatch-test/debian-ca:bookworm"
    with tempfile.TemporaryDirectory(prefix="sglpatch-router-base-") as tmp:
        context = Path(tmp)
        _copy_host_cas(context)
        (context / "Dockerfile").write_text(
            f"FROM {debian}\nCOPY ca-certificates/ /usr/local/share/ca-certificates/\nRUN update-ca-certificates\n"
        )
        key = _key((context / "Dockerfile").read_text(), _tree_digest(context))
        if _image_key(engine, ref) != key:
            build_with_log(
                engine,
                [
                    engine.builder.client,
                    "build",
                    "--progress",
                    "plain",
                    "--label",
                    f"{KEY_LABEL}={key}",
                    "--tag",
                    ref,
                    str(context),
                ],
                cache / "images" / "router-base.build.log",
                progress,
                what="router base",
            )
    return ref


def trap_base(engine: Engine, cache: Path, name: str, python3_script: str, progress=None) -> str:
    """Debian with ``/usr/local/bin/python3`` replaced by ``python3_script`` (a shell script), so
    docker/Dockerfile's first step runs it: a controlled way to hang or fill the disk mid-build."""
    debian = debian_image(engine, cache, progress)
    ref = f"sglpatch-test/trap-{name}:1"
    with tempfile.TemporaryDirectory(prefix="sglpatch-trap-") as tmp:
        context = Path(tmp)
        (context / "python3").write_text(python3_script)
        (context / "python3").chmod(0o755)
        (context / "Dockerfile").write_text(f"FROM {debian}\nCOPY python3 /usr/local/bin/python3\n")
        build_with_log(
            engine,
            [engine.builder.client, "build", "--progress", "plain", "--tag", ref, str(context)],
            cache / "images" / f"trap-{name}.build.log",
            None,
            what=f"trap base {name}",
        )
    return ref

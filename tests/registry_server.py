"""A real registry for the push tests: Debian's ``docker-registry`` (the CNCF distribution
registry), installed by the test set-up when missing and started on 127.0.0.1 only.

:func:`registry` starts one on a free loopback port with its storage in ``workdir`` (a tmpfs of
``disk_mb`` when given, so its disk can really fill up) and stops it afterwards. The Docker engine
treats 127.0.0.0/8 registries as insecure by default, so plain HTTP works without engine
configuration. Failures raise :class:`docker_engine.EngineError` with one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import socket
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from docker_engine import EngineError, apt_install, sized_dir

READY_TIMEOUT = 30.0
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)


@dataclass
class Registry:
    host: str  # 127.0.0.1:PORT
    proc: subprocess.Popen
    log: Path

    def manifest(self, name: str, reference: str) -> tuple[str, dict] | None:
        """The registry's own answer for NAME:REFERENCE: (Docker-Content-Digest, manifest), or None."""
        request = urllib.request.Request(
            f"http://{self.host}/v2/{name}/manifests/{reference}", headers={"Accept": MANIFEST_TYPES}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return resp.headers["Docker-Content-Digest"], json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def tags(self, name: str) -> list[str]:
        try:
            with urllib.request.urlopen(f"http://{self.host}/v2/{name}/tags/list", timeout=30) as resp:
                return sorted(json.loads(resp.read()).get("tags") or [])
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def forget_images(engine, host: str) -> None:
    """Untag what a test made for a registry that is going away (the engine keeps no stray tags)."""
    refs = engine.docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    mine = [ref for ref in refs if ref.startswith(f"{host}/") and not ref.endswith(":<none>")]
    if mine:
        engine.docker("rmi", *mine, check=False)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(host: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}/v2/", timeout=2) as resp:
            return resp.status == 200
    except urllib.error.HTTPError as exc:
        return exc.code == 401  # up, and asking for credentials
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def registry(
    workdir: Path, *, disk_mb: int | None = None, users: dict[str, str] | None = None, progress=None
) -> Iterator[Registry]:
    """A registry on a free loopback port; with ``users``, only they may read or push (basic auth)."""
    if shutil.which("docker-registry") is None:
        apt_install(("docker-registry",), progress)
    host = f"127.0.0.1:{free_port()}"
    with sized_dir(workdir / "data", disk_mb, "a registry") as data:
        config = workdir / "config.yml"
        auth = ""
        if users:
            import bcrypt

            passwords = workdir / "htpasswd"
            passwords.write_text(
                "".join(
                    f"{user}:{bcrypt.hashpw(secret.encode(), bcrypt.gensalt()).decode()}\n"
                    for user, secret in users.items()
                )
            )
            auth = f"auth:\n  htpasswd:\n    realm: sglpatch-test\n    path: {passwords}\n"
        config.write_text(
            f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {data}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n{auth}"
        )
        log = workdir / "registry.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                ["docker-registry", "serve", str(config)],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        served = Registry(host, proc, log)
        try:
            deadline = time.monotonic() + READY_TIMEOUT
            while not _answers(host):
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = log.read_text(errors="replace").strip().splitlines()
                    raise EngineError(f"docker-registry did not answer on {host}: {tail[-1] if tail else 'no output'}")
                time.sleep(0.2)
            if progress:
                progress(f"registry answers on {host} (storage {data})")
            yield served
        finally:
            served.stop()
            if not disk_mb:  # gigabytes of layers: never left behind in pytest's kept temp dirs
                shutil.rmtree(data, ignore_errors=True)


# ---------------------------------------------------------------- seeding a base image


def _upload_blob(host: str, name: str, chunks) -> tuple[str, int]:
    """Stream one blob into the registry (POST, one chunked PATCH, PUT with the digest computed on
    the way); returns its digest and size. Nothing is staged on disk."""
    digest, size = hashlib.sha256(), 0

    def counted():
        nonlocal size
        for chunk in chunks:
            digest.update(chunk)
            size += len(chunk)
            yield chunk

    def absolute(location: str) -> str:
        return f"http://{host}{location}" if location.startswith("/") else location

    request = urllib.request.Request(f"http://{host}/v2/{name}/blobs/uploads/", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=60) as resp:
        location = absolute(resp.headers["Location"])
    request = urllib.request.Request(
        location, method="PATCH", data=counted(), headers={"Content-Type": "application/octet-stream"}
    )
    with urllib.request.urlopen(request, timeout=1800) as resp:
        location = absolute(resp.headers["Location"])
    ref = f"sha256:{digest.hexdigest()}"
    request = urllib.request.Request(f"{location}{'&' if '?' in location else '?'}digest={ref}", method="PUT", data=b"")
    with urllib.request.urlopen(request, timeout=600):
        pass
    return ref, size


def _gzipped(stream) -> Iterator[bytes]:
    """``stream`` through pigz's fastest level on every core, as chunks."""
    pigz = subprocess.Popen(["pigz", "-1", "-n", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    feeder = threading.Thread(target=lambda: (shutil.copyfileobj(stream, pigz.stdin, 1 << 20), pigz.stdin.close()))
    feeder.start()
    yield from iter(lambda: pigz.stdout.read(1 << 20), b"")
    feeder.join()
    if pigz.wait() != 0:
        raise EngineError("pigz failed while seeding the registry")


def seed(engine, served: Registry, image: str, name: str, tag: str, progress=None) -> str:
    """Put a local image into the registry as ``name:tag`` with pigz's fast gzip on both cores,
    then `docker pull` it so the engine knows its layers are there.

    Test-only speed-up: dockerd's own push compresses with one core (about 5 MB/s of output on a
    base of CUDA wheels, 15+ minutes). A later push of an image built on this base mounts these
    layers instead of compressing them again, as a production push does onto a registry that
    already holds the base. What the engine pulls back is checked by the engine (digests).
    """
    if shutil.which("pigz") is None:
        apt_install(("pigz",), progress)
    start = time.monotonic()
    save = subprocess.Popen([engine.builder.client, "save", image], stdout=subprocess.PIPE, env=engine.env())
    layers: dict[str, tuple[str, int]] = {}
    config = manifest = None
    with tarfile.open(fileobj=save.stdout, mode="r|") as tar:
        for member in tar:
            if member.name.endswith("/layer.tar"):
                layers[member.name] = _upload_blob(served.host, name, _gzipped(tar.extractfile(member)))
            elif member.name == "manifest.json":
                manifest = json.loads(tar.extractfile(member).read())[0]
            elif member.name.endswith(".json") and member.name != "repositories":
                config = tar.extractfile(member).read()
    if save.wait() != 0 or manifest is None or config is None:
        raise EngineError(f"docker save {image} failed while seeding the registry")
    # Another image ID over the same layers: pulling the image itself would stop at "up to date"
    # and never tell the engine that the registry holds these layers.
    parsed = json.loads(config)
    settings = parsed.setdefault("config", {})
    settings["Labels"] = {**(settings.get("Labels") or {}), "sglpatch.test.seed": name}
    config = json.dumps(parsed).encode()
    config_ref, _ = _upload_blob(served.host, name, [config])
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": config_ref,
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": layers[layer][1],
                    "digest": layers[layer][0],
                }
                for layer in manifest["Layers"]
            ],
        }
    ).encode()
    request = urllib.request.Request(
        f"http://{served.host}/v2/{name}/manifests/{tag}",
        method="PUT",
        data=body,
        headers={"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    with urllib.request.urlopen(request, timeout=60) as resp:
        digest = resp.headers["Docker-Content-Digest"]
    engine.docker("pull", f"{served.host}/{name}@{digest}", timeout=1800)
    engine.docker("rmi", f"{served.host}/{name}@{digest}", check=False)  # the layers stay: the base holds them
    if progress:
        progress(f"registry seeded with {image} ({len(layers)} layers) in {time.monotonic() - start:.0f}s")
    return digest


class SeedJob:
    """A registry seeded with a base image in a background thread, from when the base is built
    until :meth:`stop`: the 9 minutes of seeding overlap the tests that run meanwhile."""

    def __init__(self, engine, image: str, workdir: Path, progress=None):
        self._ready, self._stop = threading.Event(), threading.Event()
        self.registry: Registry | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(engine, image, workdir, progress), name=f"seed {image}", daemon=True
        )
        self._thread.start()

    def _run(self, engine, image: str, workdir: Path, progress) -> None:
        try:
            with registry(workdir, progress=progress) as served:
                seed(engine, served, image, "sglpatch-test/standin", "base", progress=progress)
                self.registry = served
                self._ready.set()
                self._stop.wait()
        except BaseException as exc:  # handed to the test that waits for it
            self.error = exc
        finally:
            self._ready.set()

    def wait(self, timeout: float = 3600) -> Registry:
        if not self._ready.wait(timeout):
            raise EngineError(f"seeding the registry did not finish within {timeout:.0f}s")
        if self.error is not None:
            raise EngineError(f"seeding the registry failed: {self.error}")
        return self.registry

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=600)

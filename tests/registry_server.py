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
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from docker_engine import EngineError, apt_install, sized_dir

READY_TIMEOUT = 30.0
MANIFEST_TYPES = ", ".join(["application/vnd.docker.distribution.manifest.v2+json",
                            "application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.list.v2+json",
                            "application/vnd.oci.image.index.v1+json"])


@dataclass
class Registry:
    host: str  # 127.0.0.1:PORT
    proc: subprocess.Popen
    log: Path

    def manifest(self, name: str, reference: str) -> tuple[str, dict] | None:
        """The registry's own answer for NAME:REFERENCE: (Docker-Content-Digest, manifest), or None."""
        request = urllib.request.Request(f"http://{self.host}/v2/{name}/manifests/{reference}",
                                         headers={"Accept": MANIFEST_TYPES})
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(host: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}/v2/", timeout=2) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def registry(workdir: Path, *, disk_mb: int | None = None, progress=None) -> Iterator[Registry]:
    if shutil.which("docker-registry") is None:
        apt_install(("docker-registry",), progress)
    host = f"127.0.0.1:{free_port()}"
    with sized_dir(workdir / "data", disk_mb, "a registry") as data:
        config = workdir / "config.yml"
        config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                          f"    rootdirectory: {data}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n")
        log = workdir / "registry.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=fh,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        served = Registry(host, proc, log)
        try:
            deadline = time.monotonic() + READY_TIMEOUT
            while not _answers(host):
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = log.read_text(errors="replace").strip().splitlines()
                    raise EngineError(f"docker-registry did not answer on {host}: "
                                      f"{tail[-1] if tail else 'no output'}")
                time.sleep(0.2)
            if progress:
                progress(f"registry answers on {host} (storage {data})")
            yield served
        finally:
            served.stop()


# ---------------------------------------------------------------- seeding a base image

def _upload_blob(host: str, name: str, path: Path | None = None, data: bytes | None = None) -> str:
    """One monolithic blob upload (POST, then PUT with the digest); returns the digest."""
    digest = hashlib.sha256()
    if path is not None:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    else:
        digest.update(data)
    ref = f"sha256:{digest.hexdigest()}"
    request = urllib.request.Request(f"http://{host}/v2/{name}/blobs/uploads/", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=60) as resp:
        location = resp.headers["Location"]
    if location.startswith("/"):
        location = f"http://{host}{location}"
    size = path.stat().st_size if path is not None else len(data)
    body = open(path, "rb") if path is not None else data
    try:
        request = urllib.request.Request(f"{location}{'&' if '?' in location else '?'}digest={ref}", method="PUT",
                                         data=body, headers={"Content-Type": "application/octet-stream",
                                                             "Content-Length": str(size)})
        with urllib.request.urlopen(request, timeout=1800):
            pass
    finally:
        if path is not None:
            body.close()
    return ref


def seed(engine, served: Registry, image: str, name: str, tag: str, workdir: Path, progress=None) -> str:
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
                gz = workdir / "layer.tar.gz"
                with open(gz, "wb") as out:
                    pigz = subprocess.Popen(["pigz", "-1", "-n", "-c"], stdin=subprocess.PIPE, stdout=out)
                    shutil.copyfileobj(tar.extractfile(member), pigz.stdin, 1 << 20)
                    pigz.stdin.close()
                    if pigz.wait() != 0:
                        raise EngineError("pigz failed while seeding the registry")
                layers[member.name] = (_upload_blob(served.host, name, path=gz), gz.stat().st_size)
                gz.unlink()
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
    config_ref = _upload_blob(served.host, name, data=config)
    body = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": len(config),
                   "digest": config_ref},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": layers[layer][1], "digest": layers[layer][0]} for layer in manifest["Layers"]],
    }).encode()
    request = urllib.request.Request(f"http://{served.host}/v2/{name}/manifests/{tag}", method="PUT", data=body,
                                     headers={"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"})
    with urllib.request.urlopen(request, timeout=60) as resp:
        digest = resp.headers["Docker-Content-Digest"]
    engine.docker("pull", f"{served.host}/{name}@{digest}", timeout=1800)
    engine.docker("rmi", f"{served.host}/{name}@{digest}", check=False)  # the layers stay: the base holds them
    if progress:
        progress(f"registry seeded with {image} ({len(layers)} layers) in {time.monotonic() - start:.0f}s")
    return digest

"""A release's PyPI artifacts: the package index's listing, the choice of sdist or wheel, the
download (with progress and a stall timeout) into the cache, and the sha256 check against the
pin or the index.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from sglpatch.cache import cache_dir
from sglpatch.errors import UserError
from sglpatch.output import figure, figure_done
from sglpatch.upstream.pin import Artifact, Pin, validate_version

DEFAULT_INDEX = "https://pypi.org/simple"
PROJECT = "sglang"
# Wheel-only releases (0.5.11+) ship platform wheels; the source inside is the same for all.
# Artifact kinds: "sdist"; "wheel", the one the import, the tests and Python 3.11 use; and
# "wheel-cpXY", every other x86_64 CPython wheel of a platform-wheel release, since an overlay
# wheel only installs on the Python its upstream wheel was built for.
PREFERRED_WHEEL_TAGS = ("py3-none-any", "cp311-cp311-manylinux_2_34_x86_64")
_CPYTHON_X86_64 = re.compile(r"-(cp3\d+)-\1-manylinux_[0-9_]+_x86_64\.whl$")
# Where expected hashes come from, as error messages name them.
PIN_SOURCE = "upstream.toml"
INDEX_SOURCE = "the package index"
# Seconds a stalled index may keep us waiting for its next bytes: a hung connection is an error
# naming the index, never a job that hangs until CI kills it.
INDEX_TIMEOUT = 60
DOWNLOAD_TIMEOUT = 120


def index_url() -> str:
    return os.environ.get("SGLPATCH_INDEX_URL", DEFAULT_INDEX).rstrip("/")


@dataclass(frozen=True)
class RemoteFile:
    filename: str
    url: str
    sha256: str


def _index_listing() -> dict:
    url = f"{index_url()}/{PROJECT}/"
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=INDEX_TIMEOUT) as response:
            return json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UserError(
            f"cannot reach the package index {url} ({reason})", "connect to PyPI once so the artifact can be cached"
        ) from None


def released_versions() -> list[str]:
    """Every final (non pre-release) SGLang release on the index, oldest first."""
    found = {_filename_version(f["filename"]) for f in _index_listing().get("files", []) if not f.get("yanked")}
    return [str(v) for v in sorted(v for v in found if v is not None and not v.is_prerelease)]


def _yanked_reason(version: str) -> str | None:
    """Why the index yanked ``version`` ("" when it gives no reason), or None: not yanked."""
    for f in _index_listing().get("files", []):
        if _filename_version(f["filename"]) == Version(version) and f.get("yanked"):
            return f["yanked"] if isinstance(f["yanked"], str) else ""
    return None


def _index_files(version: str) -> list[RemoteFile]:
    listing = _index_listing()
    files = []
    for f in listing.get("files", []):
        name = f["filename"]
        if _filename_version(name) == Version(version) and not f.get("yanked"):
            files.append(RemoteFile(name, f["url"], f["hashes"]["sha256"].lower()))
    return files


def _filename_version(name: str) -> Version | None:
    try:
        if name.endswith(".whl"):
            return parse_wheel_filename(name)[1]
        if name.endswith(".tar.gz"):
            return parse_sdist_filename(name)[1]
    except Exception:  # other projects' or malformed names are simply not ours
        return None
    return None


def _choose(files: list[RemoteFile], kind: str) -> RemoteFile | None:
    if kind == "sdist":
        return next((f for f in files if f.filename.endswith(".tar.gz")), None)
    if kind.startswith("wheel-"):
        return next(
            (f for f in files if (m := _CPYTHON_X86_64.search(f.filename)) and m.group(1) == kind[len("wheel-") :]),
            None,
        )
    if kind != "wheel":
        raise ValueError(f"unknown artifact kind {kind!r}")
    for tag in PREFERRED_WHEEL_TAGS:
        match = next((f for f in files if f.filename.endswith(f"-{tag}.whl")), None)
        if match:
            return match
    return None


def _expected(version: str, kind: str, pin: Pin | None) -> Artifact | None:
    if pin is not None and Version(pin.version) == Version(version):
        return pin.artifact(kind)
    return None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def release_artifact(version: str, kind: str, pin: Pin | None = None) -> Path | None:
    """The cached, sha256-verified PyPI artifact (``"sdist"`` or ``"wheel"``) of a release.

    The expected hash comes from the pin when it pins ``version``, else from the index.
    None when the release has no such artifact (no sdist from 0.5.11 on).
    """
    validate_version(version)
    store = cache_dir() / "artifacts"
    store.mkdir(parents=True, exist_ok=True)
    expected = _expected(version, kind, pin)
    if expected is not None:
        cached = store / expected.filename
        if cached.exists():
            verify(cached, expected.sha256, PIN_SOURCE)
            return cached
    remote = _find_remote(version, kind)
    if remote is None:
        return None
    if expected is not None and remote.filename != expected.filename:
        raise UserError(
            f"the index offers {remote.filename} but the pin names {expected.filename}",
            "correct the artifact file name in upstream.toml",
        )
    want = expected.sha256 if expected else remote.sha256
    target = store / remote.filename
    if not target.exists():
        _download(remote, target)
    verify(target, want, PIN_SOURCE if expected else INDEX_SOURCE)
    return target


def wheel_kinds(version: str) -> list[str]:
    """The wheel artifact kinds of a release: "wheel", then "wheel-cpXY" for each other x86_64
    CPython wheel it publishes (none for a py3-none-any release)."""
    primary = _find_remote(version, "wheel")
    if primary is None:
        return []
    others = sorted(
        {
            m.group(1)
            for f in _CACHED_LISTING[version]
            if (m := _CPYTHON_X86_64.search(f.filename)) and f.filename != primary.filename
        },
        key=lambda tag: int(tag[3:]),
    )
    if primary.filename.endswith("-py3-none-any.whl"):
        return ["wheel"]
    return ["wheel", *(f"wheel-{tag}" for tag in others)]


_CACHED_LISTING: dict[str, list[RemoteFile]] = {}


def index_artifacts(version: str) -> tuple[Artifact, ...]:
    """The release's sdist and wheels as a pin names them, with the sha256 the index publishes
    (every use verifies the file against it)."""
    kinds = ["sdist", *wheel_kinds(version)]
    found = [(kind, _find_remote(version, kind)) for kind in kinds]
    return tuple(Artifact(kind, remote.filename, remote.sha256) for kind, remote in found if remote)


def _find_remote(version: str, kind: str) -> RemoteFile | None:
    if version not in _CACHED_LISTING:
        _CACHED_LISTING[version] = _index_files(version)
    files = _CACHED_LISTING[version]
    if not files:
        yanked = _yanked_reason(version)
        if yanked is not None:
            raise UserError(
                f"SGLang {version} was yanked from the package index{f' ({yanked})' if yanked else ''}",
                "name another release (see `pip index versions sglang`)",
            )
        raise UserError(
            f"SGLang {version} is not on the package index", "name a released version (see `pip index versions sglang`)"
        )
    return _choose(files, kind)


def _download(remote: RemoteFile, target: Path) -> None:
    partial = target.with_name(target.name + ".part")
    try:
        with urllib.request.urlopen(remote.url, timeout=DOWNLOAD_TIMEOUT) as response, partial.open("wb") as out:
            total = int(response.headers.get("Content-Length") or 0)
            done = 0
            for block in iter(lambda: response.read(1 << 20), b""):
                out.write(block)
                done += len(block)
                _progress(f"downloading {remote.filename}", done, total)
    except (urllib.error.URLError, OSError) as exc:
        partial.unlink(missing_ok=True)
        reason = getattr(exc, "reason", exc)
        raise UserError(
            f"download of {remote.filename} failed ({reason})", "check the connection to PyPI and rerun"
        ) from None
    finally:
        _progress_done()
    partial.replace(target)


def verify(path: Path, sha256: str, source: str) -> None:
    """The file hashes to ``sha256``; else it is moved aside (never used again) and one line says
    which hash each side has."""
    actual = file_sha256(path)
    if actual != sha256:
        bad = path.with_name(path.name + ".sha256-mismatch")
        path.replace(bad)
        fix = (
            f"correct the sha256 of {path.name} in {PIN_SOURCE} if it is wrong; else rerun to download the file again"
            if source == PIN_SOURCE
            else "rerun to download it again"
        )
        raise UserError(
            f"checksum mismatch for {path.name}: {source} says {sha256}, the file has {actual}",
            f"{fix} (the file was moved aside to {bad})",
        )


def _progress(label: str, done: int, total: int) -> None:
    figure(f"{label}: {done * 100 // total}%" if total else f"{label}: {done >> 20} MiB")


def _progress_done() -> None:
    figure_done()

"""Where downloads and generated state live: outside the repository, reused across runs.

The cache feeds the build its upstream source, so it must be a directory this user owns and can
write: anything else is refused with one line saying what is wrong and what to do.

What is derived and reused (a build's record, the gate's verdicts, rehearsals) is kept as
entries keyed by content (``load_entry``/``store_entry``): each carries the sha256 of its own
body and is dropped with a warning when it does not match, so an entry edited on disk is never
trusted. ``code_version`` keys what the tool's own code decides.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.output import warn

_PROBED: set[tuple[str, int, int]] = set()  # (path, st_dev, st_ino) found writable


def cache_dir() -> Path:
    """``$SGLPATCH_CACHE`` or ``~/.cache/sglpatch``: created if missing, checked to be a directory
    the current user owns and can write."""
    path, origin = _configured()
    _create(path, origin)
    _check_owner(path, origin)
    _check_writable(path, origin)
    return path


def _configured() -> tuple[Path, str]:
    root = os.environ.get("SGLPATCH_CACHE")
    if root:
        return Path(root).expanduser(), f"the cache directory {root} (SGLPATCH_CACHE)"
    try:
        home = Path.home()
    except RuntimeError:
        raise UserError(
            "cannot find the home directory to put the cache in", "set SGLPATCH_CACHE to a directory you own"
        ) from None
    path = home / ".cache" / "sglpatch"
    return path, f"the cache directory {path}"


def _create(path: Path, origin: str) -> None:
    if path.exists() and not path.is_dir():
        raise UserError(
            f"{origin} is a regular file, not a directory",
            "point SGLPATCH_CACHE at a directory (or unset it to use ~/.cache/sglpatch)",
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UserError(
            f"{origin} cannot be created: part of its path is a regular file",
            "point SGLPATCH_CACHE at a directory (or unset it to use ~/.cache/sglpatch)",
        ) from None
    except OSError as exc:
        raise UserError(
            f"{origin} cannot be created ({exc.strerror})", "set SGLPATCH_CACHE to a directory you can write"
        ) from None


def _check_owner(path: Path, origin: str) -> None:
    # Like git's safe.directory: another user's cache could hand us artifacts we never verified.
    owner = path.stat().st_uid
    if owner != os.geteuid():
        raise UserError(
            f"{origin} belongs to another user (uid {owner}, you are uid {os.geteuid()})",
            "set SGLPATCH_CACHE to a directory you own",
        )


def _check_writable(path: Path, origin: str) -> None:
    # A real write, not os.access: it also holds for root, whom permission bits do not stop.
    st = path.stat()
    key = (str(path.resolve()), st.st_dev, st.st_ino)
    if key in _PROBED:
        return
    try:
        fd, probe = tempfile.mkstemp(prefix=".sglpatch-write-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UserError(
            f"{origin} is not writable ({exc.strerror})",
            "make it writable, or set SGLPATCH_CACHE to a directory you can write",
        ) from None
    _PROBED.add(key)


# ---------------------------------------------------------------- entries kept by content

KEEP = 256  # entries of each kind kept; the oldest go first (a key never hits again once its inputs moved on)
_PACKAGE = Path(__file__).resolve().parent
_CODE_VERSION: list[str] = []


def code_version() -> str:
    """sha256 of this tool's own source: any edit to it (a check, the wheel writer) is a new key."""
    if not _CODE_VERSION:
        _CODE_VERSION.append(source_digest(_PACKAGE))
    return _CODE_VERSION[0]


def source_digest(package: Path) -> str:
    """sha256 of every ``.py`` file under ``package``, by relative path and content."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


# ---------------------------------------------------------------- entries on disk


def _entry_path(kind: str, key: str) -> Path:
    return cache_dir() / kind / f"{key}.json"


def load_entry(kind: str, key: str) -> dict | None:
    """The body stored under ``kind``/``key``, verified against the sha256 it was stored with;
    None when there is none, or (with a warning) when it does not match."""
    path = _entry_path(kind, key)
    try:
        entry = json.loads(path.read_bytes())
        body, digest = entry["body"], entry["sha256"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        warn(f"ignoring the unreadable cache entry {path}: it is rebuilt")
        return None
    if _digest(body) != digest or body.get("key") != key:
        warn(f"ignoring the cache entry {path}: its content does not match its sha256 (edited on disk?)")
        return None
    return body


def store_entry(kind: str, key: str, body: dict) -> None:
    """Store ``body`` under ``kind``/``key`` whole (readers see the old entry or the new one),
    with the sha256 it is verified by; the oldest of a kind go beyond :data:`KEEP`."""
    path = _entry_path(kind, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps({"sha256": _digest({**body, "key": key}), "body": {**body, "key": key}}, sort_keys=True)
    fd, partial = tempfile.mkstemp(prefix=f".{key[:12]}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(data)
        os.replace(partial, path)  # readers see the old entry or the whole new one
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    _prune(path.parent)


def _prune(directory: Path) -> None:
    entries = list(directory.glob("*.json"))
    if len(entries) <= KEEP:
        return
    for stale in sorted(entries, key=_mtime)[: len(entries) - KEEP]:
        stale.unlink(missing_ok=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def file_sha256(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError:
        return None

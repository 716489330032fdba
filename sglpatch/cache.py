"""Where downloads and generated state live: outside the repository, reused across runs.

The cache feeds the build its upstream source, so it must be a directory this user owns and can
write: anything else is refused with one line saying what is wrong and what to do.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sglpatch.errors import UserError

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

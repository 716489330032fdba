"""One writer at a time: an advisory file lock per line, per repository or per cache.

Every command that writes a line's state (its pin, series, work tree, rebase, dist/ or image)
holds that line's lock for its whole run; a second one refuses with one line naming the holder.
The lock is an ``flock`` on a file, so a killed holder releases it with its process. Re-entrant
within one process: `image` runs the build, which takes the same lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from pathlib import Path

from .errors import UserError

_HELD: dict[Path, list] = {}  # lock file -> [open file, depth]


@contextlib.contextmanager
def exclusive(path: Path, what: str, wait: bool = False):
    """Hold the lock file ``path`` for ``what`` (e.g. "`build.py push`"); refuse if another
    process holds it, or with ``wait`` wait for it (saying so once on stderr)."""
    path = Path(path).resolve()
    held = _HELD.get(path)
    if held is not None:
        held[1] += 1
        try:
            yield
        finally:
            held[1] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+")
    try:
        _acquire(fh, path, what, wait)
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()} {what}\n")
        fh.flush()
        _HELD[path] = [fh, 1]
        try:
            yield
        finally:
            del _HELD[path]
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)
    finally:
        fh.close()


def _acquire(fh, path: Path, what: str, wait: bool) -> None:
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    fh.seek(0)
    pid, _, theirs = (fh.read().strip() or "? a command").partition(" ")
    holder = f"another {theirs or 'command'} is running in this checkout (pid {pid})"
    if not wait:
        raise UserError(f"cannot run {what} now: {holder}",
                        f"wait for it to finish, then rerun (lock: {path})") from None
    print(f"waiting: {holder}", file=sys.stderr, flush=True)
    fcntl.flock(fh, fcntl.LOCK_EX)


def line_lock(root: Path, what: str):
    """The lock of the line whose directory is ``root``."""
    return exclusive(Path(root) / "build" / "sglpatch.lock", what)

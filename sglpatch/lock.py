"""One writer at a time: an advisory file lock per line, per repository or per cache.

Every command that writes a line's state (its pin, series, work tree, rebase, dist/ or image)
holds that line's lock for its whole run; a second one refuses with one line naming the holder.
The lock is a POSIX record lock (``lockf``) on a file: a killed holder releases it with its
process, and unlike ``flock`` it is not inherited by processes the holder forks (the contract
check's workers), so orphaned children never keep a line locked. Re-entrant within one process:
`image` runs the build, which takes the same lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.output import say

_HELD: dict[Path, list] = {}  # lock file -> [open file, depth]


@contextlib.contextmanager
def exclusive(path: Path, what: str, wait: bool = False, where: str = "in this checkout"):
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
    try:
        fh = open(path, "a+")
    except OSError as exc:
        raise UserError(
            f"cannot open the lock file {path} ({exc.strerror})", f"remove it (`rm {path}`) and rerun"
        ) from None
    try:
        _acquire(fh, path, what, wait, where)
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
            fcntl.lockf(fh, fcntl.LOCK_UN)
    finally:
        fh.close()


def _acquire(fh, path: Path, what: str, wait: bool, where: str) -> None:
    try:
        fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except (BlockingIOError, PermissionError):
        pass
    fh.seek(0)
    pid, _, theirs = (fh.read().strip() or "? a command").partition(" ")
    holder = f"another {theirs or 'command'} is running {where} (pid {pid})"
    if not wait:
        raise UserError(
            f"cannot run {what} now: {holder}", f"wait for it to finish, then rerun (lock: {path})"
        ) from None
    say(f"waiting: {holder}")
    fcntl.lockf(fh, fcntl.LOCK_EX)


def line_lock(root: Path, what: str):
    """The lock of the line whose directory is ``root``."""
    return exclusive(Path(root) / "build" / "sglpatch.lock", what)

"""Pristine trees: cached, read-only checkouts of a release's commit in the mirror, each stamped
with its commit and a digest of every file so that a checkout edited since is checked out again.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
from pathlib import Path

from sglpatch.cache import cache_dir
from sglpatch.errors import UserError
from sglpatch.output import say
from sglpatch.upstream.mirror import import_release, mirror_errors, mirror_lock, open_mirror
from sglpatch.upstream.pin import Pin

# The checkout's own submodule: a pristine tree of the pinned release comes from it when it is
# populated at the pinned commit (import_release ignores it for every other release).
SUBMODULE = Path(__file__).resolve().parents[2] / "upstream"


def prepare(pin: Pin, root: Path) -> str:
    """Import the pinned release into the mirror; return the base commit."""
    return import_release(pin.version, pin, root / "upstream")


def pristine_tree(version: str, pin: Pin | None = None) -> Path:
    """A cached, read-only checkout of a pristine release (``python/sglang/...``).

    Its stamp records the commit and a digest of every file; a checkout that no longer matches
    (a file deleted, added or edited) is checked out again."""
    with mirror_lock(version), mirror_errors():
        commit = import_release(version, pin, SUBMODULE)
        target = cache_dir() / "trees" / version
        problem = _checkout_problem(target, commit)
        if problem is None:
            return target
        if target.exists() or target.is_symlink():
            say(f"the cached tree {target} {problem}: checking it out again")
            _remove(target)
        _checkout(commit, target)
        return target


STAMP = ".sglpatch-commit"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _checkout(commit: str, target: Path) -> None:
    partial = target.with_name(target.name + ".part")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    data = io.BytesIO()
    open_mirror().archive(data, commit, format="tar")
    data.seek(0)
    with tarfile.open(fileobj=data) as tar:
        try:
            tar.extractall(partial, filter="data")
        except tarfile.FilterError as exc:  # only a commit fetched from the submodule can hold one
            _remove(partial)
            raise UserError(
                f"the commit {commit[:12]} holds {exc.tarinfo.name}, which a checkout would write "
                f"outside its tree ({exc})",
                "pin a commit of a real release in upstream.toml "
                "(or leave the submodule empty: releases are then imported from PyPI)",
            ) from None
    count, digest = _tree_digest(partial)
    (partial / STAMP).write_text(f"{commit}\nfiles {count}\nsha256 {digest}\n")
    partial.replace(target)


def _checkout_problem(target: Path, commit: str) -> str | None:
    """Why the checkout at ``target`` is not a complete, unmodified checkout of ``commit``."""
    try:
        stamp = (target / STAMP).read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return "has no stamp"
    if len(stamp) != 3:
        return "has a stamp without a file digest"
    if stamp[0] != commit:
        return "is of another commit"
    try:
        count, digest = _tree_digest(target)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stamp[1:] != [f"files {count}", f"sha256 {digest}"]:
        return f"no longer matches its stamp ({count} files now; files deleted, added or edited)"
    return None


def _tree_digest(root: Path) -> tuple[int, str]:
    """The number of files under ``root`` (the stamp aside) and a sha256 of their paths and bytes."""
    digest = hashlib.sha256()
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in sorted(filenames + links):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if rel == STAMP:
                continue
            count += 1
            if os.path.islink(path):
                data = b"link:" + os.readlink(path).encode()
            else:
                with open(path, "rb") as fh:
                    data = fh.read()
            digest.update(f"{rel}\0{len(data)}\0".encode())
            digest.update(data)
    return count, digest.hexdigest()

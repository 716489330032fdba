"""``lines --add``: start a line as a copy of another's pin and series, or bare on any release.

Apart from ``line.py`` because it records what it creates in the line's transaction log
(``transaction.py``), which itself builds on lines.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.queue.line import Line, find_line, line_dir, validate_name
from sglpatch.queue.series import PATCH_DIR
from sglpatch.queue.transaction_journal import boundary
from sglpatch.queue.transaction_log import record_created
from sglpatch.upstream import source as releases
from sglpatch.upstream.pin import PIN_FILE, bare_pin_text, read_pin, validate_version


def add_line(repo: Path, name: str, source: str, *, bare: bool, release: str | None) -> Line:
    """Start line ``name`` as a copy of line ``source``'s pin and series (same release, patches
    and series release), ready for ``rebase --onto``, which moves the pin and restarts the series
    release at 1. ``bare``: an empty series on ``release`` (default: ``source``'s), with none of
    ``source``'s checks, label or accepted findings, writing no CHANGELOG entries."""
    validate_name(name)
    origin = find_line(repo, source)
    target = line_dir(repo, name)
    if target.exists():
        raise UserError(
            f"{target.relative_to(repo)} already exists",
            f"pick another name, or remove it (`git rm -r {target.relative_to(repo)}`)",
        )
    if release is not None and not bare:
        raise UserError(
            "--release pins a bare line only",
            f"add --bare, or copy the line and move it with `rebase --onto {release}`",
        )
    pin = read_pin(origin.root)  # refuse to copy a broken pin
    bare_pin = _bare_pin(target, pin.repo, release or pin.version, name) if bare else None
    target.parent.mkdir(exist_ok=True)  # lines/, in the repository
    # A private scratch directory, renamed into place: a second `lines --add NAME` at the same
    # time fails on the rename instead of sharing a half-copied directory.
    partial = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".part", dir=target.parent))
    try:
        if bare_pin is None:
            shutil.copy2(origin.root / PIN_FILE, partial / PIN_FILE)
            shutil.copytree(origin.root / PATCH_DIR, partial / PATCH_DIR)
        else:
            (partial / PIN_FILE).write_bytes(bare_pin.encode())
            (partial / PATCH_DIR).mkdir()
            (partial / PATCH_DIR / "series").write_text(
                f"# The {name} line's series (quilt format, applied in order with -p1); empty when made.\n"
            )
        boundary("lines-add:copied")
        partial.rename(target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        if target.exists():
            raise UserError(
                f"{target.relative_to(repo)} was created by another command meanwhile", "pick another name"
            ) from None
        raise
    created = [target / PIN_FILE, *sorted((target / PATCH_DIR).iterdir())]
    record_created(
        target,
        f"lines --add {name} " + (f"--bare --release {release or pin.version}" if bare else f"--from {source}"),
        created,
    )
    return Line(name, target, repo)


def _bare_pin(target: Path, repo_url: str, version: str, name: str) -> str:
    validate_version(version)
    return bare_pin_text(target / PIN_FILE, repo_url, version, releases.index_artifacts(version), name)

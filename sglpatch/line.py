"""Maintained lines: each line pins one upstream release and carries its own series.

A line is a directory holding a pin (``upstream.toml``) and a quilt series (``patches/``), plus its
ignored work state (``build/``: work tree and rebase state; ``dist/``: its wheel). The production
line is the repository root itself, so ``python build.py`` with no ``--line`` builds what
production runs and every path in the docs stays short; any other line lives in
``lines/<name>/`` with exactly the same layout. Every command works on one line's directory and
never needs to know which line it is, except for the few things the lines share: the repository
(its submodule gitlinks), ``CHANGELOG.md`` and ``docker/Dockerfile``.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError
from . import source as releases
from .pin import PIN_FILE, bare_pin_text, read_pin, validate_version
from .series import PATCH_DIR

PRODUCTION = "production"
LINES_DIR = "lines"
SUBMODULE = "upstream"
_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")
# Names that would collide with a line's own state directories or read ambiguously.
_RESERVED = {PRODUCTION, "build", "dist", "src", "rebase", "patches", "upstream"}


@dataclass(frozen=True)
class Line:
    name: str
    root: Path  # holds upstream.toml and patches/
    repo: Path  # the repository root

    @property
    def is_production(self) -> bool:
        return self.name == PRODUCTION

    @property
    def submodule(self) -> str:
        """Repository path of this line's upstream gitlink (the line may have none)."""
        return str((self.root / SUBMODULE).relative_to(self.repo))

    def label(self) -> str:
        """How changelog entries and reports name the line."""
        return f"{self.name} line"

    def command(self, *words: str) -> str:
        """How a maintainer runs a build.py command on this line."""
        return " ".join(["python build.py", *([] if self.is_production else ["--line", self.name]), *words])


def line_dir(repo: Path, name: str) -> Path:
    return repo if name == PRODUCTION else repo / LINES_DIR / name


def find_line(repo: Path, name: str | None = None) -> Line:
    """The line called ``name`` (default: production) of the repository at ``repo``."""
    name = name or PRODUCTION
    root = line_dir(repo, name)
    if name != PRODUCTION and not (root / PIN_FILE).is_file():
        known = ", ".join(line.name for line in all_lines(repo))
        raise UserError(f"unknown line '{name}' (no {LINES_DIR}/{name}/{PIN_FILE})",
                        f"known lines: {known}; start one with `python build.py lines --add {name}`")
    return Line(name, root, repo)


def all_lines(repo: Path) -> list[Line]:
    """Production first, then ``lines/*`` in name order."""
    found = [Line(PRODUCTION, repo, repo)]
    directory = repo / LINES_DIR
    if directory.is_dir():
        found += [Line(p.name, p, repo) for p in sorted(directory.iterdir())
                  if _NAME.fullmatch(p.name) and (p / PIN_FILE).is_file()]  # not an unfinished .NAME.*.part
    return found


def line_of(root: Path) -> Line:
    """The line whose directory is ``root``: ``<repo>/lines/<name>``, else the production root."""
    root = Path(root)
    if root.parent.name == LINES_DIR and (root / PIN_FILE).is_file():
        return Line(root.name, root, root.parent.parent)
    return Line(PRODUCTION, root, root)


def validate_name(name: str) -> None:
    if not _NAME.fullmatch(name) or name in _RESERVED:
        raise UserError(f"'{name}' cannot name a line",
                        "use lower-case letters, digits and '-', starting with a letter "
                        f"(not {', '.join(sorted(_RESERVED))})")


def add_line(repo: Path, name: str, source: str, *, bare: bool, release: str | None) -> Line:
    """Start line ``name`` as a copy of line ``source``'s pin and series (same release, patches
    and series release), ready for ``rebase --onto``, which moves the pin and restarts the series
    release at 1. ``bare``: an empty series on ``release`` (default: ``source``'s), with none of
    ``source``'s checks, label or accepted findings, writing no CHANGELOG entries."""
    from .transaction import boundary, record_created  # the transaction module builds on lines

    validate_name(name)
    origin = find_line(repo, source)
    target = line_dir(repo, name)
    if target.exists():
        raise UserError(f"{target.relative_to(repo)} already exists",
                        f"pick another name, or remove it (`git rm -r {target.relative_to(repo)}`)")
    if release is not None and not bare:
        raise UserError("--release pins a bare line only",
                        f"add --bare, or copy the line and move it with `rebase --onto {release}`")
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
                f"# The {name} line's series (quilt format, applied in order with -p1); empty when made.\n")
        boundary("lines-add:copied")
        partial.rename(target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        if target.exists():
            raise UserError(f"{target.relative_to(repo)} was created by another command meanwhile",
                            "pick another name") from None
        raise
    created = [target / PIN_FILE, *sorted((target / PATCH_DIR).iterdir())]
    record_created(target, f"lines --add {name} " + (f"--bare --release {release or pin.version}" if bare
                                                      else f"--from {source}"), created)
    return Line(name, target, repo)


def _bare_pin(target: Path, repo_url: str, version: str, name: str) -> str:
    validate_version(version)
    return bare_pin_text(target / PIN_FILE, repo_url, version, releases.index_artifacts(version), name)

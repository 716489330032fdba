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
from dataclasses import dataclass
from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.upstream.pin import PIN_FILE

PRODUCTION = "production"
LINES_DIR = "lines"
SUBMODULE = "upstream"
WORK_TREE = Path("build") / "src"  # a line's patched work tree
JOURNAL = Path("build") / "transaction.json"  # an operation under way on it
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
    """The line called ``name`` (default: production) of the repository at ``repo``. A line is a
    name, never a path: ``..``, ``lines/x``, an absolute path or an empty name is refused."""
    if name is None:
        name = PRODUCTION
    known = ", ".join(line.name for line in all_lines(repo))
    if name != PRODUCTION and not _NAME.fullmatch(name):
        raise UserError(
            f"'{name}' is not a line name (a line is named with lower-case letters, digits and '-', never a path)",
            f"use one of the known lines: {known}",
        )
    root = line_dir(repo, name)
    if name != PRODUCTION and not (root / PIN_FILE).is_file():
        start = "" if name in _RESERVED else f"; start one with `python build.py lines --add {name}`"
        raise UserError(f"unknown line '{name}' (no {LINES_DIR}/{name}/{PIN_FILE})", f"known lines: {known}{start}")
    return Line(name, root, repo)


def all_lines(repo: Path) -> list[Line]:
    """Production first, then ``lines/*`` in name order."""
    found = [Line(PRODUCTION, repo, repo)]
    directory = repo / LINES_DIR
    if directory.is_dir():
        found += [
            Line(p.name, p, repo)
            for p in sorted(directory.iterdir())
            if _NAME.fullmatch(p.name) and (p / PIN_FILE).is_file()
        ]  # not an unfinished .NAME.*.part
    return found


def line_of(root: Path) -> Line:
    """The line whose directory is ``root``: ``<repo>/lines/<name>``, else the production root."""
    root = Path(root)
    if root.parent.name == LINES_DIR and (root / PIN_FILE).is_file():
        return Line(root.name, root, root.parent.parent)
    return Line(PRODUCTION, root, root)


def validate_name(name: str) -> None:
    if not _NAME.fullmatch(name) or name in _RESERVED:
        raise UserError(
            f"'{name}' cannot name a line",
            f"use lower-case letters, digits and '-', starting with a letter (not {', '.join(sorted(_RESERVED))})",
        )

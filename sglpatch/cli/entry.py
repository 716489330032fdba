"""Where `build.py`, `python -m sglpatch` and the `sglpatch` script come in.

A build whose inputs are unchanged answers here from its record (``ship.build_cache``) before
the commands, GitPython and the checks are loaded: a no-op rebuild costs a few git status calls
and the wheels' sha256. Everything else goes to :func:`sglpatch.cli.main.main`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sglpatch.cli.common import build_text
from sglpatch.lock import line_lock
from sglpatch.output import error, result, say
from sglpatch.ship.build_cache import REUSED_NOTE, build_key, reused_build

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    answered = _reused(args)
    if answered is not None:
        return answered
    try:
        from sglpatch.cli.main import main as run_command
    except KeyboardInterrupt:  # Ctrl-C while Python loads the tool: nothing has started
        error("interrupted; nothing was lost: nothing had started")
        return 130
    except ImportError as exc:  # a missing dependency or tool is an install step, not a crash
        if "git executable" in str(exc):
            error("the git program was not found on PATH: install git (e.g. apt-get install git)")
        else:
            error(f"missing Python package {getattr(exc, 'name', None) or exc}: run `pip install -r requirements.txt`")
        return 2
    return run_command(args)


def _reused(args: list[str]) -> int | None:
    """Answer a plain `build` (``--json``, ``--line``, ``--root`` at most) from the record of an
    identical build; None: anything else, or no record that holds, so the full path runs."""
    wanted = _plain_build(args)
    if wanted is None:
        return None
    root, line, as_json = wanted
    try:
        from sglpatch.queue.line import JOURNAL, WORK_TREE, find_line

        line_root = find_line(root, line).root
        with line_lock(line_root, "`build.py build`"):
            data = reused_build(build_key(line_root), line_root / JOURNAL, line_root / WORK_TREE)
            if data is None:
                return None
            say(REUSED_NOTE)
            result(data, build_text(data), as_json=as_json)
            return 0
    except Exception:  # the full path decides and reports whatever went wrong here
        return None


def _plain_build(args: list[str]) -> tuple[Path, str | None, bool] | None:
    """(root, line, --json) of a command line that asks for nothing but a build; else None."""
    root, line, as_json, seen_build = ROOT, None, False, False
    rest = iter(args)
    for arg in rest:
        name, eq, value = arg.partition("=")
        if arg == "--json":
            as_json = True
        elif arg == "build" and not seen_build:
            seen_build = True
        elif name in ("--line", "--root"):
            value = value if eq else next(rest, "")
            if not value or value.startswith("-"):
                return None
            if name == "--line":
                line = value
            elif seen_build:  # --root is the top parser's alone
                return None
            else:
                root = Path(value)
        else:
            return None
    return root, line, as_json


def checkout_of(start: Path) -> Path | None:
    """The repository that holds ``start``: the nearest directory up with build.py and upstream.toml
    (a line's own directory, lines/NAME/, has only the latter)."""
    for directory in (start, *start.parents):
        if (directory / "build.py").is_file() and (directory / "upstream.toml").is_file():
            return directory
    return None


def console() -> int:
    """The ``sglpatch`` command: `python build.py` for the checkout the current directory is in."""
    root = checkout_of(Path.cwd().resolve())
    if root is None:
        error(
            f"{Path.cwd()} is not inside a checkout of the patch repository (no build.py and "
            "upstream.toml above it): cd into one"
        )
        return 2
    return main(["--root", str(root), *sys.argv[1:]])

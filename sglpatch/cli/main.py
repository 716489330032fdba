"""`build.py`'s main: parse, find the line, run the command; every expected failure becomes one
line on stderr and an exit status. The parser is ``parser``, the commands the other modules here."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from sglpatch.cli.parser import parser
from sglpatch.errors import UserError
from sglpatch.git.env import killing_signal
from sglpatch.git.repo import GitError, GitNotFound
from sglpatch.output import error
from sglpatch.queue import transaction
from sglpatch.queue.line import find_line, line_of

# git's words for an object store that lost or garbled objects (git fsck's and read errors)
_DAMAGED = re.compile(
    r"bad (tree )?object|unable to read (tree|sha1 file)|missing (blob|tree|commit)|"
    r"is corrupt|corrupt (loose|pack)|invalid object|broken link"
)


def _terminated(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.json = getattr(args, "json", False)  # not top.set_defaults: it would reset the shared action
    signal.signal(signal.SIGTERM, _terminated)  # a stop from a scheduler is an interrupt too
    # Started with SIGINT ignored (`cmd &` in a script, nohup), git children still die of it
    # (git installs its own handlers): Python must stop with them, not misread their deaths.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # Commands work on one line's directory; `repo` stays the repository root.
        args.repo_root = args.root
        args.root = find_line(args.repo_root, getattr(args, "line", None)).root
        return args.func(args)
    except UserError as exc:
        error(str(exc))
        return 2
    except GitNotFound:
        error("the git program was not found: install git (e.g. apt-get install git)")
        return 2
    except GitError as exc:
        if (signum := killing_signal(exc)) is not None:
            error(
                f"interrupted: git {exc.command[1] if len(exc.command) > 1 else ''} was stopped by "
                f"signal {signum}; nothing was lost: {_after_interrupt(args)}"
            )
            return 130
        said = [l.strip().strip("'") for l in (exc.stderr or "").replace("stderr: '", "").splitlines() if l.strip()]
        lock = next((m for l in said for m in [re.search(r"'?(/\S+\.lock)'?", l)] if m), None)
        if lock:
            error(
                f"git found {lock.group(1)}: another git command is running there, or one was killed: "
                f"if none runs, remove it (`rm {lock.group(1)}`) and rerun"
            )
            return 2
        damage = next((l for l in said if _DAMAGED.search(l)), None)
        if damage:
            work = Path(args.root) / "build" / "src"
            error(
                f"git found a damaged repository ({damage}): `git -C {work} fsck` shows the damage; "
                f"save what you need from {work}, move it aside and run `python build.py prepare` "
                "(patches/ is untouched)"
            )
            return 2
        error(
            f"git {exc.command[1] if len(exc.command) > 1 else ''} failed: "
            f"{said[-1] if said else exc.status}: nothing was lost; rerun, or run `build.py undo`"
        )
        return 2
    except OSError as exc:
        error(f"{exc.strerror or exc}: {exc.filename or ''}: check the path and its permissions")
        return 2
    except KeyboardInterrupt as exc:
        why = f" ({exc})" if str(exc) else ""  # a git killed alone (the OOM killer) is not a Ctrl-C
        error(f"interrupted{why}; nothing was lost: {_after_interrupt(args)}")
        return 130


def _after_interrupt(args) -> str:
    try:
        line = line_of(args.root)
        if transaction.rebase_in_progress(line):
            return (
                f"`{line.command('rebase', '--continue')}` carries on, "
                f"`{line.command('rebase', '--abort')}` returns to the state before the rebase"
            )
    except Exception:  # the message must never fail
        pass
    if transaction.COMPLETED:
        return f"`{transaction.COMPLETED[-1]}` had completed before the interrupt took effect"
    return "the line is as it was before the command; rerun it"

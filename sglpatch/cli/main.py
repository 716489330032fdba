"""Command-line parsing and dispatch; expected failures become one line on stderr."""

from __future__ import annotations

import argparse
import functools
import inspect
import re
import signal
import sys
from pathlib import Path

import git

from sglpatch.errors import UserError
from sglpatch.git.env import killing_signal
from sglpatch.lock import line_lock
from sglpatch.output import error, result
from sglpatch.queue import transaction
from sglpatch.queue.line import PRODUCTION, all_lines, find_line, line_of
from sglpatch.queue.line_add import add_line
from sglpatch.queue.patch_queue import PatchQueue
from sglpatch.queue.prepare import prepare_tree
from sglpatch.queue.series import read_series_names
from sglpatch.ship import build as build_module
from sglpatch.upstream.pin import read_pin

ROOT = Path(__file__).resolve().parents[2]
# git's words for an object store that lost or garbled objects (git fsck's and read errors)
_DAMAGED = re.compile(r"bad (tree )?object|unable to read (tree|sha1 file)|missing (blob|tree|commit)|"
                      r"is corrupt|corrupt (loose|pack)|invalid object|broken link")


def emit(args, data: dict, text: str) -> None:
    result(data, text, as_json=args.json)


def writes(name: str):
    """A command that changes the line: it holds the line's lock from start to end."""
    def wrap(handler):
        @functools.wraps(handler)
        def run(args):
            with line_lock(args.root, f"`build.py {name}`"):
                return handler(args)
        return run
    return wrap


# ---------------------------------------------------------------- handlers

@writes("build")
def cmd_build(args) -> int:
    result = build_module.build(args.root)
    emit(args, result.to_json(),
         f"upstream  SGLang {result.pin.version} ({result.pin.tag}, {result.pin.commit or 'no commit pinned'})\n"
         f"patches   {len(result.applied)} applied: {', '.join(result.applied) or 'none'}\n"
         + "\n".join(f"wheel     {path}\nsha256    {sha}" for path, sha in result.wheels))
    return 0


@writes("prepare")
def cmd_prepare(args) -> int:
    pin, series, base, queue = prepare_tree(args.root)
    emit(args, {"base": base, "work_tree": str(queue.path), "applied": series.names},
         f"work tree {queue.path}: SGLang {pin.version} + {len(series.names)} patches")
    return 0


def cmd_status(args) -> int:
    from sglpatch.queue.rebase import progress
    transaction.recover_if_idle(args.root)
    rebase = progress(args.root)
    if rebase:  # the work tree holds the rebase, not the series: say where it stands
        emit(args, {"rebase": rebase}, rebase["text"])
        return 0
    queue = PatchQueue(args.root)
    rows = queue.status()
    dirty = queue.is_dirty()
    data = {"work_tree": str(queue.path), "dirty": dirty,
            "patches": [{"name": r.name, "applied": r.applied, "files": list(r.files)} for r in rows]}
    lines = [f"{'+' if r.applied else '-'} {r.name}  ({', '.join(r.files)})" for r in rows]
    if dirty:
        lines.append("work tree has uncommitted edits (refresh or new NAME to keep them)")
    emit(args, data, "\n".join(lines) or "the series is empty")
    return 0


def cmd_push(args) -> int:
    done = PatchQueue(args.root).push(args.name, all=args.all)
    emit(args, {"pushed": done}, "\n".join(f"applied {n}" for n in done) or "nothing to push")
    return 0


def cmd_pop(args) -> int:
    done = PatchQueue(args.root).pop(args.name, all=args.all)
    emit(args, {"popped": done}, "\n".join(f"removed {n}" for n in done) or "nothing to pop")
    return 0


def cmd_new(args) -> int:
    message = _message_file(args.message_file) if args.message_file else args.message
    path = PatchQueue(args.root).new(args.name, message)
    emit(args, {"patch": str(path)}, f"created {path} (edit its message, then `refresh`)")
    return 0


def _message_file(name: str) -> str:
    try:
        return Path(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"the message file {name} (-F) does not exist", "name an existing file") from None
    except UnicodeDecodeError:
        raise UserError(f"the message file {name} (-F) is not UTF-8 text", "save it as UTF-8") from None
    except OSError as exc:
        raise UserError(f"cannot read the message file {name} (-F): {exc.strerror}", "name a readable file") from None


def cmd_undo(args) -> int:
    entry = transaction.undo(args.root)
    emit(args, {"undone": entry.op, "entry": entry.sha},
         f"undid `{entry.op}`: the line is as it was before it")
    return 0


def cmd_log(args) -> int:
    entries = transaction.log(line_of(args.root))
    emit(args, {"entries": [e.__dict__ for e in entries]},
         "\n".join(f"{e.sha[:12]}  {e.date}  {e.op}" + (f"  ({e.summary.splitlines()[0]})" if e.summary else "")
                   for e in entries) or "no operation is recorded for this line")
    return 0


def cmd_refresh(args) -> int:
    path = PatchQueue(args.root).refresh()
    emit(args, {"patch": str(path)}, f"refreshed {path}")
    return 0


def cmd_export(args) -> int:
    paths = PatchQueue(args.root).export()
    emit(args, {"exported": [str(p) for p in paths]}, "\n".join(f"exported {p}" for p in paths)
         or "no patch is applied")
    return 0


def cmd_lines(args) -> int:
    if args.add:
        line = add_line(args.repo_root, args.add, args.source, bare=args.bare, release=args.release)
        what = (f"bare, on SGLang {read_pin(line.root).version}, no patches; add them with "
                f"`{line.command('new', 'NAME')}`" if args.bare else f"a copy of the {args.source} line")
        emit(args, {"added": line.name, "directory": str(line.root), "bare": args.bare},
             f"added line {line.name} in {line.root.relative_to(args.repo_root)}: {what}; "
             f"move it with `{line.command('rebase', '--onto', 'VERSION')}`")
        return 0
    if args.bare or args.release:
        raise UserError("--bare and --release go with --add NAME", "e.g. `python build.py lines --add exp --bare`")
    rows = []
    for line in all_lines(args.repo_root):
        pin = read_pin(line.root)
        rows.append({"line": line.name, "directory": str(line.root.relative_to(args.repo_root) or "."),
                     "upstream": pin.version, "commit": pin.commit, "version": pin.local_version,
                     "patches": read_series_names(line.root)})
    width = max(len(r["line"]) for r in rows)
    text = "\n".join(f"{r['line']:<{width}}  SGLang {r['upstream']:<8} {r['version']:<16} "
                     f"{len(r['patches'])} patches  ({r['directory']})" for r in rows)
    emit(args, {"lines": rows}, text)
    return 0


# ---------------------------------------------------------------- parser

def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's copy of an option must not reset a value given before the command.
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="machine-readable output on stdout")
    common.add_argument("--line", default=argparse.SUPPRESS, metavar="NAME",
                        help=f"the maintained line to work on (default: {PRODUCTION}; "
                             "`build.py lines` lists them)")
    top = argparse.ArgumentParser(
        prog="build.py", parents=[common],
        description="Maintain the SGLang patch series: with no command, build the overlay wheel.")
    top.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    top.set_defaults(func=cmd_build)
    sub = top.add_subparsers(title="commands", metavar="COMMAND")

    def add(name, func, help_text):
        cmd = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        cmd.set_defaults(func=func)
        return cmd

    add("build", cmd_build, "prepare upstream, apply the series, check, build the overlay wheel")
    add("prepare", cmd_prepare, "import the pinned upstream and apply the series into build/src")
    add("status", cmd_status, "which patches are applied and which files they touch")
    for name, func, help_text in (
            ("push", cmd_push, "apply the next patch, up to and including NAME, or --all"),
            ("pop", cmd_pop, "unapply the top patch, down to and including NAME, or --all")):
        cmd = add(name, func, help_text)
        cmd.add_argument("name", nargs="?", metavar="NAME", help="a patch of the series (e.g. 0002-foo.patch)")
        cmd.add_argument("--all", action="store_true", help="every patch")
    cmd = add("new", cmd_new, "make the work tree's edits a new patch above the top one")
    cmd.add_argument("name", help="the new patch's name (numbered, e.g. 0005-fix-foo)")
    cmd.add_argument("-m", "--message", help="commit message (default: a template to edit)")
    cmd.add_argument("-F", "--message-file", help="read the commit message from a file")
    add("refresh", cmd_refresh, "fold the work tree's edits into the top patch")
    add("export", cmd_export, "rewrite patches/ from the applied commits")
    add("undo", cmd_undo, "restore the line as it was before its last operation (repeat to go further back)")
    add("log", cmd_log, "the line's operations, newest first (what `undo` steps back through)")
    cmd = add("lines", cmd_lines, "list the maintained lines, or start a new one with --add")
    cmd.add_argument("--add", metavar="NAME", help="start line NAME as a copy of --from's pin and series")
    cmd.add_argument("--from", dest="source", default=PRODUCTION, metavar="LINE",
                     help=f"the line --add copies (default: {PRODUCTION})")
    cmd.add_argument("--bare", action="store_true",
                     help="an empty series with none of --from's checks, label or accepted findings; "
                          "writes no CHANGELOG entries ([series] changelog in its pin)")
    cmd.add_argument("--release", metavar="VERSION",
                     help="with --bare: pin this SGLang release from PyPI (default: --from's)")
    for module in _command_modules():
        if len(inspect.signature(module.register_cli).parameters) == 2:
            module.register_cli(sub, common)
        else:
            module.register_cli(sub)
    return top


def _command_modules():
    # Commands that live with their concept; each defines register_cli(subparsers, common).
    from sglpatch.cli import check
    from sglpatch.queue import importer, rebase, rehearse
    from sglpatch.ship import deploy, image
    return [m for m in (check, deploy, image, importer, rebase, rehearse) if hasattr(m, "register_cli")]


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
    except git.exc.GitCommandNotFound:
        error("the git program was not found: install git (e.g. apt-get install git)")
        return 2
    except git.GitCommandError as exc:
        if (signum := killing_signal(exc)) is not None:
            error(f"interrupted: git {exc.command[1] if len(exc.command) > 1 else ''} was stopped by "
                  f"signal {signum}; nothing was lost: {_after_interrupt(args)}")
            return 130
        said = [l.strip().strip("'") for l in (exc.stderr or "").replace("stderr: '", "").splitlines() if l.strip()]
        lock = next((m for l in said for m in [re.search(r"'?(/\S+\.lock)'?", l)] if m), None)
        if lock:
            error(f"git found {lock.group(1)}: another git command is running there, or one was killed: "
                  f"if none runs, remove it (`rm {lock.group(1)}`) and rerun")
            return 2
        damage = next((l for l in said if _DAMAGED.search(l)), None)
        if damage:
            work = Path(args.root) / "build" / "src"
            error(f"git found a damaged repository ({damage}): `git -C {work} fsck` shows the damage; "
                  f"save what you need from {work}, move it aside and run `python build.py prepare` "
                  "(patches/ is untouched)")
            return 2
        error(f"git {exc.command[1] if len(exc.command) > 1 else ''} failed: "
              f"{said[-1] if said else exc.status}: nothing was lost; rerun, or run `build.py undo`")
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
            return (f"`{line.command('rebase', '--continue')}` carries on, "
                    f"`{line.command('rebase', '--abort')}` returns to the state before the rebase")
    except Exception:  # the message must never fail
        pass
    if transaction.COMPLETED:
        return f"`{transaction.COMPLETED[-1]}` had completed before the interrupt took effect"
    return "the line is as it was before the command; rerun it"


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
        error(f"{Path.cwd()} is not inside a checkout of the patch repository (no build.py and "
              "upstream.toml above it): cd into one")
        return 2
    return main(["--root", str(root), *sys.argv[1:]])


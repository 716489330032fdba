"""The commands that work the line's series and its history: build, prepare, status, push, pop,
new, refresh, export, undo, log and lines."""

from __future__ import annotations

from pathlib import Path

from sglpatch.cli.common import build_text, emit, writes
from sglpatch.errors import UserError
from sglpatch.queue import transaction
from sglpatch.queue.line import PRODUCTION, all_lines, line_of
from sglpatch.queue.line_add import add_line
from sglpatch.queue.patch_queue import PatchQueue
from sglpatch.queue.prepare import prepare_tree
from sglpatch.queue.series import read_series_names
from sglpatch.ship import build as build_module
from sglpatch.upstream.pin import read_pin

# ---------------------------------------------------------------- handlers


@writes("build")
def cmd_build(args) -> int:
    result = build_module.build(args.root, rebuild=getattr(args, "rebuild", False))
    data = result.to_json()
    emit(args, data, build_text(data))
    return 0


@writes("prepare")
def cmd_prepare(args) -> int:
    pin, series, base, queue = prepare_tree(args.root)
    emit(
        args,
        {"base": base, "work_tree": str(queue.path), "applied": series.names},
        f"work tree {queue.path}: SGLang {pin.version} + {len(series.names)} patches",
    )
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
    data = {
        "work_tree": str(queue.path),
        "dirty": dirty,
        "patches": [{"name": r.name, "applied": r.applied, "files": list(r.files)} for r in rows],
    }
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
    emit(args, {"undone": entry.op, "entry": entry.sha}, f"undid `{entry.op}`: the line is as it was before it")
    return 0


def cmd_log(args) -> int:
    entries = transaction.log(line_of(args.root))
    emit(
        args,
        {"entries": [e.__dict__ for e in entries]},
        "\n".join(
            f"{e.sha[:12]}  {e.date}  {e.op}" + (f"  ({e.summary.splitlines()[0]})" if e.summary else "")
            for e in entries
        )
        or "no operation is recorded for this line",
    )
    return 0


def cmd_refresh(args) -> int:
    path = PatchQueue(args.root).refresh()
    emit(args, {"patch": str(path)}, f"refreshed {path}")
    return 0


def cmd_export(args) -> int:
    paths = PatchQueue(args.root).export()
    emit(
        args, {"exported": [str(p) for p in paths]}, "\n".join(f"exported {p}" for p in paths) or "no patch is applied"
    )
    return 0


def cmd_lines(args) -> int:
    if args.add is not None:  # `--add ''` is a name to refuse, not a request for the listing
        line = add_line(args.repo_root, args.add, args.source, bare=args.bare, release=args.release)
        what = (
            f"bare, on SGLang {read_pin(line.root).version}, no patches; add them with `{line.command('new', 'NAME')}`"
            if args.bare
            else f"a copy of the {args.source} line"
        )
        emit(
            args,
            {"added": line.name, "directory": str(line.root), "bare": args.bare},
            f"added line {line.name} in {line.root.relative_to(args.repo_root)}: {what}; "
            f"move it with `{line.command('rebase', '--onto', 'VERSION')}`",
        )
        return 0
    if args.bare or args.release:
        raise UserError("--bare and --release go with --add NAME", "e.g. `python build.py lines --add exp --bare`")
    rows: list[dict] = []
    for line in all_lines(args.repo_root):
        pin = read_pin(line.root)
        rows.append(
            {
                "line": line.name,
                "directory": str(line.root.relative_to(args.repo_root) or "."),
                "upstream": pin.version,
                "commit": pin.commit,
                "version": pin.local_version,
                "patches": read_series_names(line.root),
            }
        )
    width = max(len(r["line"]) for r in rows)
    text = "\n".join(
        f"{r['line']:<{width}}  SGLang {r['upstream']:<8} {r['version']:<16} "
        f"{len(r['patches'])} patches  ({r['directory']})"
        for r in rows
    )
    emit(args, {"lines": rows}, text)
    return 0


# ---------------------------------------------------------------- their subparsers


def register_cli(sub, common) -> None:
    def add(name, func, help_text):
        cmd = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        cmd.set_defaults(func=func)
        return cmd

    cmd = add("build", cmd_build, "prepare upstream, apply the series, check, build the overlay wheel")
    cmd.add_argument(
        "--rebuild",
        action="store_true",
        help="build even when the last build of the same inputs is still in place (it is reused by default)",
    )
    add("prepare", cmd_prepare, "import the pinned upstream and apply the series into build/src")
    add("status", cmd_status, "which patches are applied and which files they touch")
    for name, func, help_text in (
        ("push", cmd_push, "apply the next patch, up to and including NAME, or --all"),
        ("pop", cmd_pop, "unapply the top patch, down to and including NAME, or --all"),
    ):
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
    cmd.add_argument(
        "--from",
        dest="source",
        default=PRODUCTION,
        metavar="LINE",
        help=f"the line --add copies (default: {PRODUCTION})",
    )
    cmd.add_argument(
        "--bare",
        action="store_true",
        help="an empty series with none of --from's checks, label or accepted findings; "
        "writes no CHANGELOG entries ([series] changelog in its pin)",
    )
    cmd.add_argument(
        "--release", metavar="VERSION", help="with --bare: pin this SGLang release from PyPI (default: --from's)"
    )

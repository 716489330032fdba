"""``python build.py rebase``: carry the line's series to a new upstream release
(:mod:`sglpatch.queue.rebase` does the work)."""

from __future__ import annotations

from sglpatch.cli.common import emit
from sglpatch.queue import rebase


def register_cli(sub, common) -> None:
    cmd = sub.add_parser(
        "rebase",
        parents=[common],
        help="carry the series to a new upstream release",
        description="Replay the series onto a new SGLang release with a verdict per patch.",
    )
    group = cmd.add_mutually_exclusive_group(required=True)
    group.add_argument("--onto", metavar="VERSION", help="the new SGLang release (as on PyPI)")
    group.add_argument(
        "--continue",
        dest="action",
        action="store_const",
        const="continue",
        help="go on after resolving a conflict in the line's work tree (build/src)",
    )
    group.add_argument(
        "--skip", dest="action", action="store_const", const="skip", help="drop the conflicting patch and go on"
    )
    group.add_argument(
        "--abort",
        dest="action",
        action="store_const",
        const="abort",
        help="return exactly to the state before the rebase",
    )
    cmd.add_argument("--commit", help="upstream git commit of the new release (moves the submodule)")
    cmd.add_argument("--dry-run", action="store_true", help="print the verdicts, change nothing")
    cmd.set_defaults(func=handler)


def handler(args) -> int:
    root = args.root
    if args.onto is not None:  # `--onto ''` is a version to refuse, not a resume
        data = rebase.start(root, args.onto, args.commit, args.dry_run)
    else:
        data = rebase.resume(root, args.action)
    emit(args, data, "" if args.json else rebase.format_report(data))
    return 1 if "stopped" in data or (data.get("dry_run") and rebase.needs_a_maintainer(data["patches"])) else 0

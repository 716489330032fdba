"""``python build.py import``: take patches made elsewhere into the line's series
(:mod:`sglpatch.queue.importer` reads and writes them)."""

from __future__ import annotations

from pathlib import Path

from sglpatch.cli.common import emit
from sglpatch.queue.importer import import_files


def register_cli(sub, common) -> None:
    cmd = sub.add_parser(
        "import",
        parents=[common],
        help="add a plain diff, format-patch or mbox to the series",
        description="Add patches made elsewhere to the end of the line's series: a plain "
        "diff (git diff, diff -u at -p1), a git format-patch file or an mbox. "
        "Unknown trailers are written as unset, and the build names them.",
    )
    cmd.add_argument("files", nargs="+", type=Path, metavar="FILE", help="the patch files, in series order")
    cmd.add_argument("--name", help="the patch file name (one patch only; default: NNNN-subject-words.patch)")
    cmd.add_argument("--subject", help="the subject of a plain diff (default: from its file name)")
    cmd.add_argument(
        "--author",
        help="'Name <email>' for a plain diff or a mail without From: (default: the repository's git identity)",
    )
    cmd.add_argument("--split", action="store_true", help="one patch per file the diff changes")
    cmd.set_defaults(func=handler)


def handler(args) -> int:
    written = import_files(
        args.root, args.files, name=args.name, subject=args.subject, author=args.author, split=args.split
    )
    rows = [str(p.relative_to(args.root)) for p in written]
    emit(
        args,
        {"imported": rows},
        "\n".join(f"imported {r}" for r in rows)
        + "\nset each one's Upstream-Status and Drop-When trailers; `python build.py` names the unset ones",
    )
    return 0

"""``python build.py rehearse``: what the next bump would meet, a verdict table per line
(:mod:`sglpatch.queue.rehearse` runs and caches the dry runs)."""

from __future__ import annotations

from sglpatch.cli.common import emit
from sglpatch.queue.line import all_lines, find_line
from sglpatch.queue.rebase import needs_a_maintainer
from sglpatch.queue.rehearse import rehearse

VERDICT_MARKS = {
    "clean": "clean",
    "merged": "merged",
    "conflict": "CONFLICT",
    "suspect": "SUSPECT",
    "obsolete": "obsolete",
}


def format_rehearsal(data: dict) -> str:
    """One table per line: a row per patch, a column per release."""
    title = f"{data['line']} line: SGLang {data['from']} -> each newer release (dry runs)"
    if not data["releases"]:
        return f"{title}\n  no newer release on the index"
    names = data["patches"]
    width = max([len(n) for n in names] + [5])
    columns = [r["onto"] for r in data["releases"]]
    cells = {
        (p["name"], r["onto"]): VERDICT_MARKS.get(p["verdict"], p["verdict"])
        for r in data["releases"]
        for p in r["patches"]
    }
    col = max([len(c) for c in columns] + [len(m) for m in VERDICT_MARKS.values()])
    rows = [f"{'patch':<{width}}  " + "  ".join(f"{c:<{col}}" for c in columns)]
    rows += [f"{n:<{width}}  " + "  ".join(f"{cells.get((n, c), '-'):<{col}}" for c in columns) for n in names]
    return "\n".join([title, *(row.rstrip() for row in rows)])


def handler(args) -> int:
    line = getattr(args, "line", None)
    chosen = [find_line(args.repo_root, line)] if line is not None else all_lines(args.repo_root)
    results = [rehearse(line.root, args.releases or None) for line in chosen]
    emit(args, {"lines": results}, "" if args.json else "\n\n".join(format_rehearsal(r) for r in results))
    return 1 if any(needs_a_maintainer(r["patches"]) for line in results for r in line["releases"]) else 0


def register_cli(sub, common) -> None:
    cmd = sub.add_parser(
        "rehearse",
        parents=[common],
        help="dry-run rebase every line onto every newer release (a bump rehearsal)",
        description="For each line (or --line), a dry-run `rebase --onto` of its "
        "series onto every SGLang release newer than its pin, each "
        "from the pin: a verdict table per line. Changes nothing; "
        "exits 1 when any patch conflicts or is suspect.",
    )
    cmd.add_argument(
        "releases", nargs="*", metavar="VERSION", help="only these releases (default: every newer release on the index)"
    )
    cmd.set_defaults(func=handler)

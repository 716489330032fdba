"""`rehearse`: what the next bump would meet, before doing it.

A dry-run `rebase --onto` of a line's series onto every release newer than its pin (or the ones
named), each from the pin, with a verdict table per line. A dry run's verdicts depend only on
the series, the pin, the release and this tool's code, so each is cached under that key
(``$SGLPATCH_CACHE/rehearsals/``): a warm rehearsal replays only what changed. Each bump's time
is printed (`cached` when it came from the cache).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from packaging.version import Version

from sglpatch.upstream import source
from sglpatch.queue.prepare import say
from sglpatch.cache import cache_dir
from sglpatch.queue.line import all_lines, find_line, line_of
from sglpatch.upstream.pin import PIN_FILE, read_pin, validate_version
from sglpatch.queue.rebase import needs_a_maintainer, start
from sglpatch.queue.series import read_series
from sglpatch.queue.snapshot import write_file

VERDICT_MARKS = {"clean": "clean", "merged": "merged", "conflict": "CONFLICT", "suspect": "SUSPECT",
                 "obsolete": "obsolete"}
_PACKAGE = Path(__file__).resolve().parents[1]


def rehearse(root: Path, releases: list[str] | None = None, progress=say) -> dict:
    """Dry runs of the line at ``root`` onto every newer release (or the newer of ``releases``).
    Changes nothing."""
    pin = read_pin(root)
    for version in releases or ():
        validate_version(version)
    releases = [v for v in (releases if releases is not None else source.released_versions())
                if Version(v) > Version(pin.version)]
    line = line_of(root)
    runs = []
    for onto in releases:
        began = time.monotonic()
        run, cached = dry_run(root, onto)
        seconds = round(time.monotonic() - began, 1)
        progress(f"{line.name}: dry run onto SGLang {onto}: {'cached' if cached else f'{seconds} s'}")
        runs.append({"onto": onto, "patches": run["patches"], "seconds": seconds, "cached": cached})
    return {"line": line.name, "from": pin.version, "patches": read_series(root).names, "releases": runs}


def dry_run(root: Path, onto: str) -> tuple[dict, bool]:
    """``rebase --onto ONTO --dry-run`` of the line at ``root``, from the cache when its inputs
    are unchanged; and whether it came from the cache."""
    path = cache_dir() / "rehearsals" / f"{_key(root, onto)}.json"
    try:
        return json.loads(path.read_text()), True
    except (FileNotFoundError, ValueError):
        pass
    run = start(root, onto, dry_run=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, json.dumps(run).encode())
    return run, False


def _key(root: Path, onto: str) -> str:
    """What a dry run's verdicts depend on: the series' bytes, the pin, the release and the code."""
    digest = hashlib.sha256()
    digest.update(read_series(root).fingerprint().encode())
    digest.update((root / PIN_FILE).read_bytes())
    digest.update(str(Version(onto)).encode())
    for module in sorted(_PACKAGE.rglob("*.py")):
        digest.update(module.relative_to(_PACKAGE).as_posix().encode() + b"\0" + module.read_bytes())
    return digest.hexdigest()


def format_rehearsal(data: dict) -> str:
    """One table per line: a row per patch, a column per release."""
    title = f"{data['line']} line: SGLang {data['from']} -> each newer release (dry runs)"
    if not data["releases"]:
        return f"{title}\n  no newer release on the index"
    names = data["patches"]
    width = max([len(n) for n in names] + [5])
    columns = [r["onto"] for r in data["releases"]]
    cells = {(p["name"], r["onto"]): VERDICT_MARKS.get(p["verdict"], p["verdict"])
             for r in data["releases"] for p in r["patches"]}
    col = max([len(c) for c in columns] + [len(m) for m in VERDICT_MARKS.values()])
    rows = [f"{'patch':<{width}}  " + "  ".join(f"{c:<{col}}" for c in columns)]
    rows += [f"{n:<{width}}  " + "  ".join(f"{cells.get((n, c), '-'):<{col}}" for c in columns)
             for n in names]
    return "\n".join([title, *(row.rstrip() for row in rows)])


def handler(args) -> int:
    chosen = ([find_line(args.repo_root, args.line)] if getattr(args, "line", None)
              else all_lines(args.repo_root))
    results = [rehearse(line.root, args.releases or None) for line in chosen]
    if args.json:
        print(json.dumps({"lines": results}, indent=2))
    else:
        print("\n\n".join(format_rehearsal(r) for r in results))
    return 1 if any(needs_a_maintainer(r["patches"]) for line in results for r in line["releases"]) else 0


def register_cli(sub, common) -> None:
    cmd = sub.add_parser("rehearse", parents=[common],
                         help="dry-run rebase every line onto every newer release (a bump rehearsal)",
                         description="For each line (or --line), a dry-run `rebase --onto` of its "
                                     "series onto every SGLang release newer than its pin, each "
                                     "from the pin: a verdict table per line. Changes nothing; "
                                     "exits 1 when any patch conflicts or is suspect.")
    cmd.add_argument("releases", nargs="*", metavar="VERSION",
                     help="only these releases (default: every newer release on the index)")
    cmd.set_defaults(func=handler)

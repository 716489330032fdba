#!/usr/bin/env python3
"""Benchmark: carry the series from the pin across every later SGLang release on PyPI.

Works on a throwaway clone of this repository (nothing here changes). For each consecutive bump
it prints the per-patch verdicts and the seconds the rebase took; a conflict is skipped (and shown
as such) so the sweep can go on. Goal: all bumps in under a minute once artifacts are cached
(run it twice: the first run downloads every release).

    python benchmarks/rebase_releases.py [--to 0.5.15] [--include-post]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import git
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglpatch.errors import UserError  # noqa: E402
from sglpatch.queue import rebase  # noqa: E402
from sglpatch.upstream import source  # noqa: E402
from sglpatch.upstream.pin import read_pin  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--to", help="last release to rebase onto (default: newest)")
    parser.add_argument("--include-post", action="store_true", help="also bump through .postN releases")
    args = parser.parse_args()
    start = Version(read_pin(ROOT).version)
    releases = [
        v
        for v in source.released_versions()
        if Version(v) > start
        and (args.include_post or Version(v).post is None)
        and (not args.to or Version(v) <= Version(args.to))
    ]
    print(f"{len(releases)} bumps from {start}: {', '.join(releases)}", flush=True)
    total = 0.0
    with tempfile.TemporaryDirectory(prefix="sglpatch-bench-") as tmp:
        clone = Path(tmp) / "repo"
        git.Repo.clone_from(str(ROOT), clone)
        for version in releases:
            began = time.perf_counter()
            try:
                report = rebase.start(clone, version)
                while "stopped" in report:
                    report = rebase.resume(clone, "skip")
            except UserError as exc:
                print(f"\n{version}: error: {exc}")
                return 2
            seconds = time.perf_counter() - began
            total += seconds
            print(f"\n-> SGLang {version}  ({seconds:.1f} s)")
            for p in report["patches"]:
                print(f"   {p['name']:<55} {p['verdict']:<9} {p['detail']}")
            if not report["patches"]:
                print("   (no patches left)")
    print(f"\ntotal {total:.1f} s for {len(releases)} bumps")
    return 0


if __name__ == "__main__":
    sys.exit(main())

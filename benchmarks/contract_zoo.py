#!/usr/bin/env python3
"""Benchmark: the whole-zoo contract check (every loadable wrapper model) on full release trees.

For each tree it runs ``check_tree(tree, all_models=True)`` in a fresh process: cold (no outline
cache) and warm (outline cache filled), and prints wall seconds, CPU seconds (the process and its
outline workers: wall time on a busy machine is mostly waiting), peak RSS (the process plus its
outline workers, summed) and what was found. Goal: a few seconds per
release. Trees come from ``sglpatch.upstream.source.pristine_tree`` (downloaded and cached on first use).

    python benchmarks/contract_zoo.py                    # the pinned release and the newest on PyPI
    python benchmarks/contract_zoo.py --version 0.5.9 --version 0.5.23
    python benchmarks/contract_zoo.py --tree build/src   # any upstream-shaped checkout
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
t0 = time.perf_counter()
from sglpatch.contract import check_tree
report = check_tree(Path(sys.argv[2]), all_models=True, cache=sys.argv[3] == "warm")
seconds = time.perf_counter() - t0
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
rss = me.ru_maxrss + kids.ru_maxrss  # KiB on Linux: this process plus its outline workers
cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
print(json.dumps({"seconds": seconds, "cpu": cpu, "peak_mib": rss / 1024, "version": report.version,
                  "members": len(report.contract.target),
                  "required": sum(1 for i in report.contract.target.values() if i.required),
                  "wrappers": len(report.models),
                  "with_gaps": sum(1 for m in report.models if m.gaps), "gaps": report.gaps,
                  "kimi_gaps": [s.item.label for m in report.models
                                if m.name == "KimiK25ForConditionalGeneration" for s in m.gaps],
                  "wiring": report.wiring.passed, "problems": report.problems}))
"""


def run(tree: Path, mode: str, cache_home: Path) -> dict:
    env = dict(os.environ, SGLPATCH_CACHE=str(cache_home))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT), str(tree), mode], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"check failed on {tree}:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="append", default=[], help="a release (repeatable)")
    parser.add_argument("--tree", action="append", type=Path, default=[], help="a checkout (repeatable)")
    args = parser.parse_args()
    trees: list[tuple[str, Path]] = [(str(t), t) for t in args.tree]
    versions = list(args.version)
    if not versions and not trees:
        from sglpatch.upstream import source
        from sglpatch.upstream.pin import read_pin

        versions = [read_pin(ROOT).version, source.released_versions()[-1]]
    if versions:
        from sglpatch.upstream import source

        for v in versions:
            trees.append((v, source.pristine_tree(v)))
    print(f"{'tree':<10} {'run':<5} {'seconds':>8} {'cpu s':>6} {'peak MiB':>9}  found")
    for label, tree in trees:
        # A private cache home: the cold run really starts without outlines.
        with tempfile.TemporaryDirectory(prefix="contract-zoo-") as tmp:
            home = Path(tmp)
            cold = run(tree, "cold", home)  # outline cache off
            run(tree, "warm", home)  # fills the outline cache
            warm = run(tree, "warm", home)
        r = cold
        found = (
            f"{r['members']} members ({r['required']} required), {r['wrappers']} wrappers, "
            f"{r['with_gaps']} with gaps ({r['gaps']} gaps); KimiK25 gaps: "
            f"{', '.join(r['kimi_gaps']) or 'none'}; wiring {'ok' if r['wiring'] else 'FAIL'}"
            + (f"; PROBLEMS: {r['problems']}" if r["problems"] else "")
        )
        name = r["version"] or label
        print(f"{name:<10} {'cold':<5} {cold['seconds']:>8.2f} {cold['cpu']:>6.1f} {cold['peak_mib']:>9.0f}  {found}")
        print(
            f"{name:<10} {'warm':<5} {warm['seconds']:>8.2f} {warm['cpu']:>6.1f} {warm['peak_mib']:>9.0f}", flush=True
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark: the cost of the suspect-merge analysis (sglpatch/contract/suspect/merge.py) per patch.

For each patch of a line's series (written against the line's pinned release) and each target
release, it builds the merged tree (a symlink overlay of the cached pristine release with the
patch's files copied and the patch applied with ``patch -p1``; hunks that do not apply are simply
left out), runs ``find_suspects(old, new, merged, files)`` and prints the wall seconds, the files
and added lines analysed and every finding (a finding on our own, correctly ported patches is a
false positive worth a look). Trees come from ``sglpatch.upstream.source.pristine_tree`` (cached).

    python benchmarks/suspect_cost.py                                  # production series onto 0.5.10 0.5.11 0.5.12 0.5.23
    python benchmarks/suspect_cost.py --onto 0.5.13 --onto 0.5.20
    python benchmarks/suspect_cost.py --patch path/to/some.patch --base 0.5.9 --onto 0.5.11

Each run is in-process and starts from fresh tree views (nothing of a previous patch is reused),
so the figure is what one patch costs in a rebase that runs the analysis once per patch.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglpatch.contract.suspect.merge import added_lines, find_suspects  # noqa: E402
from sglpatch.upstream import source  # noqa: E402
from sglpatch.upstream.pin import read_pin  # noqa: E402


def touched(patch: Path) -> list[str]:
    files = []
    for m in re.finditer(r"^\+\+\+ b/(\S+)", patch.read_text(errors="replace"), re.M):
        if m.group(1) not in files:
            files.append(m.group(1))
    return files


def merged_tree(base: Path, patch: Path, dst: Path) -> tuple[Path, list[str], str]:
    shutil.copytree(base, dst, copy_function=os.symlink, ignore=shutil.ignore_patterns(".sglpatch-commit"))
    files = touched(patch)
    for rel in files:
        path = dst / rel
        if path.is_symlink():  # a real copy: the cached release is never written
            data = Path(os.readlink(path)).read_bytes()
            path.unlink()
            path.write_bytes(data)
    proc = subprocess.run(
        ["patch", "-p1", "-s", "-f", "--no-backup-if-mismatch", "-r", "-", "-i", str(patch)],
        cwd=dst,
        capture_output=True,
        text=True,
    )
    applied = "clean" if proc.returncode == 0 else "partial"
    return dst, [f for f in files if (dst / f).is_file()], applied


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--onto", action="append", help="target release (repeatable)")
    ap.add_argument("--patch", action="append", type=Path, help="a patch file (default: patches/*.patch)")
    ap.add_argument("--base", help="the release the patches were written against (default: the pin)")
    args = ap.parse_args()
    pin = read_pin(ROOT)
    base = args.base or pin.version
    patches = args.patch or sorted((ROOT / "patches").glob("*.patch"))
    onto = args.onto or ["0.5.10", "0.5.11", "0.5.12", "0.5.23"]
    old = source.pristine_tree(base, pin)
    print(f"patches written against {base}; {len(patches)} patch(es); targets {' '.join(onto)}")
    print(f"{'release':<9} {'patch':<58} {'apply':<8} {'files':>5} {'added':>6} {'found':>5} {'seconds':>8}")
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for version in onto:
            new = source.pristine_tree(version, pin)
            for i, patch in enumerate(patches):
                merged, files, applied = merged_tree(new, patch, Path(tmp) / f"{version}-{i}")
                added = sum(len(added_lines(new / f, merged / f)) for f in files if f.endswith(".py"))
                t0 = time.perf_counter()
                found = find_suspects(old, new, merged, files)
                seconds = time.perf_counter() - t0
                times.append(seconds)
                print(
                    f"{version:<9} {patch.name[:58]:<58} {applied:<8} {len(files):>5} {added:>6} "
                    f"{len(found):>5} {seconds:>8.2f}"
                )
                for s in found:
                    print(f"          {s}")
                shutil.rmtree(merged)
    times.sort()
    print(
        f"per patch: median {times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s, "
        f"total {sum(times):.2f} s over {len(times)} runs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

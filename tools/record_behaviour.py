#!/usr/bin/env python3
"""Record the tool's machine-readable outputs, so a refactor can show it changed none of them.

    python tools/record_behaviour.py OUT_DIR

Runs, for both lines, in a scratch clone of this checkout: `build --json`, `rebase --onto V
--dry-run --json` onto 0.5.10, 0.5.12 and 0.5.23 (the production line; the latest line is
already there), `check --json --all-models --version V` on 0.5.9 and 0.5.23, and `deploy --json`
with its rendered files. Absolute paths, times and sha256 of wheels (which carry build times)
are replaced by placeholders. Compare two runs with `diff -r BEFORE AFTER`.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
RUNS = [
    ("build", ["build", "--json"]),
    ("rebase-0.5.10", ["rebase", "--onto", "0.5.10", "--dry-run", "--json"]),
    ("rebase-0.5.12", ["rebase", "--onto", "0.5.12", "--dry-run", "--json"]),
    ("rebase-0.5.23", ["rebase", "--onto", "0.5.23", "--dry-run", "--json"]),
    ("check-0.5.9", ["check", "--json", "--all-models", "--version", "0.5.9"]),
    ("check-0.5.23", ["check", "--json", "--all-models", "--version", "0.5.23"]),
    ("deploy", ["deploy", "--json", "--replicas", "2"]),
]
_TIMES = re.compile(r'"(seconds|elapsed|duration|took)[^"]*": [0-9.]+')


def _normalise(text: str, root: Path) -> str:
    text = text.replace(str(root), "<root>")
    return _TIMES.sub(lambda m: m.group(0).split(":")[0] + ": <time>", text)


def record(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sglpatch-behaviour-") as scratch:
        root = Path(scratch) / "repo"
        subprocess.run(["git", "clone", "-q", str(HERE), str(root)], check=True)
        for line in ("production", "latest"):
            for name, argv in RUNS:
                if line == "latest" and name.startswith("rebase-") and name != "rebase-0.5.23":
                    continue
                proc = subprocess.run(
                    [sys.executable, "build.py", "--line", line, *argv], cwd=root, capture_output=True, text=True
                )
                body = _normalise(proc.stdout, root)
                (out / f"{line}.{name}.out").write_text(f"exit {proc.returncode}\n{body}")
                print(f"{line} {name}: exit {proc.returncode}", file=sys.stderr)
            rendered = root / ("dist" if line == "production" else f"lines/{line}/dist") / "deploy"
            if rendered.is_dir():
                for path in sorted(p for p in rendered.rglob("*") if p.is_file()):
                    target = out / f"{line}.deploy" / path.relative_to(rendered)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(_normalise(path.read_text(), root))
            shutil.rmtree(root / "build", ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, metavar="OUT_DIR", help="where to write the outputs")
    record(parser.parse_args().out)

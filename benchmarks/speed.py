#!/usr/bin/env python3
"""Benchmark: every speed figure of the tool in one run, each min / median / max over N runs.

Sections: build (warm `python build.py` in a throwaway clone of HEAD, paired with plain git doing
the same work), gate (`check_tree` in-process), check (the whole-zoo contract check per release),
rehearse (`build.py rehearse`, each line), tiers (the test tiers). docs/benchmarks.md explains each.

    python benchmarks/speed.py [--runs 5] [--only build,gate,check,rehearse,tiers] [--json]
    python benchmarks/speed.py --all-releases --tiers=all
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Container
from datetime import datetime
from pathlib import Path
from typing import Any

from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import contract_zoo  # noqa: E402
from sglpatch.queue.line import all_lines  # noqa: E402
from sglpatch.upstream import source  # noqa: E402
from sglpatch.upstream.mirror import mirror_path  # noqa: E402
from sglpatch.upstream.pin import read_pin  # noqa: E402

BUILD = [sys.executable, "build.py"]
GIT = ["git", "-c", "gc.auto=0", "-c", "maintenance.auto=false"]  # no background gc racing the clean-up
SECTIONS = ("build", "gate", "check", "rehearse", "tiers")
RELEASES = ("0.5.9", "0.5.23")
TIERS = {"unit": ["-m", "unit", "-p", "no:cacheprovider"], "fast": ["-m", "not slow"], "whole": []}
GOALS = {"unit": 180.0, "fast": 360.0, "whole": 1800.0}
EDITS = (" [speed.py edit 0]", " [speed.py edit 1]")  # appended to a patch's comment line, alternately
LABELS = {"edit": "(a) one patch edited", "noop": "(b) no-op rebuild", "cold": "(c) cold-ish build"}
# The gate alone, in the clone's own code, on its prepared work tree: one fresh process per
# run (within one process the checks would share their analysis of the tree); the outline
# cache on disk is warm. No tree id: the checks run, no verdict is reused.
GATE = r"""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
from pathlib import Path
from sglpatch.queue.series import read_series
from sglpatch.ship.build import check_tree
from sglpatch.upstream.pin import read_pin
root = Path.cwd()
pin, series = read_pin(root), read_series(root)
began = time.perf_counter(); check_tree(root / "build" / "src", series, pin)
print(json.dumps(time.perf_counter() - began))
"""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


class Bench:
    """The run: its options, its temporary directory and throwaway clone, and the figures in order
    (printed as they come unless --json)."""

    def __init__(self, args: argparse.Namespace, scratch: Path) -> None:
        self.args, self.as_json, self.scratch, self.clone = args, args.json, scratch, scratch / "repo"
        self.data: dict[str, Any] = {"machine": {}, "runs": args.runs, "figures": {}, "notes": []}

    def out(self, line: str = "") -> None:
        if not self.as_json:
            print(line, flush=True)

    def note(self, text: str) -> None:
        self.data["notes"].append(text)
        self.out(f"  note: {text}")

    def add(self, key: str, label: str, values: list[float], unit: str = "s", limit: float | None = None) -> None:
        fig: dict = {"unit": unit, "min": min(values), "median": statistics.median(values), "max": max(values)}
        fig.update((k, round(fig[k], 4)) for k in ("min", "median", "max"))
        fig["values"] = [round(v, 4) for v in values]
        text = f"  {label:<36} {fig['min']:>8.2f} {fig['median']:>8.2f} {fig['max']:>8.2f} {unit:<2}"
        if limit is not None:
            fig["goal"], fig["met"] = f"median <= {limit:g} {unit}", fig["median"] <= limit
            text += f"  goal <= {limit:g} {unit}: {'met' if fig['met'] else 'not met'}"
        self.data["figures"][key] = fig
        self.out(text.rstrip())


def progress(text: str) -> None:
    print(f"speed: {text}", file=sys.stderr, flush=True)


def run(cmd: list[str], cwd: Path, ok: Container[int] = (0,)) -> subprocess.CompletedProcess:
    """``cmd`` in ``cwd``, output captured; exits the benchmark when its exit code is not ``ok``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # bytecode cached, as for a user
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, check=False)
    if done.returncode not in ok:
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"speed: error: `{' '.join(cmd)}` exited {done.returncode} in {cwd}: {tail[0]}")
    return done


def timed(cmd: list[str], cwd: Path, ok: Container[int] = (0,)) -> float:
    began = time.perf_counter()
    run(cmd, cwd, ok)
    return time.perf_counter() - began


def machine(b: Bench) -> None:
    proc = "".join(Path("/proc", n).read_text() for n in ("cpuinfo", "meminfo") if Path("/proc", n).exists())
    cpu, ram = re.findall(r"model name\s*: (.*)", proc)[:1] or ["?"], re.findall(r"MemTotal: *(\d+)", proc) or ["0"]
    info: dict[str, Any] = {"cpu": cpu[0], "cores": os.cpu_count(), "ram_gib": round(int(ram[0]) / 2**20, 1)}
    info.update(python=platform.python_version(), git=run(["git", "--version"], ROOT).stdout.strip())
    info.update(
        head=run(["git", "rev-parse", "HEAD"], ROOT).stdout.strip(), load=[round(x, 2) for x in os.getloadavg()]
    )
    info["uncommitted_files"] = len(run(["git", "status", "--porcelain"], ROOT).stdout.splitlines())
    info["date"] = datetime.now().astimezone().isoformat(timespec="seconds")
    b.data["machine"] = info
    b.out(f"machine   {info['cpu']}, {info['cores']} cores, {info['ram_gib']} GiB RAM, load {info['load']}")
    b.out(f"software  Python {info['python']}, {info['git']}")
    b.out(
        f"measured  {info['date']}, HEAD {info['head'][:12]} ({info['uncommitted_files']} uncommitted paths not measured)"
    )


def series_names(root: Path) -> list[str]:
    lines = (root / "patches" / "series").read_text().splitlines()
    return [l.strip() for l in lines if l.strip() and not l.startswith("#")]


def edit_target(root: Path, names: list[str]) -> tuple[Path, int]:
    """A comment line a patch adds to a .py file and no later patch quotes: safe to edit."""
    texts = [(root / "patches" / n).read_text() for n in names]
    for k in reversed(range(len(names))):
        later, current = "".join(texts[k + 1 :]), ""
        for i, line in enumerate(texts[k].split("\n")):
            if line.startswith("diff --git "):
                current = line.rsplit(" b/", 1)[-1]
            elif current.endswith(".py") and line[:1] == "+" and line[1:].strip().startswith("#"):
                if not line.startswith("+++") and line[1:] not in later:
                    return root / "patches" / names[k], i
    raise SystemExit("speed: error: no patch adds a comment line to a .py file: nothing to edit")


def git_same_work(scratch: Path, base: str, patches: list[Path]) -> float:
    """Plain git doing the build's source work: clone the mirror, check out the base, apply the series."""
    dest = scratch / "git-run"
    began = time.perf_counter()
    run([*GIT, "clone", "-q", "--no-checkout", str(mirror_path()), str(dest)], scratch)
    run([*GIT, "-c", "advice.detachedHead=false", "checkout", "-q", base], dest)
    run([*GIT, "-c", "user.name=speed", "-c", "user.email=speed@localhost", "am", "-q", *map(str, patches)], dest)
    seconds = time.perf_counter() - began
    shutil.rmtree(dest)
    return seconds


def paired(b: Bench, variant: str, before: Callable[[int], object]) -> None:
    base, label = source.prepare(read_pin(b.clone), b.clone), LABELS[variant]
    builds, gits = [], []
    for i in range(b.args.runs):
        before(i)
        builds.append(timed(BUILD, b.clone))
        gits.append(git_same_work(b.scratch, base, [b.clone / "patches" / n for n in series_names(b.clone)]))
        progress(f"build {variant} {i + 1}/{b.args.runs}: build.py {builds[-1]:.2f} s, git {gits[-1]:.2f} s")
    limits = {"edit": (None, 0.5), "noop": (0.3, 0.15)}.get(variant, (None, None))
    b.add(f"build.{variant}.build", f"{label}: build.py", builds, limit=limits[0])
    b.add(f"build.{variant}.git", f"{label}: plain git", gits)
    ratios = [x / g for x, g in zip(builds, gits)]
    b.add(f"build.{variant}.ratio", f"{label}: build.py / git", ratios, "x", limits[1])


def build_section(b: Bench) -> None:
    b.out("\nbuild vs git (warm, throwaway clone, paired A B A B)")
    progress("build: warm-up build")
    timed(BUILD, b.clone)
    target, index = edit_target(b.clone, series_names(b.clone))
    original, lines = target.read_text(), target.read_text().split("\n")
    variants = ["\n".join(lines[:index] + [lines[index] + edit] + lines[index + 1 :]) for edit in EDITS]
    b.note(f"(a) edits {target.name} line {index + 1} before each run")
    paired(b, "edit", lambda i: target.write_text(variants[i % 2]))
    target.write_text(original)  # the real series again: the rehearsal cache is keyed by it
    timed(BUILD, b.clone)
    paired(b, "noop", lambda i: None)
    ignored = run(["git", "status", "--ignored", "--porcelain"], b.clone).stdout.splitlines()
    state = [l[3:] for l in ignored if l.startswith("!! ") and "__pycache__" not in l]  # what a build leaves
    b.note(f"(c) deletes {', '.join(state)} before each run")
    paired(b, "cold", lambda i: run(["rm", "-rf", *state], b.clone))


def gate_section(b: Bench) -> None:
    b.out("\ngate: check_tree on the prepared tree (a fresh process per run, warm outline cache)")
    progress(f"gate: warm-up, {b.args.runs} runs")
    run(BUILD, b.clone)  # a prepared work tree
    times = [
        json.loads(run([sys.executable, "-c", GATE], b.clone).stdout.splitlines()[-1]) for _ in range(b.args.runs + 1)
    ]
    b.add("gate", "build gate (check_tree)", times[1:], limit=1.0)


def check_section(b: Bench) -> None:
    b.out("\ncheck: whole-zoo contract check per release (fresh process, warm outline cache)")
    pinned = Version(read_pin(ROOT).version)
    every = [v for v in source.released_versions() if Version(v) >= pinned] if b.args.all_releases else RELEASES
    for version in every:
        tree, home = source.pristine_tree(version), Path(tempfile.mkdtemp(prefix="check-", dir=b.scratch))
        progress(f"check {version}: warm-up, then {b.args.runs} runs")
        contract_zoo.run(tree, "warm", home)  # fills the outline cache
        results = [contract_zoo.run(tree, "warm", home) for _ in range(b.args.runs)]
        limit = 1.6 if version == "0.5.23" else None
        b.add(f"check.{version}", f"SGLang {version}: wall", [r["seconds"] for r in results], limit=limit)
        b.add(f"check.{version}.cpu", f"SGLang {version}: cpu", [r["cpu"] for r in results])


def rehearse_section(b: Bench) -> None:
    b.out("\nrehearse: `build.py rehearse --line L` onto every newer release (warm)")
    cmds = {line.name: [sys.executable, "build.py", "rehearse", "--line", line.name] for line in all_lines(b.clone)}
    progress("rehearse: warm-up run of each line (cold when this code was never rehearsed)")
    first = sum(timed(cmd, b.clone, (0, 1)) for cmd in cmds.values())
    b.add("rehearse.first", "first run, every line (warm-up)", [first])
    per: dict[str, list[float]] = {name: [] for name in cmds}
    for i in range(b.args.runs):
        for name, cmd in cmds.items():
            per[name].append(timed(cmd, b.clone, (0, 1)))  # exit 1: a conflict or suspect patch, not a failure
        progress(f"rehearse {i + 1}/{b.args.runs}: " + ", ".join(f"{n} {t[-1]:.2f} s" for n, t in per.items()))
    for name, times in per.items():
        b.add(f"rehearse.{name}", f"line {name}", times)
    b.add("rehearse.all", "every line together", [sum(t) for t in zip(*per.values())], limit=60.0)


def tiers_section(b: Bench) -> None:
    b.out("\ntest tiers: one run each, from the clone")
    for tier, extra in TIERS.items():
        if tier == "whole" and b.args.tiers != "all":
            continue
        progress(f"tiers: {tier}")
        began = time.perf_counter()
        done = run([sys.executable, "-m", "pytest", "-q", *extra], b.clone, ok=range(256))
        seconds, none = time.perf_counter() - began, done.returncode == 5  # 5: pytest selected no test
        b.add(f"tiers.{tier}", f"{tier} ({' '.join(extra) or 'all'})", [seconds], limit=None if none else GOALS[tier])
        summary = "selects no test yet" if none else (done.stdout.strip().splitlines() or ["-"])[-1]
        b.note(f"{tier}: exit {done.returncode}: {summary}")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (default 5)")
    parser.add_argument("--only", help=f"comma-separated sections: {','.join(SECTIONS)}")
    parser.add_argument("--all-releases", action="store_true", help="check: every release from the pin on")
    parser.add_argument("--tiers", nargs="?", const="fast", choices=["fast", "all"], help="also time the test tiers")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    args.sections = args.only.split(",") if args.only else [s for s in SECTIONS if s != "tiers" or args.tiers]
    args.tiers = args.tiers or "fast"
    if unknown := [s for s in args.sections if s not in SECTIONS]:
        parser.error(f"unknown section {', '.join(unknown)} (choose from {','.join(SECTIONS)})")
    return args


def measure(b: Bench) -> None:
    if set(b.args.sections) - {"check"}:
        progress("cloning HEAD into a throwaway directory")
        run(["git", "clone", "-q", str(ROOT), str(b.clone)], b.scratch)
    b.out(
        f"runs      {b.args.runs} per figure; a goal judges the median\n  {'':<36} {'min':>8} {'median':>8} {'max':>8}"
    )
    steps = {"build": build_section, "gate": gate_section, "check": check_section, "rehearse": rehearse_section}
    for name in SECTIONS:
        if name in b.args.sections:
            steps.get(name, tiers_section)(b)


def main(argv: list[str]) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # cleans up as Ctrl-C does
    try:
        with tempfile.TemporaryDirectory(prefix="sglpatch-speed-", ignore_cleanup_errors=True) as tmp:
            bench = Bench(args, Path(tmp))
            machine(bench)
            measure(bench)
    except KeyboardInterrupt:
        print("speed: interrupted; temporary directories removed", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(bench.data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

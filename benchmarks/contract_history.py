#!/usr/bin/env python3
"""Benchmark: the contract checker measured against upstream's own later releases.

Runs the whole-zoo check (``check_tree(tree, all_models=True)``: every wrapper model) on every
SGLang release on PyPI from the pin to the newest, then lets upstream's history judge it:

- a **gap** (W lacks member m that the runtime requires and W's inner model has) at release R is
  *confirmed* when a later release gives W the member (``added``), guards every call site that
  required it (``guarded``) or stops using it (``unused``); it is ``removed`` with its class, or
  ``open`` when the newest release still has it (never confirmed: a false positive, or a crash
  nobody hit yet);
- a member upstream **added** to W between R and the next release (not provided at R, provided
  after), for a member the runtime uses, is *flagged* when the check at R reported it as a gap
  (or as required and missing everywhere: ``unsupported``, ``unverified``); an addition the check
  called ``optional`` or ``unknown`` is a miss (recall). An optional member the check did not list
  because the inner model lacked it too is a **new feature** upstream gave both at once: nothing
  was missing at R, so it is printed apart and left out of the recall.

Per release it prints gaps and their fates, additions and misses, and the check's seconds (the
trees and the outline cache come from ``sglpatch.upstream.source.pristine_tree``: offline once cached).

    python benchmarks/contract_history.py [--from 0.5.9] [--to 0.5.23] [--include-post]
                                          [--json FILE] [--show-misses] [--show-open]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglpatch.contract import check_tree  # noqa: E402
from sglpatch.upstream import source  # noqa: E402
from sglpatch.upstream.pin import read_pin  # noqa: E402

# Verdicts that show the member as required and missing (the report lists each as a failure) ...
FLAGGED = ("gap", "broken", "unsupported", "unverified")
# ... and the one it lists as a silently-off path without failing (guarded; the inner model has it).
LISTED = FLAGGED + ("optional",)
# An optional member that neither the wrapper nor its inner model had the release before: upstream
# added a feature to both at once. Nothing was missing to flag; counted apart, outside the recall.
NEW_FEATURE = "unlisted"
# Targets (issue 16): recall of upstream's later additions, whole-zoo seconds per release warm.
RECALL_TARGET = 0.95
SECONDS_TARGET = 2.0


@dataclass
class Snapshot:
    """What the check says of one release: per wrapper, each contract member's verdict."""

    version: str
    seconds: float
    required: dict[str, bool]  # contract member -> required on some path
    verdicts: dict[str, dict[str, str]]  # wrapper -> member -> verdict (absent: not listed)
    duplicates: list[str] = field(default_factory=list)

    def verdict(self, wrapper: str, member: str) -> str:
        """ok | gap | optional | ... ; ``removed`` (no such wrapper), ``unused`` (not in the
        contract), ``unlisted`` (not required and the inner model lacks it)."""
        if wrapper not in self.verdicts:
            return "removed"
        if member not in self.required:
            return "unused"
        return self.verdicts[wrapper].get(member, "unlisted")


def snapshot(version: str) -> Snapshot:
    tree = source.pristine_tree(version, read_pin(ROOT))  # the pin's own sha256 for its release
    started = time.perf_counter()
    report = check_tree(tree, all_models=True)
    seconds = time.perf_counter() - started
    verdicts: dict[str, dict[str, str]] = {}
    duplicates = []
    for model in report.models:
        if model.name in verdicts:  # two classes of one name: the first stands, the rest counted
            duplicates.append(model.qualname)
            continue
        verdicts[model.name] = {s.item.label: s.verdict for s in model.statuses}
    required = {label: item.required for label, item in report.contract.target.items()}
    return Snapshot(version, seconds, required, verdicts, duplicates)


def gap_fate(wrapper: str, member: str, later: list[Snapshot]) -> tuple[str, str | None]:
    """(fate, release): what the first later release that changes the gap does to it."""
    for snap in later:
        v = snap.verdict(wrapper, member)
        if v == "removed":
            return "removed", snap.version
        if v == "ok":
            return "added", snap.version
        if v == "unused":
            return "unused", snap.version
        if v in ("optional", "unlisted"):
            return "guarded", snap.version
    return "open", None


def additions(before: Snapshot, after: Snapshot) -> list[tuple[str, str, str]]:
    """(wrapper, member, verdict at ``before``) for each member a wrapper gains between the two."""
    found = []
    for wrapper, members in after.verdicts.items():
        if wrapper not in before.verdicts:
            continue
        for member, verdict in members.items():
            if verdict != "ok" or member not in before.required:
                continue
            was = before.verdict(wrapper, member)
            if was != "ok":
                found.append((wrapper, member, was))
    return found


def evaluate(snaps: list[Snapshot]) -> list[dict]:
    rows = []
    seen: set[tuple[str, str]] = set()
    for i, snap in enumerate(snaps):
        later = snaps[i + 1 :]
        gaps = [(w, m) for w, members in snap.verdicts.items() for m, v in members.items() if v in ("gap", "broken")]
        fates = {(w, m): gap_fate(w, m, later) for w, m in gaps}
        new = [g for g in gaps if g not in seen]  # first reported at this release
        seen.update(gaps)
        added = additions(snap, later[0]) if later else []
        rows.append(
            {
                "version": snap.version,
                "seconds": round(snap.seconds, 2),
                "wrappers": len(snap.verdicts),
                "gaps": len(gaps),
                "fates": dict(Counter(f for f, _ in fates.values())),
                "new_gaps": len(new),
                "new_fates": dict(Counter(fates[g][0] for g in new)),
                "open": sorted(f"{w}.{m}" for (w, m), (f, _) in fates.items() if f == "open"),
                "confirmed": sorted(
                    f"{w}.{m} ({f} in {r})" for (w, m), (f, r) in fates.items() if f in ("added", "guarded", "unused")
                ),
                "added_next": len(added),
                "new_features": sorted(f"{w}.{m}" for w, m, was in added if was == NEW_FEATURE),
                "flagged": sum(1 for *_, was in added if was in FLAGGED),
                "listed": sum(1 for *_, was in added if was in LISTED),
                "missed": sorted(f"{w}.{m} ({was})" for w, m, was in added if was not in FLAGGED + (NEW_FEATURE,)),
                "duplicates": snap.duplicates,
            }
        )
    return rows


def print_table(rows: list[dict], show_misses: bool, show_open: bool) -> None:
    print(
        "gaps at each release by what upstream did later (added the member, guarded or dropped every "
        "call site,\nremoved the class, still open at the newest); members upstream added by the next "
        "release, flagged here\n(a failure) or only listed (optional), missed, and new features (the inner model "
        "lacked the member too)"
    )
    print(
        f"{'release':<13} {'s':>5} {'wrap':>5} {'gaps':>5} {'added':>6} {'guard':>6} {'unused':>6} "
        f"{'remov':>6} {'open':>5} | {'next+':>5} {'flag':>5} {'list':>5} {'miss':>5} {'new':>4}"
    )
    for r in rows:
        f = r["fates"]
        print(
            f"{r['version']:<13} {r['seconds']:>5.1f} {r['wrappers']:>5} {r['gaps']:>5} "
            f"{f.get('added', 0):>6} {f.get('guarded', 0):>6} {f.get('unused', 0):>6} "
            f"{f.get('removed', 0):>6} {f.get('open', 0):>5} | {r['added_next']:>5} {r['flagged']:>5} "
            f"{r['listed']:>5} {len(r['missed']):>5} {len(r['new_features']):>4}"
        )
        if show_misses:
            for miss in r["missed"]:
                print(f"    missed: {miss}")
            for new in r["new_features"]:
                print(f"    new:    {new} (its inner model lacked it too)")
        if show_open:
            for gap in r["open"]:
                print(f"    open:   {gap}")


def summary(rows: list[dict]) -> dict:
    new_features = sum(len(r["new_features"]) for r in rows)
    additions_total = sum(r["added_next"] for r in rows) - new_features  # the ones a check could flag
    flagged = sum(r["flagged"] for r in rows)
    fates = Counter()
    for r in rows:
        fates.update(r["new_fates"])
    slowest = max((r["seconds"] for r in rows), default=0.0)
    return {
        "distinct_gaps": sum(fates.values()),
        "fates": dict(fates),
        "confirmed": sum(fates[k] for k in ("added", "guarded", "unused")),
        "additions": additions_total,
        "new_features": new_features,
        "flagged": flagged,
        "listed": sum(r["listed"] for r in rows),
        "recall": flagged / additions_total if additions_total else None,
        "slowest_seconds": slowest,
        "recall_met": additions_total == 0 or flagged / additions_total >= RECALL_TARGET,
        "seconds_met": slowest < SECONDS_TARGET,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="first", help="first release (default: the pin)")
    parser.add_argument("--to", help="last release (default: the newest on PyPI)")
    parser.add_argument("--include-post", action="store_true", help="also the .postN releases")
    parser.add_argument("--json", metavar="FILE", help="also write every row here")
    parser.add_argument("--show-misses", action="store_true", help="list each missed addition")
    parser.add_argument("--show-open", action="store_true", help="list each gap never confirmed")
    args = parser.parse_args()
    first = Version(args.first or read_pin(ROOT).version)
    versions = [
        v
        for v in source.released_versions()
        if Version(v) >= first
        and (args.include_post or Version(v).post is None)
        and (not args.to or Version(v) <= Version(args.to))
    ]
    print(f"{len(versions)} releases: {', '.join(versions)}", flush=True)
    snaps = []
    for v in versions:
        snaps.append(snapshot(v))
        print(
            f"  checked {v}: {len(snaps[-1].verdicts)} wrappers in {snaps[-1].seconds:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    rows = evaluate(snaps)
    print_table(rows, args.show_misses, args.show_open)
    s = summary(rows)
    recall = "n/a" if s["recall"] is None else f"{s['recall']:.1%}"
    f = s["fates"]
    listed = "n/a" if not s["additions"] else f"{s['listed'] / s['additions']:.1%}"
    print(
        f"\ndistinct gaps {s['distinct_gaps']}: confirmed later {s['confirmed']} (added {f.get('added', 0)}, "
        f"guarded {f.get('guarded', 0)}, unused {f.get('unused', 0)}), class removed {f.get('removed', 0)}, "
        f"still open {f.get('open', 0)}"
    )
    print(
        f"upstream additions {s['additions'] + s['new_features']}: {s['new_features']} new features (no class "
        f"had the member), {s['additions']} to flag"
    )
    print(
        f"of those {s['additions']}: flagged the release before {s['flagged']}, recall {recall} "
        f"(target {RECALL_TARGET:.0%}: {'met' if s['recall_met'] else 'NOT met'}); listed at all {listed}; "
        f"slowest check "
        f"{s['slowest_seconds']:.1f} s (target {SECONDS_TARGET:.0f} s: "
        f"{'met' if s['seconds_met'] else 'NOT met'})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": s}, indent=2))
    return 0 if s["recall_met"] and s["seconds_met"] else 1


if __name__ == "__main__":
    sys.exit(main())

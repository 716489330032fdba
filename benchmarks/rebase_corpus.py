#!/usr/bin/env python3
"""Benchmark: dry-run `rebase --onto` on a corpus of real SGLang patches across real releases.

For each corpus entry (one patch, or a stack of patches applied in order) and each target release
it makes a scratch project (a temporary git repository holding a copy of this repository's
production pin and a bare line pinned at the entry's base release, made with the tool's own
``lines --add --bare``), imports the patch files with ``import`` (plain diffs, format-patch or mbox),
and runs ``rebase --onto TARGET --dry-run`` in-process. It prints, per entry and target, the hunks
in total, the hunks carried automatically (clean + merged + obsolete), conflicting and suspect
hunks, the files upstream moved or deleted, and the time; then totals, and a sample of the suspect
findings. Nothing in this repository changes.

    python benchmarks/rebase_corpus.py                          # our own series (patches/ on its pin, lines/*)
    python benchmarks/rebase_corpus.py --corpus /work/corpus    # the entries of benchmarks/corpus.toml
    python benchmarks/rebase_corpus.py --corpus DIR --only slime-v0.5.9 --onto 0.5.10 --json
    python benchmarks/rebase_corpus.py --corpus DIR --split     # one patch per file (import --split)

A patch that conflicts is not checked for suspects (the tool checks what merged), so a large
single patch with one conflicting file shows no suspect at all; ``--split`` imports one patch per
file, as a maintainer porting such a patch file by file would, so every file that merges is checked.

The corpus: ``benchmarks/corpus.toml`` names each entry's origin (repository, commit, path, URL),
the sha256 of every file, the release it was written against and the releases to rebase it onto.
The patch files themselves are other projects' code and are not committed: fetch them into a
directory of your own as ``DIR/<entry id>/<file name>`` (the manifest says from where); a file
whose sha256 differs from the manifest's is refused. Without ``--corpus`` the corpus is this
repository's own series, which we may commit: each line's series at its pin, onto the releases
given by ``--onto`` (default: 0.5.10, 0.5.12 and the newest release; a line on the newest release
has nothing to rebase onto and is listed as such).

Times: "seconds" is the wall time of one dry run (scratch repository, both releases, every patch);
"per patch" is what the patches themselves cost in it (replay, per-hunk verdicts, suspect check),
measured by timing ``rebase.apply_one`` and ``rebase.check_suspects``; the rest is the dry run's
fixed cost per release. Releases come from ``~/.cache/sglpatch`` (downloaded from PyPI once).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sglpatch.errors import UserError  # noqa: E402
from sglpatch.queue import importer, rebase  # noqa: E402
from sglpatch.queue import line as lines  # noqa: E402
from sglpatch.queue.line_add import add_line  # noqa: E402
from sglpatch.queue.series import read_series_names  # noqa: E402
from sglpatch.upstream import source  # noqa: E402
from sglpatch.upstream.pin import read_pin  # noqa: E402

MANIFEST = ROOT / "benchmarks" / "corpus.toml"
AUTHOR = "Corpus Benchmark <corpus-benchmark@example.invalid>"
CARRIED = ("clean", "merged", "obsolete")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.M)
_SUSPECTS = re.compile(r"merged, but (\d+) suspect")


@dataclass
class Entry:
    id: str
    base: str
    onto: list[str]
    files: list[Path]  # in the order they are applied
    origin: str = ""  # one line: where it comes from


@dataclass
class Run:
    entry: str
    onto: str
    patches: int = 0
    hunks: int = 0
    carried: int = 0
    conflict: int = 0
    suspect: int = 0
    deleted: int = 0
    moved_files: int = 0
    deleted_files: int = 0
    verdicts: dict = field(default_factory=dict)  # patch verdict -> count
    findings: list[str] = field(default_factory=list)
    suspect_findings: int = 0
    seconds: float = 0.0
    patch_seconds: float = 0.0  # apply_one + check_suspects, summed over the patches
    error: str = ""

    @property
    def share(self) -> float:
        return self.carried / self.hunks if self.hunks else 1.0


# ---------------------------------------------------------------- corpus


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest_entries(manifest: Path, corpus: Path) -> list[Entry]:
    """The manifest's entries, every file checked against its sha256 (refused when it differs)."""
    data = tomllib.loads(manifest.read_text(encoding="utf-8"))
    entries = []
    for item in data.get("patch", []):
        files = []
        for f in item["files"]:
            local = corpus / item["id"] / Path(f["path"]).name
            if not local.is_file():
                raise UserError(f"{local} is missing", f"fetch it from {f['url']} (sha256 {f['sha256']})")
            if sha256(local) != f["sha256"]:
                raise UserError(
                    f"{local} has sha256 {sha256(local)}, the manifest says {f['sha256']}",
                    f"fetch the file named in {manifest.name}: {f['url']}",
                )
            files.append(local)
        entries.append(
            Entry(item["id"], item["base"], list(item["onto"]), files, f"{item['repository']} @ {item['commit'][:12]}")
        )
    return entries


def own_entries(onto: list[str] | None) -> list[Entry]:
    """This repository's own lines: each line's series (as it is on disk) at its pin."""
    newest = source.released_versions()[-1]
    default = onto or ["0.5.10", "0.5.12", newest]
    entries = []
    for line in lines.all_lines(ROOT):
        base = read_pin(line.root).version
        files = [line.root / "patches" / name for name in read_series_names(line.root)]
        later = [v for v in default if Version(v) > Version(base)]
        entries.append(Entry(f"own-{line.name}", base, later, files, f"this repository, {line.label()}"))
    return entries


def count_hunks(path: Path) -> int:
    return len(_HUNK.findall(path.read_bytes().decode("utf-8", "surrogateescape")))


# ---------------------------------------------------------------- timing hooks


class Timer:
    """Times the per-patch steps of a dry run (the tool's own functions, wrapped in-process)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        for name in ("apply_one", "check_suspects"):
            setattr(rebase, name, self._timed(getattr(rebase, name)))

    def _timed(self, function):
        def timed(*args, **kwargs):
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - began

        return timed


# ---------------------------------------------------------------- one dry run


def scratch_project(tmp: Path) -> Path:
    """A throwaway repository with our production pin: enough for `lines --add --bare`."""
    project = tmp / "project"
    project.mkdir()
    subprocess.run(["git", "init", "--quiet", str(project)], check=True)
    shutil.copyfile(ROOT / "upstream.toml", project / "upstream.toml")
    (project / "patches").mkdir()
    (project / "patches" / "series").write_text("")
    return project


def quiet():
    """The tool's progress lines go to stderr; keep the benchmark's table readable."""
    return contextlib.redirect_stderr(io.StringIO())


def run_entry(project: Path, entry: Entry, number: int, timer: Timer, verbose: bool, split: bool = False) -> list[Run]:
    runs = []
    with quiet():
        line = add_line(project, f"corpus-{number}", "production", bare=True, release=entry.base)
        importer.import_files(line.root, entry.files, author=AUTHOR, split=split)
    imported = [line.root / "patches" / name for name in read_series_names(line.root)]
    hunks_of = {p.name: count_hunks(p) for p in imported}
    for onto in entry.onto:
        run = Run(entry.id, onto, patches=len(imported))
        timer.seconds = 0.0
        began = time.perf_counter()
        try:
            with quiet():
                report = rebase.start(line.root, onto, dry_run=True)
        except UserError as exc:
            run.error = str(exc)
            runs.append(run)
            continue
        run.seconds = time.perf_counter() - began
        run.patch_seconds = timer.seconds
        for patch in report["patches"]:
            tally(run, patch, hunks_of.get(patch["name"], 0))
        runs.append(run)
        if verbose:
            print(rebase.format_report(report), file=sys.stderr)
    return runs


def tally(run: Run, patch: dict, hunks_in_file: int) -> None:
    run.verdicts[patch["verdict"]] = run.verdicts.get(patch["verdict"], 0) + 1
    files = patch.get("file_verdicts") or []
    if not files:  # obsolete as a whole: every hunk is carried (by dropping the patch)
        run.hunks += hunks_in_file
        run.carried += hunks_in_file if patch["verdict"] == "obsolete" else 0
        run.conflict += hunks_in_file if patch["verdict"] == "conflict" else 0
        return
    for file in files:
        run.moved_files += file["verdict"] == "moved" or file["detail"].startswith("moved from")
        run.deleted_files += file["verdict"] == "deleted"
        for hunk in file["hunks"]:
            run.hunks += 1
            verdict = hunk["verdict"]
            run.carried += verdict in CARRIED
            run.conflict += verdict == "conflict"
            run.suspect += verdict == "suspect"
            run.deleted += verdict == "deleted"
            if verdict == "suspect":
                run.findings += [f for f in hunk["detail"].split("; ") if re.match(r"\S+:\d+: ", f)]
    if patch["verdict"] == "suspect":
        found = _SUSPECTS.search(patch["detail"])
        run.suspect_findings += int(found.group(1)) if found else 0
        if not any(f["verdict"] == "suspect" for f in files):  # findings not placed in a hunk
            run.findings.append(patch["detail"])


# ---------------------------------------------------------------- report


def table(runs: list[Run], entries: list[Entry]) -> str:
    out = [
        f"{'entry':<26} {'onto':<13} {'patches':>7} {'hunks':>6} {'carried':>8} {'share':>6} "
        f"{'confl':>6} {'susp':>5} {'find':>5} {'mv/del':>7} {'seconds':>8} {'per patch':>10}  verdicts"
    ]
    for r in runs:
        if r.error:
            out.append(f"{r.entry:<26} {r.onto:<13} error: {r.error}")
            continue
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(r.verdicts.items()))
        out.append(
            f"{r.entry:<26} {r.onto:<13} {r.patches:>7} {r.hunks:>6} {r.carried:>8} {r.share:>6.0%} "
            f"{r.conflict:>6} {r.suspect:>5} {r.suspect_findings:>5} "
            f"{f'{r.moved_files}/{r.deleted_files}':>7} {r.seconds:>8.1f} "
            f"{r.patch_seconds / max(r.patches, 1):>10.2f}  {verdicts}"
        )
    for e in entries:
        if not e.onto:
            out.append(f"{e.id:<26} {'-':<13} (on SGLang {e.base}: no later release to rebase onto)")
    ok = [r for r in runs if not r.error]
    if ok:
        hunks, carried = sum(r.hunks for r in ok), sum(r.carried for r in ok)
        patches = sum(r.patches for r in ok)
        share = [r.share for r in ok]
        out += [
            "",
            f"total: {len(ok)} rebases of {len({r.entry for r in ok})} entries, {patches} patch replays, "
            f"{hunks} hunks: {carried} carried automatically ({carried / max(hunks, 1):.0%}; per rebase "
            f"{min(share):.0%} to {max(share):.0%}), {sum(r.conflict for r in ok)} conflict, "
            f"{sum(r.suspect for r in ok)} suspect hunks ({sum(r.suspect_findings for r in ok)} findings), "
            f"{sum(r.deleted for r in ok)} in deleted files; "
            f"{sum(r.moved_files for r in ok)} files followed to a new path",
            f"time: {sum(r.seconds for r in ok):.1f} s wall; per rebase median "
            f"{sorted(r.seconds for r in ok)[len(ok) // 2]:.1f} s; per patch (replay + verdicts + "
            f"suspect check) {sum(r.patch_seconds for r in ok) / max(patches, 1):.2f} s mean, "
            f"{max(r.patch_seconds / max(r.patches, 1) for r in ok):.2f} s worst rebase",
        ]
    findings = [(r, f) for r in ok for f in r.findings]
    if findings:
        out += ["", "suspect findings (sample):"]
        out += [f"  {r.entry} -> {r.onto}: {f}" for r, f in findings[:12]]
        if len(findings) > 12:
            out.append(f"  ... {len(findings) - 12} more (--json lists them all)")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, help="directory of the manifest's patch files (default: our own series)")
    ap.add_argument("--manifest", type=Path, default=MANIFEST, help="default: benchmarks/corpus.toml")
    ap.add_argument("--only", action="append", help="run only this entry id (repeatable)")
    ap.add_argument("--onto", action="append", help="target release (repeatable; replaces the entries' own)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument(
        "--split",
        action="store_true",
        help="import one patch per file (`import --split`): a file that merges is then checked for "
        "suspects even when another file of the same patch conflicts",
    )
    ap.add_argument("--verbose", action="store_true", help="also print each dry run's report on stderr")
    args = ap.parse_args()
    try:
        entries = manifest_entries(args.manifest, args.corpus) if args.corpus else own_entries(args.onto)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.only:
        unknown = sorted(set(args.only) - {e.id for e in entries})
        if unknown:
            print(
                f"error: no corpus entry {', '.join(unknown)}: the entries are {', '.join(e.id for e in entries)}",
                file=sys.stderr,
            )
            return 2
        entries = [e for e in entries if e.id in args.only]
    if args.onto and args.corpus:
        for e in entries:
            e.onto = [v for v in args.onto if Version(v) > Version(e.base)]
    if not args.json:
        for e in entries:
            print(
                f"{e.id}: {len(e.files)} file(s), {sum(count_hunks(f) for f in e.files)} hunks, "
                f"on SGLang {e.base} -> {', '.join(e.onto) or '(none)'}; from {e.origin}",
                flush=True,
            )
        print(flush=True)
    timer = Timer()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="sglpatch-corpus-") as tmp:
        project = scratch_project(Path(tmp))
        for number, entry in enumerate(entries, 1):
            if not entry.onto:
                continue
            try:
                done = run_entry(project, entry, number, timer, args.verbose, args.split)
            except UserError as exc:
                done = [Run(entry.id, "-", error=f"import: {exc}")]
            runs += done
            if not args.json:
                for r in done:
                    print(
                        f"  {r.entry} -> {r.onto}: "
                        + (
                            f"error: {r.error}"
                            if r.error
                            else f"{r.carried}/{r.hunks} hunks carried, {r.conflict} conflict, {r.suspect} suspect, "
                            f"{r.seconds:.1f} s"
                        ),
                        flush=True,
                    )
    if args.json:
        print(
            json.dumps(
                {
                    "entries": [
                        {
                            "id": e.id,
                            "base": e.base,
                            "onto": e.onto,
                            "origin": e.origin,
                            "files": [str(f) for f in e.files],
                        }
                        for e in entries
                    ],
                    "runs": [{**r.__dict__, "share": round(r.share, 4)} for r in runs],
                },
                indent=2,
            )
        )
    else:
        print("\n" + table(runs, entries))
    return 0 if all(not r.error for r in runs) else 2


if __name__ == "__main__":
    sys.exit(main())

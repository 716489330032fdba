"""Per-file and per-hunk verdicts of a patch replayed on a new release, and upstream's moves.

A patch's one verdict hides what a maintainer needs on a 49-file patch: which files and hunks
went through, which moved, which conflict. Each hunk is tried alone with `git apply --check`
against the tree the patch is replayed on (the new release plus the patches before it):

    clean      applies at its own line
    merged     applies N lines away ("moved by N lines"), or only by the three-way merge
    obsolete   the new release already has it (it applies in reverse)
    conflict   neither: the hunk's lines are given
    suspect    it went in, but what its added lines use is gone from the new release, or it leaves
               unpatched calls upstream added (:mod:`sglpatch.contract.suspect`)
    moved      its file moved upstream: the hunk is carried to the new path (then one of the above)
    deleted    its file was deleted upstream

A file's verdict is its worst hunk's. Moves and deletions come from git's rename detection
between the two releases (content similarity), so a moved file is followed whatever its name.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sglpatch.contract.suspect.merge import Suspect, added_lines, find_suspects
from sglpatch.git.diffheader import git_line_paths, renamed_header, sections
from sglpatch.git.env import git_bytes
from sglpatch.git.repo import Repo, pinned_env, run, run_status, work_dir

ORDER = ["obsolete", "clean", "merged", "moved", "suspect", "conflict", "deleted"]  # better to worse
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_OFFSET = re.compile(r"Hunk #1 succeeded at (\d+) \(offset (-?\d+) lines?\)")


@dataclass
class Hunk:
    old_start: int
    verdict: str
    detail: str = ""
    lines: list[str] = field(default_factory=list)  # a conflicting hunk's own lines


@dataclass
class FileVerdict:
    path: str  # in the new release (after a move)
    verdict: str
    detail: str = ""
    hunks: list[Hunk] = field(default_factory=list)


# ---------------------------------------------------------------- upstream's moves


@dataclass(frozen=True)
class Moves:
    """Files of the old release that the new one renamed (old -> new) or deleted."""

    renamed: dict[str, str]
    deleted: frozenset[str]

    @classmethod
    def between(cls, repo: Repo, old: str | None, new: str) -> Moves:
        if not old:
            return cls({}, frozenset())
        with pinned_env(repo):
            out = run(repo, "diff", "--name-status", "-z", "--find-renames=50%", "--diff-filter=RD", old, new, "--")
        renamed, deleted = {}, set()
        fields = out.split("\0")  # -z: paths as they are, never C-quoted
        while len(fields) >= 2:
            status = fields.pop(0)
            if status.startswith("R") and len(fields) >= 2:
                renamed[fields[0]] = fields[1]
                del fields[:2]
            else:
                if status == "D":
                    deleted.add(fields[0])
                del fields[:1]
        return cls(renamed, frozenset(deleted))

    def follow(self, patch_text: str) -> tuple[str, dict[str, str]]:
        """The patch with every path upstream renamed carried to its new name; and what moved.

        Only the names in each file's header change, whole names only (a file whose name merely
        starts like a moved one, ``x.py`` and ``x.pyi``, stays), however git quoted them."""
        found = sections(patch_text)
        moved = {s.old: self.renamed[s.old] for s in found if s.old in self.renamed}
        if not moved:
            return patch_text, moved
        out = [patch_text[: found[0].start]]
        for s in found:
            out.append(renamed_header(patch_text[s.start : s.end], moved))
        return "".join(out), moved


# ---------------------------------------------------------------- per hunk


def verdicts(
    repo: Repo, patch_text: str, moves: Moves | None = None, moved: dict[str, str] | None = None
) -> list[FileVerdict]:
    """What each file and hunk of ``patch_text`` meets on ``repo``'s HEAD, before the patch is
    applied. A hunk that applies neither alone nor in reverse is "merged" (three-way) until
    git's merge says otherwise: ``settle_conflicts``."""
    moves = moves or Moves({}, frozenset())
    moved_back = {new: old for old, new in (moved or {}).items()}
    result = []
    for path, header, file_hunks in parse_files(patch_text):
        old_path = moved_back.get(path, path)
        if old_path in moves.deleted and path not in moved_back:
            result.append(
                FileVerdict(
                    path, "deleted", "deleted upstream", [Hunk(_start(h), "deleted", "", _lines(h)) for h in file_hunks]
                )
            )
            continue
        checked = [_hunk_verdict(repo, header, h) for h in file_hunks]
        worst = max((h.verdict for h in checked), key=ORDER.index, default="clean")
        detail = f"moved from {old_path}" if old_path != path else ""
        result.append(FileVerdict(path, "moved" if detail and worst != "conflict" else worst, detail, checked))
    return result


def parse_files(patch_text: str) -> list[tuple[str, str, list[str]]]:
    """(path, file header, [hunk texts]) for each file of a patch, in order."""
    files = []
    for section in sections(patch_text):
        header: list[str] = []
        hunks: list[list[str]] = []
        for line in patch_text[section.start : section.end].splitlines(keepends=True):
            if line == "-- \n":
                break  # format-patch's signature
            if _HUNK.match(line):
                hunks.append([line])
            elif hunks:
                hunks[-1].append(line)
            else:
                header.append(line)
        files.append((section.path, "".join(header), ["".join(h) for h in hunks]))
    return files


def settle_conflicts(files: list[FileVerdict], conflicted: list[str]) -> list[FileVerdict]:
    """After git's merge stopped in ``conflicted``: their hunks that do not apply alone conflict."""
    for file in files:
        if file.path in conflicted and file.verdict != "deleted":
            for hunk in file.hunks:
                if hunk.detail == "three-way merge":
                    hunk.verdict, hunk.detail = "conflict", "does not apply, even three-way"
            file.verdict = max((h.verdict for h in file.hunks), key=ORDER.index, default="conflict")
    return files


def _hunk_verdict(repo: Repo, header: str, hunk: str) -> Hunk:
    start = _start(hunk)
    ok, output = _apply_check(repo, header + hunk)
    if ok:
        offset = _OFFSET.search(output)
        if offset and int(offset.group(2)):
            return Hunk(start, "merged", f"moved by {int(offset.group(2)):+d} lines (now at {offset.group(1)})")
        return Hunk(start, "clean")
    if _apply_check(repo, header + hunk, "--reverse")[0]:
        return Hunk(start, "obsolete", "the new release already has it")
    return Hunk(start, "merged", "three-way merge", _lines(hunk))


def _apply_check(repo: Repo, text: str, *options: str) -> tuple[bool, str]:
    with pinned_env(repo):
        status, out, err = run_status(repo, "apply", "--check", "--verbose", *options, "-", input=git_bytes(text))
    return status == 0, out + err


def _start(hunk: str) -> int:
    match = _HUNK.match(hunk)
    return int(match.group(1)) if match else 0


def _lines(hunk: str) -> list[str]:
    return hunk.splitlines()[:40]


def as_dicts(files: list[FileVerdict]) -> list[dict]:
    return [asdict(f) for f in files]


def summary(file: dict) -> str:
    """One line for a file of the text report: its verdict and how its hunks went."""
    counts: dict[str, int] = {}
    for hunk in file["hunks"]:
        counts[hunk["verdict"]] = counts.get(hunk["verdict"], 0) + 1
    parts = [f"{n} {v}" for v, n in sorted(counts.items(), key=lambda item: ORDER.index(item[0]))]
    notes = [h["detail"] for h in file["hunks"] if h["verdict"] in ("merged", "conflict") and h["detail"]]
    where = [f"@@ -{h['old_start']}" for h in file["hunks"] if h["verdict"] == "conflict"]
    extra = "; ".join(filter(None, [file["detail"], ", ".join(dict.fromkeys(notes)), " ".join(where)]))
    return f"{file['path']}: {file['verdict']} ({', '.join(parts) or 'no hunks'})" + (f"; {extra}" if extra else "")


# ---------------------------------------------------------------- suspect merges


def suspects(
    repo: Repo, files: list[FileVerdict], old_tree: Path, new_tree: Path, paths: list[str]
) -> tuple[list[Suspect], list[FileVerdict]]:
    """The suspect findings of the patch HEAD just made (on its own added lines, and calls it
    leaves unpatched in upstream's lines; not the lines earlier patches added), with the hunks
    they fall in marked ``suspect``."""
    merged = Path(work_dir(repo))
    own = _added_by_head(repo)
    found = []
    for finding in find_suspects(old_tree, new_tree, merged, paths):
        ours = finding.line in own.get(finding.path, set())
        upstreams = finding.line not in set(added_lines(new_tree / finding.path, merged / finding.path))
        if ours or upstreams:
            found.append(finding)
    ranges = _head_hunk_ranges(repo)
    for file in files:
        mine = [f for f in found if f.path == file.path]
        if not mine:
            continue
        for finding in mine:
            index = next((i for i, (a, b) in enumerate(ranges.get(file.path, [])) if a <= finding.line < b), None)
            hunk = file.hunks[index] if index is not None and len(ranges[file.path]) == len(file.hunks) else None
            if hunk is not None:
                hunk.verdict, hunk.detail = "suspect", "; ".join(filter(None, [hunk.detail, str(finding)]))
        if ORDER.index("suspect") > ORDER.index(file.verdict):
            file.verdict = "suspect"
        file.detail = "; ".join(filter(None, [file.detail, f"{len(mine)} suspect"]))
    return found, files


def _added_by_head(repo: Repo) -> dict[str, set[int]]:
    """The lines HEAD's commit added, per file (new-side numbers)."""
    added: dict[str, set[int]] = {}
    for path, (start, count) in _head_hunks(repo, "-U0"):
        added.setdefault(path, set()).update(range(start, start + count))
    return added


def _head_hunk_ranges(repo: Repo) -> dict[str, list[tuple[int, int]]]:
    ranges: dict[str, list[tuple[int, int]]] = {}
    for path, (start, count) in _head_hunks(repo):
        ranges.setdefault(path, []).append((start, start + max(count, 1)))
    return ranges


def _head_hunks(repo: Repo, *options: str):
    with pinned_env(repo):
        diff = run(
            repo,
            "diff",
            *options,
            "--no-renames",
            "--no-ext-diff",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            "HEAD^",
            "HEAD",
            "--",
        )
    path = None
    for line in diff.splitlines():
        paths = git_line_paths(line)
        if paths:
            path = paths[1]
        hunk = _HUNK.match(line)
        if hunk and path:
            yield path, (int(hunk.group(3)), int(hunk.group(4) or 1))

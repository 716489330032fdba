"""One patch replayed on the new release, and its verdict: clean, merged, conflict, obsolete, or
suspect (it went in, but uses what the new release lost). Also the dry run, which replays the
whole series in a scratch repository and changes nothing."""

from __future__ import annotations

import re
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from sglpatch.contract import checks
from sglpatch.errors import UserError
from sglpatch.git.diffheader import sections
from sglpatch.git.env import git_bytes, git_text, raise_if_killed
from sglpatch.git.repo import GitError, Repo, git_dir, head_sha, init_repo, pinned_env, run
from sglpatch.queue import hunks
from sglpatch.queue.hunks import Moves
from sglpatch.queue.patch_queue import am_refusal, format_patch
from sglpatch.queue.rebase_state import REBASE_BRANCH
from sglpatch.queue.series import PATCH_DIR, PatchEntry
from sglpatch.upstream import source

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@", re.M)
# git's merge messages: "CONFLICT (content): Merge conflict in PATH",
# "CONFLICT (modify/delete): PATH deleted in HEAD and modified in ...", "... (rename/delete) ..."
_CONFLICT = re.compile(r"^CONFLICT \([^)]*\): (?:Merge conflict in (.+)|(.+?) deleted in )", re.M)  # names as they are


@dataclass
class Verdict:
    name: str
    verdict: str  # clean | merged | conflict | obsolete | skipped
    detail: str = ""
    files: list[str] = field(default_factory=list)
    file_verdicts: list[dict] = field(default_factory=list)  # hunks.FileVerdict, per file and hunk


NEEDS_A_MAINTAINER = {"conflict", "suspect"}  # a dry run or rehearsal with one of these exits 1


def needs_a_maintainer(patches: list[dict]) -> bool:
    return any(p["verdict"] in NEEDS_A_MAINTAINER for p in patches)


def apply_one(repo: Repo, patch: PatchEntry, version: str, pristine: Path, moves: Moves) -> Verdict:
    """Replay one patch on HEAD and say what happened, per patch, per file and per hunk. A file
    upstream moved is followed to its new path; one it deleted is a conflict that says so."""
    reason = drop_reason(patch, version, pristine)
    if reason:
        return Verdict(patch.name, "obsolete", reason, list(patch.files))
    text = git_text(patch.path.read_bytes())
    followed, moved = moves.follow(text)
    files = [moved.get(f, f) for f in patch.files]
    with tempfile.TemporaryDirectory(prefix="sglpatch-apply-") as tmp, pinned_env(repo):
        carried = patch.path
        if moved:
            carried = Path(tmp) / patch.name
            carried.write_bytes(git_bytes(followed))
        try:
            run(repo, "apply", "--check", "--reverse", str(carried))
            return Verdict(patch.name, "obsolete", f"SGLang {version} already contains the change", files)
        except GitError as exc:
            raise_if_killed(exc)
        per_file = hunks.verdicts(repo, followed, moves, moved)
        notes = [f"{old} moved to {new} upstream" for old, new in moved.items()]
        before = head_sha(repo)
        try:
            output = run(repo, "am", "--3way", "--committer-date-is-author-date", "--keep-cr", str(carried))
        except GitError as exc:
            raise_if_killed(exc)
            _refuse_mail_header(repo, patch, exc)
            conflicted = conflicted_files(exc.stdout or "") or files
            gone = [f for f in conflicted if f in moves.deleted and f not in moved]
            per_file = hunks.settle_conflicts(per_file, conflicted)
            where = ", ".join(f"{f} (deleted upstream)" if f in gone else f for f in conflicted)
            return Verdict(
                patch.name,
                "conflict",
                "; ".join([f"three-way merge stopped in {where}", *notes]),
                conflicted,
                hunks.as_dicts(per_file),
            )
        if head_sha(repo) == before:
            return Verdict(patch.name, "obsolete", f"merges to no change on SGLang {version}", files)
        shifted = _moved_hunks(followed, format_patch(repo, "HEAD"))
        detail = "; ".join(filter(None, ["three-way merge" if "3-way merge" in output else "", shifted, *notes]))
        kind = "merged" if detail else "clean"
        if "3-way merge" in output and not shifted:
            detail += "; same hunks"
        return Verdict(patch.name, kind, detail, files, hunks.as_dicts(per_file))


def check_suspects(repo: Repo, verdict: Verdict, old_tree: Path, new_tree: Path) -> Verdict:
    """A patch that went in (clean or merged) is ``suspect`` when its added lines use what the
    new release lost, or it leaves unpatched calls that upstream added."""
    if verdict.verdict not in ("clean", "merged"):
        return verdict
    files = [
        hunks.FileVerdict(f["path"], f["verdict"], f["detail"], [hunks.Hunk(**h) for h in f["hunks"]])
        for f in verdict.file_verdicts
    ]
    found, files = hunks.suspects(repo, files, old_tree, new_tree, verdict.files)
    if not found:
        return verdict
    more = f" (+{len(found) - 3} more)" if len(found) > 3 else ""
    return replace(
        verdict,
        verdict="suspect",
        file_verdicts=hunks.as_dicts(files),
        detail=f"merged, but {len(found)} suspect: " + "; ".join(map(str, found[:3])) + more,
    )


def _refuse_mail_header(repo: Repo, patch: PatchEntry, exc: GitError) -> None:
    """git am applied the diff and then refused the mail header (a Date: or From: it cannot
    read): bad input, not a conflict, and no resolution would get past it."""
    if "Patch failed at" in (exc.stdout or "") or run(repo, "diff", "--name-only", "--diff-filter=U"):
        return
    refused, by_hook = am_refusal(repo, exc.stderr or "")
    run(repo, "am", "--abort")
    if by_hook:
        raise UserError(f"{PATCH_DIR}/{patch.name}: git am stopped although the diff applies ({refused})", by_hook)
    raise UserError(
        f"{PATCH_DIR}/{patch.name}: git am refuses its mail header ({refused})",
        f"fix the From:/Date: header of {PATCH_DIR}/{patch.name}, commit it, then rerun",
    )


def conflicted_files(am_output: str) -> list[str]:
    """The paths `git am --3way` names in its CONFLICT lines, sorted."""
    return sorted({m.group(1) or m.group(2) for m in _CONFLICT.finditer(am_output)})


def drop_reason(patch: PatchEntry, version: str, pristine: Path) -> str | None:
    for condition in patch.drop_when:
        if condition.kind == "upstream" and condition.holds_for_version(version):
            return f"Drop-When {condition} holds for {version}"
        if condition.kind == "check" and checks.run_check(condition.value, pristine).passed:
            return f"Drop-When {condition}: the check passes on pristine SGLang {version}"
    return None


def _moved_hunks(old: str, new: str) -> str:
    """Which hunks now start at other lines: 'path: -120 -> -134, ...'."""

    def hunks(text):
        return [
            (s.path, int(m.group(1)))
            for s in sections(text)
            for m in map(_HUNK.match, text[s.start : s.end].splitlines())
            if m
        ]

    before, after = hunks(old), hunks(new)
    if len(before) != len(after):
        return f"hunks changed: {len(before)} before, {len(after)} now"
    moved = [f"{path}:{a}->{b}" for (path, a), (_, b) in zip(before, after) if a != b]
    return ("moved " + ", ".join(moved)) if moved else ""


def dry_run_verdicts(series, onto: str, old_base: str, new_base: str, pristine: Path, old_pristine: Path) -> dict:
    """Replay in a scratch repository that borrows the mirror's objects (git alternates: no copy
    of the two releases): nothing of ours moves."""
    with tempfile.TemporaryDirectory(prefix="sglpatch-dry-") as tmp:
        scratch = init_repo(tmp)
        alternates = Path(git_dir(scratch)) / "objects" / "info" / "alternates"
        alternates.write_text(str(Path(git_dir(source.open_mirror())) / "objects") + "\n")
        with pinned_env(scratch):
            run(scratch, "checkout", "--quiet", "-B", REBASE_BRANCH, new_base)
            verdicts = []
            moves = Moves.between(scratch, old_base, new_base)
            for patch in series.patches:
                verdict = check_suspects(
                    scratch, apply_one(scratch, patch, onto, pristine, moves), old_pristine, pristine
                )
                if verdict.verdict == "conflict":
                    run(scratch, "am", "--abort")
                verdicts.append(asdict(verdict))
    return {"onto": onto, "dry_run": True, "patches": verdicts}

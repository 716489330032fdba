"""Taking up the step a rebase stopped at: `--continue` takes the maintainer's resolution of the
conflict (or accepts a suspect merge), `--skip` drops the patch."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.git.env import raise_if_killed
from sglpatch.git.repo import GitError, Repo, git_dir, message_text, pinned_env, resolve_commit, run, summary_text
from sglpatch.git.repo import head_sha as head_of
from sglpatch.queue.patch_queue import PatchQueue, am_refusal
from sglpatch.queue.rebase_state import STATE_DIR, State
from sglpatch.queue.rebase_verdicts import Verdict, check_suspects
from sglpatch.queue.series import commit_matches_patch, holds_conflict_markers, parse_patch
from sglpatch.queue.transaction_journal import boundary
from sglpatch.queue.untracked import name_left_out


def _in_am(queue: PatchQueue) -> bool:
    return (Path(git_dir(queue.repo)) / "rebase-apply").exists()


def head_sha(queue: PatchQueue) -> str:
    return head_of(queue.repo)


def skip_stopped(queue: PatchQueue, state: State) -> None:
    current = state.current
    if current is None:
        raise UserError("the rebase is not stopped at a patch", "run `rebase --continue`")
    _back_to_before(queue, current)
    record_step(state, Verdict(current["name"], "skipped", "dropped by the maintainer"), None)


def continue_stopped(queue: PatchQueue, state: State, old_tree: Path, new_tree: Path) -> Verdict | None:
    """Take the maintainer's resolution of the stopped patch. A resolved conflict is checked like
    any merge (the files that merged around the conflict and the resolution itself): the suspect
    verdict it returns stops the rebase again, and the next ``--continue`` accepts it."""
    current = state.current
    if current is None:
        return None  # every step had finished; the rebase was stopped before writing its result
    if not current.get("stopped"):
        _back_to_before(queue, current)
        state.current = None
        return None
    name, before = current["name"], current["head_before"]
    markers = _has_conflict_markers(queue)
    if markers:
        raise UserError(f"conflict markers remain in {', '.join(markers)}", "resolve them, then `rebase --continue`")
    suspect = current.get("conflict", {}).get("verdict") == "suspect"
    if _in_am(queue):
        _finish_am(queue, state, current)
    elif suspect and queue.is_dirty() and head_sha(queue) != before:  # the maintainer's fix, not committed
        with pinned_env(queue.repo):
            run(queue.repo, "add", "--all")
            name_left_out(queue.repo, f"the resolution of {name}")
            run(queue.repo, "commit", "--quiet", "--amend", "--no-edit", "--no-verify")
    elif queue.is_dirty():
        raise UserError(
            f"no `git am` is in progress for {name}, and {queue.path} has uncommitted edits",
            "`rebase --skip` drops the patch, `rebase --abort` returns to the state before",
        )
    head = head_sha(queue)
    if head == before:
        if not current.get("continued"):  # the am ended without us: aborted by hand
            raise UserError(
                f"the conflict in {name} is no longer in progress (was `git am --abort` run?) "
                "and HEAD holds no resolution of it",
                "`rebase --skip` drops the patch, `rebase --abort` returns to the state before the rebase",
            )
        record_step(state, Verdict(name, "obsolete", "the resolution left no change"), None)
        return None
    commit = resolve_commit(queue.repo, head)
    patch = parse_patch(queue.root / STATE_DIR / "patches" / name)
    if [p.hexsha for p in commit.parents] != [before] or not commit_matches_patch(message_text(commit), patch):
        raise UserError(
            f"HEAD in {queue.path} is {head[:12]} ('{summary_text(commit)}'), not a resolution of {name} "
            f"on top of {before[:12]}",
            "put HEAD back, `rebase --skip`, or `rebase --abort`",
        )
    stopped_at = current.get("conflict", {})
    if suspect:
        record_step(
            state,
            Verdict(name, "merged", "suspect merge accepted by the maintainer", stopped_at.get("files", [])),
            head,
        )
        return None
    resolved = Verdict(
        name,
        "merged",
        "conflict resolved by the maintainer",
        [f["path"] for f in stopped_at.get("file_verdicts", [])] or list(patch.files),
        _resolved(stopped_at.get("file_verdicts", [])),
    )
    checked = check_suspects(queue.repo, resolved, old_tree, new_tree)
    if checked.verdict == "suspect":
        return replace(checked, detail=f"conflict resolved, but {checked.detail.removeprefix('merged, but ')}")
    record_step(state, replace(resolved, files=stopped_at.get("files", []), file_verdicts=[]), head)
    return None


def _resolved(file_verdicts: list[dict]) -> list[dict]:
    """The stopped patch's per-file verdicts once the maintainer resolved its conflicts."""
    return [
        {
            **f,
            "verdict": "merged" if f["verdict"] == "conflict" else f["verdict"],
            "hunks": [{**h, "verdict": "merged" if h["verdict"] == "conflict" else h["verdict"]} for h in f["hunks"]],
        }
        for f in file_verdicts
    ]


def _finish_am(queue: PatchQueue, state: State, current: dict) -> None:
    """Commit the maintainer's resolution with the stopped `git am` (ours: HEAD has not moved);
    ``current`` is ``state.current``, the stopped step."""
    if head_sha(queue) != current["head_before"]:
        raise UserError(
            f"HEAD in {queue.path} moved to {head_sha(queue)[:12]} while {current['name']} was "
            f"stopped (it was {current['head_before'][:12]})",
            "put it back, or `rebase --abort`",
        )
    current["continued"] = True  # from here an unmoved HEAD means "resolved to no change"
    state.save(queue.root)
    with pinned_env(queue.repo):
        for path in _deleted_upstream_unresolved(queue.repo):  # never resurrected by `add --all`
            run(queue.repo, "rm", "-q", "-f", "--", path)
        run(queue.repo, "add", "--all")
        name_left_out(queue.repo, f"the resolution of {current['name']}")
        boundary("rebase:resolution-added")
        try:
            run(queue.repo, "am", "--continue")
        except GitError as exc:
            raise_if_killed(exc)
            if "No changes" not in (exc.stdout + exc.stderr):
                refused, by_hook = am_refusal(queue.repo, exc.stderr or "", "`rebase --continue`")
                raise UserError(
                    f"git am --continue failed for {current['name']}: {refused}",
                    by_hook or "resolve it in the work tree, then `rebase --continue`",
                ) from None
            run(queue.repo, "am", "--skip")


def _deleted_upstream_unresolved(repo: Repo) -> list[str]:
    """Paths of a modify/delete conflict (the new release deleted them, the patch changes them)
    that the maintainer has neither staged (`git add`) nor removed: no stage 2, no stage 0."""
    stages: dict[str, set[str]] = {}
    for row in run(repo, "ls-files", "--unmerged", "-z").split("\0"):
        if row:
            info, path = row.split("\t", 1)
            stages.setdefault(path, set()).add(info.split()[2])
    return sorted(path for path, found in stages.items() if "2" not in found)


def _has_conflict_markers(queue: PatchQueue) -> list[str]:
    """The files that differ from HEAD (staged with `git add` or not, or unmerged) and still hold a
    conflict marker; names as they are (``-z``: spaces, never C-quoted)."""
    with pinned_env(queue.repo):
        listed = (
            run(queue.repo, "diff", "--name-only", "-z", "HEAD", "--")
            + "\0"
            + run(queue.repo, "diff", "--name-only", "-z", "--diff-filter=U")
        )
    files = {f for f in listed.split("\0") if f}
    # An unmerged path is listed by the first call unless its work-tree file matches HEAD (a
    # modify/delete kept as ours): the second call names it either way.
    return sorted(
        f
        for f in files
        if (queue.path / f).is_file() and holds_conflict_markers((queue.path / f).read_text(errors="replace"))
    )


def _back_to_before(queue: PatchQueue, current: dict) -> None:
    """The work tree as it was before ``current``'s step: its `git am` ended and whatever it, or
    the maintainer by hand, committed for the patch dropped. A step killed midway is redone from
    there (it holds nothing of the user's); a skipped patch leaves nothing behind."""
    with pinned_env(queue.repo):
        if _in_am(queue):
            run(queue.repo, "am", "--quit")
        run(queue.repo, "reset", "--quiet", "--hard", current["head_before"])


def record_step(state: State, verdict: Verdict, commit: str | None) -> None:
    state.steps.append({**asdict(verdict), "commit": commit})
    state.current = None

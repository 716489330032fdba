"""Crash recovery: what a killed command left is rolled back (it had not reached its commit point)
or forward (it had), keeping whatever the user edited since."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.git.repo import GitError, Repo, git_dir, run, run_status
from sglpatch.lock import line_lock
from sglpatch.output import say
from sglpatch.queue import snapshot
from sglpatch.queue.line import Line, line_of
from sglpatch.queue.snapshot import State
from sglpatch.queue.transaction_journal import (
    existing_work_repo,
    git_environment,
    read_journal,
    restore_start,
    signals_held,
    write_journal,
)
from sglpatch.queue.transaction_log import LOG_REF, apply, entry_states, mark_written, record, touched_files


def recover(line: Line) -> str | None:
    """Finish what an interrupted run left: roll a commit forward, anything earlier back.
    Returns what was done, or None. A rebase in progress is left for `rebase` to continue."""
    journal = read_journal(line)
    if journal is None or journal["phase"] == "rebase":
        return None
    repo = existing_work_repo(line)
    if journal["phase"] == "committing":
        done = _roll_forward_killed(line, repo, journal)
    else:
        done = _roll_back_killed(line, repo, journal)
    say(f"note: {done}")
    return done


def recover_if_idle(root: Path) -> None:
    """For readers (`status`): finish an interrupted run unless a writer is at work right now."""
    line = line_of(root)
    if read_journal(line) is None:
        return
    try:
        with line_lock(line.root, "`status`"):
            recover(line)
    except UserError:
        pass  # a writer holds the line; what it leaves is its own business


def _roll_back_killed(line: Line, repo: Repo, journal: dict) -> str:
    """Undo what a killed command did to the work tree. The user may have edited it since, so
    what is rolled back is logged first (`undo` brings it back), and a command that had not
    moved HEAD yet has nothing to roll back: the files are left as they are."""
    with signals_held():
        start = snapshot.load(repo, run(repo, "rev-parse", f"{journal['start']}^{{tree}}"))
        current = snapshot.capture(line, repo)
        in_am = (Path(git_dir(repo)) / "rebase-apply").exists()
        if (current.head, current.branch, current.base) == (start.head, start.branch, start.base) and not in_am:
            write_journal(line, None)
            return f"the interrupted `{journal['op']}` had changed nothing"
        if not start.head:
            restore_start(line, repo, journal["start"])
        else:
            target = current.with_work_tree_of(start)
            record(line, repo, f"roll back the interrupted {journal['op']}", "", current, target)
        return f"rolled back the interrupted `{journal['op']}` (`undo` shows what it had left)"


def _roll_forward_killed(line: Line, repo: Repo, journal: dict) -> str:
    """Complete a command killed after its commit point. The user may have edited the line
    since: as if the command had finished first, a file edited since stays as the user left it
    and work tree edits are replayed over the command's work tree. When the replay conflicts,
    the work tree as found is logged first, so `undo` brings it back."""
    op, entry = journal["op"], journal["entry"]
    with signals_held():
        before, after = entry_states(repo, entry)
        current = snapshot.capture(line, repo)
        touched = touched_files(before, after)
        kept = {p for p in touched if current.files.get(p) not in (before.files.get(p), after.files.get(p))}
        edited = bool(after.head) and current.worktree_tree not in (before.worktree_tree, after.worktree_tree)
        if not kept and not edited:
            apply(line, repo, entry)
            return f"completed the interrupted `{op}`"
        with git_environment(repo):
            run(repo, "update-ref", LOG_REF, entry)  # the command happened; the edits came after it
        mark_written(repo, after, touched - kept)
        # what the command did not write stays as the user has it now (a hand edit of another patch)
        target = replace(
            after,
            files=dict(current.files),
            gitlink=after.gitlink if before.gitlink != after.gitlink else current.gitlink,
        )
        for path in touched - kept:
            if path in after.files:
                target.files[path] = after.files[path]
            else:
                target.files.pop(path, None)
        replayed = None
        if edited and (current.head, current.branch) == (after.head, after.branch):
            # the work tree had reached the command's result: the edits are on top of it as they are
            target = replace(target, worktree=current.worktree, worktree_tree=current.worktree_tree)
        elif edited:
            replayed = _replay_edits(repo, before, after, current)
            target = replace(target, worktree=replayed[0], worktree_tree=replayed[1])
        record(line, repo, f"complete the interrupted {op}", "", current, target)
    if replayed and replayed[2]:
        return (
            f"completed the interrupted `{op}`; the work tree edits made since conflict with it: "
            f"resolve the conflict markers in {', '.join(replayed[2])} "
            f"(`{line.command('undo')}` restores the work tree as it was)"
        )
    return f"completed the interrupted `{op}`, keeping the edits made since"


def _replay_edits(repo: Repo, before: State, after: State, current: State) -> tuple[str | None, str, list[str]]:
    """``after``'s work tree with the edits made over ``before``'s since: a three-way merge of
    the work tree trees, as (commit, tree, files left with conflict markers)."""
    with git_environment(repo):
        base = run(repo, "commit-tree", before.worktree_tree, "-m", "sglpatch: before")
        ours = run(repo, "commit-tree", after.worktree_tree, "-p", base, "-m", "sglpatch: after")
        theirs = run(repo, "commit-tree", current.worktree_tree, "-p", base, "-m", "sglpatch: edited")
        status, out, err = run_status(repo, "merge-tree", "--write-tree", "-z", "--name-only", ours, theirs)
        if status not in (0, 1):
            raise GitError(["git", "merge-tree"], status, err)
        # -z: "TREE\0NAME\0NAME\0\0messages", names as they are (spaces, never C-quoted)
        tree, _, rest = out.partition("\0")
        conflicted = sorted({f for f in rest.partition("\0\0")[0].split("\0") if f}) if status else []
        if tree == after.worktree_tree:
            return after.worktree, tree, conflicted
        return run(repo, "commit-tree", tree, "-p", after.head, "-m", "sglpatch: work tree"), tree, conflicted

"""``undo``: restore the line as it was before the newest operation not yet undone, itself logged
as a new entry, refusing whatever would overwrite an edit made since."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.git.repo import git_dir, work_dir
from sglpatch.lock import line_lock
from sglpatch.queue import snapshot
from sglpatch.queue.line import WORK_TREE, Line, line_of
from sglpatch.queue.snapshot import State
from sglpatch.queue.transaction_journal import existing_work_repo, rebase_in_progress, signals_held
from sglpatch.queue.transaction_log import Entry, entry_states, log, record, touched_files
from sglpatch.queue.transaction_recovery import recover


def undo(root: Path) -> Entry:
    """Restore the state before the newest operation not yet undone. Returns that operation."""
    line = line_of(root)
    with line_lock(line.root, "`undo`"):
        recover(line)
        if rebase_in_progress(line):
            raise UserError("a rebase is in progress", f"use `{line.command('rebase', '--abort')}` to undo it")
        target = _undo_target(log(line))
        if target is None:
            raise UserError("there is nothing to undo", "no operation of this tool is recorded for this line")
        if target.op.endswith("(aborted)"):  # its before/ is a rebase's half-way work tree
            raise UserError(
                f"`{target.op}` cannot be undone: it would bring back a rebase half-way",
                f"its work tree is kept: `git -C {line.root / WORK_TREE} diff {target.sha}^2` shows it",
            )
        repo = existing_work_repo(line)
        if (git_dir(repo) / "rebase-apply").exists():
            raise UserError(
                f"a `git am` started by hand is in progress in {work_dir(repo)}",
                "finish it (`git am --continue`) or abort it (`git am --abort`) there, then rerun undo",
            )
        was, now = entry_states(repo, target.sha)
        if was.head is None and now.head is not None:
            raise UserError(
                f"there is nothing to undo: `{target.op}` made the work tree, nothing was before it",
                f"to start over, run `{line.command('prepare')}`",
            )
        current = snapshot.capture(line, repo)
        _refuse_changed_since(line, target, now, current, was)
        # what the entry did not change stays as it is now
        restored = replace(
            was if not was.same_work_tree(now) else current,
            files=dict(current.files),
            gitlink=was.gitlink if was.gitlink != now.gitlink else current.gitlink,
        )
        for path in touched_files(was, now):
            if path in was.files:
                restored.files[path] = was.files[path]
            else:
                restored.files.pop(path, None)
        with signals_held():
            record(line, repo, f"undo {target.op}", f"Undoes: {target.sha}", current, restored)
        return target


def _undo_target(entries: list[Entry]) -> Entry | None:
    undone = set()
    for entry in entries:
        if entry.undoes:
            undone.add(entry.undoes)
        elif entry.sha not in undone:
            return entry
    return None


def _refuse_changed_since(line: Line, target: Entry, after: State, current: State, before: State) -> None:
    for path in sorted(touched_files(before, after)):
        if after.files.get(path) != current.files.get(path):
            raise UserError(
                f"{path} changed since `{target.op}`; undo would overwrite it",
                f"commit it or move it aside, then rerun `{line.command('undo')}`",
            )
    if before.gitlink != after.gitlink and after.gitlink != current.gitlink:
        raise UserError(f"the {line.submodule} gitlink changed since `{target.op}`", "restore it, then rerun undo")
    if not before.same_work_tree(after) and after.head and not current.same_work_tree(after):
        raise UserError(
            f"{line.root / WORK_TREE} changed since `{target.op}`; undo would overwrite it",
            "fold the edits into a patch (`refresh`, `new NAME`) or discard them, then rerun undo",
        )

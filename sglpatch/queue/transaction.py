"""Every change to a line is a transaction: it reaches its new state whole, or nothing changed.

After StGit's stack transactions. A command runs inside ``transaction(root, op)``:

1. under the line's lock, finish or roll back whatever an interrupted run left (``recover``);
2. snapshot the line (``sglpatch.queue.snapshot``) and note it in a journal, ``build/transaction.json``;
3. do its git work in the work tree and *stage* file writes (``tx.write``, ``tx.delete``): nothing
   in ``patches/``, the pin or ``CHANGELOG.md`` is written yet;
4. commit: a log entry (a commit on ``refs/sglpatch/log`` in the work tree's repository, tree
   ``before/`` + ``after/``, first parent the previous entry) is made, the journal says
   "committing", and only then are the files written, each aside then renamed.

An exception or Ctrl-C before the commit puts the work tree back as it was; a killed process is
rolled back (before the commit point) or forward (after it) by the next command. ``undo``
restores the ``before/`` of the newest entry not yet undone, itself as a new entry. A rebase is
one long transaction (``durable``): it survives across commands until ``--continue`` commits it
or ``--abort`` returns to its start.

Here: the transaction and its staged writes. The journal is ``transaction_journal``, the log of
entries ``transaction_log``, crash recovery ``transaction_recovery``, ``undo`` ``transaction_undo``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.git.env import git_bytes
from sglpatch.git.repo import GitError, NoSuchPath, NotARepository, Repo, open_repo, run
from sglpatch.lock import line_lock
from sglpatch.queue import snapshot
from sglpatch.queue.line import Line, line_of
from sglpatch.queue.snapshot import blob_sha
from sglpatch.queue.transaction_journal import (
    WORK_TREE,
    existing_work_repo,
    git_environment,
    read_journal,
    rebase_in_progress,
    restore_start,
    signals_held,
    work_repo,
    write_journal,
)

# The CLI and tests reach these as transaction.NAME.
from sglpatch.queue.transaction_log import COMPLETED, LOG_REF, commit_state, log, record, written_blobs  # noqa: F401
from sglpatch.queue.transaction_recovery import (
    recover,
    recover_if_idle,  # noqa: F401
)
from sglpatch.queue.transaction_undo import undo  # noqa: F401

_ACTIVE: dict[Path, Transaction] = {}  # per line: a nested `transaction()` joins it


class Refused(UserError):
    """The transaction cannot commit: the line is left as it was before the command."""


@dataclass
class _Write:
    data: bytes | None  # None: delete
    expect: str | None  # blob of the file when the write was staged; None: absent
    whole: bool  # replaces a file the user may have written (a patch file)


@dataclass
class Transaction:
    line: Line
    repo: Repo
    op: str
    start: str  # commit holding the snapshot taken at begin
    durable: bool = False
    writes: dict[str, _Write] = field(default_factory=dict)
    gitlink: str | None = None
    # what ``recover`` did on the way in (finished or rolled back an interrupted run, which may
    # have rewritten the pin or the series), or None; a value read before then may be stale
    recovered: str | None = None

    def write(self, path: Path, data: str | bytes, *, whole: bool = True) -> None:
        """Stage ``path``'s new content. ``whole``: it replaces the file (a patch file) rather
        than editing the content it was computed from (pin, series, changelog)."""
        data = git_bytes(data) if isinstance(data, str) else data  # a patch git wrote goes back byte for byte
        self.writes[snapshot.rel(self.line, path)] = _Write(data, _current_blob(Path(path)), whole)

    def delete(self, path: Path) -> None:
        self.writes[snapshot.rel(self.line, path)] = _Write(None, _current_blob(Path(path)), True)

    def set_gitlink(self, gitlink: str) -> None:
        self.gitlink = gitlink

    def staged(self, path: Path) -> bytes | None:
        """What ``path`` will hold after the commit (staged content, else the file now)."""
        key = snapshot.rel(self.line, path)
        if key in self.writes:
            return self.writes[key].data
        return Path(path).read_bytes() if Path(path).is_file() else None

    # ------------------------------------------------------------ commit / roll back

    def commit(self, summary: str = "") -> str:
        with signals_held():
            self.preflight()
            before = snapshot.capture(self.line, self.repo)
            after = replace(before, files=dict(before.files))
            for path, write in self.writes.items():
                if write.data is None:
                    after.files.pop(path, None)
                else:
                    mode = before.files.get(path, "100644 x").split()[0]
                    after.files[path] = f"{mode} {_store_blob(self.repo, write.data)}"
            if self.gitlink is not None:
                after.gitlink = self.gitlink
            start = snapshot.load(self.repo, self._start_tree())
            before = before.with_work_tree_of(start)
            entry = record(self.line, self.repo, self.op, summary, before, after, self.start)
            _ACTIVE.pop(self.line.root, None)
            return entry

    def _start_tree(self) -> str:
        return run(self.repo, "rev-parse", f"{self.start}^{{tree}}")

    def preflight(self) -> None:
        """Refuse now, before anything else changes, if the staged writes could not commit."""
        for path, write in self.writes.items():
            current = _current_blob(self.line.repo / path)
            if current != write.expect:
                raise Refused(f"{path} changed while `{self.op}` ran", "nothing was written; rerun the command")
            if write.whole:
                self.refuse_unsafe([self.line.repo / path])

    def refuse_unsafe(self, paths: list[Path]) -> None:
        """Refuse to replace any of ``paths`` that holds work the user has not committed."""
        for path in paths:
            current = _current_blob(Path(path))
            key = snapshot.rel(self.line, path)
            if current is not None and not _is_safe(self.line, self.repo, key, current):
                raise Refused(
                    f"{key} has changes that are not committed; `{self.op}` would overwrite them",
                    f"commit it (`git add {key} && git commit`) or move it aside, then rerun",
                )

    def rollback(self) -> None:
        """Put the work tree back as it was at begin; no staged file was written."""
        with signals_held():
            restore_start(self.line, self.repo, self.start)
            _ACTIVE.pop(self.line.root, None)

    def suspend(self) -> None:
        """A durable transaction stops for the user (a rebase conflict); it stays open."""
        _ACTIVE.pop(self.line.root, None)

    def abandon(self) -> str:
        """End a durable transaction by returning the work tree to its start; logged, so the
        abandoned work (a half-resolved conflict) stays recoverable with `undo`."""
        with signals_held():
            start = snapshot.load(self.repo, self._start_tree())
            current = snapshot.capture(self.line, self.repo)
            target = current.with_work_tree_of(start)
            entry = record(self.line, self.repo, f"{self.op} (aborted)", "", current, target)
            _ACTIVE.pop(self.line.root, None)
            return entry


def _current_blob(path: Path) -> str | None:
    return blob_sha(path.read_bytes()) if path.is_file() else None


def _store_blob(repo: Repo, data: bytes) -> str:
    with git_environment(repo):
        return run(repo, "hash-object", "-w", "--stdin", input=data)


def _is_safe(line: Line, repo: Repo, path: str, current: str) -> bool:
    """The file's content is committed in the repository, or is what this tool last wrote."""
    if written_blobs(repo).get(path) == current:
        return True
    try:
        return run(open_repo(line.repo), "rev-parse", f"HEAD:{path}") == current
    except (NotARepository, NoSuchPath, GitError):
        return False


def begin(line: Line, op: str, durable: bool = False, create: bool = False) -> Transaction:
    repo = work_repo(line, create=create)
    if repo is None:
        raise UserError(f"no work tree at {line.root / WORK_TREE}", f"run `{line.command('prepare')}` first")
    state = snapshot.capture(line, repo)
    start = commit_state(repo, state, f"sglpatch: before {op}")
    write_journal(line, {"op": op, "phase": "rebase" if durable else "running", "start": start})
    tx = Transaction(line, repo, op, start, durable)
    _ACTIVE[line.root] = tx
    return tx


def resume(line: Line) -> Transaction:
    """The open durable transaction of the line (a rebase in progress)."""
    journal = read_journal(line)
    if not journal or journal["phase"] != "rebase":
        raise UserError("no rebase is in progress", "start one with `rebase --onto VERSION`")
    tx = Transaction(line, existing_work_repo(line), journal["op"], journal["start"], durable=True)
    _ACTIVE[line.root] = tx
    return tx


@contextlib.contextmanager
def resumed(root: Path, op: str):
    """Carry on the line's open durable transaction (a rebase) under the line's lock; it stays
    open unless the body commits or abandons it."""
    line = line_of(root)
    with line_lock(line.root, f"`{op}`"):
        recover(line)
        tx = resume(line)
        try:
            yield tx
        finally:
            tx.suspend()


@contextlib.contextmanager
def transaction(root: Path, op: str, durable: bool = False, create: bool = False):
    """Run ``op`` on the line at ``root`` as one transaction (joins one already open here)."""
    line = line_of(root)
    active = _ACTIVE.get(line.root)
    if active is not None:
        yield active
        return
    with line_lock(line.root, f"`{op}`"):
        recovered = recover(line)
        journal = rebase_in_progress(line)
        if journal:
            raise UserError(
                f"a rebase is in progress on the {line.label()} (`{journal['op']}`)",
                f"finish it with `{line.command('rebase', '--continue')}` or "
                f"`--skip`, or undo it with `{line.command('rebase', '--abort')}`",
            )
        tx = begin(line, op, durable, create)
        tx.recovered = recovered
        try:
            yield tx
            if _ACTIVE.get(line.root) is tx:
                tx.commit()
        except BaseException as exc:
            if _ACTIVE.get(line.root) is tx:  # neither committed nor suspended
                if getattr(exc, "keep_progress", False):
                    _commit_or_roll_back(tx, str(exc))  # push --all stops at a patch that does not apply
                else:
                    tx.rollback()
            raise


def _commit_or_roll_back(tx: Transaction, summary: str) -> None:
    try:
        tx.commit(summary)
    except BaseException:
        if _ACTIVE.get(tx.line.root) is tx:
            tx.rollback()
        raise

"""Every change to a line is a transaction: it reaches its new state whole, or nothing changed.

After StGit's stack transactions. A command runs inside ``transaction(root, op)``:

1. under the line's lock, finish or roll back whatever an interrupted run left (``recover``);
2. snapshot the line (``sglpatch.snapshot``) and note it in a journal, ``build/transaction.json``;
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
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import git

from sglpatch.queue import snapshot
from sglpatch.errors import UserError
from sglpatch.git.env import git_bytes, git_env, raise_if_killed
from sglpatch.queue.line import Line, line_of
from sglpatch.lock import line_lock
from sglpatch.queue.snapshot import State, blob_sha

LOG_REF = "refs/sglpatch/log"
JOURNAL = Path("build") / "transaction.json"
WORK_TREE = Path("build") / "src"
_WRITTEN = "sglpatch-written.json"  # in the work tree's .git: path -> blob the tool last wrote
_ACTIVE: dict[Path, "Transaction"] = {}


class Refused(UserError):
    """The transaction cannot commit: the line is left as it was before the command."""


def boundary(name: str) -> None:
    """A step boundary; tests kill the process at the k-th one (SGLPATCH_CRASH_AT=k) and list
    them (SGLPATCH_BOUNDARIES=file) to prove every interrupted state recovers."""
    listing = os.environ.get("SGLPATCH_BOUNDARIES")
    if listing:
        with open(listing, "a") as fh:
            fh.write(name + "\n")
    crash_at = os.environ.get("SGLPATCH_CRASH_AT")
    if crash_at:
        boundary.count = getattr(boundary, "count", 0) + 1
        if crash_at in (str(boundary.count), name):
            os.kill(os.getpid(), signal.SIGKILL)


COMPLETED: list[str] = []  # what committed while Ctrl-C waited: the CLI says so, not "as before"


@contextlib.contextmanager
def _signals_held():
    """Ctrl-C and SIGTERM wait until a commit or roll-back step is complete."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def work_repo(line: Line, create: bool = False) -> git.Repo | None:
    """The line's work tree repository; with ``create``, a new one where there is none yet."""
    path = line.root / WORK_TREE
    if (path / ".git").exists():
        return checked_repo(path, line.command("prepare"))
    if not create:
        return None
    if path.exists() and any(path.iterdir()):  # files without their repository: someone's work
        raise UserError(f"{path} holds files but no git repository (.git is gone)",
                        f"move it aside (`mv {path} {path}.saved`), then run `{line.command('prepare')}`")
    path.mkdir(parents=True, exist_ok=True)
    return git.Repo.init(path)


def checked_repo(path: Path, prepare: str) -> git.Repo:
    """``path``'s own repository: a damaged .git must never let git fall through to the
    repository around it (the user's checkout)."""
    try:
        repo = git.Repo(path)
        top = repo.git.rev_parse("--show-toplevel")
    except (git.exc.InvalidGitRepositoryError, git.GitCommandError):
        top = None
    if top is None or Path(top).resolve() != Path(path).resolve():
        raise UserError(f"{path}/.git is damaged (git does not recognise it as a repository)",
                        f"move {path} aside (`mv {path} {path}.saved`), then run `{prepare}`")
    return repo


def _git(repo):
    return repo.git.custom_environment(**git_env())


# ---------------------------------------------------------------- the journal

def _journal_path(line: Line) -> Path:
    return line.root / JOURNAL


def read_journal(line: Line) -> dict | None:
    path = _journal_path(line)
    damaged = UserError(f"{path} is damaged", f"move it aside (`mv {path} {path}.bad`) and rerun")
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        raise damaged from None
    needs = {"running": "start", "rebase": "start", "committing": "entry"}
    if not isinstance(data, dict) or data.get("phase") not in needs or not isinstance(data.get("op"), str) \
            or not re.fullmatch(r"[0-9a-f]{40}", str(data.get(needs[data["phase"]]))):
        raise damaged
    repo = work_repo(line)
    try:
        repo.git.cat_file("-e", f"{data[needs[data['phase']]]}^{{commit}}")
    except (AttributeError, git.GitCommandError):
        raise damaged from None
    return data


def _write_journal(line: Line, data: dict | None) -> None:
    path = _journal_path(line)
    if data is None:
        path.unlink(missing_ok=True)
    else:
        snapshot.write_file(path, json.dumps(data, indent=1).encode())
    boundary(f"journal:{data['phase'] if data else 'cleared'}")


# ---------------------------------------------------------------- staged writes

@dataclass
class _Write:
    data: bytes | None  # None: delete
    expect: str | None  # blob of the file when the write was staged; None: absent
    whole: bool  # replaces a file the user may have written (a patch file)


@dataclass
class Transaction:
    line: Line
    repo: git.Repo
    op: str
    start: str  # commit holding the snapshot taken at begin
    durable: bool = False
    writes: dict[str, _Write] = field(default_factory=dict)
    gitlink: str | None = None

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
        with _signals_held():
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
            before = replace(before, head=start.head, branch=start.branch, base=start.base,
                             worktree=start.worktree, worktree_tree=start.worktree_tree)
            entry = record(self.line, self.repo, self.op, summary, before, after, self.start)
            _ACTIVE.pop(self.line.root, None)
            return entry

    def _start_tree(self) -> str:
        return self.repo.git.rev_parse(f"{self.start}^{{tree}}")

    def preflight(self) -> None:
        """Refuse now, before anything else changes, if the staged writes could not commit."""
        for path, write in self.writes.items():
            current = _current_blob(self.line.repo / path)
            if current != write.expect:
                raise Refused(f"{path} changed while `{self.op}` ran",
                              "nothing was written; rerun the command")
            if write.whole:
                self.refuse_unsafe([self.line.repo / path])

    def refuse_unsafe(self, paths: list[Path]) -> None:
        """Refuse to replace any of ``paths`` that holds work the user has not committed."""
        for path in paths:
            current = _current_blob(Path(path))
            key = snapshot.rel(self.line, path)
            if current is not None and not _is_safe(self.line, self.repo, key, current):
                raise Refused(f"{key} has changes that are not committed; `{self.op}` would overwrite them",
                              f"commit it (`git add {key} && git commit`) or move it aside, then rerun")

    def rollback(self) -> None:
        """Put the work tree back as it was at begin; no staged file was written."""
        with _signals_held():
            target = snapshot.load(self.repo, self._start_tree())
            current = snapshot.capture(self.line, self.repo)
            if not current.same_work_tree(target):
                snapshot.restore_worktree(self.repo, target, current)
            _write_journal(self.line, None)
            _ACTIVE.pop(self.line.root, None)

    def suspend(self) -> None:
        """A durable transaction stops for the user (a rebase conflict); it stays open."""
        _ACTIVE.pop(self.line.root, None)

    def abandon(self) -> str:
        """End a durable transaction by returning the work tree to its start; logged, so the
        abandoned work (a half-resolved conflict) stays recoverable with `undo`."""
        with _signals_held():
            start = snapshot.load(self.repo, self._start_tree())
            current = snapshot.capture(self.line, self.repo)
            target = replace(current, head=start.head, branch=start.branch, base=start.base,
                             worktree=start.worktree, worktree_tree=start.worktree_tree)
            entry = record(self.line, self.repo, f"{self.op} (aborted)", "", current, target)
            _ACTIVE.pop(self.line.root, None)
            return entry


def _current_blob(path: Path) -> str | None:
    return blob_sha(path.read_bytes()) if path.is_file() else None


def _store_blob(repo: git.Repo, data: bytes) -> str:
    with _git(repo):
        return repo.git.hash_object("-w", "--stdin", istream=snapshot.as_stdin(data))


def _is_safe(line: Line, repo: git.Repo, path: str, current: str) -> bool:
    """The file's content is committed in the repository, or is what this tool last wrote."""
    if _written(repo).get(path) == current:
        return True
    try:
        return git.Repo(line.repo).git.rev_parse(f"HEAD:{path}") == current
    except (git.exc.InvalidGitRepositoryError, git.exc.NoSuchPathError, git.GitCommandError):
        return False


def _written(repo: git.Repo) -> dict[str, str]:
    path = Path(repo.git_dir) / _WRITTEN
    return json.loads(path.read_text()) if path.exists() else {}


# ---------------------------------------------------------------- begin / record / apply

def begin(line: Line, op: str, durable: bool = False, create: bool = False) -> Transaction:
    repo = work_repo(line, create=create)
    if repo is None:
        raise UserError(f"no work tree at {line.root / WORK_TREE}", f"run `{line.command('prepare')}` first")
    state = snapshot.capture(line, repo)
    start = _commit_state(repo, state, f"sglpatch: before {op}")
    _write_journal(line, {"op": op, "phase": "rebase" if durable else "running", "start": start})
    tx = Transaction(line, repo, op, start, durable)
    _ACTIVE[line.root] = tx
    return tx


def resume(line: Line) -> Transaction:
    """The open durable transaction of the line (a rebase in progress)."""
    journal = read_journal(line)
    if not journal or journal["phase"] != "rebase":
        raise UserError("no rebase is in progress", "start one with `rebase --onto VERSION`")
    tx = Transaction(line, work_repo(line), journal["op"], journal["start"], durable=True)
    _ACTIVE[line.root] = tx
    return tx


def _commit_state(repo: git.Repo, state: State, message: str) -> str:
    tree = snapshot.store(repo, state)
    parents = ["-p", state.worktree] if state.worktree else []
    with _git(repo):
        return repo.git.commit_tree(tree, *parents, "-m", message)


def record(line: Line, repo: git.Repo, op: str, summary: str, before: State, after: State,
           start: str | None = None) -> str:
    """Log the change ``before`` -> ``after`` as an entry, then make the line ``after``."""
    before_commit = start or _commit_state(repo, before, f"sglpatch: before {op}")
    before_tree = snapshot.store(repo, before)
    after_tree = snapshot.store(repo, after)
    tree = _nest(repo, before_tree, after_tree)
    parents = []
    previous = _log_head(repo)
    if previous:
        parents += ["-p", previous]
    parents += ["-p", before_commit]
    if after.worktree:
        parents += ["-p", after.worktree]
    with _git(repo):
        entry = repo.git.commit_tree(tree, *parents, "-m", f"{op}\n\n{summary}".rstrip() + "\n")
    _write_journal(line, {"op": op, "phase": "committing", "entry": entry})
    apply(line, repo, entry)
    COMPLETED.append(op)
    return entry


def _nest(repo: git.Repo, before_tree: str, after_tree: str) -> str:
    listing = f"040000 tree {before_tree}\tbefore\n040000 tree {after_tree}\tafter\n"
    with _git(repo):
        return repo.git.mktree(istream=snapshot.as_stdin(listing))


def _log_head(repo: git.Repo) -> str | None:
    try:
        return repo.git.rev_parse("--verify", "--quiet", LOG_REF) or None
    except git.GitCommandError as exc:
        raise_if_killed(exc)  # a killed probe is not "no log yet"
        return None


def entry_states(repo: git.Repo, entry: str) -> tuple[State, State]:
    return (snapshot.load(repo, repo.git.rev_parse(f"{entry}:before")),
            snapshot.load(repo, repo.git.rev_parse(f"{entry}:after")))


def apply(line: Line, repo: git.Repo, entry: str) -> None:
    """Make the line the ``after/`` of ``entry``; idempotent, so a killed apply is redone."""
    before, after = entry_states(repo, entry)
    current = snapshot.capture(line, repo)
    if after.head and not current.same_work_tree(after):
        snapshot.restore_worktree(repo, after, current)
        boundary("work-tree")
    touched = _touched(before, after)
    for path in sorted(touched):
        snapshot.restore_files(line, repo, after, {path})
        boundary(f"file:{path}")
    if before.gitlink != after.gitlink:
        snapshot.write_gitlink(line, after.gitlink)
        boundary("gitlink")
    _mark_written(repo, after, touched)
    with _git(repo):
        repo.git.update_ref(LOG_REF, entry)
    _write_journal(line, None)


def _mark_written(repo: git.Repo, state: State, paths: set[str]) -> None:
    """Remember ``paths`` as this tool wrote them in ``state``, so its own later commands may
    replace them before the user commits them."""
    written = _written(repo)
    for path in paths:
        if path in state.files:
            written[path] = state.files[path].split()[1]
        else:
            written.pop(path, None)
    snapshot.write_file(Path(repo.git_dir) / _WRITTEN, json.dumps(written, indent=1, sort_keys=True).encode())


def record_created(root: Path, op: str, paths: list[Path]) -> str:
    """Log files an operation created outside a transaction (a new line's pin and series) as
    written by this tool, so its own later commands may rewrite them before they are committed."""
    line = line_of(root)
    repo = work_repo(line, create=True)
    after = snapshot.capture(line, repo)
    keys = {snapshot.rel(line, p) for p in paths}
    before = replace(after, files={k: v for k, v in after.files.items() if k not in keys})
    return record(line, repo, op, "", before, after)


# ---------------------------------------------------------------- recovery

def recover(line: Line) -> str | None:
    """Finish what an interrupted run left: roll a commit forward, anything earlier back.
    Returns what was done, or None. A rebase in progress is left for `rebase` to continue."""
    journal = read_journal(line)
    if journal is None or journal["phase"] == "rebase":
        return None
    repo = work_repo(line)
    if journal["phase"] == "committing":
        done = _roll_forward_killed(line, repo, journal)
    else:
        done = _roll_back_killed(line, repo, journal)
    print(f"note: {done}", file=sys.stderr, flush=True)
    return done


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


def _roll_back_killed(line: Line, repo: git.Repo, journal: dict) -> str:
    """Undo what a killed command did to the work tree. The user may have edited it since, so
    what is rolled back is logged first (`undo` brings it back), and a command that had not
    moved HEAD yet has nothing to roll back: the files are left as they are."""
    with _signals_held():
        start = snapshot.load(repo, repo.git.rev_parse(f"{journal['start']}^{{tree}}"))
        current = snapshot.capture(line, repo)
        in_am = (Path(repo.git_dir) / "rebase-apply").exists()
        if (current.head, current.branch, current.base) == (start.head, start.branch, start.base) and not in_am:
            _write_journal(line, None)
            return f"the interrupted `{journal['op']}` had changed nothing"
        if not start.head:
            Transaction(line, repo, journal["op"], journal["start"]).rollback()
        else:
            target = replace(current, head=start.head, branch=start.branch, base=start.base,
                             worktree=start.worktree, worktree_tree=start.worktree_tree)
            record(line, repo, f"roll back the interrupted {journal['op']}", "", current, target)
        return f"rolled back the interrupted `{journal['op']}` (`undo` shows what it had left)"


def _roll_forward_killed(line: Line, repo: git.Repo, journal: dict) -> str:
    """Complete a command killed after its commit point. The user may have edited the line
    since: as if the command had finished first, a file edited since stays as the user left it
    and work tree edits are replayed over the command's work tree. When the replay conflicts,
    the work tree as found is logged first, so `undo` brings it back."""
    op, entry = journal["op"], journal["entry"]
    with _signals_held():
        before, after = entry_states(repo, entry)
        current = snapshot.capture(line, repo)
        touched = _touched(before, after)
        kept = {p for p in touched if current.files.get(p) not in (before.files.get(p), after.files.get(p))}
        edited = bool(after.head) and current.worktree_tree not in (before.worktree_tree, after.worktree_tree)
        if not kept and not edited:
            apply(line, repo, entry)
            return f"completed the interrupted `{op}`"
        with _git(repo):
            repo.git.update_ref(LOG_REF, entry)  # the command happened; the edits came after it
        _mark_written(repo, after, touched - kept)
        # what the command did not write stays as the user has it now (a hand edit of another patch)
        target = replace(after, files=dict(current.files),
                         gitlink=after.gitlink if before.gitlink != after.gitlink else current.gitlink)
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
        return (f"completed the interrupted `{op}`; the work tree edits made since conflict with it: "
                f"resolve the conflict markers in {', '.join(replayed[2])} "
                f"(`{line.command('undo')}` restores the work tree as it was)")
    return f"completed the interrupted `{op}`, keeping the edits made since"


def _replay_edits(repo: git.Repo, before: State, after: State, current: State) -> tuple[str, str, list[str]]:
    """``after``'s work tree with the edits made over ``before``'s since: a three-way merge of
    the work tree trees, as (commit, tree, files left with conflict markers)."""
    with _git(repo):
        base = repo.git.commit_tree(before.worktree_tree, "-m", "sglpatch: before")
        ours = repo.git.commit_tree(after.worktree_tree, "-p", base, "-m", "sglpatch: after")
        theirs = repo.git.commit_tree(current.worktree_tree, "-p", base, "-m", "sglpatch: edited")
        status, out, err = repo.git.merge_tree("--write-tree", "-z", "--name-only", ours, theirs,
                                               with_extended_output=True, with_exceptions=False)
        if status not in (0, 1):
            raise git.GitCommandError(["git", "merge-tree"], status, err)
        # -z: "TREE\0NAME\0NAME\0\0messages", names as they are (spaces, never C-quoted)
        tree, _, rest = out.partition("\0")
        conflicted = sorted({f for f in rest.partition("\0\0")[0].split("\0") if f}) if status else []
        if tree == after.worktree_tree:
            return after.worktree, tree, conflicted
        return repo.git.commit_tree(tree, "-p", after.head, "-m", "sglpatch: work tree"), tree, conflicted


def rebase_in_progress(line: Line) -> dict | None:
    journal = read_journal(line)
    return journal if journal and journal["phase"] == "rebase" else None


@contextlib.contextmanager
def transaction(root: Path, op: str, durable: bool = False, create: bool = False):
    """Run ``op`` on the line at ``root`` as one transaction (joins one already open here)."""
    line = line_of(root)
    active = _ACTIVE.get(line.root)
    if active is not None:
        yield active
        return
    with line_lock(line.root, f"`{op}`"):
        recover(line)
        journal = rebase_in_progress(line)
        if journal:
            raise UserError(f"a rebase is in progress on the {line.label()} (`{journal['op']}`)",
                            f"finish it with `{line.command('rebase', '--continue')}` or "
                            f"`--skip`, or undo it with `{line.command('rebase', '--abort')}`")
        tx = begin(line, op, durable, create)
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


# ---------------------------------------------------------------- undo and the log

@dataclass(frozen=True)
class Entry:
    sha: str
    op: str
    summary: str
    date: str
    undoes: str | None


def log(line: Line) -> list[Entry]:
    """The line's operations, newest first."""
    repo = work_repo(line)
    if repo is None or _log_head(repo) is None:
        return []
    entries = []
    for commit in repo.iter_commits(LOG_REF, first_parent=True):
        if "before" not in [t.name for t in commit.tree.trees]:
            break  # the first entry's first parent is its own "before" snapshot
        op, _, summary = commit.message.partition("\n\n")
        undoes = next((l.split(": ", 1)[1] for l in summary.splitlines() if l.startswith("Undoes: ")), None)
        entries.append(Entry(commit.hexsha, op.strip(), summary.strip(), commit.committed_datetime.isoformat(),
                             undoes))
    return entries


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
            raise UserError(f"`{target.op}` cannot be undone: it would bring back a rebase half-way",
                            f"its work tree is kept: `git -C {line.root / WORK_TREE} diff "
                            f"{target.sha}^2` shows it")
        repo = work_repo(line)
        if (Path(repo.git_dir) / "rebase-apply").exists():
            raise UserError(f"a `git am` started by hand is in progress in {repo.working_tree_dir}",
                            "finish it (`git am --continue`) or abort it (`git am --abort`) there, then rerun undo")
        was, now = entry_states(repo, target.sha)
        if was.head is None and now.head is not None:
            raise UserError(f"there is nothing to undo: `{target.op}` made the work tree, nothing was before it",
                            f"to start over, run `{line.command('prepare')}`")
        current = snapshot.capture(line, repo)
        _refuse_changed_since(line, target, now, current, was)
        # what the entry did not change stays as it is now
        restored = replace(was if not was.same_work_tree(now) else current, files=dict(current.files),
                           gitlink=was.gitlink if was.gitlink != now.gitlink else current.gitlink)
        for path in _touched(was, now):
            if path in was.files:
                restored.files[path] = was.files[path]
            else:
                restored.files.pop(path, None)
        with _signals_held():
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


def _touched(before: State, after: State) -> set[str]:
    """The managed files an entry changed."""
    return {p for p in set(before.files) | set(after.files) if before.files.get(p) != after.files.get(p)}


def _refuse_changed_since(line: Line, target: Entry, after: State, current: State, before: State) -> None:
    for path in sorted(_touched(before, after)):
        if after.files.get(path) != current.files.get(path):
            raise UserError(f"{path} changed since `{target.op}`; undo would overwrite it",
                            f"commit it or move it aside, then rerun `{line.command('undo')}`")
    if before.gitlink != after.gitlink and after.gitlink != current.gitlink:
        raise UserError(f"the {line.submodule} gitlink changed since `{target.op}`",
                        "restore it, then rerun undo")
    if not before.same_work_tree(after) and after.head and not current.same_work_tree(after):
        raise UserError(f"{line.root / WORK_TREE} changed since `{target.op}`; undo would overwrite it",
                        "fold the edits into a patch (`refresh`, `new NAME`) or discard them, then rerun undo")

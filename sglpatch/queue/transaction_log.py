"""The line's operation log: every change is an entry, a commit on ``refs/sglpatch/log`` in the
work tree's repository whose tree holds the line ``before/`` and ``after/`` it; ``apply`` makes
the line an entry's ``after/``, ``log`` reads the entries back."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.git.env import raise_if_killed
from sglpatch.git.repo import GitError, Repo, first_parent_commits, git_dir, message_text, run, work_dir
from sglpatch.output import warn
from sglpatch.queue import snapshot
from sglpatch.queue.line import Line, line_of
from sglpatch.queue.snapshot import State
from sglpatch.queue.transaction_journal import boundary, git_environment, work_repo, write_journal

LOG_REF = "refs/sglpatch/log"
_WRITTEN = "sglpatch-written.json"  # in the work tree's .git: path -> blob the tool last wrote
COMPLETED: list[str] = []  # what committed while Ctrl-C waited: the CLI says so, not "as before"


def written_blobs(repo: Repo) -> dict[str, str]:
    return read_record(Path(git_dir(repo)) / _WRITTEN, "which files the tool wrote last")


def read_record(path: Path, what: str) -> dict[str, str]:
    """A JSON record the tool keeps in the work tree's .git; a damaged one is named and read as
    empty, which only makes the tool more careful (it then trusts no file or commit by it)."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        warn(f"{path} is damaged ({exc.__class__.__name__}): ignored, so nothing is taken as known of {what}")
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        warn(f"{path} is damaged (not a map of names to ids): ignored, so nothing is taken as known of {what}")
        return {}
    return data


def commit_state(repo: Repo, state: State, message: str) -> str:
    tree = snapshot.store(repo, state)
    parents = ["-p", state.worktree] if state.worktree else []
    with git_environment(repo):
        return run(repo, "commit-tree", tree, *parents, "-m", message)


def record(line: Line, repo: Repo, op: str, summary: str, before: State, after: State, start: str | None = None) -> str:
    """Log the change ``before`` -> ``after`` as an entry, then make the line ``after``."""
    before_commit = start or commit_state(repo, before, f"sglpatch: before {op}")
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
    with git_environment(repo):
        entry = run(repo, "commit-tree", tree, *parents, "-m", f"{op}\n\n{summary}".rstrip() + "\n")
    write_journal(line, {"op": op, "phase": "committing", "entry": entry})
    apply(line, repo, entry)
    COMPLETED.append(op)
    return entry


def _nest(repo: Repo, before_tree: str, after_tree: str) -> str:
    listing = f"040000 tree {before_tree}\tbefore\n040000 tree {after_tree}\tafter\n"
    with git_environment(repo):
        return run(repo, "mktree", input=listing)


def _log_head(repo: Repo) -> str | None:
    try:
        return run(repo, "rev-parse", "--verify", "--quiet", LOG_REF) or None
    except GitError as exc:
        raise_if_killed(exc)  # a killed probe is not "no log yet"
        if _ref_exists(repo, LOG_REF):  # there, but naming no commit: damaged, not "nothing recorded"
            work = work_dir(repo)
            prepare = line_of(work.parent.parent).command("prepare")  # the work tree is <line>/build/src
            raise UserError(
                f"the operation log {LOG_REF} in {work} is damaged (it names no commit)",
                f"`git -C {work} fsck` shows the damage; save what you need from {work}, move it aside "
                f"and run `{prepare}` (patches/ is untouched)",
            ) from None
        return None


def _ref_exists(repo: Repo, ref: str) -> bool:
    directory = Path(git_dir(repo))
    if (directory / ref).is_file():
        return True
    try:
        packed = (directory / "packed-refs").read_text(errors="replace")
    except FileNotFoundError:
        return False
    return any(line.rstrip().endswith(" " + ref) for line in packed.splitlines())


def entry_states(repo: Repo, entry: str) -> tuple[State, State]:
    return (
        snapshot.load(repo, run(repo, "rev-parse", f"{entry}:before")),
        snapshot.load(repo, run(repo, "rev-parse", f"{entry}:after")),
    )


def apply(line: Line, repo: Repo, entry: str) -> None:
    """Make the line the ``after/`` of ``entry``; idempotent, so a killed apply is redone."""
    before, after = entry_states(repo, entry)
    current = snapshot.capture(line, repo)
    if after.head and not current.same_work_tree(after):
        snapshot.restore_worktree(repo, after, current)
        boundary("work-tree")
    touched = touched_files(before, after)
    for path in sorted(touched):
        snapshot.restore_files(line, repo, after, {path})
        boundary(f"file:{path}")
    if before.gitlink != after.gitlink:
        snapshot.write_gitlink(line, after.gitlink)
        boundary("gitlink")
    mark_written(repo, after, touched)
    with git_environment(repo):
        run(repo, "update-ref", LOG_REF, entry)
    write_journal(line, None)


def mark_written(repo: Repo, state: State, paths: set[str]) -> None:
    """Remember ``paths`` as this tool wrote them in ``state``, so its own later commands may
    replace them before the user commits them."""
    written = written_blobs(repo)
    for path in paths:
        if path in state.files:
            written[path] = state.files[path].split()[1]
        else:
            written.pop(path, None)
    snapshot.write_file(Path(git_dir(repo)) / _WRITTEN, json.dumps(written, indent=1, sort_keys=True).encode())


def touched_files(before: State, after: State) -> set[str]:
    """The managed files an entry changed."""
    return {p for p in set(before.files) | set(after.files) if before.files.get(p) != after.files.get(p)}


def record_created(root: Path, op: str, paths: list[Path]) -> str:
    """Log files an operation created outside a transaction (a new line's pin and series) as
    written by this tool, so its own later commands may rewrite them before they are committed."""
    line = line_of(root)
    repo = work_repo(line, create=True)
    after = snapshot.capture(line, repo)
    keys = {snapshot.rel(line, p) for p in paths}
    before = replace(after, files={k: v for k, v in after.files.items() if k not in keys})
    return record(line, repo, op, "", before, after)


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
    for commit in first_parent_commits(repo, LOG_REF):
        if "before" not in [t.name for t in commit.tree.trees]:
            break  # the first entry's first parent is its own "before" snapshot
        op, _, summary = message_text(commit).partition("\n\n")
        undoes = next((l.split(": ", 1)[1] for l in summary.splitlines() if l.startswith("Undoes: ")), None)
        entries.append(Entry(commit.hexsha, op.strip(), summary.strip(), commit.committed_datetime.isoformat(), undoes))
    return entries

"""A line's whole state as one git tree, so any state can be restored exactly (after StGit).

The state of a line is what its commands change: the pin (``upstream.toml``), every file in
``patches/``, the repository's ``CHANGELOG.md``, the upstream gitlink in the repository's index,
and the work tree ``build/src`` (its branch, HEAD, base ref and files, uncommitted edits and
untracked files included). A snapshot stores all of it in the work tree's own git repository:

    files/<path from the repository root>   every managed file that exists
    meta.json                                head, branch, base, worktree commit, gitlink

The work tree's files are a commit (like ``git stash create``, untracked files included) whose
parent is HEAD; snapshots keep it reachable as a parent of the log entry that holds them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from sglpatch.git.env import raise_if_killed
from sglpatch.git.repo import (
    GitError,
    NoSuchPath,
    NotARepository,
    Repo,
    git_dir,
    open_repo,
    pinned_env,
    read_object,
    run,
)
from sglpatch.queue.line import Line

BASE_REF = "refs/sglpatch/base"
PIN_FILE = "upstream.toml"
PATCH_DIR = "patches"
CHANGELOG = "CHANGELOG.md"


@dataclass
class State:
    files: dict[str, str] = field(default_factory=dict)  # repo path -> "<mode> <blob sha>"
    head: str | None = None
    branch: str | None = None
    base: str | None = None
    worktree: str | None = None  # commit holding the work tree's files (HEAD when clean)
    gitlink: str = ""  # "<mode> <sha>" of the line's upstream submodule in the repo index
    worktree_tree: str | None = None  # the tree of ``worktree``

    def with_work_tree_of(self, other: State) -> State:
        """These files, with ``other``'s HEAD, branch, base and work tree: the state a roll-back
        returns to while keeping what the maintainer edited outside the work tree."""
        return replace(
            self,
            head=other.head,
            branch=other.branch,
            base=other.base,
            worktree=other.worktree,
            worktree_tree=other.worktree_tree,
        )

    def same_work_tree(self, other: State) -> bool:
        return (self.head, self.branch, self.base, self.worktree_tree) == (
            other.head,
            other.branch,
            other.base,
            other.worktree_tree,
        )


def blob_sha(data: bytes) -> str:
    """git's blob id of ``data`` (what ``git hash-object`` prints), without running git."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def managed_paths(line: Line) -> list[Path]:
    """The files a line's commands may write, as absolute paths (existing ones only)."""
    paths = [line.root / PIN_FILE, line.repo / CHANGELOG]
    patches = line.root / PATCH_DIR
    if patches.is_dir():
        paths += sorted(p for p in patches.iterdir() if p.is_file())
    return [p for p in paths if p.is_file()]


def rel(line: Line, path: Path) -> str:
    return Path(path).resolve().relative_to(line.repo.resolve()).as_posix()


# ---------------------------------------------------------------- capture


def capture(line: Line, repo: Repo) -> State:
    """The line's current state; file contents are written into ``repo``'s object store."""
    state = State()
    paths = managed_paths(line)
    if paths:
        with pinned_env(repo):
            shas = run(repo, "hash-object", "-w", "--", *map(str, paths)).split()
        for path, sha in zip(paths, shas):
            mode = "100755" if os.access(path, os.X_OK) else "100644"
            state.files[rel(line, path)] = f"{mode} {sha}"
    state.gitlink = read_gitlink(line)
    state.head, state.branch, state.base = _refs(repo)
    if state.head:
        state.worktree, state.worktree_tree = _worktree_commit(repo, state.head)
    return state


def _refs(repo: Repo) -> tuple[str | None, str | None, str | None]:
    def rev(name):
        try:
            return run(repo, "rev-parse", "--verify", "--quiet", name) or None
        except GitError as exc:
            raise_if_killed(exc)  # a killed probe is not "no such ref"
            return None

    try:
        branch = run(repo, "symbolic-ref", "--quiet", "HEAD")
    except GitError as exc:
        raise_if_killed(exc)
        branch = None
    return rev("HEAD^{commit}"), branch, rev(f"{BASE_REF}^{{commit}}")


def _worktree_commit(repo: Repo, head: str) -> tuple[str, str]:
    """A commit of every file in the work tree (tracked, edited or untracked, not ignored)."""
    with tempfile.TemporaryDirectory(prefix="sglpatch-snap-") as tmp:
        index = Path(tmp) / "index"
        real = Path(git_dir(repo)) / "index"
        if real.exists():
            # its stat cache spares re-hashing every file; its mtime must come along, since git
            # re-reads a file whose mtime is not older than the index (an edit made in the second
            # of the last checkout, same size, looks clean to an index copied now)
            shutil.copy2(real, index)
        with pinned_env(repo, GIT_INDEX_FILE=str(index)):
            if not real.exists():
                run(repo, "read-tree", head)
            run(repo, "add", "--all")
            tree = run(repo, "write-tree")
            if tree == run(repo, "rev-parse", f"{head}^{{tree}}"):
                return head, tree
            return run(repo, "commit-tree", tree, "-p", head, "-m", "sglpatch: work tree"), tree


def read_gitlink(line: Line) -> str:
    try:
        out = run(open_repo(line.repo), "ls-files", "--stage", "--", line.submodule)
    except (NotARepository, NoSuchPath, GitError):
        return ""
    parts = out.split()
    return f"{parts[0]} {parts[1]}" if parts and parts[0] == "160000" else ""


# ---------------------------------------------------------------- store / load


def store(repo: Repo, state: State) -> str:
    """The state as a tree in ``repo``; returns the tree id."""
    meta = {k: v for k, v in asdict(state).items() if k != "files"}
    with pinned_env(repo):
        meta_sha = run(repo, "hash-object", "-w", "--stdin", input=json.dumps(meta, indent=1))
    entries = [f"100644 blob {meta_sha}\tmeta.json"]
    for path, mode_sha in sorted(state.files.items()):
        mode, sha = mode_sha.split()
        entries.append(f"{mode} blob {sha}\tfiles/{path}")
    return make_tree(repo, entries)


def make_tree(repo: Repo, entries: list[str]) -> str:
    """A (nested) tree from ``git update-index --index-info`` lines."""
    with tempfile.TemporaryDirectory(prefix="sglpatch-tree-") as tmp:
        with pinned_env(repo, GIT_INDEX_FILE=str(Path(tmp) / "index")):
            run(repo, "update-index", "--index-info", input="\n".join(entries) + "\n")
            return run(repo, "write-tree")


def load(repo: Repo, tree: str) -> State:
    """The state stored in ``tree`` (see store)."""
    meta = json.loads(run(repo, "cat-file", "blob", f"{tree}:meta.json"))
    state = State(**meta)
    listing = run(repo, "ls-tree", "-r", tree, "--", "files")
    for row in listing.splitlines():
        info, path = row.split("\t", 1)
        mode, _, sha = info.split()
        state.files[path[len("files/") :]] = f"{mode} {sha}"
    return state


def blob(repo: Repo, sha: str) -> bytes:
    return read_object(repo, sha)


# ---------------------------------------------------------------- restore


def write_file(path: Path, data: bytes, mode: str = "100644") -> None:
    """Write aside, then rename: a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".sglpatch-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o755 if mode == "100755" else 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def restore_files(line: Line, repo: Repo, target: State, touched: set[str]) -> None:
    """Make every managed path in ``touched`` what ``target`` says (present or absent)."""
    for path in sorted(touched):
        absolute = line.repo / path
        if path in target.files:
            mode, sha = target.files[path].split()
            data = blob(repo, sha)
            if not (absolute.is_file() and absolute.read_bytes() == data):
                write_file(absolute, data, mode)
        elif absolute.exists():
            absolute.unlink()


def write_gitlink(line: Line, gitlink: str) -> None:
    if read_gitlink(line) == gitlink:
        return
    repo = open_repo(line.repo)
    with pinned_env(repo):
        if gitlink:
            mode, sha = gitlink.split()
            run(repo, "update-index", "--add", "--cacheinfo", f"{mode},{sha},{line.submodule}")
        else:
            run(repo, "update-index", "--force-remove", "--", line.submodule)


def restore_worktree(repo: Repo, target: State, current: State) -> None:
    """Make the work tree, HEAD, branch and base exactly ``target``'s; ``current`` is the state
    it is in now (its untracked files are known, so files ``target`` lacks are removed)."""
    with pinned_env(repo):
        if (Path(git_dir(repo)) / "rebase-apply").exists():
            run(repo, "am", "--quit")  # only our own commands run git am here
        if not target.head:
            return  # the work tree was new: what the command left is rebuilt by the next prepare
        if current.worktree_tree:
            run(repo, "read-tree", "--reset", "-u", current.worktree_tree)
        run(repo, "read-tree", "--reset", "-u", target.worktree_tree)
        if target.branch:
            run(repo, "update-ref", target.branch, target.head)
            run(repo, "symbolic-ref", "HEAD", target.branch)
        else:
            run(repo, "update-ref", "--no-deref", "HEAD", target.head)
        run(repo, "reset", "--quiet")
        if target.base:
            run(repo, "update-ref", BASE_REF, target.base)
        else:
            run(repo, "update-ref", "-d", BASE_REF)

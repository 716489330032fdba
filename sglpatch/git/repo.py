"""A git repository as the rest of the project drives it: open or create one, run a git command
in it, read its HEAD, a commit or an object. The one place (with ``run.py``) that knows GitPython.

A command runs as GitPython runs it: ``run(repo, "rev-parse", "--verify", ref)`` is
``repo.git.rev_parse("--verify", ref)``, its output a str (git's bytes decoded with
surrogateescape, see ``env.git_bytes``), its trailing newline stripped unless the caller says
``strip_newline_in_stdout=False``. Inside ``with pinned_env(repo):`` every command runs in the
reproducible environment of ``env.git_env()``; outside it, in the process's own.

Failures are GitPython's exceptions, under the names below: callers catch them from here.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

import git

from sglpatch.git.env import git_env

Repo = git.Repo
Commit = git.Commit
GitError = git.GitCommandError  # a git command exited non-zero (or died of a signal)
AnyGitError = git.exc.GitError  # every failure GitPython reports, GitError included
BadName = git.BadName  # a revision that names no object
NotARepository = git.exc.InvalidGitRepositoryError
NoSuchPath = git.exc.NoSuchPathError
GitNotFound = git.exc.GitCommandNotFound  # the git program itself is missing


def open_repo(path) -> Repo:
    """The repository at ``path`` (NotARepository or NoSuchPath when there is none)."""
    return git.Repo(path)


def init_repo(path, *, bare: bool = False) -> Repo:
    """A new (or the existing) repository at ``path``, as ``git init`` makes it."""
    return git.Repo.init(path, bare=bare)


def pinned_env(repo: Repo, *, date: str | None = None, **extra: str) -> AbstractContextManager[None]:
    """Inside it, ``repo``'s commands run with ``git_env(date)`` and the ``extra`` variables."""
    return repo.git.custom_environment(**{**git_env(date), **extra})


def stdin_file(data: str | bytes) -> IO[bytes]:
    """A file holding ``data`` (a str as UTF-8), for a command's ``input``."""
    handle = tempfile.TemporaryFile()
    handle.write(data.encode() if isinstance(data, str) else data)
    handle.seek(0)
    return handle


def run(repo: Repo, command: str, *args: Any, input: str | bytes | None = None, **options: Any) -> str:
    """``git command args`` in ``repo``, its output; GitError when it fails. ``input`` is fed on
    stdin; ``options`` are GitPython's (``strip_newline_in_stdout=False`` keeps the last newline)."""
    return _call(repo, command, *args, input=input, **options)


def run_status(repo: Repo, command: str, *args: Any, input: str | bytes | None = None) -> tuple[int, str, str]:
    """``git command args`` in ``repo`` as (exit status, stdout, stderr); never raises for a
    non-zero exit."""
    return _call(repo, command, *args, input=input, with_extended_output=True, with_exceptions=False)


def _call(repo: Repo, command: str, *args: Any, input: str | bytes | None, **options: Any) -> Any:
    if input is not None:
        options["istream"] = stdin_file(input)
    return getattr(repo.git, command.replace("-", "_"))(*args, **options)


def head_sha(repo: Repo) -> str:
    """The commit HEAD points to (ValueError when it points to none yet)."""
    return repo.head.commit.hexsha


def head_tree(repo: Repo) -> str:
    """The git tree id of the commit HEAD points to: the content of a clean work tree, as one id."""
    return repo.head.commit.tree.hexsha


def resolve_commit(repo: Repo, rev: str) -> Commit:
    """The commit ``rev`` names (BadName or ValueError when it names none)."""
    return repo.commit(rev)


def first_parent_commits(repo: Repo, rev_range: str) -> Iterator[Commit]:
    """The commits of ``rev_range`` along first parents, newest first (``git rev-list --first-parent``)."""
    return repo.iter_commits(rev_range, first_parent=True)


def read_object(repo: Repo, sha: str) -> bytes:
    """The content of the object ``sha`` (a blob's bytes), read from ``repo``'s object store."""
    return repo.odb.stream(bytes.fromhex(sha)).read()


def current_branch(repo: Repo) -> str:
    """The short name of the branch HEAD is on (TypeError when HEAD is detached)."""
    return repo.active_branch.name


def git_dir(repo: Repo) -> Path:
    """The path of ``repo``'s .git directory (the repository itself when bare)."""
    return Path(repo.git_dir)


def work_dir(repo: Repo) -> Path:
    """The path of ``repo``'s work tree (ValueError for a bare repository, which has none)."""
    if repo.working_tree_dir is None:
        raise ValueError(f"{repo.git_dir} is a bare repository: it has no work tree")
    return Path(repo.working_tree_dir)


def message_text(commit: Commit) -> str:
    """A commit's message as text: GitPython hands over bytes when it cannot decode them."""
    message = commit.message
    return message if isinstance(message, str) else message.decode("utf-8", "surrogateescape")


def summary_text(commit: Commit) -> str:
    """A commit's subject line as text (GitPython hands over bytes when it cannot decode it)."""
    summary = commit.summary
    return summary if isinstance(summary, str) else summary.decode("utf-8", "surrogateescape")

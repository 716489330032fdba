"""The journal of the line's open transaction, ``build/transaction.json``: what a killed run left
for the next one to finish; the work tree repository it names; and the step boundaries and held
signals that make every interruption land between two whole steps."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from pathlib import Path
from typing import Literal, overload

from sglpatch.errors import UserError
from sglpatch.git.repo import GitError, NotARepository, Repo, init_repo, open_repo, pinned_env, run
from sglpatch.queue import snapshot
from sglpatch.queue.line import JOURNAL, WORK_TREE, Line
from sglpatch.queue.untracked import keep_out_build_products

_BOUNDARIES_PASSED = [0]  # SGLPATCH_CRASH_AT=N kills the process at the Nth boundary it passes


def boundary(name: str) -> None:
    """A step boundary; tests kill the process at the k-th one (SGLPATCH_CRASH_AT=k) and list
    them (SGLPATCH_BOUNDARIES=file) to prove every interrupted state recovers."""
    listing = os.environ.get("SGLPATCH_BOUNDARIES")
    if listing:
        with open(listing, "a") as fh:
            fh.write(name + "\n")
    crash_at = os.environ.get("SGLPATCH_CRASH_AT")
    if crash_at:
        _BOUNDARIES_PASSED[0] += 1
        if crash_at in (str(_BOUNDARIES_PASSED[0]), name):
            os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def signals_held():
    """Ctrl-C and SIGTERM wait until a commit or roll-back step is complete."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@overload
def work_repo(line: Line, create: Literal[True]) -> Repo: ...
@overload
def work_repo(line: Line, create: bool = False) -> Repo | None: ...
def work_repo(line: Line, create: bool = False) -> Repo | None:
    """The line's work tree repository; with ``create``, a new one where there is none yet."""
    path = line.root / WORK_TREE
    if (path / ".git").exists():
        return checked_repo(path, line.command("prepare"))
    if not create:
        return None
    if path.exists() and any(path.iterdir()):  # files without their repository: someone's work
        raise UserError(
            f"{path} holds files but no git repository (.git is gone)",
            f"move it aside (`mv {path} {path}.saved`), then run `{line.command('prepare')}`",
        )
    path.mkdir(parents=True, exist_ok=True)
    repo = init_repo(path)
    keep_out_build_products(repo)
    return repo


def existing_work_repo(line: Line) -> Repo:
    """The line's work tree repository where a journal or a log entry says there is one."""
    repo = work_repo(line)
    if repo is None:
        raise UserError(f"no work tree at {line.root / WORK_TREE}", f"run `{line.command('prepare')}` first")
    return repo


def checked_repo(path: Path, prepare: str) -> Repo:
    """``path``'s own repository: a damaged .git must never let git fall through to the
    repository around it (the user's checkout)."""
    try:
        repo = open_repo(path)
        top = run(repo, "rev-parse", "--show-toplevel")
    except (NotARepository, GitError):
        top = None
    if top is None or Path(top).resolve() != Path(path).resolve():
        raise UserError(
            f"{path}/.git is damaged (git does not recognise it as a repository)",
            f"move {path} aside (`mv {path} {path}.saved`), then run `{prepare}`",
        )
    keep_out_build_products(repo)
    return repo


def git_environment(repo):
    return pinned_env(repo)


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
    if (
        not isinstance(data, dict)
        or data.get("phase") not in needs
        or not isinstance(data.get("op"), str)
        or not re.fullmatch(r"[0-9a-f]{40}", str(data.get(needs[data["phase"]])))
    ):
        raise damaged
    repo = work_repo(line)
    if repo is None:  # a journal without its work tree
        raise damaged
    try:
        run(repo, "cat-file", "-e", f"{data[needs[data['phase']]]}^{{commit}}")
    except GitError:
        raise damaged from None
    return data


def write_journal(line: Line, data: dict | None) -> None:
    path = _journal_path(line)
    if data is None:
        path.unlink(missing_ok=True)
    else:
        snapshot.write_file(path, json.dumps(data, indent=1).encode())
    boundary(f"journal:{data['phase'] if data else 'cleared'}")


def rebase_in_progress(line: Line) -> dict | None:
    journal = read_journal(line)
    return journal if journal and journal["phase"] == "rebase" else None


def restore_start(line: Line, repo: Repo, start: str) -> None:
    """Put the work tree back as it was at ``start`` (the commit of the snapshot a transaction
    began with) and clear the journal; no staged file was written."""
    target = snapshot.load(repo, run(repo, "rev-parse", f"{start}^{{tree}}"))
    current = snapshot.capture(line, repo)
    if not current.same_work_tree(target):
        snapshot.restore_worktree(repo, target, current)
    write_journal(line, None)

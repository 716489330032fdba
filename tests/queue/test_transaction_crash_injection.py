"""Crash injection: `rebase` killed (SIGKILL) at every step boundary, then `--continue` or
`--abort`, ends in the complete result or exactly the state before, never anything else.

`sglpatch.queue.transaction_journal.boundary` lists the boundaries a run passes (SGLPATCH_BOUNDARIES=file) and
kills the process at the k-th (SGLPATCH_CRASH_AT=k). Each k runs on a fresh copy of one prepared
project (real git repositories, synthetic releases served from 127.0.0.1).

Each boundary costs about five runs of the CLI: the fast set kills the rebases at a sample of their
boundaries (``[sample]``, one of each kind the assertions tell apart), the whole suite at every other
one too (``[rest]``, slow); together they are every boundary.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import git
import pytest
from helpers import run_cli
from test_rebase import RUNNER, V2, env, make_repo, snapshot  # noqa: F401  (env is a fixture)

from sglpatch.queue.patch_queue import PatchQueue

ONTO = ["rebase", "--onto", "1.1.0", "--commit", "2" * 40]
PARTS = [pytest.param("sample", id="sample"), pytest.param("rest", id="rest", marks=pytest.mark.slow)]


def boundaries(root: Path, env, *args) -> tuple[list[str], object]:
    listing = root.parent / f"boundaries-{len(list(root.parent.iterdir()))}.txt"
    result = run_cli(root, *args, env={**env["env"], "SGLPATCH_BOUNDARIES": str(listing)})
    return listing.read_text().split(), result


def copy(template: Path, name: str) -> Path:
    target = template.parent / name
    shutil.copytree(template, target, symlinks=True)
    return target


def consistent(root: Path, env) -> None:
    """What any state the tool leaves must satisfy (`status` first finishes an interrupted run)."""
    status = run_cli(root, "status", env=env["env"])
    assert status.returncode == 0, status.stderr
    assert not (root / "build" / "transaction.json").exists() or _rebase_journal(root)
    if not _rebase_journal(root):
        PatchQueue(root).applied_names()  # the work tree matches the series
        assert not (root / "build" / "src" / ".git" / "rebase-apply").exists()


def _rebase_journal(root: Path) -> bool:
    path = root / "build" / "transaction.json"
    return path.exists() and '"rebase"' in path.read_text()


def finish(root: Path, env, action: str, resolve=None) -> None:
    """Run `rebase --<action>` until the rebase is over (resolving conflicts on the way)."""
    for _ in range(5):
        if not _rebase_journal(root):
            return
        if resolve and action == "continue":
            resolve(root)
        result = run_cli(root, "rebase", f"--{action}", env=env["env"])
        assert "Traceback" not in result.stderr, result.stderr
        assert result.returncode in (0, 1) or "interrupted before its first step" in result.stderr, result.stderr
    raise AssertionError("the rebase never ended")


def resolve_conflict(root: Path) -> None:
    target = root / "build" / "src" / RUNNER
    if target.exists() and "<<<<<<<" in target.read_text():
        target.write_text(V2[RUNNER].replace("line 10 upstream\n", "line ten upstream\n"))


def sample(names: list[str]) -> set[int]:
    """The first boundary of each kind the assertions tell apart: before or after the rebase
    started on the new base, before or after a commit point, a step or a file being written."""
    first: dict[tuple[bool, bool, bool], int] = {}
    for k in range(1, len(names) + 1):
        first.setdefault((_started(names, k), _committed(names, k), names[k - 1].startswith("file:")), k)
    return set(first.values())


def crash_matrix(template: Path, env, args: list[str], part: str, resolve=None) -> tuple[int, dict, dict]:
    """Kill ``args`` at the ``part`` ("sample" or "rest") of its boundaries; each survivor must end
    complete (continue) or as before (abort) or, past the commit point, complete either way."""
    before = snapshot(template)
    reference = copy(template, "reference")
    names, result = boundaries(reference, env, *args)
    assert result.returncode in (0, 1), result.stderr
    finish(reference, env, "continue", resolve)
    complete = snapshot(reference)
    assert complete != before
    sampled = sample(names)
    for k in (k for k in range(1, len(names) + 1) if (k in sampled) == (part == "sample")):
        for action in ("continue", "abort"):
            root = copy(template, f"k{k}-{action}")
            killed = run_cli(root, *args, env={**env["env"], "SGLPATCH_CRASH_AT": str(k)})
            assert killed.returncode == -9, f"boundary {k} ({names[k - 1]}) was not reached: {killed.stderr}"
            consistent(root, env)
            finish(root, env, action, resolve)
            consistent(root, env)
            after = snapshot(root)
            allowed = [complete] if action == "continue" and _started(names, k) else [complete, before]
            assert after in allowed, (
                f"killed at boundary {k} ({names[k - 1]}), then --{action}: "
                "neither the complete result nor the state before"
            )
            if action == "abort" and not _committed(names, k):
                assert after == before, f"killed at {k} ({names[k - 1]}), --abort did not restore"
            shutil.rmtree(root)
    return len(names), before, complete


def _started(names: list[str], k: int) -> bool:
    """The rebase had saved its first step on the new release when killed at boundary k; from
    there `--continue` must carry it to the end (before it, returning to the start is allowed)."""
    if "journal:rebase" not in names:
        return True  # a `--continue` run: the rebase was resumable all along
    if "rebase:on-new-base" not in names[:k]:
        return False
    return "rebase:state" in names[names.index("rebase:on-new-base") : k]


def _committed(names: list[str], k: int) -> bool:
    return "journal:committing" in names[:k]


@pytest.mark.parametrize("part", PARTS)
def test_a_rebase_killed_at_any_boundary_recovers(env, part):
    template = make_repo(env, ["clean", "moved", "textual"])
    assert run_cli(template, "prepare", env=env["env"]).returncode == 0
    count, before, complete = crash_matrix(template, env, ONTO, part)
    assert count >= 15, "the boundaries cover prepare, every step, and the commit"


@pytest.mark.parametrize("part", PARTS)
def test_a_continue_killed_at_any_boundary_keeps_the_resolution(env, part):
    template = make_repo(env, ["clean", "conflict", "moved"])
    assert run_cli(template, *ONTO, env=env["env"]).returncode == 1
    resolve_conflict(template)
    count, before, complete = crash_matrix(template, env, ["rebase", "--continue"], part, resolve_conflict)
    assert "+line ten upstream" in complete["patches/0002-conflict.patch"].decode()
    assert count >= 8


def test_a_killed_refresh_rolls_back_or_forward_and_never_half(env):
    template = make_repo(env, ["clean", "moved"])
    assert run_cli(template, "prepare", env=env["env"]).returncode == 0
    (template / "build" / "src" / RUNNER).write_text(
        (template / "build" / "src" / RUNNER).read_text() + "an edit to fold in\n"
    )
    git.Repo(template).git.status()
    before = snapshot(template)
    names, result = boundaries(copy(template, "reference"), env, "refresh")
    assert result.returncode == 0, result.stderr
    for k in range(1, len(names) + 1):
        root = copy(template, f"refresh-k{k}")
        assert run_cli(root, "refresh", env={**env["env"], "SGLPATCH_CRASH_AT": str(k)}).returncode == -9
        consistent(root, env)
        text = (root / "patches" / "0002-moved.patch").read_text()
        edit_in_tree = "an edit to fold in" in (root / "build" / "src" / RUNNER).read_text()
        assert edit_in_tree, f"killed at {k} ({names[k - 1]}): the edit is gone from the work tree"
        if "+an edit to fold in" not in text:
            assert snapshot(root) == before and git.Repo(root / "build" / "src").is_dirty(), (
                f"killed at {k} ({names[k - 1]}): neither refreshed nor as before"
            )
        shutil.rmtree(root)


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])

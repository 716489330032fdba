"""Small patch queues on real temporary git repositories, for the tests of the queue
(tests/queue/test_patch_queue.py) and of the git environment it runs git in (tests/git/test_env.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import UPSTREAM_FILES, commit_files, commit_project, make_project, make_upstream, message, patch_text

from sglpatch.queue.patch_queue import PatchQueue

RUNNER = "python/sglang/srt/model_executor/model_runner.py"
KIMI = "python/sglang/srt/models/kimi_k25.py"


def edited(path: str, old: str, new: str) -> dict[str, str]:
    return {path: UPSTREAM_FILES[path].replace(old, new)}


@pytest.fixture
def upstream(tmp_path):
    return make_upstream(tmp_path / "upstream")


@pytest.fixture
def project(tmp_path, upstream):
    return two_patch_queue(tmp_path / "project", upstream)


def two_patch_queue(root: Path, upstream) -> tuple[Path, PatchQueue]:
    repo, base = upstream
    patches = {
        "0001-runner.patch": patch_text(
            repo, base, edited(RUNNER, "line 10\n", "line ten\n"), message("runner: spell out ten")
        ),
        "0002-kimi.patch": patch_text(repo, base, edited(KIMI, "return 1", "return 2"), message("kimi: return two")),
    }
    make_project(root, patches)
    queue = PatchQueue(root)
    queue.reset_to(repo, base)
    return root, queue


def one_file_queue(tmp_path, upstream, path: str, before: str, after: str, subject: str, *, onto=None):
    """A queue of one patch changing ``path`` from ``before`` to ``after``, on an upstream commit
    that adds ``path`` (or on what ``onto(repo)`` commits above that). Returns (root, queue, patch)."""
    repo, base = upstream
    repo.git.checkout("--quiet", "--detach", base)
    start = commit_files(repo, {path: before}, f"upstream adds {path}")
    text = patch_text(repo, start, {path: after}, message(subject))
    target = onto(repo) if onto else start
    root = make_project(tmp_path / "p", {"0001-one.patch": text})
    commit_project(root, target)  # the tool rewrites only committed patch files
    queue = PatchQueue(root)
    queue.reset_to(repo, target)
    return root, queue, text

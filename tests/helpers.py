"""Builders for real temporary git repositories and patch series used by the unit tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import git

REPO_ROOT = Path(__file__).resolve().parent.parent
AUTHOR_ENV = {
    "GIT_AUTHOR_NAME": "Test Author", "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "Test Author", "GIT_COMMITTER_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}

UPSTREAM_FILES = {
    "python/sglang/srt/models/kimi_k25.py": "class KimiK25:\n    def forward(self):\n        return 1\n",
    "python/sglang/srt/model_executor/model_runner.py":
        "".join(f"line {i}\n" for i in range(1, 41)),
    "python/pyproject.toml": "[project]\nname = 'sglang'\n",
}


def commit_files(repo: git.Repo, files: dict[str, str | None], message: str) -> str:
    root = Path(repo.working_tree_dir)
    for rel, text in files.items():
        path = root / rel
        if text is None:
            repo.index.remove([rel], working_tree=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        repo.index.add([rel])
    with repo.git.custom_environment(**AUTHOR_ENV):
        repo.git.commit("--quiet", "--allow-empty", "-m", message)
    return repo.head.commit.hexsha


def make_upstream(path: Path, files: dict[str, str] | None = None) -> tuple[git.Repo, str]:
    repo = git.Repo.init(path)
    return repo, commit_files(repo, files or UPSTREAM_FILES, "upstream release")


def patch_text(upstream: git.Repo, base: str, files: dict[str, str | None], message: str) -> str:
    """A real `git format-patch` file for ``files`` changed on top of ``base``."""
    upstream.git.checkout("--quiet", "--detach", base)
    commit_files(upstream, files, message)
    text = upstream.git.format_patch("--stdout", "--zero-commit", "--no-signature", "--full-index",
                                     "-1", "HEAD", strip_newline_in_stdout=False)
    upstream.git.checkout("--quiet", "--detach", base)
    return text


def message(subject: str, status: str = "Pending", drop: str = "check:example") -> str:
    return (f"{subject}\n\nWhy this change exists.\n\n"
            f"Upstream-Status: {status}\nDrop-When: {drop}\n")


def make_project(path: Path, patches: dict[str, str], series: list[str] | None = None) -> Path:
    (path / "patches").mkdir(parents=True)
    (path / "upstream.toml").write_text((REPO_ROOT / "upstream.toml").read_text())
    for name, text in patches.items():
        (path / "patches" / name).write_text(text)
    names = list(patches) if series is None else series
    (path / "patches" / "series").write_text("# test series\n" + "".join(f"{n}\n" for n in names))
    return path


def run_cli(root: Path, *args: str, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run `build.py` as a user would, in a child process."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(REPO_ROOT / "build.py"), "--root", str(root), *args],
                          capture_output=True, text=True, env=full_env, **kwargs)


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]

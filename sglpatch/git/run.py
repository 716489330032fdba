"""Running the git program itself, for what GitPython's wrappers do not fit (a command fed on
stdin, or one whose exit code is the answer).

By default git runs as GitPython runs it: the executable GitPython is told to use
(``GIT_PYTHON_GIT_EXECUTABLE``) in the reproducible environment of ``git_env()``. A command that
reads the user's own checkout as the user sees it (its status, its remote) asks for
``user_config=True``: the user's git configuration then applies, prompts stay off.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from sglpatch.git.env import git_env


def gitpython_program() -> str:
    """The git GitPython runs: ``GIT_PYTHON_GIT_EXECUTABLE`` when an operator names one, else ``git``."""
    gitpython = sys.modules.get("git")
    if gitpython is None:  # not loaded (a reused build answers without it): GitPython reads the same variable
        return os.environ.get("GIT_PYTHON_GIT_EXECUTABLE") or "git"
    return gitpython.Git.GIT_PYTHON_GIT_EXECUTABLE or "git"


def run_git(
    args: Sequence[str],
    *,
    cwd: Path | str | None = None,
    input: str | None = None,
    program: str | None = None,
    user_config: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``git args`` to completion, its output captured as text; never raises for a non-zero
    exit (the caller reads ``returncode``). ``program`` defaults to ``gitpython_program()``.
    A missing program raises ``FileNotFoundError``, as ``subprocess.run`` does."""
    if user_config:
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    else:
        env = {**os.environ, **git_env()}
    return subprocess.run(
        [program or gitpython_program(), *args], cwd=cwd, input=input, capture_output=True, text=True, env=env
    )

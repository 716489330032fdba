"""The code's own checks, configured in pyproject.toml, run as CI runs them: ruff's lint and
format check over the repository, mypy over the package. Each has a twin proving it fires
with the project's configuration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import REPO_ROOT


def tool(*argv: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing_to_say():
    result = tool("ruff", "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_code_is_formatted_as_ruff_formats_it():
    result = tool("ruff", "format", "--check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_passes_on_the_package():
    result = tool("mypy", "--no-incremental", "--cache-dir", "/dev/null")
    assert result.returncode == 0, result.stdout + result.stderr


def _project_copy(tmp_path: Path, code: str) -> Path:
    (tmp_path / "pyproject.toml").write_text((REPO_ROOT / "pyproject.toml").read_text())
    (tmp_path / "sglpatch").mkdir()
    (tmp_path / "sglpatch" / "__init__.py").write_text("")
    (tmp_path / "build.py").write_text("")
    (tmp_path / "sglpatch" / "bad.py").write_text(code)
    return tmp_path


def test_ruff_with_the_projects_settings_flags_an_unused_import_and_unformatted_code(tmp_path):
    root = _project_copy(tmp_path, "import os\nx = {'a':1}\n")
    assert "F401" in tool("ruff", "check", "--no-cache", ".", cwd=root).stdout
    assert tool("ruff", "format", "--check", "--no-cache", ".", cwd=root).returncode == 1


def test_mypy_with_the_projects_settings_flags_a_wrong_type(tmp_path):
    root = _project_copy(tmp_path, "def f(x: int) -> str:\n    return x\n")
    result = tool("mypy", "--no-incremental", "--cache-dir", "/dev/null", cwd=root)
    assert result.returncode == 1 and "sglpatch/bad.py:2: error" in result.stdout, result.stdout

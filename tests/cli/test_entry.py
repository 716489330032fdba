"""The `sglpatch` console script and `python -m sglpatch`: `python build.py` for the checkout
the current directory is in, from any directory of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

from helpers import REPO_ROOT

from sglpatch.cli.entry import checkout_of


def run_module(cwd, *argv):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "sglpatch", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_checkout_is_found_from_a_line_directory_inside_it():
    assert checkout_of(REPO_ROOT / "lines" / "latest" / "patches") == REPO_ROOT
    result = run_module(REPO_ROOT / "lines" / "latest", "lines", "--json")
    assert result.returncode == 0, result.stderr
    assert [line["line"] for line in json.loads(result.stdout)["lines"]] == ["production", "latest"]


def test_outside_any_checkout_it_says_so_in_one_line(tmp_path):
    assert checkout_of(tmp_path) is None
    result = run_module(tmp_path, "lines")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "not inside a checkout" in result.stderr


def test_the_package_builds_a_wheel_with_the_console_script(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO_ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("sglpatch-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "sglpatch = sglpatch.cli.entry:console" in entry_points
    assert "sglpatch/queue/rebase.py" in names and not any(n.startswith("tests/") for n in names)

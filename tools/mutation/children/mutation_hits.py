"""A pytest plugin (`-p mutation_hits`) for tools/mutation/modules.py: the functions a test's child
processes reached (written by sitecustomize.py here) count as reached by that test."""

import os
from pathlib import Path

import pytest


@pytest.hookimpl(tryfirst=True)  # before mutmut's own teardown hook reads the hits
def pytest_runtest_teardown(item, nextitem):
    directory = os.environ.get("SGLPATCH_MUTMUT_HITS")
    if os.environ.get("MUTANT_UNDER_TEST") != "stats" or not directory:
        return
    from mutmut.state import state

    for path in Path(directory).glob("*.hits"):
        state()._stats.update(path.read_text(encoding="utf-8").split())
        path.unlink()

"""Data flows one way: a command reads its line's pin and series once and passes them down.

Each command runs in this process through ``sglpatch.cli.main.main`` with ``read_pin``,
``read_series`` and ``read_series_names`` counted wherever they are reached: in their own modules
and in every module that imported them by name. A series read is a ``read_series`` or a
``read_series_names`` call (the names ``read_series`` reads on its way are part of its one read).

The rebase runs on test_rebase.py's synthetic project and releases, served by a local package
index; the build on the real pinned release (as tests/ship/test_build.py does).
"""

from __future__ import annotations

import collections
import contextlib
import json
import sys
import traceback
from pathlib import Path

import git
import pytest
from helpers import (
    REPO_ROOT,
    make_project,
    message,
)
from test_rebase import KIMI, RUNNER, V2, env, make_repo  # noqa: F401  (env: a fixture)

import sglpatch.cli.main  # noqa: F401  every module a command reaches, imported before counting
from sglpatch.cli.main import main
from sglpatch.queue import rebase, series
from sglpatch.upstream import pin, source

READERS = ((pin, "read_pin", "pin"), (series, "read_series", "series"), (series, "read_series_names", "series"))


class Reads:
    """What one command read: ``counts["pin"]``, ``counts["series"]``, and from where."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.callers: list[str] = []
        self._inside = 0

    def wrap(self, kind: str, read):
        def counted(*args, **kwargs):
            if not self._inside:  # read_series's own read_series_names is part of its one read
                self.counts[kind] += 1
                caller = traceback.extract_stack(limit=2)[0]
                self.callers.append(f"{kind}: {Path(caller.filename).name}:{caller.lineno} {caller.name}")
            self._inside += 1
            try:
                return read(*args, **kwargs)
            finally:
                self._inside -= 1

        return counted


@contextlib.contextmanager
def counting():
    """Count the reads in every module that holds a reader, by its own module or by name."""
    reads = Reads()
    with pytest.MonkeyPatch.context() as patch:
        for module, name, kind in READERS:
            original = getattr(module, name)
            counted = reads.wrap(kind, original)
            for holder in [m for m in list(sys.modules.values()) if getattr(m, "__name__", "").startswith("sglpatch")]:
                if getattr(holder, name, None) is original:
                    patch.setattr(holder, name, counted)
        yield reads


def run_counted(root: Path, *argv: str) -> tuple[int, Reads]:
    with counting() as reads:
        code = main(["--root", str(root), *argv])
    return code, reads


def assert_at_most(reads: Reads, pins: int, series_reads: int) -> None:
    assert reads.counts["pin"] <= pins and reads.counts["series"] <= series_reads, reads.callers


# ---------------------------------------------------------------- rebase


@pytest.fixture
def project(env):
    """A line on release 1.0.0 with a clean, a conflicting and a moved patch for 1.1.0."""
    return make_repo(env, ["clean", "conflict", "moved"])


def test_a_rebase_reads_the_pin_and_the_series_once_per_command(project, capsys):
    code, reads = run_counted(project, "rebase", "--onto", "1.1.0", "--dry-run", "--json")
    assert code == 1 and json.loads(capsys.readouterr().out)["dry_run"]
    assert_at_most(reads, pins=1, series_reads=1)

    # start: validates against the pin, prepares the tree, replays up to the conflict
    code, reads = run_counted(project, "rebase", "--onto", "1.1.0", "--json")
    assert code == 1 and json.loads(capsys.readouterr().out)["stopped"]["patch"] == "0002-conflict.patch"
    assert_at_most(reads, pins=1, series_reads=1)

    # resume: the pin for the pristine trees and the last step; the series lives in the journal now
    (project / "build" / "src" / RUNNER).write_text(V2[RUNNER].replace("line 10 upstream\n", "line ten upstream\n"))
    code, reads = run_counted(project, "rebase", "--continue", "--json")
    assert code == 0, capsys.readouterr().err
    assert [p["verdict"] for p in json.loads(capsys.readouterr().out)["patches"]] == ["clean", "merged", "merged"]
    assert_at_most(reads, pins=1, series_reads=0)
    # the rebase wrote the new pin at its end (staged and committed, never read back)
    assert pin.read_pin(project).version == "1.1.0"


def test_an_aborted_and_a_skipped_rebase_read_the_pin_once_and_the_series_not_at_all(project, capsys):
    assert run_counted(project, "rebase", "--onto", "1.1.0")[0] == 1
    capsys.readouterr()
    code, reads = run_counted(project, "rebase", "--abort", "--json")
    assert code == 0 and json.loads(capsys.readouterr().out)["aborted"]
    assert_at_most(reads, pins=0, series_reads=0)

    assert run_counted(project, "rebase", "--onto", "1.1.0")[0] == 1
    capsys.readouterr()
    code, reads = run_counted(project, "rebase", "--skip", "--json")
    assert code == 0, capsys.readouterr().err
    assert_at_most(reads, pins=1, series_reads=0)
    assert series.read_series_names(project) == ["0001-clean.patch", "0003-moved.patch"]


def test_the_counter_sees_a_read_more_wherever_it_is_made(project, monkeypatch, capsys):
    """The twin: a step that reads the pin and the series again, through the names a module of the
    rebase imported, is counted."""
    verdicts = rebase.dry_run_verdicts

    def reads_again(*args, **kwargs):
        rebase.read_pin(project)
        rebase.read_series(project)
        return verdicts(*args, **kwargs)

    monkeypatch.setattr(rebase, "dry_run_verdicts", reads_again)
    code, reads = run_counted(project, "rebase", "--onto", "1.1.0", "--dry-run", "--json")
    assert code == 1 and json.loads(capsys.readouterr().out)["dry_run"]
    assert (reads.counts["pin"], reads.counts["series"]) == (2, 2), reads.callers
    with pytest.raises(AssertionError):
        assert_at_most(reads, pins=1, series_reads=1)


# ---------------------------------------------------------------- build


@pytest.fixture(scope="module")
def pristine():
    pinned = pin.read_pin(REPO_ROOT)
    source.prepare(pinned, REPO_ROOT)
    return source.pristine_tree(pinned.version, pinned)


def marker_patch(pristine: Path, tmp: Path) -> str:
    """A format-patch file that appends a line to the real kimi_k25.py of the pinned release."""
    repo = git.Repo.init(tmp)
    (tmp / KIMI).parent.mkdir(parents=True)
    (tmp / KIMI).write_text((pristine / KIMI).read_text())
    repo.index.add([KIMI])
    repo.index.commit("base")
    (tmp / KIMI).write_text((pristine / KIMI).read_text() + "\nSGLPATCH_READS_MARKER = 1\n")
    repo.index.add([KIMI])
    repo.index.commit(message("kimi: marker", drop="upstream>=0.5.12"))
    return repo.git.format_patch(
        "--stdout", "--zero-commit", "--no-signature", "--full-index", "-1", "HEAD", strip_newline_in_stdout=False
    )


def test_a_build_reads_the_pin_and_the_series_once(pristine, tmp_path, capsys):
    root = make_project(tmp_path / "project", {"0001-marker.patch": marker_patch(pristine, tmp_path / "p")})
    for work_tree in ("none yet", "the previous build's"):  # the second checks it is exported first
        code, reads = run_counted(root, "--json")
        assert code == 0, (work_tree, capsys.readouterr().err)
        assert json.loads(capsys.readouterr().out)["patches"] == ["0001-marker.patch"]
        assert_at_most(reads, pins=1, series_reads=1)

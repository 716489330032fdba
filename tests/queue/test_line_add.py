"""`lines --add NAME [--from LINE]`: a new line starts as a copy of a line's pin and series."""

from __future__ import annotations

import json
from pathlib import Path

import git
from helpers import run_cli
from test_rebase import PATCHES, V1, add_line, env, make_repo  # noqa: F401  (env: a fixture)

from sglpatch.queue.series import read_series_names
from sglpatch.upstream.pin import read_pin


def ok(result):
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def line_files(line: Path) -> dict[str, bytes]:
    return {str(p.relative_to(line)): p.read_bytes() for p in [line / "upstream.toml", *(line / "patches").iterdir()]}


def production_and_next(env) -> tuple[Path, Path]:
    """Production on 1.0.0 with three patches; line `next` rebased onto 1.1.0, where it kept two
    (one of them rewritten): a pin and a series that differ from production's."""
    root = make_repo(env, ["clean", "moved", "textual"])
    nxt = add_line(root, env, "next")
    ok(run_cli(root, "--line", "next", "rebase", "--onto", "1.1.0", env=env["env"]))
    git.Repo(root).git.add("--all")
    git.Repo(root).git.commit("-qm", "the next line on 1.1.0")
    assert read_pin(root).version == "1.0.0" and read_pin(nxt).version == "1.1.0"
    assert read_series_names(root) != read_series_names(nxt)
    return root, nxt


def test_lines_add_from_another_line_copies_that_lines_pin_and_series(env):
    """`lines --add copy --from next` starts `copy` with next's pin (release 1.1.0, its
    artifacts, series release 1) and next's series, patch files byte for byte: not production's."""
    root, nxt = production_and_next(env)
    ok(run_cli(root, "lines", "--add", "copy", "--from", "next", env=env["env"]))
    copy = root / "lines" / "copy"
    assert line_files(copy) == line_files(nxt)
    assert read_pin(copy).version == "1.1.0" and read_pin(copy).series_release == 1
    assert read_series_names(copy) == ["0001-clean.patch", "0002-moved.patch"]
    listing = json.loads(ok(run_cli(root, "lines", "--json", env=env["env"])).stdout)["lines"]
    assert {r["line"]: r["upstream"] for r in listing} == {"production": "1.0.0", "next": "1.1.0", "copy": "1.1.0"}


def test_lines_add_without_from_copies_production(env):
    """The twin: without --from the new line is production's pin and series, byte for byte,
    whatever other lines exist."""
    root, nxt = production_and_next(env)
    ok(run_cli(root, "lines", "--add", "plain", env=env["env"]))
    plain = root / "lines" / "plain"
    assert line_files(plain) == line_files(root) != line_files(nxt)
    assert read_pin(plain).version == "1.0.0"
    assert read_series_names(plain) == ["0001-clean.patch", "0002-moved.patch", "0003-textual.patch"]

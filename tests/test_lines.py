"""Maintained lines: the production line at the root, others in lines/<name>/, each with its own
pin and series; and the per-line acceptance of known gaps in the build gate ([series.accepted]).

Rebasing a line is tested with the other rebase verdicts in test_rebase.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from helpers import REPO_ROOT, assert_one_line_error, make_project, run_cli
from sglang_runtime import line_names
from sglpatch import build, source
from sglpatch.errors import UserError
from sglpatch.line import all_lines, find_line
from sglpatch.pin import read_pin
from sglpatch.series import read_series

PIN = read_pin(REPO_ROOT)
KIMI = "KimiK25ForConditionalGeneration"
# What the contract check finds on pristine 0.5.9 (docs/contract.md), by finding subject: the four
# gaps, and set_embed_and_head of the EAGLE-3 interface's draft side (tests/test_build_gate.py).
GAPS_0_5_9 = {f"{KIMI}.{m}" for m in ("get_embed_and_head", "model", "routed_experts_weights_of_layer",
                                       "set_eagle3_layers_to_capture", "set_embed_and_head",
                                       "forward(pp_proxy_tensors)")}


@pytest.fixture(scope="module")
def pristine():
    source.prepare(PIN, REPO_ROOT)
    return source.pristine_tree(PIN.version, PIN)


@pytest.fixture
def empty_series(tmp_path):
    return read_series(make_project(tmp_path / "project", {}))


def gate(tree, series, accepted: set[str]):
    pin = dataclasses.replace(PIN, required_checks=("kimi-k25-eagle3-interface",),
                              accepted=tuple((s, "test") for s in sorted(accepted)))
    build.check_tree(tree, series, pin)


def test_the_gate_accepts_exactly_the_listed_gaps(pristine, empty_series):
    gate(pristine, empty_series, GAPS_0_5_9)
    missing = f"{KIMI}.get_embed_and_head"
    with pytest.raises(UserError, match=f"lacks {missing.split('.')[1]}, "):
        gate(pristine, empty_series, GAPS_0_5_9 - {missing})


def test_an_acceptance_outliving_its_gap_fails_the_gate(pristine, empty_series):
    with pytest.raises(UserError, match=f"{KIMI}.pp_group is accepted .* but no check reports it"):
        gate(pristine, empty_series, GAPS_0_5_9 | {f"{KIMI}.pp_group"})


def test_the_repository_has_a_production_and_a_latest_line():
    lines = {line.name: line for line in all_lines(REPO_ROOT)}
    assert list(lines) == line_names()  # the tests' own listing, which parametrizes them
    assert {line.repo for line in lines.values()} == {REPO_ROOT}
    assert list(lines)[0] == "production" and lines["production"].root == REPO_ROOT
    assert lines["latest"].root == REPO_ROOT / "lines" / "latest"
    latest = read_pin(lines["latest"].root)
    assert latest.local_version == f"{latest.version}+kimi.{latest.series_release}"
    assert latest.required_checks == PIN.required_checks, "the fork's promises hold on every line"
    # every accepted gap says why
    assert all(len(why) > 40 for _, why in latest.accepted)


def test_lines_lists_every_line_as_json():
    result = run_cli(REPO_ROOT, "lines", "--json")
    assert result.returncode == 0, result.stderr
    rows = {r["line"]: r for r in json.loads(result.stdout)["lines"]}
    assert rows["production"]["version"] == PIN.local_version
    assert rows["latest"]["upstream"] == read_pin(find_line(REPO_ROOT, "latest").root).version
    assert rows["latest"]["directory"] == "lines/latest"


def test_an_unknown_line_is_a_one_line_error():
    assert_one_line_error(run_cli(REPO_ROOT, "--line", "nightly"), "unknown line 'nightly'",
                          "production, latest")


@pytest.mark.parametrize("line", line_names())
def test_every_line_builds_its_wheel_through_its_gates(line):
    """`python build.py --line L`: the line's pristine release + series -> the gates -> its wheel."""
    root = find_line(REPO_ROOT, line).root
    pin, series = read_pin(root), read_series(root)
    result = run_cli(REPO_ROOT, "--line", line, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["version"] == pin.local_version and data["patches"] == series.names
    assert data["wheel"].startswith(str(root / "dist" / f"sglang-{pin.local_version}-"))
    # an overlay per pinned upstream wheel (one per CPython on a platform-wheel release)
    assert [Path(w["path"]).name.split("-", 2)[2] for w in data["wheels"]] == \
        [a.filename.split("-", 2)[2] for a in pin.wheels]
    assert data["wheels"][0] == {"path": data["wheel"], "sha256": data["sha256"]}
    gates = {*pin.required_checks, *series.check_names()}
    assert gates and all(f"check {name}: ok" in result.stderr for name in gates), result.stderr

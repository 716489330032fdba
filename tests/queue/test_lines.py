"""Maintained lines: the production line at the root, others in lines/<name>/, each with its own
pin and series; and the per-line acceptance of known gaps in the build gate ([series.accepted]).

Rebasing a line is tested with the other rebase verdicts in test_rebase.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import REPO_ROOT, assert_one_line_error, make_project, run_cli
from sglang_runtime import line_names

from sglpatch.errors import UserError
from sglpatch.queue.line import Line, all_lines, find_line
from sglpatch.queue.line_add import add_line
from sglpatch.queue.series import read_series
from sglpatch.ship import build
from sglpatch.upstream import source
from sglpatch.upstream.pin import read_pin

PIN = read_pin(REPO_ROOT)
KIMI = "KimiK25ForConditionalGeneration"
# What the contract check finds on pristine 0.5.9 (docs/contract.md), by finding subject: the gaps
# (EPLB's classmethod since its probe's None is followed to the recorder's assert), and
# set_embed_and_head of the EAGLE-3 interface's draft side (tests/test_build_gate.py).
GAPS_0_5_9 = {
    f"{KIMI}.{m}"
    for m in (
        "get_embed_and_head",
        "model",
        "routed_experts_weights_of_layer",
        "set_eagle3_layers_to_capture",
        "set_embed_and_head",
        "forward(pp_proxy_tensors)",
        "get_model_config_for_expert_location",
    )
}


@pytest.fixture(scope="module")
def pristine():
    source.prepare(PIN, REPO_ROOT)
    return source.pristine_tree(PIN.version, PIN)


@pytest.fixture
def empty_series(tmp_path):
    return read_series(make_project(tmp_path / "project", {}))


def gate(tree, series, accepted: set[str]):
    pin = dataclasses.replace(
        PIN, required_checks=("kimi-k25-eagle3-interface",), accepted=tuple((s, "test") for s in sorted(accepted))
    )
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


def test_find_line_names_the_line_it_finds():
    assert find_line(REPO_ROOT, "latest") == Line("latest", REPO_ROOT / "lines" / "latest", REPO_ROOT)
    assert find_line(REPO_ROOT) == Line("production", REPO_ROOT, REPO_ROOT)
    assert find_line(REPO_ROOT).command("prepare") == "python build.py prepare"
    assert find_line(REPO_ROOT, "latest").command("prepare") == "python build.py --line latest prepare"


def test_lines_add_returns_the_line_and_logs_how_it_was_made(tmp_path):
    repo = make_project(tmp_path / "repo", {})
    assert add_line(repo, "next", "production", bare=False, release=None) == Line("next", repo / "lines" / "next", repo)
    log = run_cli(repo, "--line", "next", "log")
    assert log.returncode == 0 and log.stdout.rstrip().endswith("lines --add next --from production"), log.stdout
    with pytest.raises(UserError, match="'Next' cannot name a line: use lower-case letters, digits and '-'"):
        add_line(repo, "Next", "production", bare=False, release=None)


def test_lines_add_that_fails_midway_leaves_nothing(tmp_path, monkeypatch):
    repo = make_project(tmp_path / "repo", {})
    (repo / "lines").mkdir()

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shutil, "copytree", disk_full)
    with pytest.raises(OSError, match="No space left"):
        add_line(repo, "next", "production", bare=False, release=None)
    assert list((repo / "lines").iterdir()) == []  # the scratch copy is gone too


def test_lines_add_racing_another_lines_add_refuses(tmp_path, monkeypatch):
    repo = make_project(tmp_path / "repo", {})
    copytree = shutil.copytree

    def another_command_meanwhile(source, target, **kwargs):
        copytree(source, target, **kwargs)
        (repo / "lines" / "next").mkdir()
        (repo / "lines" / "next" / "upstream.toml").write_text("the other command's line\n")

    monkeypatch.setattr(shutil, "copytree", another_command_meanwhile)
    with pytest.raises(UserError, match="^lines/next was created by another command meanwhile: pick another name$"):
        add_line(repo, "next", "production", bare=False, release=None)
    assert [p.name for p in (repo / "lines").iterdir()] == ["next"]  # ours is gone, theirs untouched
    assert (repo / "lines" / "next" / "upstream.toml").read_text() == "the other command's line\n"


def test_an_unknown_line_is_a_one_line_error():
    assert_one_line_error(run_cli(REPO_ROOT, "--line", "nightly"), "unknown line 'nightly'", "production, latest")


@pytest.mark.parametrize("value", ["..", "", "/tmp", "../latest", "lines/latest", "./latest", "Latest", "latest/"])
def test_a_line_is_a_name_never_a_path(value):
    # `..` names the repository root, which holds a pin: before, it ran on production silently
    with pytest.raises(
        UserError, match=f"^'{re.escape(value)}' is not a line name .*never a path\\): use one of the known lines"
    ):
        find_line(REPO_ROOT, value)


@pytest.mark.parametrize("command", [["status"], ["rehearse"], ["lines", "--add", "x", "--from"]])
def test_every_command_refuses_a_path_for_a_line(command):
    args = ["--line", ".."] + command if command[0] != "lines" else [*command, ".."]
    assert_one_line_error(run_cli(REPO_ROOT, *args), "'..' is not a line name")


def test_a_reserved_name_is_not_offered_as_a_line_to_start():
    line = assert_one_line_error(run_cli(REPO_ROOT, "--line", "build", "status"), "unknown line 'build'")
    assert "lines --add" not in line


def test_lines_add_with_an_empty_name_is_an_error_not_the_listing():
    result = run_cli(REPO_ROOT, "lines", "--add", "")
    assert_one_line_error(result, "'' cannot name a line")
    assert "production" not in result.stdout


@pytest.mark.parametrize("line", line_names())
def test_every_line_builds_its_wheel_through_its_gates(line):
    """`python build.py --line L`: the line's pristine release + series -> the gates -> its wheel."""
    root = find_line(REPO_ROOT, line).root
    pin, series = read_pin(root), read_series(root)
    result = run_cli(REPO_ROOT, "--line", line, "build", "--rebuild", "--json")  # the gates run, not reused
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["version"] == pin.local_version and data["patches"] == series.names
    assert data["wheel"].startswith(str(root / "dist" / f"sglang-{pin.local_version}-"))
    # an overlay per pinned upstream wheel (one per CPython on a platform-wheel release)
    assert [Path(w["path"]).name.split("-", 2)[2] for w in data["wheels"]] == [
        a.filename.split("-", 2)[2] for a in pin.wheels
    ]
    assert data["wheels"][0] == {"path": data["wheel"], "sha256": data["sha256"]}
    gates = {*pin.required_checks, *series.check_names()}
    assert gates and all(f"check {name}: ok" in result.stderr for name in gates), result.stderr

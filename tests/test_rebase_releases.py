"""`rebase --onto` with our real series on real SGLang releases from PyPI."""

from __future__ import annotations

import shutil

import pytest

from helpers import REPO_ROOT, commit_project
from sglpatch import rebase
from sglpatch.pin import read_pin
from sglpatch.series import read_series, read_series_names

pytestmark = pytest.mark.slow


def by_drop_check(check: str) -> str:
    for patch in read_series(REPO_ROOT).patches:
        if any(c.kind == "check" and c.value == check for c in patch.drop_when):
            return patch.name
    raise AssertionError(f"no patch in the series is dropped by check:{check}")


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    for name in ("upstream.toml", "CHANGELOG.md", ".gitignore"):
        shutil.copy(REPO_ROOT / name, root / name)
    shutil.copytree(REPO_ROOT / "patches", root / "patches")
    commit_project(root, read_pin(REPO_ROOT).commit)
    return root


def test_onto_0_5_10_drops_the_kimi_delegation_and_keeps_the_capture_wiring(project):
    delegation = by_drop_check("kimi-k25-eagle3-interface")
    wiring = by_drop_check("eagle3-capture-wiring")
    dry = rebase.start(project, "0.5.10", dry_run=True)
    verdicts = {p["name"]: p["verdict"] for p in dry["patches"]}
    assert verdicts[delegation] == "obsolete"
    assert verdicts[wiring] in ("clean", "merged")

    report = rebase.start(project, "0.5.10", commit="1519acf37c23f2189adb93f57ca9cd2db1bebf18")
    skipped = []
    while "stopped" in report:  # a patch that needs porting by hand; not what this test is about
        skipped.append(report["stopped"]["patch"])
        report = rebase.resume(project, "skip")
    assert skipped == [n for n, v in verdicts.items() if v == "conflict"]
    assert {p["name"]: p["verdict"] for p in report["patches"]} == {
        n: ("skipped" if v == "conflict" else v) for n, v in verdicts.items()}
    names = read_series_names(project)
    assert delegation not in names and wiring in names
    assert read_pin(project).version == "0.5.10"
    assert f"dropped {delegation} (upstreamed in 0.5.10)" in (project / "CHANGELOG.md").read_text()

"""`rebase --onto` with our real series on real SGLang releases from PyPI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import git
import pytest
from helpers import REPO_ROOT, commit_project, message

from sglpatch.queue import rebase
from sglpatch.queue.series import read_series, read_series_names
from sglpatch.upstream import source
from sglpatch.upstream.pin import read_pin

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
        n: ("skipped" if v == "conflict" else v) for n, v in verdicts.items()
    }
    names = read_series_names(project)
    assert delegation not in names and wiring in names
    assert read_pin(project).version == "0.5.10"
    assert f"dropped {delegation} (upstreamed in 0.5.10)" in (project / "CHANGELOG.md").read_text()


# ---------------------------------------------------------------- moves and deletions upstream

COLLECTOR = "python/sglang/srt/metrics/collector.py"  # 0.5.10: observability/metrics_collector.py
DELETED = "python/sglang/srt/managers/async_mm_data_processor.py"  # gone in 0.5.10


def one_patch_project(tmp_path: Path, path: str, old: str, new: str) -> Path:
    """A line on the real 0.5.9 whose only patch changes ``old`` to ``new`` in ``path``."""
    pristine = source.pristine_tree("0.5.9", read_pin(REPO_ROOT))
    scratch = git.Repo.init(tmp_path / "scratch")
    target = tmp_path / "scratch" / path
    target.parent.mkdir(parents=True)
    original = (pristine / path).read_text()
    assert original.count(old) == 1, "the premise: the changed text is unique"
    target.write_text(original)
    scratch.git.add("--all")
    scratch.git.commit("-qm", "0.5.9", author="T <t@example.org>")
    target.write_text(original.replace(old, new))
    scratch.git.commit("-qam", message("metrics: a downstream change", drop="upstream>=9"), author="T <t@example.org>")
    root = tmp_path / "project"
    (root / "patches").mkdir(parents=True)
    for name in ("upstream.toml", "CHANGELOG.md", ".gitignore"):
        shutil.copy(REPO_ROOT / name, root / name)
    pin = (root / "upstream.toml").read_text()
    (root / "upstream.toml").write_text(pin.replace(pin[pin.index("checks = ") :].split("\n", 1)[0], "checks = []"))
    (root / "patches" / "0001-downstream.patch").write_text(
        scratch.git.format_patch("--stdout", "-1", "HEAD", strip_newline_in_stdout=False)
    )
    (root / "patches" / "series").write_text("0001-downstream.patch\n")
    commit_project(root, read_pin(REPO_ROOT).commit)
    return root


def test_a_file_upstream_moved_is_followed_to_its_new_path(tmp_path):
    head = "def get_histogram_conf_from_env(env_var_name: str) -> Optional[List[float]]:\n"
    root = one_patch_project(tmp_path, COLLECTOR, head, head + "    # downstream: read once at start-up\n")
    dry = rebase.start(root, "0.5.10", dry_run=True)
    (patch,) = dry["patches"]
    assert patch["verdict"] == "merged", patch
    assert f"{COLLECTOR} moved to python/sglang/srt/observability/metrics_collector.py upstream" in patch["detail"]
    (file,) = patch["file_verdicts"]
    assert (file["path"], file["verdict"]) == ("python/sglang/srt/observability/metrics_collector.py", "moved")
    report = rebase.start(root, "0.5.10", commit="1519acf37c23f2189adb93f57ca9cd2db1bebf18")
    assert "stopped" not in report
    text = (root / "patches" / "0001-downstream.patch").read_text()
    assert "b/python/sglang/srt/observability/metrics_collector.py" in text and COLLECTOR not in text


def test_a_file_upstream_deleted_is_a_conflict_that_says_so(tmp_path):
    original = source.pristine_tree("0.5.9", read_pin(REPO_ROOT)) / DELETED
    first = original.read_text().splitlines(keepends=True)[0]
    root = one_patch_project(tmp_path, DELETED, first, first + "# downstream\n")
    (patch,) = rebase.start(root, "0.5.10", dry_run=True)["patches"]
    assert patch["verdict"] == "conflict" and f"{DELETED} (deleted upstream)" in patch["detail"]
    assert [(f["path"], f["verdict"]) for f in patch["file_verdicts"]] == [(DELETED, "deleted")]
    # the twin: the moved file above is no deletion, so "deleted" is not what every missing file gets


# ---------------------------------------------------------------- suspect merges on real releases

RUNNER = "python/sglang/srt/model_executor/model_runner.py"


def test_a_clean_merge_calling_a_method_removed_in_0_5_11_is_suspect_and_not_on_0_5_10(tmp_path):
    """ModelRunner.init_double_sparsity_channel_config is in 0.5.9 and 0.5.10, gone in 0.5.11; a
    patch that calls it merges without a marker on both."""
    head = "    def load_model(self):\n        tic_total = time.perf_counter()\n"
    root = one_patch_project(tmp_path, RUNNER, head, head + "        self.init_double_sparsity_channel_config(None)\n")
    (gone,) = rebase.start(root, "0.5.11", dry_run=True)["patches"]
    assert gone["verdict"] == "suspect", gone
    assert "init_double_sparsity_channel_config" in gone["detail"]
    (kept,) = rebase.start(root, "0.5.10", dry_run=True)["patches"]
    assert kept["verdict"] in ("clean", "merged"), kept  # the twin: the method is still there


def test_the_corpus_benchmark_rebases_our_own_series_and_refuses_an_unknown_entry():
    """benchmarks/rebase_corpus.py on our production series onto 0.5.10 (it broke once when
    add_line moved and nothing ran it); its twin, an entry id that does not exist, is one line."""
    script = str(REPO_ROOT / "benchmarks" / "rebase_corpus.py")
    done = subprocess.run(
        [sys.executable, script, "--only", "own-production", "--onto", "0.5.10", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = json.loads(done.stdout)["runs"]
    names = read_series_names(REPO_ROOT)
    hunks = sum((REPO_ROOT / "patches" / n).read_text().count("\n@@ -") for n in names)
    assert (run["entry"], run["onto"], run["patches"], run["hunks"], run["error"]) == (
        "own-production",
        "0.5.10",
        len(names),
        hunks,
        "",
    )
    assert sum(run["verdicts"].values()) == run["patches"] and 0 < run["carried"] < run["hunks"]
    bad = subprocess.run(
        [sys.executable, script, "--only", "no-such-entry"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: no corpus entry no-such-entry: the entries are ")

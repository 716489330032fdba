"""The series file and patch headers: parsing, validation and bad input."""

from __future__ import annotations

import pytest

from helpers import assert_one_line_error, make_project, make_upstream, message, patch_text, run_cli
from sglpatch.errors import UserError
from sglpatch.series import parse_drop_when, read_series, trailer_problems, write_series

KIMI = "python/sglang/srt/models/kimi_k25.py"


@pytest.fixture
def good_patch(tmp_path):
    repo, base = make_upstream(tmp_path / "up")
    return patch_text(repo, base, {KIMI: "class KimiK25:\n    pass\n"},
                      message("kimi: pass", "Backport [v0.5.10]", "check:kimi, upstream>=0.5.12"))


def test_series_reads_names_trailers_and_files(tmp_path, good_patch):
    root = make_project(tmp_path / "p", {"0001-a.patch": good_patch})
    (root / "patches" / "series").write_text("# comment\n\n0001-a.patch -p1  # trailing comment\n")
    series = read_series(root)
    (patch,) = series.patches
    assert patch.subject == "kimi: pass"
    assert patch.upstream_status == "Backport [v0.5.10]"
    assert [str(c) for c in patch.drop_when] == ["check:kimi", "upstream>=0.5.12"]
    assert patch.files == (KIMI,)
    assert trailer_problems(patch) == []
    assert len(series.fingerprint()) == 64


def test_fingerprint_changes_with_any_patch_byte(tmp_path, good_patch):
    root = make_project(tmp_path / "p", {"0001-a.patch": good_patch})
    before = read_series(root).fingerprint()
    (root / "patches" / "0001-a.patch").write_text(good_patch.replace("pass", "pass  "))
    assert read_series(root).fingerprint() != before


def test_missing_trailers_are_reported(tmp_path):
    repo, base = make_upstream(tmp_path / "up")
    bare = patch_text(repo, base, {KIMI: "x = 1\n"}, "kimi: no trailers\n\nJust a body.\n")
    root = make_project(tmp_path / "p", {"0001-bare.patch": bare})
    problems = trailer_problems(read_series(root).patches[0])
    assert problems == ["no Upstream-Status: trailer",
                        "no Drop-When: trailer saying when the patch can be dropped"]


@pytest.mark.parametrize("value, error", [("nonsense", "cannot read Drop-When"),
                                          ("upstream>=banana", "no valid version")])
def test_bad_drop_conditions_are_rejected(tmp_path, value, error):
    with pytest.raises(UserError, match=error):
        parse_drop_when(value, tmp_path / "x.patch")


def test_malformed_patch_file_is_one_clear_error(tmp_path):
    root = make_project(tmp_path / "p", {"0001-bad.patch": "this is not a patch\n"})
    assert_one_line_error(run_cli(root, "build"), "0001-bad.patch", "not a git format-patch file")


def test_patch_without_a_diff_is_rejected(tmp_path, good_patch):
    header = good_patch.split("\n---\n", 1)[0] + "\n"
    root = make_project(tmp_path / "p", {"0001-empty.patch": header})
    assert_one_line_error(run_cli(root, "build"), "0001-empty.patch", "no diff")


def test_series_naming_a_missing_file(tmp_path, good_patch):
    root = make_project(tmp_path / "p", {"0001-a.patch": good_patch}, ["0001-a.patch", "0002-gone.patch"])
    assert_one_line_error(run_cli(root, "build"), "0002-gone.patch", "does not exist")


def test_duplicate_series_entry(tmp_path, good_patch):
    root = make_project(tmp_path / "p", {"0001-a.patch": good_patch}, ["0001-a.patch", "0001-a.patch"])
    assert_one_line_error(run_cli(root, "build"), "0001-a.patch", "listed twice")


def test_stray_patch_file_is_a_warning_not_an_error(tmp_path, good_patch):
    root = make_project(tmp_path / "p", {"0001-a.patch": good_patch, "0009-forgotten.patch": good_patch},
                        ["0001-a.patch"])
    warnings = []
    series = read_series(root, warn=warnings.append)
    assert series.names == ["0001-a.patch"]
    assert series.stray == ("0009-forgotten.patch",)
    assert warnings and "0009-forgotten.patch" in warnings[0] and "not in the series" in warnings[0]


def test_missing_series_file(tmp_path):
    (tmp_path / "upstream.toml").write_text("[upstream]\n")
    with pytest.raises(UserError, match="no series file"):
        read_series(tmp_path)


def test_write_series_keeps_the_header_comment(tmp_path):
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "series").write_text("# Our series\n# second line\n\na.patch\n")
    write_series(tmp_path, ["a.patch", "b.patch"])
    assert (tmp_path / "patches" / "series").read_text() == "# Our series\n# second line\n\na.patch\nb.patch\n"

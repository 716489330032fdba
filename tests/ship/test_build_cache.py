"""What a build reuses (``sglpatch.ship.build_cache``): a whole build whose inputs and outputs are
unchanged, and the gate's verdict on an unchanged tree; each invalidation, and each cache entry
tampered with on disk, makes the build do the work again."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import git
import pytest
from helpers import REPO_ROOT, make_project, run_cli
from test_build import KIMI, pristine, real_patch  # noqa: F401  (pristine: a fixture)

from sglpatch import cache
from sglpatch.cache import cache_dir, file_sha256, source_digest
from sglpatch.queue.series import read_series
from sglpatch.ship.build import build
from sglpatch.ship.build_cache import REUSED_NOTE, build_key, gate_key
from sglpatch.upstream.pin import read_pin

VERDICT_REUSED = "is reused (same tree, same checks)"


@pytest.fixture
def project(pristine, tmp_path):  # noqa: F811
    root = make_project(tmp_path / "project", {"0001-marker.patch": real_patch(pristine, tmp_path / "p", "kimi: m")})
    first = run_cli(root, "--json")
    assert first.returncode == 0, first.stderr
    return root, json.loads(first.stdout)


def build_again(root: Path, *args: str) -> tuple[dict, str]:
    result = run_cli(root, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result.stderr


def modules_loaded(root: Path, *args: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", str(REPO_ROOT / "build.py"), "--root", str(root), *args],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return {line.rpartition("|")[2].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}


def entry_of(kind: str, root: Path) -> tuple[Path, dict]:
    """The project's cache entry of ``kind``: its build's, or the gate's verdict on its work tree."""
    if kind == "builds":
        key = build_key(root)
    else:
        pin, series = read_pin(root), read_series(root)
        tree = git.Repo(root / "build" / "src").head.commit.tree.hexsha
        names = list(dict.fromkeys([*pin.required_checks, *series.check_names()]))
        key = gate_key(tree, names, dict(pin.accepted), series.touched_files())
    path = cache_dir() / kind / f"{key}.json"
    return path, json.loads(path.read_text())


def test_a_build_with_nothing_changed_is_reused_without_loading_git_or_the_checks(project):
    root, first = project
    again, said = build_again(root)
    assert REUSED_NOTE in said and "check " not in said
    assert again == first
    loaded = modules_loaded(root)
    assert "git" not in loaded and "sglpatch.contract" not in loaded


@pytest.mark.parametrize(
    "args", [["build", "--json"], ["--json", "build", "--line", "production"], ["--line=production"]]
)
def test_every_spelling_of_a_plain_build_is_answered_before_the_commands_load(project, args):
    root, _ = project
    assert "git" not in modules_loaded(root, *args)


@pytest.mark.parametrize("args", [["build", "--rebuild"], ["status"], ["--jso"]])
def test_anything_but_a_plain_build_goes_to_the_commands(project, args):
    root, _ = project
    assert "git" in modules_loaded(root, *args)  # argparse takes --jso for --json: the full path decides


def test_rebuild_does_the_whole_build_and_loads_what_it_needs(project):
    root, first = project
    again, said = build_again(root, "build", "--rebuild")
    assert REUSED_NOTE not in said and VERDICT_REUSED not in said
    assert "applied 0001-marker.patch" in said
    assert again["sha256"] == first["sha256"]
    assert {"git", "sglpatch.contract"} <= modules_loaded(root, "build", "--rebuild")


def test_an_edited_patch_builds_again(project, pristine, tmp_path):  # noqa: F811
    root, first = project
    # new to every run: a tree checked by an earlier run would have its verdict reused, rightly
    edited = (pristine / KIMI).read_text() + f"\nSGLPATCH_TEST_MARKER = '{uuid.uuid4()}'\n"
    (root / "patches" / "0001-marker.patch").write_text(
        real_patch(pristine, tmp_path / "q", "kimi: m", new_text=edited)
    )
    again, said = build_again(root)
    assert REUSED_NOTE not in said and VERDICT_REUSED not in said  # a checked file changed: the gate runs
    assert again["sha256"] != first["sha256"]


def test_a_patch_whose_message_alone_changed_reuses_the_gates_verdict(project):
    root, first = project
    patch = root / "patches" / "0001-marker.patch"
    text = patch.read_text()
    assert text.count("\nUpstream-Status:") == 1
    patch.write_text(text.replace("\nUpstream-Status:", "\nWhy: a longer explanation.\n\nUpstream-Status:"))
    again, said = build_again(root)
    assert REUSED_NOTE not in said and VERDICT_REUSED in said
    assert again["sha256"] != first["sha256"]  # its provenance's series fingerprint covers the patch bytes


def test_an_edited_pin_builds_again(project):
    root, _ = project
    pin = root / "upstream.toml"
    pin.write_text(pin.read_text() + "\n# a maintainer's note\n")
    _, said = build_again(root)
    assert REUSED_NOTE not in said


def test_a_new_code_version_builds_again(project, monkeypatch, capsys):
    root, _ = project
    keys = build_key(root), gate_key("tree", ["a-check"], {}, [])
    monkeypatch.setattr(cache, "_CODE_VERSION", [f"another version of the checks {uuid.uuid4()}"])
    assert build_key(root) != keys[0] and gate_key("tree", ["a-check"], {}, []) != keys[1]
    build(root)
    said = capsys.readouterr().err
    assert REUSED_NOTE not in said and VERDICT_REUSED not in said


def test_the_code_version_covers_every_source_file(tmp_path):
    package = tmp_path / "pkg"
    shutil.copytree(REPO_ROOT / "sglpatch", package, ignore=shutil.ignore_patterns("__pycache__"))
    before = source_digest(package)
    assert source_digest(package) == before
    check = package / "contract" / "named.py"
    check.write_text(check.read_text() + "\n# one more line\n")
    assert source_digest(package) != before


def test_a_tampered_wheel_in_dist_is_built_again(project):
    root, first = project
    wheel = Path(first["wheel"])
    wheel.write_bytes(wheel.read_bytes() + b"tampered")
    again, said = build_again(root)
    assert REUSED_NOTE not in said and VERDICT_REUSED in said  # the tree is unchanged: only the wheel is redone
    assert again["sha256"] == first["sha256"]
    assert file_sha256(wheel) == first["sha256"]


def test_a_record_whose_work_tree_is_gone_builds_again(project):
    # a directory made anew at the same path (pytest's numbered temp dirs come back) with the same
    # content has the same key: the record must not stand for a work tree that is not there
    root, first = project
    shutil.rmtree(root / "build")
    shutil.rmtree(root / "dist")
    again, said = build_again(root)
    assert REUSED_NOTE not in said and "applied 0001-marker.patch" in said
    assert again["sha256"] == first["sha256"]


def test_a_deleted_wheel_is_built_again(project):
    root, first = project
    Path(first["wheel"]).unlink()
    again, said = build_again(root)
    assert REUSED_NOTE not in said
    assert Path(again["wheel"]).is_file()


@pytest.mark.parametrize("kind", ["builds", "verdicts"])
def test_a_cache_entry_edited_on_disk_is_ignored_with_a_warning(project, kind):
    root, first = project
    entry, data = entry_of(kind, root)
    if kind == "builds":
        data["body"]["result"]["sha256"] = "0" * 64
    else:
        data["body"]["said"] = ["check every-check: ok"]
    entry.write_text(json.dumps(data))
    Path(first["wheel"]).unlink()  # the build runs: its gate meets the verdict entry
    again, said = build_again(root)
    assert "does not match its sha256" in said
    assert (REUSED_NOTE if kind == "builds" else VERDICT_REUSED) not in said
    assert again["sha256"] == first["sha256"]


def test_an_entry_that_matches_its_digest_is_reused(project):
    # the twin of the tampering test: the same path through the cache, untouched
    root, first = project
    Path(first["wheel"]).unlink()
    _, said = build_again(root)
    assert "does not match" not in said and VERDICT_REUSED in said


def test_a_work_tree_with_an_uncommitted_edit_is_not_reused(project):
    root, _ = project
    edited = root / "build" / "src" / KIMI
    edited.write_text(edited.read_text() + "# mine\n")
    result = run_cli(root)
    assert result.returncode != 0 and "uncommitted edits" in result.stderr
    assert edited.read_text().endswith("# mine\n")

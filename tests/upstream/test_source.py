"""Getting pristine upstream releases: the real PyPI artifacts, checksums, and no network."""

from __future__ import annotations

import shutil

from helpers import assert_one_line_error, make_project, run_cli
from release_cache import PIN, UNREACHABLE, isolated_cache, pinned_commit  # noqa: F401  (fixtures)

from sglpatch.upstream import source


def test_pinned_release_imports_from_the_real_sdist(pinned_commit):
    commit, _ = pinned_commit
    tree = source.pristine_tree(PIN.version, PIN)
    assert (tree / "python/sglang/srt/models/kimi_k25.py").is_file()
    assert (tree / "python/pyproject.toml").is_file()
    text = (tree / "python/sglang/srt/models/kimi_k25.py").read_text()
    assert "class KimiK25ForConditionalGeneration" in text
    assert "set_eagle3_layers_to_capture" not in text  # the bug this fork exists for
    message = source.open_mirror().commit(commit).message
    assert PIN.artifact("sdist").sha256 in message
    assert source.release_artifact(PIN.version, "wheel", PIN).name == PIN.artifact("wheel").filename


def test_second_run_needs_no_network(tmp_path, pinned_commit):
    source.release_artifact(PIN.version, "wheel", PIN)  # sdist and wheel now cached
    root = make_project(tmp_path / "p", {})
    result = run_cli(root, "build", env={"SGLPATCH_INDEX_URL": UNREACHABLE})
    assert result.returncode == 0, result.stderr


def test_a_wrong_pin_sha256_fails_though_the_real_release_is_cached_and_in_the_mirror(
    pinned_commit, isolated_cache, tmp_path, monkeypatch
):
    commit, sdist = pinned_commit
    (isolated_cache / "artifacts").mkdir(parents=True)
    shutil.copy(sdist, isolated_cache / "artifacts" / sdist.name)
    assert source.import_release(PIN.version, PIN) == commit  # verified and in the mirror
    root = make_project(tmp_path / "p", {})
    right = PIN.artifact("sdist").sha256
    wrong = right[::-1]
    (root / "upstream.toml").write_text((root / "upstream.toml").read_text().replace(right, wrong))
    result = run_cli(root, "prepare", env={"SGLPATCH_INDEX_URL": UNREACHABLE, "SGLPATCH_CACHE": str(isolated_cache)})
    assert_one_line_error(result, "checksum mismatch", sdist.name, "upstream.toml", wrong, right)
    # the twin: the right pin, same cache, offline: the mirror's record of the artifact verifies it
    monkeypatch.setenv("SGLPATCH_INDEX_URL", UNREACHABLE)
    assert source.import_release(PIN.version, PIN) == commit

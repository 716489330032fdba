"""The local git mirror of pristine releases (``sglpatch.upstream.mirror``): each release imported
once from its verified sdist or wheel, reproducibly, and nothing written outside the import."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import REPO_ROOT
from release_cache import PIN, isolated_cache, local_index, pinned_commit  # noqa: F401  (fixtures)

from sglpatch.errors import UserError
from sglpatch.upstream import source
from sglpatch.upstream.pin import read_pin


def test_import_is_reproducible(pinned_commit, isolated_cache):
    commit, sdist = pinned_commit
    (isolated_cache / "artifacts").mkdir(parents=True)
    shutil.copy(sdist, isolated_cache / "artifacts" / sdist.name)
    # Same artifact, fresh mirror: the same commit, so work trees and exports agree everywhere.
    assert source.import_release(PIN.version, PIN) == commit


def test_wheel_only_release_imports_from_its_wheel():
    tree = source.pristine_tree("0.5.12")
    assert (tree / "python/sglang/srt/models/kimi_k25.py").is_file()
    assert not list((tree / "python").rglob("*.so"))
    assert not list((tree / "python").glob("*.dist-info"))


def test_a_wheel_import_keeps_the_executable_bits_the_wheel_records(isolated_cache):
    """0.5.23 (the latest line's release) ships only wheels; amx_utils.py is executable in them,
    so a patch to it must say 100755, not turn it into 100644 on re-export."""
    import os
    import zipfile

    latest = read_pin(REPO_ROOT / "lines" / "latest")
    wheel = latest.artifact("wheel")
    shared = Path.home() / ".cache" / "sglpatch" / "artifacts" / wheel.filename
    (isolated_cache / "artifacts").mkdir(parents=True)
    if shared.exists():  # warm machine: no download; a fresh import into the isolated mirror either way
        shutil.copy(shared, isolated_cache / "artifacts" / wheel.filename)
    executable = "sglang/srt/layers/amx_utils.py"
    path = source.release_artifact("0.5.23", "wheel", latest)
    assert (zipfile.ZipFile(path).getinfo(executable).external_attr >> 16) & 0o111, "the premise"
    commit = source.import_release("0.5.23", latest)
    listing = source.open_mirror().git.ls_tree(
        "-r", commit, "--", f"python/{executable}", "python/sglang/srt/models/kimi_k25.py"
    )
    modes = {path: mode for mode, _, _, path in (line.split(None, 3) for line in listing.splitlines())}
    assert modes == {f"python/{executable}": "100755", "python/sglang/srt/models/kimi_k25.py": "100644"}
    assert os.access(source.pristine_tree("0.5.23", latest) / "python" / executable, os.X_OK)


def test_an_import_shares_no_scratch_file_with_other_processes(pinned_commit, isolated_cache, tmp_path, monkeypatch):
    """A git process of someone else's holding ``$TMPDIR/index.lock`` (as a concurrent import once
    did: the scratch index was ``$TMPDIR/index``) does not disturb an import."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    (scratch / "index.lock").write_text("held by another git process")
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    commit, sdist = pinned_commit
    (isolated_cache / "artifacts").mkdir(parents=True)
    shutil.copy(sdist, isolated_cache / "artifacts" / sdist.name)
    assert source.import_release(PIN.version, PIN) == commit
    assert sorted(p.name for p in scratch.iterdir()) == ["index.lock"]


def test_a_git_error_is_told_by_git_s_last_line_without_gitpython_s_framing():
    import git

    error = git.exc.GitCommandError(["git", "update-ref"], 128, stderr="error: one\nfatal: the last word X\n")
    assert source._git_reason(error) == "fatal: the last word X"
    assert source._git_reason(git.exc.GitCommandError(["git", "fsck"], 1, stderr="")) == "GitCommandError"
    assert source._git_reason(git.exc.NoSuchPathError("/nowhere")) == "NoSuchPathError"
    assert source._git_reason(git.exc.InvalidGitRepositoryError("/tmp")) == "not a git repository"


def test_a_release_without_an_sdist_or_a_wheel_this_python_takes_is_one_error(isolated_cache, local_index, monkeypatch):
    monkeypatch.setenv("SGLPATCH_INDEX_URL", local_index.url)
    local_index.publish("sglang-4.0.0-cp39-cp39-manylinux_2_28_x86_64.whl", b"only for 3.9")
    with pytest.raises(UserError) as error:
        source.import_release("4.0.0")
    assert str(error.value) == "SGLang 4.0.0 has neither an sdist nor a usable wheel on the index: pick another release"


def test_a_pin_naming_only_a_wheel_imports_that_wheel_though_the_index_has_an_sdist(
    isolated_cache, local_index, monkeypatch
):
    """A pin without an sdist names the wheel its release is made from: that wheel is imported,
    verified against the pin, never the sdist the index also offers. The twin: a pin naming the
    sdist imports the sdist."""
    import io
    import zipfile

    from helpers import sdist_bytes

    from sglpatch.upstream.pin import Artifact

    monkeypatch.setenv("SGLPATCH_INDEX_URL", local_index.url)
    pins = {}
    for version, kind in (("5.0.0", "wheel"), ("5.1.0", "sdist")):
        sdist = f"sglang-{version}.tar.gz"
        shas = {
            "sdist": local_index.publish(sdist, sdist_bytes(version, {"python/sglang/origin.py": "FROM = 'sdist'\n"}))
        }
        raw = io.BytesIO()
        with zipfile.ZipFile(raw, "w") as whl:
            whl.writestr("sglang/origin.py", "FROM = 'wheel'\n")
            whl.writestr(f"sglang-{version}.dist-info/METADATA", f"Name: sglang\nVersion: {version}\n")
        wheel = f"sglang-{version}-py3-none-any.whl"
        shas["wheel"] = local_index.publish(wheel, raw.getvalue())
        named = {"sdist": sdist, "wheel": wheel}[kind]
        pins[version] = PIN.with_release(version, f"v{version}", None, (Artifact(kind, named, shas[kind]),))
    imported = {
        version: source.open_mirror().git.show(f"{source.import_release(version, pin)}:python/sglang/origin.py")
        for version, pin in pins.items()
    }
    assert imported == {"5.0.0": "FROM = 'wheel'", "5.1.0": "FROM = 'sdist'"}


def test_an_sdist_member_that_climbs_out_of_the_tree_is_refused_and_written_nowhere(
    isolated_cache, local_index, monkeypatch, tmp_path
):
    """An artifact is verified against the pin, not trusted: an sdist member named ``../../../x``
    (or a wheel's ``../x``) is one error naming it, with nothing written outside the import's tree
    and nothing imported. The twin: the same sdist without it imports."""
    import io
    import tempfile
    import zipfile

    from helpers import sdist_bytes

    from sglpatch.errors import UserError
    from sglpatch.upstream.pin import Artifact

    monkeypatch.setenv("SGLPATCH_INDEX_URL", local_index.url)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    files = {"python/sglang/origin.py": "FROM = 'sdist'\n"}
    for version, climbing in (("6.0.0", True), ("6.1.0", False)):
        sdist = f"sglang-{version}.tar.gz"
        extra = {"python/../../../escaped.py": "ESCAPED = True\n"} if climbing else {}
        sha = local_index.publish(sdist, sdist_bytes(version, files | extra))
        pin = PIN.with_release(version, f"v{version}", None, (Artifact("sdist", sdist, sha),))
        if climbing:
            with pytest.raises(
                UserError,
                match=r"sglang-6\.0\.0\.tar\.gz holds \.\./\.\./\.\./escaped\.py, which "
                r"would be written outside its tree",
            ):
                source.import_release(version, pin)
            assert list((tmp_path / "tmp").iterdir()) == [] and not (tmp_path / "escaped.py").exists()
            assert "release/6.0.0" not in [t.name for t in source.open_mirror().tags]
        else:
            assert (
                source.open_mirror().git.show(f"{source.import_release(version, pin)}:python/sglang/origin.py")
                == "FROM = 'sdist'"
            )
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w") as whl:
        whl.writestr("sglang/origin.py", "FROM = 'wheel'\n")
        whl.writestr("../escaped.py", "ESCAPED = True\n")
    wheel = "sglang-6.2.0-py3-none-any.whl"
    pin = PIN.with_release(
        "6.2.0", "v6.2.0", None, (Artifact("wheel", wheel, local_index.publish(wheel, raw.getvalue())),)
    )
    with pytest.raises(UserError, match=r"sglang-6\.2\.0-py3-none-any\.whl holds \.\./escaped\.py, which would be"):
        source.import_release("6.2.0", pin)
    assert list((tmp_path / "tmp").iterdir()) == [], "nothing beside the import's tree"


def test_the_mirror_check_runs_the_git_gitpython_is_told_to(tmp_path, monkeypatch):
    """An operator may point GitPython at another git (GIT_PYTHON_GIT_EXECUTABLE): the object
    check, which runs git itself, runs that one too. The twin: through it, a lost blob is found."""
    import git

    repo = git.Repo.init(tmp_path / "mirror")
    (tmp_path / "mirror" / "a.py").write_text("x = 1\n")
    repo.git.add("a.py")
    repo.git.commit(
        "-qm",
        "one file",
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid",
        },
    )
    commit = repo.head.commit.hexsha
    log = tmp_path / "calls"
    wrapper = tmp_path / "operators-git"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec git "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setattr(git.Git, "GIT_PYTHON_GIT_EXECUTABLE", str(wrapper))
    assert source._commit_problem(repo, commit) is None
    assert any(line.endswith("cat-file --batch-check") for line in log.read_text().splitlines()), log.read_text()
    blob = repo.git.rev_parse("HEAD:a.py")
    (Path(repo.git_dir) / "objects" / blob[:2] / blob[2:]).unlink()
    assert source._commit_problem(repo, commit) == f"points to a commit {commit[:12]} whose tree lacks 1 file objects"

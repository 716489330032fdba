"""Verify on every run: the cache (artifacts, git mirror, pristine trees) is checked against the pin
each time a release is used, and a corrupt or foreign cache is rebuilt or refused in one line.

Real files and real git repositories throughout; releases are served from a package index on
loopback, and each check has a negative twin proving it fires.
"""

from __future__ import annotations

import hashlib
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    AUTHOR_ENV,
    REPO_ROOT,
    assert_one_line_error,
    make_upstream,
    pin_text,
    run_cli,
    sdist_bytes,
)
from release_cache import FILES, OTHER, SDIST, env, mirror_git  # noqa: F401  (env is a fixture)

from sglpatch.cache import cache_dir
from sglpatch.errors import UserError
from sglpatch.lock import exclusive
from sglpatch.upstream import mirror, source
from sglpatch.upstream.pin import read_pin

UNREACHABLE = "http://127.0.0.1:9/simple"
WRONG = hashlib.sha256(b"not the sdist").hexdigest()


def offline(monkeypatch) -> None:
    """From here on the index cannot be reached: whatever works, works from the cache."""
    monkeypatch.setenv("SGLPATCH_INDEX_URL", UNREACHABLE)
    source._CACHED_LISTING.clear()


def imported(env) -> str:
    return source.import_release("1.0.0", read_pin(env.root))


def loose_object(env, sha: str) -> Path:
    return env.mirror / "objects" / sha[:2] / sha[2:]


def prepare(env, *, index: str | None = UNREACHABLE) -> subprocess.CompletedProcess:
    return run_cli(env.root, "prepare", env={**env.env, "SGLPATCH_INDEX_URL": index or env.index.url})


# ---------------------------------------------------------------- the pin's sha256, on every use


def test_a_verified_release_is_reused_offline(env, monkeypatch):
    commit = imported(env)
    offline(monkeypatch)
    assert imported(env) == commit
    assert (source.pristine_tree("1.0.0", read_pin(env.root)) / OTHER).read_text() == "VALUE = 1\n"
    result = prepare(env)
    assert result.returncode == 0, result.stderr


def test_a_wrong_pin_sha256_fails_even_when_everything_is_cached(env):
    assert prepare(env, index=None).returncode == 0  # in the mirror, artifact cached
    (env.root / "upstream.toml").write_text(pin_text("1.0.0", WRONG))
    # the cached artifact is checked against the pin
    assert_one_line_error(prepare(env), "checksum mismatch", SDIST, "upstream.toml", WRONG, env.sha)
    assert not env.artifact.exists()  # moved aside: never used unverified
    # nothing cached now: the mirror's record of the artifact it was made from still disagrees
    line = assert_one_line_error(prepare(env), "checksum mismatch", SDIST, "upstream.toml", WRONG, env.sha)
    assert "tag -d release/1.0.0" in line
    # the pin corrected: the mirror's commit is verified by its record, offline
    (env.root / "upstream.toml").write_text(pin_text("1.0.0", env.sha))
    result = prepare(env)
    assert result.returncode == 0, result.stderr


def test_a_wrong_pin_sha256_fails_a_cached_pristine_tree_too(env):
    """The tree is checked out from the mirror, but only after the pin's sha256 is checked again."""
    tree = source.pristine_tree("1.0.0", read_pin(env.root))
    (env.root / "upstream.toml").write_text(pin_text("1.0.0", WRONG))
    with pytest.raises(UserError, match="checksum mismatch") as error:
        source.pristine_tree("1.0.0", read_pin(env.root))
    assert WRONG in str(error.value) and env.sha in str(error.value)
    (env.root / "upstream.toml").write_text(pin_text("1.0.0", env.sha))
    assert source.pristine_tree("1.0.0", read_pin(env.root)) == tree


def test_a_corrupted_cached_artifact_is_detected_on_next_use(env, monkeypatch):
    commit = imported(env)
    data = bytearray(env.artifact.read_bytes())
    data[len(data) // 2] ^= 0xFF
    env.artifact.write_bytes(data)
    with pytest.raises(UserError, match="checksum mismatch") as error:
        imported(env)
    assert hashlib.sha256(data).hexdigest() in str(error.value)
    assert env.artifact.with_name(f"{SDIST}.sha256-mismatch").exists()
    # the mirror's commit stands (its record matches the pin); the artifact is downloaded again
    assert imported(env) == commit
    assert source.release_artifact("1.0.0", "sdist", read_pin(env.root)) == env.artifact
    assert hashlib.sha256(env.artifact.read_bytes()).hexdigest() == env.sha


def test_a_tag_made_from_other_bytes_is_imported_again_from_the_verified_artifact(env, monkeypatch, capsys):
    commit = imported(env)
    forged = _commit_with_message(env, commit, f"SGLang 1.0.0\n\nImported from PyPI: {SDIST}\nsha256: {WRONG}\n")
    offline(monkeypatch)
    assert imported(env) == commit
    assert f"not the pinned {env.sha}" in capsys.readouterr().err
    assert mirror_git(env, "rev-parse", "release/1.0.0") == commit != forged


def test_a_tag_made_from_other_bytes_without_the_artifact_is_one_error(env, monkeypatch):
    commit = imported(env)
    _commit_with_message(env, commit, f"SGLang 1.0.0\n\nImported from PyPI: {SDIST}\nsha256: {WRONG}\n")
    env.artifact.unlink()
    offline(monkeypatch)
    with pytest.raises(UserError, match="checksum mismatch") as error:
        imported(env)
    assert all(s in str(error.value) for s in ("upstream.toml", WRONG, env.sha, "tag -d release/1.0.0"))


@pytest.mark.parametrize(
    "message, reason",
    [
        (
            "Imported from PyPI: sglang-1.1.0.tar.gz\nsha256: {sha}\n",
            f"was imported from sglang-1.1.0.tar.gz, not from the pinned {SDIST}",
        ),
        ("made by hand\n", "({forged}) records no artifact it was imported from"),
    ],
)
def test_a_tag_not_made_from_the_pinned_artifact_is_imported_again(env, monkeypatch, capsys, message, reason):
    commit = imported(env)
    forged = _commit_with_message(env, commit, "SGLang 1.0.0\n\n" + message.format(sha=env.sha))
    offline(monkeypatch)
    assert imported(env) == commit
    said = f"release/1.0.0 in the mirror {reason.format(forged=forged[:12])}: importing it again\n"
    assert capsys.readouterr().err == said


def test_a_tag_an_older_sglpatch_imported_from_a_wheel_is_imported_again(env, capsys):
    """Wheel imports before Import-Format 2 dropped the executable bits the wheel records; the
    twin: the same record with the format line is kept."""
    import io
    import zipfile

    wheel = "sglang-1.2.0-py3-none-any.whl"
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as whl:
        whl.writestr("sglang/srt/other.py", "VALUE = 3\n")
        whl.writestr("sglang/srt/", "")  # a directory entry
        tool = zipfile.ZipInfo("sglang/srt/tool.py")
        tool.external_attr = 0o100755 << 16
        whl.writestr(tool, "#!/usr/bin/env python\n")
        whl.writestr("sglang/srt/kernel.cpython-311-x86_64-linux-gnu.so", b"\x7fELF")
        whl.writestr("sglang-1.2.0.dist-info/METADATA", "Name: sglang\nVersion: 1.2.0\n")
        whl.writestr("sglang-1.2.0.data/scripts/launch", "#!/bin/sh\n")
    sha = env.index.publish(wheel, data.getvalue())
    commit = source.import_release("1.2.0")
    # the source as upstream's repository lays it out: no build outputs, the recorded modes kept
    assert mirror_git(env, "ls-tree", "-r", "--format=%(objectmode) %(path)", commit).splitlines() == [
        "100644 python/sglang/srt/other.py",
        "100755 python/sglang/srt/tool.py",
    ]
    record = f"SGLang 1.2.0\n\nImported from PyPI: {wheel}\nsha256: {sha}\n"
    assert mirror_git(env, "log", "-1", "--format=%B", commit) == record + source.WHEEL_FORMAT.strip()
    assert source.import_release("1.2.0") == commit and capsys.readouterr().err == ""
    _commit_with_message(env, commit, record, tag="release/1.2.0")
    assert source.import_release("1.2.0") == commit
    assert capsys.readouterr().err == (
        "release/1.2.0 in the mirror was imported from a wheel by an older sglpatch, "
        "which lost executable bits: importing it again\n"
    )


def test_another_releases_commit_under_the_tag_is_imported_again(env, monkeypatch, capsys):
    commit = imported(env)
    other = source.import_release("1.1.0")
    mirror_git(env, "update-ref", "refs/tags/release/1.0.0", other)
    offline(monkeypatch)
    assert imported(env) == commit
    assert f"was imported from sglang-1.1.0.tar.gz, not from the pinned {SDIST}" in capsys.readouterr().err


def _commit_with_message(env, commit: str, message: str, tag: str = "release/1.0.0") -> str:
    """Point the release tag at a commit of the same tree whose record names ``message``."""
    tree = mirror_git(env, "rev-parse", f"{commit}^{{tree}}")
    forged = subprocess.run(
        ["git", "--git-dir", str(env.mirror), "commit-tree", tree, "-m", message],
        check=True,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "x",
            "GIT_AUTHOR_EMAIL": "x@x",
            "GIT_COMMITTER_NAME": "x",
            "GIT_COMMITTER_EMAIL": "x@x",
        },
    ).stdout.strip()
    mirror_git(env, "update-ref", f"refs/tags/{tag}", forged)
    return forged


# ---------------------------------------------------------------- the mirror's objects


def test_a_deleted_tag_is_imported_again_from_the_cached_artifact(env, monkeypatch):
    commit = imported(env)
    mirror_git(env, "tag", "-d", "release/1.0.0")
    offline(monkeypatch)
    assert imported(env) == commit
    assert mirror_git(env, "rev-parse", "release/1.0.0") == commit


def test_a_tag_pointing_to_a_missing_object_is_imported_again(env, monkeypatch, capsys):
    commit = imported(env)
    (env.mirror / "refs" / "tags" / "release" / "1.0.0").write_text("1" * 40 + "\n")
    offline(monkeypatch)
    assert imported(env) == commit
    assert "points to a missing or broken object" in capsys.readouterr().err
    assert mirror_git(env, "rev-parse", "release/1.0.0") == commit


def test_a_broken_tag_git_cannot_delete_is_named_with_the_command_that_clears_it(env, monkeypatch):
    """Another git process holding the mirror's packed-refs lock keeps git from deleting the tag."""
    imported(env)
    (env.mirror / "refs" / "tags" / "release" / "1.0.0").write_text("1" * 40 + "\n")
    (env.mirror / "packed-refs.lock").write_text("")
    offline(monkeypatch)
    with pytest.raises(UserError) as error:
        imported(env)
    assert str(error.value) == (
        f"the git mirror {env.mirror} has a broken refs/tags/release/1.0.0 that git cannot "
        f"delete: clear it with `rm -rf {env.mirror}` and rerun"
    )


@pytest.mark.parametrize("kind", ["blob", "tree"])
def test_a_commit_missing_an_object_of_its_tree_is_imported_again(env, monkeypatch, capsys, kind):
    commit = imported(env)
    path = OTHER if kind == "blob" else "python/sglang/srt"
    sha = mirror_git(env, "rev-parse", f"{commit}:{path}")
    loose_object(env, sha).unlink()
    with pytest.raises(subprocess.CalledProcessError):
        mirror_git(env, "cat-file", "-e", sha)
    offline(monkeypatch)
    assert imported(env) == commit
    assert "importing it again" in capsys.readouterr().err
    mirror_git(env, "cat-file", "-e", sha)  # written again by the fresh import
    mirror_git(env, "ls-tree", "-r", commit)


def test_a_corrupt_object_git_cannot_rewrite_is_named_with_the_command_that_clears_it(env):
    assert prepare(env, index=None).returncode == 0
    commit = mirror_git(env, "rev-parse", "release/1.0.0")
    obj = loose_object(env, commit)
    obj.chmod(0o644)
    obj.write_bytes(b"garbage, not a zlib stream")
    line = assert_one_line_error(prepare(env), "corrupt", f"rm -rf {env.mirror}")
    assert "Traceback" not in line
    shutil.rmtree(env.mirror)  # the command the error names
    result = prepare(env)
    assert result.returncode == 0, result.stderr


def test_a_mirror_that_is_no_repository_is_named_with_the_command_that_clears_it(env):
    env.mirror.mkdir(parents=True)
    (env.mirror / "HEAD").write_text("not a ref\n")
    line = assert_one_line_error(
        prepare(env),
        f"the git mirror {env.mirror} is corrupt (not a git repository)",
        f"clear it with `rm -rf {env.mirror}` and rerun",
    )
    assert "Traceback" not in line
    shutil.rmtree(env.mirror)
    assert prepare(env, index=None).returncode == 0


def test_a_tag_git_cannot_read_is_named_with_the_command_that_clears_it(env):
    assert prepare(env, index=None).returncode == 0
    (env.mirror / "refs" / "tags" / "release" / "1.0.0").write_text("not a sha\n")
    line = assert_one_line_error(prepare(env), "release/1.0.0", f"rm -rf {env.mirror}")
    reason = line.partition(" is corrupt (")[2]
    # git's own last line, without GitPython's framing of the command
    assert reason.startswith("fatal: ") and "refs/tags/release/1.0.0" in reason, line
    assert not any(frame in line for frame in ("stderr:", "Cmd(", "exit code(")), line
    shutil.rmtree(env.mirror)
    assert prepare(env).returncode == 0


# ---------------------------------------------------------------- concurrent imports

IMPORT = (
    "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path;"
    "from sglpatch.upstream import source; from sglpatch.upstream.pin import read_pin;"
    "print(source.pristine_tree('1.0.0', read_pin(Path(sys.argv[2]))))"
)


def _importer(env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", IMPORT, str(REPO_ROOT), str(env.root)],
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env.env, "SGLPATCH_INDEX_URL": env.index.url},
    )


def test_concurrent_imports_of_one_release_leave_one_intact_mirror(env):
    children = [_importer(env) for _ in range(4)]
    outputs = [child.communicate(timeout=120) for child in children]
    assert [c.returncode for c in children] == [0] * 4, outputs
    assert {out.strip() for out, _ in outputs} == {str(env.cache / "trees" / "1.0.0")}
    mirror_git(env, "fsck", "--strict")
    assert mirror_git(env, "tag", "--list") == "release/1.0.0"
    assert imported(env) == mirror_git(env, "rev-parse", "release/1.0.0")


def test_an_import_waits_for_the_mirror_lock(env):
    with exclusive(cache_dir() / "mirror.lock", "a test holding the mirror"):
        child = _importer(env)
        ready, _, _ = select.select([child.stderr], [], [], 60)
        said = child.stderr.readline() if ready else ""
        assert "waiting" in said and "a test holding the mirror" in said, said
        time.sleep(0.5)
        assert child.poll() is None  # blocked while the lock is held
        assert not (env.mirror / "refs" / "tags" / "release" / "1.0.0").exists()
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert out.strip() == str(env.cache / "trees" / "1.0.0")


def test_the_mirror_lock_names_the_release_being_imported(env, monkeypatch):
    """What a second importer waiting for the lock is told: which release the holder imports."""
    seen = []
    real = mirror._import

    def importing(*args):
        seen.append((cache_dir() / "mirror.lock").read_text())
        return real(*args)

    monkeypatch.setattr(mirror, "_import", importing)
    source.pristine_tree("1.1.0")
    source.import_release("1.0.0", read_pin(env.root))
    assert seen == [f"{os.getpid()} import of SGLang 1.1.0\n", f"{os.getpid()} import of SGLang 1.0.0\n"]
    assert (cache_dir() / "mirror.lock").read_text() == ""  # released, and its holder gone with it


# ---------------------------------------------------------------- the cache directory itself


def test_an_own_writable_cache_directory_is_used(env):
    assert cache_dir() == env.cache
    assert not [p for p in env.cache.iterdir() if p.name.startswith(".sglpatch-write-probe")]


def test_a_cache_that_is_a_regular_file_is_one_error(env, tmp_path):
    (tmp_path / "file").write_text("")
    result = run_cli(env.root, "prepare", env={"SGLPATCH_CACHE": str(tmp_path / "file")})
    assert_one_line_error(result, str(tmp_path / "file"), "SGLPATCH_CACHE", "is a regular file")


def test_a_cache_below_a_regular_file_is_one_error(env, tmp_path):
    (tmp_path / "file").write_text("")
    result = run_cli(env.root, "prepare", env={"SGLPATCH_CACHE": str(tmp_path / "file" / "cache")})
    assert_one_line_error(result, "cannot be created", "regular file", "SGLPATCH_CACHE")


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root writes through permission bits; the read-only "
    "case root cannot bypass is test_a_cache_root_cannot_write_is_one_error",
)
def test_a_read_only_cache_is_one_error(env, tmp_path):
    cache = tmp_path / "readonly"
    cache.mkdir(mode=0o555)
    try:
        result = run_cli(env.root, "prepare", env={"SGLPATCH_CACHE": str(cache)})
    finally:
        cache.chmod(0o755)
    assert_one_line_error(result, str(cache), "is not writable", "SGLPATCH_CACHE")


@pytest.mark.skipif(
    os.geteuid() != 0,
    reason="/proc is root's: for other users it is another user's "
    "cache, tested by test_a_cache_of_another_user_is_one_error",
)
def test_a_cache_root_cannot_write_is_one_error(env):
    # /proc is a directory root owns and cannot create files in: a probe by writing catches it
    # where permission bits (os.access) would say root may write.
    assert os.access("/proc", os.W_OK)
    result = run_cli(env.root, "prepare", env={"SGLPATCH_CACHE": "/proc"})
    assert_one_line_error(result, "/proc", "is not writable", "SGLPATCH_CACHE")


def test_a_cache_of_another_user_is_one_error(env, tmp_path):
    if os.geteuid() == 0:
        cache = tmp_path / "theirs"
        cache.mkdir()
        os.chown(cache, 65534, 65534)
    else:
        cache = Path("/")  # root's
    result = run_cli(env.root, "prepare", env={"SGLPATCH_CACHE": str(cache)})
    assert_one_line_error(result, str(cache), "belongs to another user", "set SGLPATCH_CACHE to a directory you own")


# ---------------------------------------------------------------- what a mismatch tells to do


def test_a_mismatch_names_the_side_to_correct(env):
    """The index's hash against the bytes it served: download again. The pin's hash against a
    verified download: correct the pin if it is wrong. A file name the pin does not name: refused
    before anything is downloaded."""
    listed = env.index.publish("sglang-1.3.0.tar.gz", sdist_bytes("1.3.0", FILES))
    (env.index.directory / "files" / "sglang-1.3.0.tar.gz").write_bytes(b"served instead")
    served = hashlib.sha256(b"served instead").hexdigest()
    with pytest.raises(UserError) as error:
        source.release_artifact("1.3.0", "sdist")
    aside = env.cache / "artifacts" / "sglang-1.3.0.tar.gz.sha256-mismatch"
    assert str(error.value) == (
        f"checksum mismatch for sglang-1.3.0.tar.gz: the package index says {listed}, "
        f"the file has {served}: rerun to download it again (the file was moved aside "
        f"to {aside})"
    )
    (env.root / "upstream.toml").write_text(pin_text("1.0.0", WRONG))
    with pytest.raises(UserError) as error:
        source.release_artifact("1.0.0", "sdist", read_pin(env.root))
    aside = env.artifact.with_name(f"{SDIST}.sha256-mismatch")
    assert str(error.value) == (
        f"checksum mismatch for {SDIST}: upstream.toml says {WRONG}, the file has "
        f"{env.sha}: correct the sha256 of {SDIST} in upstream.toml if it is wrong; else "
        f"rerun to download the file again (the file was moved aside to {aside})"
    )
    (env.root / "upstream.toml").write_text(pin_text("1.0.0", env.sha).replace(SDIST, "sglang-1.0.0.post0.tar.gz"))
    with pytest.raises(UserError) as error:
        source.release_artifact("1.0.0", "sdist", read_pin(env.root))
    assert str(error.value) == (
        f"the index offers {SDIST} but the pin names sglang-1.0.0.post0.tar.gz: "
        "correct the artifact file name in upstream.toml"
    )
    assert sorted(p.name for p in (env.cache / "artifacts").iterdir()) == [
        f"{SDIST}.sha256-mismatch",
        "sglang-1.3.0.tar.gz.sha256-mismatch",
    ]


# ---------------------------------------------------------------- the submodule as the source


def test_a_submodule_at_the_pinned_commit_is_imported_as_it_is(env, tmp_path):
    """The pinned commit itself, fetched from the populated submodule; the twins: a submodule at
    another commit, a directory that is no repository, and a pin without a commit all import the
    sdist (the same tree, recorded as made from the artifact)."""
    upstream, pinned = make_upstream(tmp_path / "upstream", FILES)
    checkout = Path(upstream.working_tree_dir)
    (env.root / "upstream.toml").write_text(pin_text("1.0.0", env.sha).replace('commit = ""', f'commit = "{pinned}"'))
    pin = read_pin(env.root)
    assert source.import_release("1.0.0", pin, checkout) == pinned
    assert mirror_git(env, "rev-parse", "release/1.0.0") == pinned

    mirror_git(env, "update-ref", "-d", "refs/tags/release/1.0.0")
    upstream.git.commit("--allow-empty", "-qm", "moved on", env={**os.environ, **AUTHOR_ENV})
    from_sdist = source.import_release("1.0.0", pin, checkout)
    assert from_sdist != pinned
    assert f"Imported from PyPI: {SDIST}" in mirror_git(env, "log", "-1", "--format=%B", from_sdist)
    assert mirror_git(env, "rev-parse", f"{from_sdist}^{{tree}}") == mirror_git(env, "rev-parse", f"{pinned}^{{tree}}")
    upstream.git.checkout("-q", pinned)
    (tmp_path / "not-a-repository" / ".git").mkdir(parents=True)
    (env.root / "upstream.toml").write_text(pin_text("1.0.0", env.sha))
    for submodule, with_pin in (
        (tmp_path / "not-a-repository", pin),
        (tmp_path / "missing", pin),
        (checkout, read_pin(env.root)),
    ):  # the last: a pin without a commit
        mirror_git(env, "update-ref", "-d", "refs/tags/release/1.0.0")
        assert source.import_release("1.0.0", with_pin, submodule) == from_sdist

"""Pristine trees (``sglpatch.upstream.trees``): cached, read-only checkouts of a release's commit
in the mirror, each stamped with its commit and a digest of every file so that a checkout edited
since is checked out again; the pinned commit taken from the line's own ``upstream/`` submodule."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers import AUTHOR_ENV, make_upstream, pin_text
from release_cache import FILES, OTHER, env, mirror_git  # noqa: F401  (env is a fixture)

from sglpatch.errors import UserError
from sglpatch.upstream import source, trees
from sglpatch.upstream.pin import read_pin


def test_an_intact_cached_tree_is_reused(env):
    tree = source.pristine_tree("1.0.0", read_pin(env.root))
    stamp = (tree / ".sglpatch-commit").stat()
    assert source.pristine_tree("1.0.0", read_pin(env.root)) == tree
    assert (tree / ".sglpatch-commit").stat().st_ino == stamp.st_ino  # not checked out again


def test_a_checkout_interrupted_before_its_rename_is_cleared_and_done_again(env):
    """A killed checkout leaves ``<version>.part`` beside the trees; the next one starts afresh."""
    trees = env.cache / "trees"
    (trees / "1.0.0.part" / "python").mkdir(parents=True)
    (trees / "1.0.0.part" / "python" / "half-written.py").write_text("x = ")
    tree = source.pristine_tree("1.0.0", read_pin(env.root))
    assert sorted(p.name for p in trees.iterdir()) == ["1.0.0"]
    assert sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()) == sorted(
        [*FILES, ".sglpatch-commit"]
    )


CHANGED = "no longer matches its stamp ({} files now; files deleted, added or edited)"


@pytest.mark.parametrize(
    "damage, reason",
    [
        ("deleted", CHANGED.format(2)),
        ("edited", CHANGED.format(3)),
        ("added", CHANGED.format(4)),
        ("added at the top", CHANGED.format(4)),
        ("moved", CHANGED.format(3)),
        ("linked", CHANGED.format(3)),
        ("linked directory", CHANGED.format(4)),
        ("old stamp", "has a stamp without a file digest"),
        ("no stamp", "has no stamp"),
        ("other commit", "is of another commit"),
        ("a file in its place", "has no stamp"),
    ],
)
def test_a_damaged_cached_tree_is_checked_out_again(env, capsys, tmp_path, damage, reason):
    tree = source.pristine_tree("1.0.0", read_pin(env.root))
    stamp = tree / ".sglpatch-commit"
    if damage == "deleted":
        (tree / OTHER).unlink()
    elif damage == "edited":
        (tree / OTHER).write_text("VALUE = 9\n")
    elif damage == "added":
        (tree / "python/sglang/stray.py").write_text("")
    elif damage == "added at the top":  # beside the stamp
        (tree / "stray.txt").write_text("")
    elif damage == "moved":  # the same bytes under another name
        (tree / OTHER).rename(tree / "python/sglang/srt/stray.py")
    elif damage == "linked":  # the same bytes, read through a link
        (tmp_path / "same.py").write_text((tree / OTHER).read_text())
        (tree / OTHER).unlink()
        (tree / OTHER).symlink_to(tmp_path / "same.py")
    elif damage == "linked directory":
        (tree / "python/sglang/stray").symlink_to(tmp_path)
    elif damage == "old stamp":  # the stamp of earlier versions: the commit alone, nothing to check against
        stamp.write_text(stamp.read_text().splitlines()[0])
    elif damage == "no stamp":
        stamp.unlink()
    elif damage == "other commit":
        stamp.write_text("0" * 40 + "\n" + "\n".join(stamp.read_text().splitlines()[1:]) + "\n")
    else:
        shutil.rmtree(tree)
        tree.write_text("not a tree")
    assert source.pristine_tree("1.0.0", read_pin(env.root)) == tree
    assert capsys.readouterr().err == f"the cached tree {tree} {reason}: checking it out again\n"
    assert (tree / OTHER).read_text() == "VALUE = 1\n" and not (tree / OTHER).is_symlink()
    assert not (tree / "python/sglang/stray.py").exists() and not (tree / "stray.txt").exists()
    assert sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file() or p.is_symlink()) == sorted(
        [*FILES, ".sglpatch-commit"]
    )
    assert source.pristine_tree("1.0.0", read_pin(env.root)) == tree and capsys.readouterr().err == ""


def test_prepare_imports_the_pinned_commit_from_the_line_s_own_upstream_submodule(env, tmp_path):
    """`prepare` looks for the submodule at the line's `upstream/`. The twin: the same pinned
    commit in a repository elsewhere is not used, and the sdist is imported."""
    elsewhere, pinned = make_upstream(tmp_path / "elsewhere", FILES)
    (env.root / "upstream.toml").write_text(pin_text("1.0.0", env.sha).replace('commit = ""', f'commit = "{pinned}"'))
    assert source.prepare(read_pin(env.root), env.root) != pinned  # no upstream/ in the line
    mirror_git(env, "update-ref", "-d", "refs/tags/release/1.0.0")
    elsewhere.git.clone(str(Path(elsewhere.working_tree_dir)), str(env.root / "upstream"))
    assert source.prepare(read_pin(env.root), env.root) == pinned


def test_a_pristine_tree_of_the_pinned_release_comes_from_the_checkout_s_submodule(env, tmp_path, monkeypatch):
    """The twin: the same submodule is not used for a release the pin does not pin."""
    upstream, pinned = make_upstream(tmp_path / "upstream", FILES)
    (env.root / "upstream.toml").write_text(pin_text("1.0.0", env.sha).replace('commit = ""', f'commit = "{pinned}"'))
    monkeypatch.setattr(trees, "SUBMODULE", Path(upstream.working_tree_dir))
    tree = source.pristine_tree("1.0.0", read_pin(env.root))
    assert (tree / source.STAMP).read_text().splitlines()[0] == pinned
    other = source.pristine_tree("1.1.0", read_pin(env.root))
    assert "Imported from PyPI: sglang-1.1.0.tar.gz" in mirror_git(env, "log", "-1", "--format=%B", "release/1.1.0")
    assert (other / OTHER).read_text() == "VALUE = 2\n"


def test_a_pinned_commit_holding_a_link_out_of_its_tree_is_refused_and_leaves_nothing(env, tmp_path):
    """Only a commit fetched from the submodule can hold a symbolic link (artifact imports keep
    files and directories); one that points outside the checkout is never followed."""
    upstream, _ = make_upstream(tmp_path / "upstream", FILES)
    checkout = Path(upstream.working_tree_dir)
    inside, outside = checkout / "python/sglang/srt/same.py", checkout / "python/sglang/srt/escape"
    inside.symlink_to("other.py")
    outside.symlink_to(tmp_path / "secret")
    upstream.git.add("-A")
    upstream.git.commit("-qm", "links", env={**os.environ, **AUTHOR_ENV})
    pinned = upstream.head.commit.hexsha
    (env.root / "upstream.toml").write_text(pin_text("1.0.0", env.sha).replace('commit = ""', f'commit = "{pinned}"'))
    assert source.import_release("1.0.0", read_pin(env.root), checkout) == pinned
    with pytest.raises(UserError) as error:
        source.pristine_tree("1.0.0", read_pin(env.root))
    assert str(error.value).startswith(
        f"the commit {pinned[:12]} holds python/sglang/srt/escape, which a checkout would write outside its tree ("
    )
    assert sorted(p.name for p in (env.cache / "trees").iterdir()) == []
    # the twin: a link inside the tree is checked out as a link
    outside.unlink()
    upstream.git.add("-A")
    upstream.git.commit("-qm", "inside only", env={**os.environ, **AUTHOR_ENV})
    pinned = upstream.head.commit.hexsha
    (env.root / "upstream.toml").write_text(pin_text("1.0.0", env.sha).replace('commit = ""', f'commit = "{pinned}"'))
    mirror_git(env, "update-ref", "-d", "refs/tags/release/1.0.0")
    assert source.import_release("1.0.0", read_pin(env.root), checkout) == pinned
    tree = source.pristine_tree("1.0.0", read_pin(env.root))
    assert os.readlink(tree / "python/sglang/srt/same.py") == "other.py"

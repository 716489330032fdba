"""Which file each section of a diff is about, read from diffs real git writes: odd names, every
kind of section, and every prefix git can be asked for."""

from __future__ import annotations

import os
from pathlib import Path

import git
import pytest

from helpers import AUTHOR_ENV
from sglpatch.diffheader import git_line_paths, sections, unprefixed_lines, unquote, with_ab_prefixes
from sglpatch.hunks import Moves

BODY = "".join(f"line {i} of a file long enough for git to find it moved\n" for i in range(30))
# path in the base commit -> path in the head commit (None: deleted; a new file has no base path)
SPACED, UTF8, TAB, QUOTE = "dir one/a b/c.txt", "caf\u00e9.txt", "t\tab.txt", 'q"uote.txt'
EXPECTED = [  # (old, new) of each section, in git's order
    ("bin.dat", "bin.dat"),
    (UTF8, UTF8),
    ("copied from.txt", "copied to.txt"),
    (SPACED, SPACED),
    (None, "empty new.txt"),
    ("gone.txt", None),
    ("mode only.sh", "mode only.sh"),
    (None, "new file.txt"),
    (QUOTE, QUOTE),
    ("old name.txt", "renamed name.txt"),  # git orders a rename by its new name
    (TAB, TAB),
]


def _commit(repo: git.Repo, message: str) -> str:
    repo.git.add("--all")
    with repo.git.custom_environment(**AUTHOR_ENV):
        repo.git.commit("--quiet", "-m", message)
    return repo.head.commit.hexsha


@pytest.fixture(scope="module")
def odd_repo(tmp_path_factory) -> git.Repo:
    """A base and a head commit whose diff holds every kind of section, on names git must quote."""
    root = tmp_path_factory.mktemp("odd")
    repo = git.Repo.init(root)
    files = {SPACED: "1\n", UTF8: "x\n", TAB: "t\n", QUOTE: "q\n", "gone.txt": "bye\n", "mode only.sh": "#!/bin/sh\n",
             "old name.txt": BODY, "copied from.txt": BODY.upper(), "bin.dat": None}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            (root / rel).write_bytes(bytes(range(256)))
        else:
            (root / rel).write_text(text)
    _commit(repo, "base")
    for rel, text in {SPACED: "2\n", UTF8: "y\n", TAB: "u\n", QUOTE: "r\n", "new file.txt": "n\n",
                      "empty new.txt": "", "copied to.txt": BODY.upper()}.items():
        (root / rel).write_text(text)
    (root / "bin.dat").write_bytes(bytes(reversed(range(256))))
    (root / "gone.txt").unlink()
    (root / "old name.txt").rename(root / "renamed name.txt")
    os.chmod(root / "mode only.sh", 0o755)
    _commit(repo, "head")
    return repo


def diff(repo: git.Repo, *options: str) -> str:
    return repo.git.diff("-M", "-C", "--find-copies-harder", "--binary", *options, "HEAD^", "HEAD",
                         strip_newline_in_stdout=False)


def test_every_section_of_a_real_diff_is_read_with_its_old_and_new_path(odd_repo):
    text = diff(odd_repo)
    found = sections(text)
    assert [(s.old, s.new) for s in found] == EXPECTED
    assert [s.path for s in found] == [new or old for old, new in EXPECTED]
    # the sections tile the diff: each starts at its own `diff --git` line and ends where the next starts
    assert "".join(text[s.start:s.end] for s in found) == text
    assert all(text[s.start:].startswith("diff --git ") for s in found)


@pytest.mark.parametrize("options", [["--no-prefix"], ["--src-prefix=i/", "--dst-prefix=w/"],
                                     ["--src-prefix=orig/", "--dst-prefix=new/"],
                                     ["--src-prefix=x/y/", "--dst-prefix=z/"]],
                         ids=["no-prefix", "mnemonic", "unequal", "two-levels"])
def test_a_diff_made_with_other_prefixes_is_rewritten_byte_for_byte_as_git_writes_a_and_b(odd_repo, options):
    ab = diff(odd_repo)
    other = diff(odd_repo, *options)
    assert other != ab and len(unprefixed_lines(other)) == len(EXPECTED)
    assert with_ab_prefixes(other) == ab
    assert unprefixed_lines(ab) == [] and with_ab_prefixes(ab) == ab  # the twin: a/ b/ is left as it is


def test_the_mnemonic_prefixes_of_a_work_tree_diff_are_rewritten(odd_repo, tmp_path):
    odd_repo.git.checkout("--quiet", "--detach", "HEAD")
    try:
        (Path(odd_repo.working_tree_dir) / SPACED).write_text("3\n")
        plain = odd_repo.git.diff(strip_newline_in_stdout=False)
        mnemonic = git.Git(odd_repo.working_tree_dir).execute(
            ["git", "-c", "diff.mnemonicPrefix=true", "diff"], strip_newline_in_stdout=False)
    finally:
        odd_repo.git.checkout("--quiet", "--", ".")
    assert mnemonic.startswith("diff --git i/dir one/a b/c.txt w/dir one/a b/c.txt\n")
    assert with_ab_prefixes(mnemonic) == plain


def test_a_diff_git_line_whose_paths_cannot_be_told_from_its_prefixes_is_refused():
    # two names that share no path and no rename lines to say which is which
    with pytest.raises(ValueError, match="cannot tell the paths of 'diff --git one.txt two.txt'"):
        with_ab_prefixes("diff --git one.txt two.txt\nold mode 100644\nnew mode 100755\n")
    # the same names with the ---/+++ lines of a non-rename disagree with every split
    with pytest.raises(ValueError, match="cannot tell"):
        with_ab_prefixes("diff --git x/f y/f\n--- x/f\n+++ y/g\n@@ -1 +1 @@\n-a\n+b\n")
    # the twin: rename lines say it
    renamed = with_ab_prefixes("diff --git one.txt two.txt\nsimilarity index 100%\n"
                               "rename from one.txt\nrename to two.txt\n")
    assert renamed.startswith("diff --git a/one.txt b/two.txt\n")
    assert with_ab_prefixes("no diff here\n") == "no diff here\n"


def test_what_precedes_the_first_section_and_the_hunks_are_kept():
    text = ("Subject: x\n\n---\n diff stat\n\ndiff --git f f\nindex 1..2 100644\n--- f\n+++ f\n"
            "@@ -1 +1 @@\n--- f\n+++ f\n")
    assert with_ab_prefixes(text) == ("Subject: x\n\n---\n diff stat\n\ndiff --git a/f b/f\nindex 1..2 100644\n"
                                      "--- a/f\n+++ b/f\n@@ -1 +1 @@\n--- f\n+++ f\n")


@pytest.mark.parametrize("line, paths", [
    ("diff --git a/x b/x", ("x", "x")),
    ("diff --git a/x b/x\r\n", ("x", "x")),
    ("diff --git a/a b/c.txt b/a b/c.txt", ("a b/c.txt", "a b/c.txt")),
    ("diff --git a/old name b/new name", ("old name", "new name")),
    ('diff --git "a/caf\\303\\251" b/plain', ("caf\u00e9", "plain")),
    ('diff --git a/plain "b/caf\\303\\251"', ("plain", "caf\u00e9")),
    ('diff --git "a/t\\tab" "b/t\\tab"', ("t\tab", "t\tab")),
])
def test_a_diff_git_line_names_its_two_paths(line, paths):
    assert git_line_paths(line) == paths


@pytest.mark.parametrize("line", ["--- a/x", "diff --git x x", "diff --git i/x w/x", "diff --git a/x",
                                  "diff --cc a/x b/x"])
def test_what_is_not_a_diff_git_line_with_a_and_b_names_nothing(line):
    assert git_line_paths(line) is None


def test_unquote_reads_git_c_quoting_and_leaves_plain_names():
    assert unquote('"caf\\303\\251.txt"') == "caf\u00e9.txt"
    assert unquote('"q\\"uote"') == 'q"uote'
    assert unquote("plain name") == "plain name"
    assert unquote('"') == '"' and unquote('"half') == '"half'


def test_a_patch_follows_upstreams_renames_by_whole_names_however_quoted(tmp_path):
    """`rebase` carries a patch to the paths upstream moved its files to: the result is the diff git
    writes for the same edits on the moved files. A file whose name only starts like a moved one
    (``x.py`` and ``x.pyi``, ``data/x.py`` holding ``a/x.py``) stays where it is."""
    renamed = {"python/x.py": "python/pkg/x.py", UTF8: "moved/" + UTF8, "old dir/s p.py": "new dir/s p.py"}
    stay = ["python/x.pyi", "data/python/x.py"]
    before = {**{old: f"{old} 1\n" for old in renamed}, **{p: f"{p} 1\n" for p in stay}}

    def edited_diff(paths: dict[str, str]) -> str:
        repo = git.Repo.init(tmp_path / str(len(list(tmp_path.iterdir()))))
        root = Path(repo.working_tree_dir)
        for old, text in before.items():
            (root / paths.get(old, old)).parent.mkdir(parents=True, exist_ok=True)
            (root / paths.get(old, old)).write_text(text)
        _commit(repo, "base")
        for old, text in before.items():
            (root / paths.get(old, old)).write_text(text.replace(" 1", " 2"))
        return repo.git.diff(strip_newline_in_stdout=False)

    original, expected = edited_diff({}), edited_diff(renamed)
    followed, moved = Moves(renamed, frozenset()).follow(original)

    def by_file(text: str) -> list[str]:  # git orders the sections by the new names
        return sorted(text[s.start:s.end] for s in sections(text))

    assert followed != original and by_file(followed) == by_file(expected)
    assert moved == renamed
    # the twin: nothing upstream moved leaves the patch byte-identical
    assert Moves({"python/elsewhere.py": "python/x.py"}, frozenset()).follow(original) == (original, {})

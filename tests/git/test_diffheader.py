"""Which file each section of a diff is about, read from diffs real git writes: odd names, every
kind of section, and every prefix git can be asked for."""

from __future__ import annotations

import os
from pathlib import Path

import git
import pytest
from helpers import AUTHOR_ENV, commit_files, make_upstream

from sglpatch.git.diffheader import (
    git_line_paths,
    quote,
    renamed_header,
    sections,
    unprefixed_lines,
    unquote,
    with_ab_prefixes,
)
from sglpatch.queue.hunks import Moves

BODY = "".join(f"line {i} of a file long enough for git to find it moved\n" for i in range(30))
# path in the base commit -> path in the head commit (None: deleted; a new file has no base path)
SPACED, UTF8, TAB, QUOTE = "dir one/a b/c.txt", "caf\u00e9.txt", "t\tab.txt", 'q"uote.txt'
# a trailing space, a trailing X (what a stripped-too-much name loses), a backslash, a newline, a
# Latin-1 byte that is no UTF-8 (git quotes it as \351; Python holds it as a lone surrogate)
ODD = ["sp end ", "PREFIX", "back\\slash.txt", "new\nline.txt", "lat\udce9.txt", "sub/zz.txt"]
EXPECTED = [  # (old, new) of each section, in git's order
    ("PREFIX", "PREFIX"),
    ("back\\slash.txt", "back\\slash.txt"),
    ("bin.dat", "bin.dat"),
    (UTF8, UTF8),
    ("copied from.txt", "copied to.txt"),
    ("dev.txt", "dev.txt"),
    (SPACED, SPACED),
    (None, "empty new.txt"),
    ("gone.txt", None),
    ("lat\udce9.txt", "lat\udce9.txt"),
    ("k.txt", "m b/n.txt"),  # a copy whose diff --git line splits at the wrong " b/"
    ("mode only.sh", "mode only.sh"),
    ("new\nline.txt", "new\nline.txt"),
    (None, "new file.txt"),
    (QUOTE, QUOTE),
    ("old name.txt", "renamed name.txt"),  # git orders a rename by its new name
    ("sp end ", "sp end "),
    ("sub/zz.txt", "sub/zz.txt"),
    (TAB, TAB),
    ("plain.txt", "z b/q.txt"),  # a rename whose diff --git line splits at the wrong " b/"
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
    files = {
        SPACED: "1\n",
        UTF8: "x\n",
        TAB: "t\n",
        QUOTE: "q\n",
        "gone.txt": "bye\n",
        "mode only.sh": "#!/bin/sh\n",
        "old name.txt": BODY,
        "copied from.txt": BODY.upper(),
        "bin.dat": None,
        **{n: f"{n!r}\n" for n in ODD},
        "plain.txt": BODY.replace("line", "row"),
        "k.txt": BODY.replace("line", "entry"),
        "dev.txt": "-- /dev/null\nrename from x\n",
    }  # its hunk removes lines that look like a header
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            (root / rel).write_bytes(bytes(range(256)))
        else:
            (root / rel).write_text(text)
    _commit(repo, "base")
    for rel, text in {
        SPACED: "2\n",
        UTF8: "y\n",
        TAB: "u\n",
        QUOTE: "r\n",
        "new file.txt": "n\n",
        "empty new.txt": "",
        "copied to.txt": BODY.upper(),
        **{n: f"{n!r} 2\n" for n in ODD},
        "m b/n.txt": BODY.replace("line", "entry"),
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "bin.dat").write_bytes(bytes(reversed(range(256))))
    (root / "gone.txt").unlink()
    (root / "dev.txt").write_text("kept\n")
    (root / "old name.txt").rename(root / "renamed name.txt")
    (root / "z b").mkdir()
    (root / "plain.txt").rename(root / "z b" / "q.txt")  # "diff --git a/plain.txt b/z b/q.txt": where is " b/"?
    os.chmod(root / "mode only.sh", 0o755)
    _commit(repo, "head")
    return repo


def diff(repo: git.Repo, *options: str) -> str:
    return repo.git.diff(
        "-M", "-C", "--find-copies-harder", "--binary", *options, "HEAD^", "HEAD", strip_newline_in_stdout=False
    )


def test_every_section_of_a_real_diff_is_read_with_its_old_and_new_path(odd_repo):
    text = diff(odd_repo)
    found = sections(text)
    assert [(s.old, s.new) for s in found] == EXPECTED
    assert [s.path for s in found] == [new or old for old, new in EXPECTED]
    # the sections tile the diff: each starts at its own `diff --git` line and ends where the next starts
    assert "".join(text[s.start : s.end] for s in found) == text
    assert all(text[s.start :].startswith("diff --git ") for s in found)


@pytest.mark.parametrize(
    "options",
    [
        ["--no-prefix"],
        ["--src-prefix=i/", "--dst-prefix=w/"],
        ["--src-prefix=orig/", "--dst-prefix=new/"],
        ["--src-prefix=x/y/", "--dst-prefix=z/"],
    ],
    ids=["no-prefix", "mnemonic", "unequal", "two-levels"],
)
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
            ["git", "-c", "diff.mnemonicPrefix=true", "diff"], strip_newline_in_stdout=False
        )
    finally:
        odd_repo.git.checkout("--quiet", "--", ".")
    assert mnemonic.startswith("diff --git i/dir one/a b/c.txt w/dir one/a b/c.txt\n")
    assert with_ab_prefixes(mnemonic) == plain


def test_a_diff_git_line_whose_paths_cannot_be_told_from_its_prefixes_is_refused():
    # two names that share no path and no rename lines to say which is which
    with pytest.raises(ValueError, match="cannot tell the paths of 'diff --git one.txt two.txt'"):
        with_ab_prefixes("diff --git one.txt two.txt\nold mode 100644\nnew mode 100755\n")
    # a long line is quoted up to 120 characters
    with pytest.raises(ValueError) as long:
        with_ab_prefixes(f"diff --git {'o' * 100} {'t' * 100}\n")
    assert f"'diff --git {'o' * 100} {'t' * 8}' from" in str(long.value)
    # the twin: rename lines say it
    renamed = with_ab_prefixes(
        "diff --git one.txt two.txt\nsimilarity index 100%\nrename from one.txt\nrename to two.txt\n"
    )
    assert renamed.startswith("diff --git a/one.txt b/two.txt\n")
    assert with_ab_prefixes("no diff here\n") == "no diff here\n"


def test_what_precedes_the_first_section_and_the_hunks_are_kept():
    text = (
        "Subject: x\n\n---\n diff stat\n\ndiff --git f f\nindex 1..2 100644\n--- f\n+++ f\n@@ -1 +1 @@\n--- f\n+++ f\n"
    )
    assert with_ab_prefixes(text) == (
        "Subject: x\n\n---\n diff stat\n\ndiff --git a/f b/f\nindex 1..2 100644\n"
        "--- a/f\n+++ b/f\n@@ -1 +1 @@\n--- f\n+++ f\n"
    )


@pytest.mark.parametrize(
    "line, paths",
    [
        ("diff --git a/x b/x", ("x", "x")),
        ("diff --git a/x b/x\r\n", ("x", "x")),
        ("diff --git a/a b/c.txt b/a b/c.txt", ("a b/c.txt", "a b/c.txt")),
        ("diff --git a/old name b/new name", ("old name", "new name")),
        ('diff --git "a/caf\\303\\251" b/plain', ("caf\u00e9", "plain")),
        ('diff --git a/plain "b/caf\\303\\251"', ("plain", "caf\u00e9")),
        ('diff --git "a/t\\tab" "b/t\\tab"', ("t\tab", "t\tab")),
        # a rename of "kkkkkk b/l" whose middle is a space: only the last " b/" can be guessed
        ("diff --git a/kkkkkk b/l b/yy", ("kkkkkk b/l", "yy")),
    ],
)
def test_a_diff_git_line_names_its_two_paths(line, paths):
    assert git_line_paths(line) == paths


@pytest.mark.parametrize(
    "line", ["--- a/x", "diff --git x x", "diff --git i/x w/x", "diff --git a/x", "diff --cc a/x b/x"]
)
def test_what_is_not_a_diff_git_line_with_a_and_b_names_nothing(line):
    assert git_line_paths(line) is None


def test_an_empty_file_deleted_has_no_new_path_though_it_has_no_dev_null_line(tmp_path):
    repo, _ = make_upstream(tmp_path / "r", {"empty.txt": "", "kept.txt": "k\n"})
    commit_files(repo, {"empty.txt": None}, "delete the empty file")
    text = repo.git.diff("HEAD^", "HEAD", strip_newline_in_stdout=False)
    assert "deleted file mode" in text and "/dev/null" not in text  # the premise
    assert [(s.old, s.new) for s in sections(text)] == [("empty.txt", None)]


def test_a_header_without_mode_lines_says_created_and_deleted_by_dev_null():
    """Tools other than git may write a ``diff --git`` header without ``new file mode``: the
    ``/dev/null`` side says it. The twin: both sides named is a change to the file."""
    made = sections(
        "diff --git a/n b/n\n--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n"
        "diff --git a/d b/d\n--- a/d\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
        "diff --git a/c b/c\n--- a/c\n+++ b/c\n@@ -1 +1 @@\n-x\n+y\n"
    )
    assert [(s.old, s.new) for s in made] == [(None, "n"), ("d", None), ("c", "c")]


def test_a_section_that_names_no_a_and_b_paths_is_passed_over_not_the_rest():
    text = "diff --git one\n--- one\n+++ one\ndiff --git a/y b/y\n--- a/y\n+++ b/y\n"
    assert [(s.old, s.new, text[s.start : s.end]) for s in sections(text)] == [
        ("y", "y", "diff --git a/y b/y\n--- a/y\n+++ b/y\n")
    ]


def test_a_section_with_a_and_b_is_left_as_it_is_even_where_its_paths_could_not_be_told():
    text = "diff --git a/one b/two\n--- a/one\n+++ b/two\n@@ -1 +1 @@\n-a\n+b\n"
    assert with_ab_prefixes(text) == text


def test_quote_writes_what_git_writes_and_unquote_reads_it_back():
    for name, quoted in [
        ("plain name.txt", "plain name.txt"),
        ("caf\u00e9", '"caf\\303\\251"'),
        ("caf\udce9", '"caf\\351"'),
        ('q"b\\s', '"q\\"b\\\\s"'),
        ("t\tn\n", '"t\\tn\\n"'),
        ("\x01\x7f", '"\\001\\177"'),
    ]:
        assert quote(name) == quoted, name
        assert unquote(quoted) == name


def test_unquote_reads_git_c_quoting_and_leaves_plain_names():
    assert unquote('"caf\\303\\251.txt"') == "caf\u00e9.txt"
    assert unquote('"q\\"uote"') == 'q"uote'
    assert unquote("plain name") == "plain name"
    assert unquote('"') == '"' and unquote('"half') == '"half'


def test_a_patch_follows_upstreams_renames_by_whole_names_however_quoted(tmp_path):
    """`rebase` carries a patch to the paths upstream moved its files to: the result is the diff git
    writes for the same changes on the moved files, whatever the change (an edit, a mode change
    without hunks, the patch's own rename of a moved file). A file whose name only starts like a
    moved one (``x.py`` and ``x.pyi``, ``data/python/x.py`` holding ``a/python/x.py``) stays."""
    renamed = {
        "python/x.py": "python/pkg/x.py",
        UTF8: "moved/" + UTF8,
        "old dir/s p.py": "new dir/s p.py",
        "tool.sh": "bin/tool.sh",
        "PREFIX": "moved/PREFIX",
        "sp end ": "moved/sp end ",
    }
    stay = ["python/x.pyi", "data/python/x.py"]
    before = {**{old: f"{old} 1\n" + BODY for old in renamed}, **{p: f"{p} 1\n" for p in stay}}
    # a hunk that removes lines looking like a header of a moved file stays as it is
    before["python/x.py"] += "-- a/python/x.py\n++ b/python/x.py\nrename from python/x.py\n"

    def changed_diff(paths: dict[str, str]) -> str:
        repo = git.Repo.init(tmp_path / str(len(list(tmp_path.iterdir()))))
        root = Path(repo.working_tree_dir)
        at = {old: root / paths.get(old, old) for old in before}
        for old, text in before.items():
            at[old].parent.mkdir(parents=True, exist_ok=True)
            at[old].write_text(text)
        _commit(repo, "base")
        for old in ["python/x.py", UTF8, "PREFIX", "sp end ", *stay]:
            at[old].write_text(before[old].replace(" 1", " 2").replace("-- a/python/x.py\n", ""))
        os.chmod(at["tool.sh"], 0o755)
        at["old dir/s p.py"].rename(root / "other name.py")  # the patch renames a file upstream moved
        repo.git.add("--all")
        return repo.git.diff("-M", "--cached", strip_newline_in_stdout=False)

    original, expected = changed_diff({}), changed_diff(renamed)
    followed, moved = Moves(renamed, frozenset()).follow(original)

    def by_file(text: str) -> list[str]:  # git orders the sections by the new names
        return sorted(text[s.start : s.end] for s in sections(text))

    assert "rename to other name.py" in original and "old mode 100644" in original  # the premises
    assert original.count("\n--- a/python/x.py\n") == 2  # its header, and a line its hunk removes
    assert followed != original and by_file(followed) == by_file(expected)
    assert moved == renamed
    # the twins: nothing upstream moved leaves the patch byte-identical, and so does a text that is no diff
    assert Moves({"python/elsewhere.py": "python/x.py"}, frozenset()).follow(original) == (original, {})
    assert renamed_header("not a diff\n", renamed) == "not a diff\n"

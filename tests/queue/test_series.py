"""The series file and patch headers: parsing, validation and bad input."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    REPO_ROOT,
    assert_one_line_error,
    commit_files,
    make_project,
    make_upstream,
    message,
    patch_text,
    run_cli,
)

from sglpatch.errors import UserError
from sglpatch.queue.series import (
    DropCondition,
    PatchEntry,
    commit_matches_patch,
    message_break,
    parse_drop_when,
    parse_patch,
    parse_trailers,
    read_series,
    read_series_lines,
    read_series_names,
    render_series,
    trailer_problems,
    write_series,
)

try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # not in requirements-dev.txt: the seeded random cases below still run
    given = None

KIMI = "python/sglang/srt/models/kimi_k25.py"


@pytest.fixture
def good_patch(tmp_path):
    repo, base = make_upstream(tmp_path / "up")
    return patch_text(
        repo,
        base,
        {KIMI: "class KimiK25:\n    pass\n"},
        message("kimi: pass", "Backport [v0.5.10]", "check:kimi, upstream>=0.5.12"),
    )


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


def test_the_files_of_a_patch_are_read_whatever_their_names_hold(tmp_path):
    """Spaces (even " b/"), C-quoted UTF-8 names, new and deleted files: every file of the diff is
    listed (split at whitespace, "a b/c.txt" was lost, and a patch of such files alone had "no diff")."""
    repo, base = make_upstream(tmp_path / "up")
    spaced, quoted, new = "python/a b/c.txt", "python/caf\u00e9.txt", "python/n e w.txt"
    repo.git.checkout("--quiet", "--detach", base)
    start = commit_files(repo, {spaced: "1\n", quoted: "x\n"}, "odd names")
    text = patch_text(repo, start, {spaced: "2\n", quoted: None, new: "n\n"}, message("odd names"))
    assert '"a/python/caf\\303\\251.txt"' in text and "+++ b/python/a b/c.txt\t" in text
    root = make_project(tmp_path / "p", {"0001-a.patch": text})
    (patch,) = read_series(root).patches
    assert patch.files == (spaced, quoted, new)


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
    assert problems == ["no Upstream-Status: trailer", "no Drop-When: trailer saying when the patch can be dropped"]


@pytest.mark.parametrize(
    "value, error", [("nonsense", "cannot read Drop-When"), ("upstream>=banana", "no valid version")]
)
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
    root = make_project(
        tmp_path / "p", {"0001-a.patch": good_patch, "0009-forgotten.patch": good_patch}, ["0001-a.patch"]
    )
    warnings = []
    series = read_series(root, warn=warnings.append)
    assert series.names == ["0001-a.patch"]
    assert series.stray == ("0009-forgotten.patch",)
    assert warnings and "0009-forgotten.patch" in warnings[0] and "not in the series" in warnings[0]
    # the directory's README and an editor's dotfiles are not patches; a readme.md in other case is
    for name in ("README.md", ".0001-a.patch.swp", "readme.md"):
        (root / "patches" / name).write_text("notes\n")
    assert read_series(root, warn=warnings.append).stray == ("0009-forgotten.patch", "readme.md")


def test_missing_series_file(tmp_path):
    (tmp_path / "upstream.toml").write_text("[upstream]\n")
    with pytest.raises(UserError, match="no series file"):
        read_series(tmp_path)


def test_write_series_keeps_the_header_comment(tmp_path):
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "series").write_text("# Our series\n# second line\n\na.patch\n")
    write_series(tmp_path, ["a.patch", "b.patch"])
    assert (tmp_path / "patches" / "series").read_text() == "# Our series\n# second line\n\na.patch\nb.patch\n"


# ---------------------------------------------------------------- the series file's syntax


def series_error(root, text: str | bytes) -> str:
    path = root / "patches" / "series"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UserError) as caught:
        read_series_names(root)
    assert "\n" not in str(caught.value)
    return str(caught.value)


# (the listed line, what the error says, its valid twin)
BAD_ENTRIES = [
    ("sub/0002-b.patch", "'sub/0002-b.patch' is a path, not a file name in patches/", "0002-b.patch"),
    (".0002-b.patch", "'.0002-b.patch' starts with '.' or '-'", "0002-b.patch"),
    ("-0002-b.patch", "'-0002-b.patch' starts with '.' or '-'", "0002-b.patch"),
    ("0002-b..c.patch", "'0002-b..c.patch' contains '..'", "0002-b.c.patch"),
    ("0002-b\x0cc.patch", "'0002-b\\x0cc.patch' has characters other than", "0002-b_c.patch"),
    ("0002-b\u00a0c.patch", "'0002-b\\xa0c.patch' has characters other than", "0002-b+c~1.patch"),
    ("0002-b.patch#why", "'0002-b.patch#why' has characters other than", "0002-b.patch  # why"),
    ("0002-b.txt", "'0002-b.txt' does not end in .patch or .diff", "0002-b.diff"),
    ("0002-b.patch -p0", "unsupported options '-p0' for 0002-b.patch", "0002-b.patch -p1"),
    ("0002-b.patch -p1 -R", "unsupported options '-p1 -R'", "0002-b.patch\t-p1\t# reversed? no"),
    ("0001-A.patch", "'0001-A.patch' is listed twice (also on line 2)", "#0001-a.patch"),
]


@pytest.mark.parametrize("line, error, twin", BAD_ENTRIES)
def test_series_lines_are_validated_with_file_and_line(tmp_path, line, error, twin):
    header = "# header\n0001-a.patch\n"
    message = series_error(tmp_path, header + line + "\n")
    assert message.startswith(f"{tmp_path / 'patches' / 'series'}:3: {error}"), message
    (tmp_path / "patches" / "series").write_text(header + twin + "\n")
    assert read_series_names(tmp_path)[0] == "0001-a.patch"


def test_series_invalid_utf8_names_the_line(tmp_path):
    message = series_error(tmp_path, b"# header\n0001-a.patch\n# caf\xe9\n")
    assert message == (
        f"{tmp_path / 'patches' / 'series'}:3: not valid UTF-8 (byte 0xe9): save the series file as UTF-8"
    )
    (tmp_path / "patches" / "series").write_text("# header\n0001-a.patch\n# café\n")
    assert read_series_names(tmp_path) == ["0001-a.patch"]


def test_series_with_crlf_line_endings(tmp_path):
    message = series_error(tmp_path, "# header\r\n0001-a.patch\r\n")
    assert message.endswith("series has CRLF line endings: convert with `dos2unix` or re-export")


def test_series_errors_reach_the_user_as_one_line(tmp_path):
    root = make_project(tmp_path / "p", {}, ["0001-a.patch", "../0002-b.patch"])
    assert_one_line_error(run_cli(root, "lines"), "series:3: '../0002-b.patch' is a path")


@pytest.mark.parametrize("line", [".", "lines/latest"])
def test_the_real_series_validate(line):
    root = REPO_ROOT / line
    series = read_series(root, warn=pytest.fail)
    assert series.names and all(p.subject and p.files for p in series.patches)
    assert render_series(root, series.names) == (root / "patches" / "series").read_text()


# ---------------------------------------------------------------- patch files' bytes


def test_non_utf8_bytes_in_the_diff_are_kept(tmp_path, good_patch):
    data = good_patch.encode().replace(b"+    pass", b"+    pass  # caf\xe9", 1)
    (tmp_path / "0001-a.patch").write_bytes(data)
    patch = parse_patch(tmp_path / "0001-a.patch")
    assert patch.subject == "kimi: pass" and patch.files == (KIMI,)


def test_non_utf8_message_is_refused_with_the_line(tmp_path, good_patch):
    data = good_patch.encode().replace(b"Why this change exists.", b"Why this change exists\xff.", 1)
    line = data[: data.index(b"\xff")].count(b"\n") + 1
    (tmp_path / "0001-a.patch").write_bytes(data)
    with pytest.raises(UserError, match=rf"0001-a.patch:{line}: not valid UTF-8 \(byte 0xff\): git am reads"):
        parse_patch(tmp_path / "0001-a.patch")


@pytest.mark.parametrize(
    "author, accepted",
    [
        ("A. Maintainer", False),
        ("nobody", False),
        ("Name <>", False),
        ("Name <nobody>", True),
        ("am@example.org", True),
        ("=?utf-8?q?J=C3=B6rg?= <j@example.org>", True),
    ],
)
def test_a_from_header_without_an_address_git_am_would_refuse_is_named(tmp_path, good_patch, author, accepted):
    """git am takes the author's address from <...> or a bare address; "From: Name" applies the
    diff and then fails on an empty ident, so it is refused before git runs."""
    text = re.sub(r"(?m)^From: .*$", f"From: {author}", good_patch, count=1)
    assert f"From: {author}\n" in text
    (tmp_path / "0001-a.patch").write_text(text)
    if accepted:
        assert parse_patch(tmp_path / "0001-a.patch").subject == "kimi: pass"
    else:
        with pytest.raises(UserError, match="0001-a.patch has no e-mail address in its From: header"):
            parse_patch(tmp_path / "0001-a.patch")


def test_undecodable_subject_is_one_error(tmp_path, good_patch):
    bad = good_patch.replace("Subject: [PATCH] kimi: pass", "Subject: =?utf-8?b?/w==?=", 1)
    assert bad != good_patch
    (tmp_path / "0001-a.patch").write_text(bad)
    with pytest.raises(UserError, match="0001-a.patch: the Subject: header cannot be decoded"):
        parse_patch(tmp_path / "0001-a.patch")
    (tmp_path / "0001-a.patch").write_text(good_patch.replace("[PATCH] kimi: pass", "=?utf-8?q?kimi:_p=C3=A4ss?=", 1))
    assert parse_patch(tmp_path / "0001-a.patch").subject == "kimi: päss"


def test_crlf_patch_file_is_named_as_such(tmp_path, good_patch):
    root = make_project(tmp_path / "p", {"0001-a.patch": good_patch})
    (root / "patches" / "0001-a.patch").write_bytes(good_patch.replace("\n", "\r\n").encode())
    assert_one_line_error(
        run_cli(root, "build"), "patches/0001-a.patch has CRLF line endings: convert with `dos2unix` or re-export"
    )


def test_crlf_lines_inside_the_diff_are_a_crlf_file_changed(tmp_path, good_patch):
    (tmp_path / "0001-a.patch").write_bytes(good_patch.replace("+    pass\n", "+    pass\r\n", 1).encode())
    assert parse_patch(tmp_path / "0001-a.patch").files == (KIMI,)


# ---------------------------------------------------------------- versions


def test_drop_when_compares_versions_as_pep440():
    condition = DropCondition("upstream", "0.5.12")
    assert condition.holds_for_version("0.5.12.0") and condition.holds_for_version("0.5.13")
    assert not condition.holds_for_version("0.5.12rc1")
    assert DropCondition("upstream", "0.5.12.0").holds_for_version("0.5.12")
    with pytest.raises(UserError, match="'main' is not a PEP 440 version"):
        condition.holds_for_version("main")


# ---------------------------------------------------------------- rewriting the series

SERIES = """\
# Our series
# second line

# 0000-parked-at-the-top.patch
0001-a.patch -p1  # why a
#0002-parked.patch
0003-c.patch

# about d
0004-d.patch
# trailing comment
"""


def rendered(tmp_path, text: str, names: list[str]) -> str:
    (tmp_path / "patches").mkdir(exist_ok=True)
    (tmp_path / "patches" / "series").write_text(text)
    return render_series(tmp_path, names)


@pytest.mark.parametrize(
    "names, expected",
    [
        (["0001-a.patch", "0003-c.patch", "0004-d.patch"], SERIES),
        (["0001-a.patch", "0004-d.patch"], SERIES.replace("0003-c.patch\n", "")),
        (
            ["0001-a.patch", "0003-c.patch", "0005-e.patch", "0004-d.patch"],
            SERIES.replace("0003-c.patch\n", "0003-c.patch\n0005-e.patch\n"),
        ),
        (
            ["0005-e.patch", "0001-a.patch", "0003-c.patch", "0004-d.patch"],
            SERIES.replace("0001-a.patch", "0005-e.patch\n0001-a.patch"),
        ),
        (
            ["0003-c.patch", "0001-a.patch"],  # reordered, d dropped: the entries swap places
            "# Our series\n# second line\n\n# 0000-parked-at-the-top.patch\n0003-c.patch\n#0002-parked.patch\n"
            "0001-a.patch -p1  # why a\n\n# about d\n# trailing comment\n",
        ),
        (
            [],
            "# Our series\n# second line\n\n# 0000-parked-at-the-top.patch\n#0002-parked.patch\n\n# about d\n"
            "# trailing comment\n",
        ),
    ],
)
def test_render_series_keeps_comments_options_and_parked_entries(tmp_path, names, expected):
    text = rendered(tmp_path, SERIES, names)
    assert text == expected
    (tmp_path / "patches" / "series").write_text(text)
    assert read_series_names(tmp_path) == names


def test_render_series_refuses_names_it_could_not_read_back(tmp_path):
    with pytest.raises(UserError, match="cannot list 'x/0005.patch' .*: it is a path"):
        rendered(tmp_path, SERIES, ["0001-a.patch", "x/0005.patch"])
    with pytest.raises(UserError, match="cannot list '0001-a.patch' twice"):
        rendered(tmp_path, SERIES, ["0001-a.patch", "0001-a.patch"])


def test_write_series_without_a_series_file(tmp_path):
    write_series(tmp_path, ["0001-a.patch", "0002-b.patch"])
    assert (tmp_path / "patches" / "series").read_text() == "0001-a.patch\n0002-b.patch\n"


# Property: whatever the file and the new names, the file lists exactly the new names, and every
# comment, blank line, parked entry and kept entry's own line survives, in its order.

SKELETON = ["", "# a comment", "#0090-parked.patch", "# 0091-parked.patch -p1", "  # indented", "\t"]
ENTRY_FORMS = ["{}", "{} -p1", "{}  # why", "{}\t-p1\t# why", "  {}"]


def check_render_property(tmp_path, old_lines: list[str], names: list[str]) -> None:
    text = "".join(f"{line}\n" for line in old_lines)
    old = read_series_lines_of(tmp_path, text)
    new = read_series_lines_of(tmp_path, rendered(tmp_path, text, names))
    assert [line.name for line in new if line.name] == names
    assert [line.text for line in new if not line.name] == [line.text for line in old if not line.name]
    old_text = {line.name: line.text for line in old if line.name}
    assert all(line.text == old_text[line.name] for line in new if line.name in old_text)
    header = next((i for i, line in enumerate(old) if line.name), len(old))
    assert [line.text for line in new[:header]] == [line.text for line in old[:header]]
    assert rendered(tmp_path, text, [line.name for line in old if line.name]) == text


def read_series_lines_of(tmp_path, text: str):
    (tmp_path / "patches").mkdir(exist_ok=True)
    (tmp_path / "patches" / "series").write_text(text)
    return read_series_lines(tmp_path / "patches" / "series")


def random_case(rng: random.Random) -> tuple[list[str], list[str]]:
    listed = [f"{i:04d}-p{i}.patch" for i in rng.sample(range(40), rng.randint(0, 8))]
    lines = [rng.choice(ENTRY_FORMS).format(n) for n in listed]
    lines += [rng.choice(SKELETON) for _ in range(rng.randint(0, 8))]
    rng.shuffle(lines)
    kept = rng.sample(listed, rng.randint(0, len(listed)))
    fresh = [f"{i:04d}-new{i}.patch" for i in range(40, 40 + rng.randint(0, 3))]
    names = kept + fresh
    rng.shuffle(names)
    return lines, names


@pytest.mark.parametrize("seed", range(100))
def test_render_series_property_seeded(tmp_path, seed):
    check_render_property(tmp_path, *random_case(random.Random(seed)))


if given is not None:

    @st.composite
    def series_cases(draw) -> tuple[list[str], list[str]]:
        listed = [f"{i:04d}-p{i}.patch" for i in draw(st.lists(st.integers(0, 39), unique=True, max_size=8))]
        lines = [draw(st.sampled_from(ENTRY_FORMS)).format(n) for n in listed]
        lines = draw(st.permutations(lines + draw(st.lists(st.sampled_from(SKELETON), max_size=8))))
        kept = draw(st.permutations(listed))[: draw(st.integers(0, len(listed)))]
        fresh = [f"{i:04d}-new{i}.patch" for i in range(40, 40 + draw(st.integers(0, 3)))]
        return lines, draw(st.permutations(kept + fresh))

    @settings(max_examples=150, deadline=None)
    @given(series_cases())
    def test_render_series_property_hypothesis(tmp_path_factory, case):
        check_render_property(tmp_path_factory.mktemp("series"), *case)
else:

    def test_render_series_property_hypothesis():
        pytest.skip("hypothesis is not installed; the seeded cases cover the same property")


SUBJECTS = [
    "kimi: plain subject",
    "[RFC] tagged",
    "[RFC][v2]  tags and   runs of spaces",
    "Re: [PATCH] a reply",
    "first line of a paragraph\nand its second line",
    "\u00fcnicode subject \u2014 with a dash",
    "ends with a bracket [v0.5.10]",
]


@pytest.mark.parametrize("subject", SUBJECTS)
def test_a_commit_matches_its_patch_before_and_after_git_am(tmp_path, subject):
    """The subject rule is git's own: checked against real `git format-patch` and `git am`."""
    import git

    from sglpatch.queue.series import commit_matches_patch

    repo = git.Repo.init(tmp_path / "r")
    repo.git.commit("--allow-empty", "-qm", "base")
    (tmp_path / "r" / "f").write_text("a\n")
    repo.git.add("f")
    repo.git.commit("-qm", f"{subject}\n\nbody\n")
    made = repo.head.commit
    (patch_file,) = repo.git.format_patch("-1", "-o", str(tmp_path / "out")).splitlines()
    repo.git.checkout("-q", "HEAD~1")
    repo.git.am("-q", patch_file)
    patch = parse_patch(tmp_path / "r" / patch_file)
    assert commit_matches_patch(made.message, patch), "the commit the patch was made from"
    assert commit_matches_patch(repo.head.commit.message, patch), "the commit git am made from it"
    # the negative twin: another subject does not match
    assert not commit_matches_patch("another subject\n\nbody\n", patch)


# ---------------------------------------------------------------- what the rest of the tool reads


def entry(name: str, files=(), drop_when=(), status="Pending", message="") -> PatchEntry:
    return PatchEntry(name, Path(name), name, message, tuple(files), status, tuple(drop_when))


def test_the_series_answers_what_the_rest_of_the_tool_asks(tmp_path, good_patch):
    root = make_project(tmp_path / "p", {"0001-a.patch": good_patch})
    series = read_series(root)
    assert series.get("0001-a.patch").subject == "kimi: pass"
    with pytest.raises(UserError) as caught:
        series.get("0002-b.patch")
    assert str(caught.value) == "no patch named '0002-b.patch' in patches/series: known patches: 0001-a.patch"
    empty = type(series)(root, (), ())
    with pytest.raises(UserError, match="known patches: none$"):
        empty.get("0001-a.patch")
    check, up = DropCondition("check", "kimi"), DropCondition("upstream", "0.5.12")
    several = type(series)(
        root,
        (
            entry("1.patch", ["b", "a"], [check, up]),
            entry("2.patch", ["a", "c"], [DropCondition("check", "sm12"), check]),
        ),
        (),
    )
    assert several.check_names() == ["kimi", "sm12"]  # in series order, each once, checks only
    assert several.touched_files() == ["b", "a", "c"]


def test_read_series_warns_on_stderr_by_default(tmp_path, good_patch, capsys):
    root = make_project(tmp_path / "p", {"0001-a.patch": good_patch})
    (root / "patches" / "0009-stray.patch").write_text(good_patch)
    read_series(root)
    assert capsys.readouterr().err == (
        "warning: patches/0009-stray.patch is not in the series and is ignored; add it to patches/series or delete it\n"
    )


@pytest.mark.parametrize(
    "body, line",
    [
        ("subject\n\nplain words\n", None),
        ("subject\n\nwords\ndiff --git a/x b/x\n", 4),
        ("subject\n\nIndex: x\n", 3),
        ("subject\n\n---\n", 3),
        ("subject\n\n--- a/file\n", 3),
        ("subject\n\n---  \n", 3),
        ("subject\n\n----- a rule\n", None),
        ("subject\n\n---x\n", None),
        ("subject\n\ndiffs -u\n", None),
        ("subject\n\nindex: lower case\n", None),
    ],
)
def test_message_break_finds_where_git_am_would_cut(body, line):
    assert message_break(body) == line


def test_a_commit_matches_its_patch_by_the_first_paragraph():
    patch = PatchEntry("1.patch", Path("1.patch"), "kimi: pass", "", (), None, ())
    assert commit_matches_patch("kimi: pass\n\nwhy\n\nUpstream-Status: Pending\n", patch)
    assert commit_matches_patch("kimi:\n pass\n", patch)  # the first paragraph, whitespace collapsed
    assert not commit_matches_patch("kimi: other\n\nkimi: pass\n\nlast\n", patch)


def test_a_subject_folded_with_a_tab_reads_whole(tmp_path, good_patch):
    folded = good_patch.replace("Subject: [PATCH] kimi: pass", "Subject: [PATCH] kimi:\n\tpass")
    assert folded != good_patch
    root = make_project(tmp_path / "p", {"0001-a.patch": folded})
    assert read_series(root).patches[0].subject == "kimi:\tpass"


def test_trailers_are_the_key_value_lines_of_the_last_paragraph():
    body = "subject\n\nNote: not a trailer, the body\n\nUpstream-Status: Pending\nSigned\nDrop-When: upstream>=1\n"
    assert parse_trailers(body) == {"Upstream-Status": "Pending", "Drop-When": "upstream>=1"}


def test_drop_when_reads_every_condition(tmp_path):
    path = tmp_path / "0001-a.patch"
    assert parse_drop_when("unset, upstream>=0.5.12, check:k", path) == (
        DropCondition("upstream", "0.5.12"),
        DropCondition("check", "k"),
    )
    assert parse_drop_when("upstream>=0.5.12", path)[0].holds_for_version("0.5.12")
    with pytest.raises(UserError) as caught:
        parse_drop_when("check:", path)
    assert caught.value.hint == "use check:<name> or upstream>=<version>"
    with pytest.raises(UserError) as caught:
        parse_drop_when("upstream>=soon", path)
    assert caught.value.hint == "write e.g. upstream>=0.5.12"


def test_trailer_problems_say_what_to_write():
    assert trailer_problems(entry("a", status="Unset", message="s\n\nUpstream-Status: Unset\nDrop-When: unset")) == [
        "Upstream-Status is unset (imported): make it one of Pending, Submitted, Backport, Denied, Inappropriate, "
        "Accepted",
        "Drop-When is unset (imported): say when the patch can be dropped (check:NAME or upstream>=VERSION)",
    ]
    assert trailer_problems(entry("a", status="Maybe", drop_when=[DropCondition("check", "k")])) == [
        "Upstream-Status 'Maybe' is not one of Pending, Submitted, Backport, Denied, Inappropriate, Accepted"
    ]


def test_render_series_names_the_file_it_refuses(tmp_path):
    (tmp_path / "patches").mkdir()
    with pytest.raises(UserError) as caught:
        render_series(tmp_path, ["0001-a.patch", "0001-A.patch"])
    assert (
        str(caught.value)
        == f"cannot list '0001-A.patch' twice in {tmp_path / 'patches' / 'series'}: list each patch once"
    )
    with pytest.raises(UserError) as caught:
        render_series(tmp_path, ["../x.patch"])
    assert caught.value.hint.startswith("name patches as `git format-patch` does")


def test_the_series_is_written_as_utf8_whatever_the_locale(tmp_path):
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "series").write_text("# la série de Kimi\n0001-a.patch\n", encoding="utf-8")
    env = {
        **os.environ,
        "LC_ALL": "C",
        "LANG": "C",
        "PYTHONUTF8": "0",
        "PYTHONCOERCECLOCALE": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    script = (
        "import sys; from pathlib import Path; from sglpatch.queue.series import write_series; "
        "write_series(Path(sys.argv[1]), ['0001-a.patch', '0002-b.patch'])"
    )
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "patches" / "series").read_bytes().decode(
        "utf-8"
    ) == "# la série de Kimi\n0001-a.patch\n0002-b.patch\n"


def test_conflict_markers_are_named_per_file_and_only_where_a_diff_adds_them():
    """A patch must not add the lines git writes around a conflict: each file whose diff adds one
    is named, in order; a marker the diff removes, or `=======` alone (a reST rule), is no
    unresolved merge. The twin: the same patch without those two files passes."""
    from sglpatch.queue.series import holds_conflict_markers, refuse_conflict_markers

    def section(path: str, body: str) -> str:
        return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n{body}"

    added = section("a.py", "@@ -1 +1,3 @@\n+<<<<<<< ours\n x\n+>>>>>>> theirs\n")
    removed = section("b.py", "@@ -1 +1 @@\n-<<<<<<< old\n+y\n")
    rule = section("c.rst", "@@ -1 +1,2 @@\n t\n+=======\n")
    last = section("d.py", "@@ -1 +1 @@\n-z\n+>>>>>>>\n")
    with pytest.raises(UserError) as error:
        refuse_conflict_markers(added + removed + rule + last, "0001-x.patch", "resolve it first")
    assert str(error.value) == "0001-x.patch would add conflict markers to a.py, d.py: resolve it first"
    refuse_conflict_markers(removed + rule, "0001-x.patch", "resolve it first")
    assert holds_conflict_markers("x = 1\n<<<<<<< HEAD\n") and holds_conflict_markers(">>>>>>>\n")
    assert not holds_conflict_markers("x = '<<<<<<< inside a line'\n=======\n")


@pytest.mark.parametrize("where", ["message", "diff header", "nowhere"])
def test_crlf_in_the_message_alone_or_the_diff_headers_alone_is_refused(tmp_path, good_patch, where):
    """git am reads the mail and the `diff --git` lines with LF ends: CRLF in either part alone is
    refused as a CRLF file; the twin (nowhere) is read."""
    data = good_patch.encode()
    if where == "message":
        data = data.replace(b"Why this change exists.\n", b"Why this change exists.\r\n", 1)
    elif where == "diff header":
        data = re.sub(rb"(?m)^(diff --git [^\n]*)$", rb"\1\r", data)
    (tmp_path / "0001-a.patch").write_bytes(data)
    if where == "nowhere":
        assert parse_patch(tmp_path / "0001-a.patch").files == (KIMI,)
        return
    with pytest.raises(UserError) as error:
        parse_patch(tmp_path / "0001-a.patch")
    assert (
        str(error.value) == f"{tmp_path / '0001-a.patch'} has CRLF line endings: convert with `dos2unix` or re-export"
    )


def test_a_later_file_whose_diff_removes_a_dash_line_and_an_earlier_one_not_utf8(tmp_path):
    """The message ends at the first `---` line and at the first `diff --git`: a `---` further
    down (a removed `--` line) and bytes that are not UTF-8 in an earlier file's diff belong to
    the diff. The twin: the same patch of one file reads too."""
    repo, base = make_upstream(tmp_path / "up", {"python/a.txt": "caf\n", "python/b.sql": "--\nselect 1;\n"})
    text = patch_text(repo, base, {"python/a.txt": "cafe\n", "python/b.sql": "select 1;\n"}, message("two files"))
    assert "\n---\n" in text.split("diff --git a/python/b.sql", 1)[1], "the premise: a removed `--` line"
    data = text.encode().replace(b"+cafe\n", b"+caf\xe9\n", 1)
    (tmp_path / "0001-a.patch").write_bytes(data)
    patch = parse_patch(tmp_path / "0001-a.patch")
    assert (patch.subject, patch.files, patch.message) == (
        "two files",
        ("python/a.txt", "python/b.sql"),
        "Why this change exists.\n\nUpstream-Status: Pending\nDrop-When: check:example",
    )
    one = patch_text(repo, base, {"python/b.sql": "select 1;\n"}, message("one file"))
    (tmp_path / "0002-b.patch").write_text(one)
    assert parse_patch(tmp_path / "0002-b.patch").files == ("python/b.sql",)


@pytest.mark.parametrize(
    "damage, error",
    [
        (lambda t: t.split("\n\n", 1)[0] + "\n", "is not a git format-patch file (no mail header with a Subject)"),
        (
            lambda t: re.sub(r"(?m)^Subject: .*$", "X-Subject: none", t, count=1),
            "is not a git format-patch file (no mail header with a Subject)",
        ),
        (
            lambda t: re.sub(r"(?m)^From: .*$", "From: =?x-no-such-charset?q?A?= <a@example.org>", t, count=1),
            ": the From: header cannot be decoded",
        ),
        (lambda t: t.replace("Drop-When: check:example", "Drop-When: upstream>=soon"), ": Drop-When"),
        (lambda t: t, None),
    ],
)
def test_a_damaged_mail_header_or_trailer_is_named_with_its_file(tmp_path, damage, error):
    """Each refusal starts with the patch file's path (a blank line lost from the header, a Subject
    renamed, a From: in an unknown charset, a Drop-When that is no condition); the twin is intact."""
    repo, base = make_upstream(tmp_path / "up")
    text = patch_text(repo, base, {KIMI: "class KimiK25:\n    pass\n"}, message("kimi: pass"))
    path = tmp_path / "0001-a.patch"
    path.write_text(damage(text))
    if error is None:
        assert parse_patch(path).subject == "kimi: pass"
        return
    with pytest.raises(UserError) as raised:
        parse_patch(path)
    assert str(raised.value).startswith(f"{path}{'' if error.startswith(':') else ' '}{error}"), str(raised.value)


@pytest.mark.parametrize("target", ["outside", "inside"])
def test_a_patch_file_that_is_a_link_is_refused_in_one_line(tmp_path, good_patch, target):
    root = make_project(tmp_path / "project", {"0001-kimi.patch": good_patch})
    patch = root / "patches" / "0001-kimi.patch"
    real = tmp_path / "elsewhere.patch" if target == "outside" else root / "patches" / "0001-kimi.real"
    real.write_text(good_patch)
    patch.unlink()
    patch.symlink_to(real)
    with pytest.raises(UserError, match=r"0001-kimi\.patch is a symbolic link \(to .*\), not a file of the repository"):
        read_series(root)
    line = assert_one_line_error(run_cli(root, "prepare"), "is a symbolic link")
    hint = line.split("(`", 1)[1].split("`)", 1)[0]
    subprocess.run(hint, shell=True, check=True)  # the hint, followed literally, makes it a file
    assert not patch.is_symlink() and read_series(root).names == ["0001-kimi.patch"]  # the twin: a file is read


def test_a_series_file_that_is_a_link_is_refused(tmp_path, good_patch):
    root = make_project(tmp_path / "project", {"0001-kimi.patch": good_patch})
    series = root / "patches" / "series"
    (tmp_path / "series").write_text(series.read_text())
    series.unlink()
    series.symlink_to(tmp_path / "series")
    with pytest.raises(UserError, match=r"series is a symbolic link"):
        read_series_names(root)

"""`import`: plain diffs, format-patch files and mboxes into a line's series, through the CLI,
on real git repositories and a synthetic release served from 127.0.0.1."""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
from helpers import assert_one_line_error, run_cli
from test_rebase import KIMI, OTHER, RUNNER, V1, env, make_repo, snapshot  # noqa: F401  (env is a fixture)

from sglpatch.queue.series import parse_patch, read_series, read_series_names, trailer_problems


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def plain_diff(env, edits: dict[str, str], *options: str) -> str:
    """`git diff` (or with options) of ``edits`` on the synthetic release, as a downstream ships it."""
    repo = env["upstream"]
    repo.git.checkout("--quiet", "--detach", env["base"])
    for path, text in edits.items():
        (Path(repo.working_tree_dir) / path).write_text(text)
    diff = repo.git.diff(*options, strip_newline_in_stdout=False)
    repo.git.checkout("--quiet", "--", ".")
    return diff


def test_a_plain_git_diff_becomes_a_patch_whose_unknown_trailers_the_build_names(env, tmp_path):
    root = make_repo(env, ["clean"])
    diff = tmp_path / "fix-kimi-forward.diff"
    diff.write_text(
        plain_diff(
            env, {KIMI: V1[KIMI].replace("return 1", "return 3"), RUNNER: V1[RUNNER].replace("line 5\n", "line five\n")}
        )
    )
    result = ok(run_cli(root, "import", str(diff), "--author", "A. Downstream <ad@example.org>", env=env["env"]))
    assert "imported patches/0002-fix-kimi-forward.patch" in result.stdout
    assert read_series_names(root) == ["0001-clean.patch", "0002-fix-kimi-forward.patch"]
    patch = parse_patch(root / "patches" / "0002-fix-kimi-forward.patch")
    assert patch.subject == "fix kimi forward" and set(patch.files) == {KIMI, RUNNER}
    assert "Imported from fix-kimi-forward.diff" in patch.message
    assert "From: A. Downstream <ad@example.org>" in patch.path.read_text()
    problems = trailer_problems(patch)
    assert any("Upstream-Status is unset" in p for p in problems) and any("Drop-When is unset" in p for p in problems)
    # it applies like any patch, with its author
    ok(run_cli(root, "prepare", env=env["env"]))
    head = git.Repo(root / "build" / "src").head.commit
    assert head.summary == "fix kimi forward" and head.author.email == "ad@example.org"
    # the build names the unset trailers (one line, non-zero); the twin: set them and it passes that gate
    build = run_cli(root, "build", env=env["env"])
    assert build.returncode != 0 and "unset (imported)" in build.stderr + build.stdout
    text = patch.path.read_text().replace(
        "Upstream-Status: Unset [imported: say whether it is upstream]", "Upstream-Status: Pending"
    )
    text = text.replace("Drop-When: unset", "Drop-When: upstream>=9")
    patch.path.write_text(text)
    assert trailer_problems(parse_patch(patch.path)) == []


def test_a_diff_u_at_p1_gets_git_headers_and_applies(env, tmp_path):
    root = make_repo(env, [])
    diff = plain_diff(
        env, {OTHER: "VALUE = 7\n"}, "--no-prefix", "--src-prefix=sglang-old/", "--dst-prefix=sglang-new/"
    )
    diff = "\n".join(l for l in diff.splitlines() if not l.startswith(("diff --git", "index "))) + "\n"
    assert "diff --git" not in diff and "--- sglang-old/" in diff  # the premise: a diff -u
    (tmp_path / "value.patch").write_text(diff)
    ok(run_cli(root, "import", str(tmp_path / "value.patch"), "--subject", "Set VALUE to 7", env=env["env"]))
    (patch,) = read_series(root).patches
    assert patch.name == "0001-Set-VALUE-to-7.patch" and patch.files == (OTHER,)
    ok(run_cli(root, "prepare", env=env["env"]))
    assert (root / "build" / "src" / OTHER).read_text() == "VALUE = 7\n"


def test_a_recursive_diff_u_with_spaced_new_and_deleted_files_applies_where_it_says(env, tmp_path):
    """GNU `diff -ruN`: it quotes a name with a space, writes its command line before each file and
    stamps the absent side of a new or deleted file with the epoch. Cut at the first space, the
    spaced file was patched as `python/sglang/srt/new` and the new file was a change to nothing."""
    root = make_repo(env, [])
    spaced = "python/sglang/srt/new model.py"
    for side in ("old", "new"):
        for rel, text in V1.items():
            (tmp_path / side / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / side / rel).write_text(text)
    (tmp_path / "new" / OTHER).write_text("VALUE = 8\n")
    (tmp_path / "new" / spaced).write_text("class New:\n    pass\n")
    (tmp_path / "new" / RUNNER).unlink()
    made = subprocess.run(["diff", "-ruN", "old", "new"], cwd=tmp_path, capture_output=True, text=True)
    assert made.returncode == 1 and f'--- "old/{spaced}"\t1970-01-01' in made.stdout  # the premise
    (tmp_path / "tree.diff").write_text(made.stdout)
    ok(run_cli(root, "import", str(tmp_path / "tree.diff"), "--split", env=env["env"]))
    patches = read_series(root).patches
    assert sorted(p.files for p in patches) == sorted([(RUNNER,), (spaced,), (OTHER,)])
    assert all("diff -ruN" not in p.path.read_text() for p in patches)
    ok(run_cli(root, "prepare", env=env["env"]))
    src = root / "build" / "src"
    assert (src / OTHER).read_text() == "VALUE = 8\n" and (src / spaced).read_text() == "class New:\n    pass\n"
    assert not (src / RUNNER).exists()
    # the twin: a file only emptied (its time stamp is not the epoch) is kept, empty
    (tmp_path / "new" / RUNNER).write_text("")
    (tmp_path / "new" / OTHER).write_text(V1[OTHER])
    (tmp_path / "new" / spaced).unlink()
    made = subprocess.run(["diff", "-ruN", "old", "new"], cwd=tmp_path, capture_output=True, text=True)
    (tmp_path / "emptied.diff").write_text(made.stdout)
    ok(run_cli(root, "import", str(tmp_path / "emptied.diff"), env=env["env"]))
    emptied = read_series(root).patches[-1].path.read_text()
    assert "deleted file mode" not in emptied and f"+++ b/{RUNNER}\n@@ -1,40 +0,0 @@" in emptied
    env["upstream"].git.checkout("--quiet", "--detach", env["base"])
    env["upstream"].git.apply("--check", str(read_series(root).patches[-1].path))


def test_an_mbox_of_format_patches_keeps_order_subjects_and_authors(env, tmp_path):
    root = make_repo(env, [])
    repo = env["upstream"]
    repo.git.checkout("--quiet", "-B", "downstream", env["base"])
    for subject, (path, text) in (
        ("first: value", (OTHER, "VALUE = 8\n")),
        ("[RFC] second: kimi", (KIMI, V1[KIMI].replace("return 1", "return 4"))),
    ):
        (Path(repo.working_tree_dir) / path).write_text(text)
        repo.git.commit("-qam", subject, author="B. Upstreamer <bu@example.org>")
    mbox = repo.git.format_patch("--stdout", "-2", "HEAD", strip_newline_in_stdout=False)
    repo.git.checkout("--quiet", "--detach", env["base"])
    (tmp_path / "series.mbox").write_text(mbox)
    ok(run_cli(root, "import", str(tmp_path / "series.mbox"), env=env["env"]))
    assert read_series_names(root) == ["0001-first-value.patch", "0002-second-kimi.patch"]
    ok(run_cli(root, "prepare", env=env["env"]))
    commits = list(git.Repo(root / "build" / "src").iter_commits("refs/sglpatch/base..HEAD"))[::-1]
    assert [c.summary for c in commits] == ["first: value", "second: kimi"]
    assert {c.author.email for c in commits} == {"bu@example.org"}
    ok(run_cli(root, "status", env=env["env"]))  # the subjects git am rewrote still match


def test_a_mail_without_from_gets_the_author_and_a_series_file_without_one_is_named(env, tmp_path):
    root = make_repo(env, ["clean"])
    text = (root / "patches" / "0001-clean.patch").read_text()
    headless = "\n".join(l for l in text.splitlines() if not l.startswith("From: ")) + "\n"
    (tmp_path / "no-from.patch").write_text(headless.replace("clean: change", "other: change"))
    ok(
        run_cli(
            root, "import", str(tmp_path / "no-from.patch"), "--author", "C. Porter <cp@example.org>", env=env["env"]
        )
    )
    assert "From: C. Porter <cp@example.org>" in (root / "patches" / "0002-other-change.patch").read_text()
    # the twin: the same file put in patches/ by hand is refused with one line naming the author
    (root / "patches" / "0002-other-change.patch").write_text(headless)
    assert_one_line_error(run_cli(root, "prepare", env=env["env"]), "no From: header")


def test_split_makes_one_patch_per_file(env, tmp_path):
    root = make_repo(env, [])
    (tmp_path / "both.diff").write_text(
        plain_diff(env, {OTHER: "VALUE = 9\n", KIMI: V1[KIMI].replace("return 1", "return 9")})
    )
    ok(run_cli(root, "import", str(tmp_path / "both.diff"), "--split", env=env["env"]))
    patches = read_series(root).patches
    assert [p.files for p in patches] == [(KIMI,), (OTHER,)]
    assert [p.subject for p in patches] == [f"both ({KIMI})", f"both ({OTHER})"]
    ok(run_cli(root, "prepare", env=env["env"]))


def test_bad_imports_are_one_line_and_write_nothing(env, tmp_path):
    root = make_repo(env, ["clean"])
    before = snapshot(root)
    (tmp_path / "notes.txt").write_text("just words\n")
    (tmp_path / "bad.diff").write_bytes(b"Fixes the caf\xe9 path (Latin-1).\n\ndiff --git a/x b/x\n")
    (tmp_path / "clean.diff").write_text(plain_diff(env, {OTHER: "VALUE = 5\n"}))
    for args, needle in (
        (["notes.txt"], "holds no diff"),
        (["missing.diff"], "does not exist"),
        (["bad.diff"], "not valid UTF-8"),
        (["clean.diff", "--name", "0001-clean"], "patches/0001-clean.patch already exists"),
        (["clean.diff", "--author", "nobody"], "is not 'Name <email>'"),
        (["clean.diff", "clean.diff", "--name", "x"], "--name names one patch"),
    ):
        files = [
            str(tmp_path / a) if not a.startswith("-") and i < 2 and "." in a and "<" not in a else a
            for i, a in enumerate(args)
        ]
        assert_one_line_error(run_cli(root, "import", *files, env=env["env"]), needle)
    assert snapshot(root) == before


def staged_diff(env, files: dict[str, bytes]) -> bytes:
    """`git diff --cached --binary` of ``files`` (bytes) on the synthetic release."""
    repo = env["upstream"]
    repo.git.checkout("--quiet", "--detach", env["base"])
    work = Path(repo.working_tree_dir)
    for path, data in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_bytes(data)
    repo.git.add("--all")
    diff = subprocess.run(["git", "diff", "--cached", "--binary"], cwd=work, capture_output=True, check=True).stdout
    repo.git.reset("--quiet", "--hard")
    repo.git.clean("-qfd")
    return diff


def test_every_byte_of_a_diff_is_kept_from_import_to_the_applied_commit(env, tmp_path):
    root = make_repo(env, ["clean"])
    diff = staged_diff(
        env,
        {
            KIMI: V1[KIMI].encode() + b"X = 1\r\nY = 2\r\n",  # CRLF lines added to an LF file
            "python/sglang/crlf.txt": b"a\r\nb\r\n",  # a new CRLF file
            "python/sglang/no_newline.txt": b"no newline at the end",
            "python/sglang/blob.bin": b"\x00\x01binary\x00\xff",
            "python/sglang/latin1.txt": b"caf\xe9 \xe9t\xe9\n",  # not UTF-8
        },
    )
    (tmp_path / "mixed.diff").write_bytes(diff)
    ok(run_cli(root, "import", str(tmp_path / "mixed.diff"), "--author", "A <a@b.org>", env=env["env"]))
    ok(run_cli(root, "prepare", env=env["env"]))
    work = root / "build" / "src"
    applied = subprocess.run(
        ["git", "show", "HEAD", "--binary", "--format="], cwd=work, capture_output=True, check=True
    ).stdout
    assert applied == diff
    assert (work / KIMI).read_bytes().endswith(b"X = 1\r\nY = 2\r\n")


def test_crlf_lines_a_patch_carries_survive_a_rebase(env, tmp_path):
    root = make_repo(env, ["clean"])
    (tmp_path / "crlf.diff").write_bytes(staged_diff(env, {"python/sglang/crlf.txt": b"a\r\nb\r\n"}))
    ok(run_cli(root, "import", str(tmp_path / "crlf.diff"), "--author", "A <a@b.org>", env=env["env"]))
    name = read_series_names(root)[-1]
    text = (root / "patches" / name).read_bytes()
    (root / "patches" / name).write_bytes(
        text.replace(
            b"Upstream-Status: Unset [imported: say whether it is upstream]", b"Upstream-Status: Pending"
        ).replace(b"Drop-When: unset", b"Drop-When: upstream>=9")
    )
    subprocess.run(["git", "add", "--all", "patches"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "import crlf"], cwd=root, check=True)
    ok(run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]))
    assert b"+a\r\n+b\r\n" in (root / "patches" / name).read_bytes()
    assert (root / "build" / "src" / "python/sglang/crlf.txt").read_bytes() == b"a\r\nb\r\n"


def test_a_diff_saved_with_crlf_line_ends_is_read_back_to_lf(env, tmp_path):
    # the twin: the diff's own lines end in CR too, so the file was converted on the way
    root = make_repo(env, ["clean"])
    diff = staged_diff(env, {"python/sglang/dos.txt": b"one\ntwo\n"})
    assert b"\r" not in diff
    (tmp_path / "dos.diff").write_bytes(diff.replace(b"\n", b"\r\n"))
    ok(run_cli(root, "import", str(tmp_path / "dos.diff"), "--author", "A <a@b.org>", env=env["env"]))
    ok(run_cli(root, "prepare", env=env["env"]))
    assert (root / "build" / "src" / "python/sglang/dos.txt").read_bytes() == b"one\ntwo\n"


def test_a_diff_made_without_a_and_b_prefixes_is_imported_under_them_and_applies(env, tmp_path):
    """`git diff --no-prefix` and other prefixes: `git am` strips one leading directory, so as they
    came such diffs apply to the wrong paths or not at all (and --split crashed on them)."""
    root = make_repo(env, [])
    edits = {OTHER: "VALUE = 9\n", KIMI: V1[KIMI].replace("return 1", "return 9")}
    (tmp_path / "bare.diff").write_text(plain_diff(env, edits, "--no-prefix"))
    (tmp_path / "mnemonic.diff").write_text(
        plain_diff(env, {RUNNER: V1[RUNNER].replace("line 5\n", "line V\n")}, "--src-prefix=i/", "--dst-prefix=w/")
    )
    assert (tmp_path / "bare.diff").read_text().startswith(f"diff --git {KIMI} {KIMI}\n")
    ok(run_cli(root, "import", str(tmp_path / "bare.diff"), "--split", env=env["env"]))
    ok(run_cli(root, "import", str(tmp_path / "mnemonic.diff"), env=env["env"]))
    patches = read_series(root).patches
    assert [p.files for p in patches] == [(KIMI,), (OTHER,), (RUNNER,)]
    first = patches[0].path.read_text()
    assert f"diff --git a/{KIMI} b/{KIMI}\n" in first and f"\n--- a/{KIMI}\n+++ b/{KIMI}\n" in first
    ok(run_cli(root, "prepare", env=env["env"]))
    src = root / "build" / "src"
    assert (src / OTHER).read_text() == "VALUE = 9\n" and "line V\n" in (src / RUNNER).read_text()
    # the twin: the bare diff put in patches/ by hand as a mail is refused, naming the prefixes
    text = patches[1].path.read_text().replace(f"a/{OTHER}", OTHER).replace(f"b/{OTHER}", OTHER)
    patches[1].path.write_text(text)
    assert_one_line_error(run_cli(root, "prepare", env=env["env"]), "without git's a/ and b/ prefixes")


def test_an_import_takes_the_next_number_no_line_uses(env, tmp_path):
    root = make_repo(env, ["clean"])
    ok(run_cli(root, "lines", "--add", "next", env=env["env"]))
    (tmp_path / "a.diff").write_text(plain_diff(env, {KIMI: V1[KIMI].replace("return 1", "return 3")}))
    (tmp_path / "b.diff").write_text(plain_diff(env, {RUNNER: V1[RUNNER].replace("line 5\n", "line five\n")}))
    ok(run_cli(root, "import", str(tmp_path / "a.diff"), "--author", "A <a@b.org>", env=env["env"]))
    assert read_series_names(root)[-1] == "0002-a.patch"
    ok(run_cli(root, "--line", "next", "import", str(tmp_path / "b.diff"), "--author", "A <a@b.org>", env=env["env"]))
    assert read_series_names(root / "lines" / "next")[-1] == "0003-b.patch"  # 0002 is production's
    # the twin: new refuses a number another line's patch holds, and names the free one
    ok(run_cli(root, "--line", "next", "prepare", env=env["env"]))
    work = root / "lines" / "next" / "build" / "src"
    (work / OTHER).write_text("VALUE = 9\n")
    line = assert_one_line_error(
        run_cli(root, "--line", "next", "new", "0002-mine", "-m", "mine", env=env["env"]), "0002 is taken"
    )
    assert "0002-a.patch" in line and "0004-mine" in line

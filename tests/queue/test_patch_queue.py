"""Patch queue semantics on real temporary git repositories."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import git
import pytest
from helpers import (
    UPSTREAM_FILES,
    assert_one_line_error,
    commit_files,
    commit_project,
    make_project,
    message,
    patch_text,
    run_cli,
)
from patch_queues import KIMI, RUNNER, edited, one_file_queue, project, two_patch_queue, upstream  # noqa: F401  (fixtures)

from sglpatch.errors import UserError
from sglpatch.queue.line import line_of
from sglpatch.queue.patch_queue import PatchQueue, am_refusal
from sglpatch.queue.series import read_series_names
from sglpatch.queue.transaction_log import log


def test_push_all_applies_each_patch_as_one_commit(project):
    root, queue = project
    assert queue.push(all=True) == ["0001-runner.patch", "0002-kimi.patch"]
    assert [c.summary for c in queue.applied_commits()] == ["runner: spell out ten", "kimi: return two"]
    assert "line ten" in (queue.path / RUNNER).read_text()
    assert [s.applied for s in queue.status()] == [True, True]
    assert queue.status()[0].files == (RUNNER,)


def test_push_and_pop_by_name_and_one_at_a_time(project):
    root, queue = project
    assert queue.push() == ["0001-runner.patch"]
    assert queue.push("0002-kimi.patch") == ["0002-kimi.patch"]
    assert queue.pop() == ["0002-kimi.patch"]
    assert "return 1" in (queue.path / KIMI).read_text()
    assert queue.applied_names() == ["0001-runner.patch"] and "line ten" in (queue.path / RUNNER).read_text()
    queue.push(all=True)
    assert queue.pop("0002-kimi.patch") == ["0002-kimi.patch"]  # down to the target, not below it
    assert queue.applied_names() == ["0001-runner.patch"]
    queue.push(all=True)
    assert queue.pop("0001-runner.patch") == ["0002-kimi.patch", "0001-runner.patch"]
    assert queue.applied_names() == []
    queue.push(all=True)
    assert queue.pop(all=True) == ["0002-kimi.patch", "0001-runner.patch"]
    assert queue.applied_names() == [] and "line 10" in (queue.path / RUNNER).read_text()
    assert queue.pop(all=True) == []


def test_export_of_an_unchanged_series_is_byte_identical(project):
    root, queue = project
    queue.push(all=True)
    before = {p.name: p.read_bytes() for p in (root / "patches").iterdir()}
    queue.export()
    first = {p.name: p.read_bytes() for p in (root / "patches").iterdir()}
    # A second application from scratch (new commit dates, new SHAs) must export the same bytes.
    queue.pop(all=True)
    queue.push(all=True)
    queue.export()
    second = {p.name: p.read_bytes() for p in (root / "patches").iterdir()}
    assert first == second
    assert set(before) == set(first)
    assert b"From 0000000000000000000000000000000000000000" in first["0001-runner.patch"]


def test_new_and_refresh_turn_edits_into_patch_files(project):
    root, queue = project
    queue.push(all=True)
    (queue.path / KIMI).write_text("class KimiK25:\n    pass\n")
    path = queue.new("0003-kimi-pass", "kimi: pass\n\nBody.\n\nUpstream-Status: Pending\nDrop-When: check:x\n")
    assert path.name == "0003-kimi-pass.patch"
    assert (root / "patches" / "series").read_text().splitlines()[-1] == "0003-kimi-pass.patch"
    assert "+    pass" in path.read_text()
    (queue.path / "python/sglang/new_module.py").write_text("X = 1\n")
    queue.refresh()
    text = path.read_text()
    assert "new_module.py" in text and "+    pass" in text
    assert not queue.is_dirty()
    # The refreshed patch re-applies from scratch to the same tree.
    tree = queue.repo.head.commit.tree.hexsha
    queue.pop(all=True)
    queue.push(all=True)
    assert queue.repo.head.commit.tree.hexsha == tree


def test_edits_holding_conflict_markers_never_reach_a_patch_file(project):
    """A work tree left with markers (a replayed edit, a merge by hand) is refused by `refresh`
    and `new`, naming the file; the patch files, the commits and the edits stay as they were. The
    twin: a marker-like line that is no marker (no space after it, `=======` alone) is an edit like
    any other."""
    root, queue = project
    queue.push(all=True)
    head = queue.repo.head.commit.hexsha
    before = {p.name: p.read_bytes() for p in (root / "patches").iterdir()}
    marked = "class KimiK25:\n<<<<<<< ours\n    x = 1\n=======\n    x = 2\n>>>>>>> theirs\n"
    (queue.path / KIMI).write_text(marked)
    with pytest.raises(UserError) as refresh:
        queue.refresh()
    assert refresh.value.what == f"0002-kimi.patch would add conflict markers to {KIMI}"
    assert refresh.value.hint == f"resolve them in {queue.path}, then rerun"
    with pytest.raises(UserError, match="0003-x.patch would add conflict markers"):
        queue.new("0003-x", "x\n")
    assert {p.name: p.read_bytes() for p in (root / "patches").iterdir()} == before
    assert queue.repo.head.commit.hexsha == head and (queue.path / KIMI).read_text() == marked
    (queue.path / KIMI).write_text("class KimiK25:\n<<<<<<<<\n=======\n    x = 2\n")
    assert "+<<<<<<<<" in queue.new("0003-x", "x\n").read_text()


def test_new_patch_goes_right_above_the_top_applied_patch(project):
    root, queue = project
    queue.push()
    (queue.path / KIMI).write_text("class KimiK25:\n    pass\n")
    queue.new("0001b-between", "between\n\nUpstream-Status: Pending\nDrop-When: check:x\n")
    lines = [l for l in (root / "patches" / "series").read_text().splitlines() if not l.startswith("#")]
    assert lines == ["0001-runner.patch", "0001b-between.patch", "0002-kimi.patch"]


@pytest.mark.parametrize("command", [["push"], ["pop"], ["push", "--all"]])
def test_dirty_work_tree_is_refused_and_kept(project, command):
    root, queue = project
    queue.push()
    (queue.path / RUNNER).write_text("my precious edit\n")
    (queue.path / "untracked.py").write_text("also mine\n")
    result = run_cli(root, *command)
    assert_one_line_error(result, "uncommitted edits", "refresh")
    assert (queue.path / RUNNER).read_text() == "my precious edit\n"
    assert (queue.path / "untracked.py").read_text() == "also mine\n"


def test_pop_refuses_a_commit_that_differs_from_its_patch_file(project):
    root, queue = project
    queue.push()
    (queue.path / RUNNER).write_text("amended by hand\n")
    queue.repo.git.commit("-qam", "runner: spell out ten", "--amend")
    with pytest.raises(UserError, match="differs from patches/0001-runner.patch"):
        queue.pop()
    assert (queue.path / RUNNER).read_text() == "amended by hand\n"


def test_re_preparing_refuses_an_unexported_commit_below_a_synced_one(project, upstream):
    """prepare (reset_to) checks every applied commit, not only the first: the top one, amended
    by hand, holds work its patch file lacks; once exported, the same prepare goes through."""
    root, queue = project
    commit_project(root, upstream[1])  # the tool rewrites only committed patch files
    queue.push(all=True)
    (queue.path / KIMI).write_text("class KimiK25:\n    amended = True\n")
    queue.repo.git.commit("-qam", "kimi: return two", "--amend")
    with pytest.raises(UserError, match="differs from patches/0002-kimi.patch"):
        queue.reset_to(*upstream)
    assert queue.applied_names() == ["0001-runner.patch", "0002-kimi.patch"]
    assert "amended = True" in (queue.path / KIMI).read_text()
    queue.export()
    queue.reset_to(*upstream)  # the twin: exported, nothing is lost
    assert queue.applied_names() == []


def test_a_refreshed_patch_edited_in_patches_is_the_newer_truth(project, upstream):
    """refresh marks its commit as the one its file was written from; a later edit of the file
    (a pull) makes the commit disposable, not work to keep."""
    root, queue = project
    commit_project(root, upstream[1])
    queue.push(all=True)
    (queue.path / KIMI).write_text("class KimiK25:\n    refreshed = True\n")
    queue.refresh()
    patch = root / "patches" / "0002-kimi.patch"
    patch.write_text(patch.read_text().replace("Why this change exists.", "Why, said better."))
    queue.reset_to(*upstream)
    assert queue.applied_names() == []


def test_prepare_rebuilds_a_work_tree_that_lost_its_base_ref(project, upstream):
    root, queue = project
    queue.push(all=True)
    queue.repo.git.update_ref("-d", "refs/sglpatch/base")
    queue.reset_to(*upstream)
    assert queue.applied_names() == [] and queue.base.hexsha == upstream[1]


@pytest.mark.parametrize("good_first", [True, False])
def test_patch_that_no_longer_applies_stops_at_last_good_patch(tmp_path, upstream, good_first):
    """The error says how far the push got: after the good patch, or, with the stale patch first,
    that nothing was applied."""
    repo, base = upstream
    good = patch_text(repo, base, edited(KIMI, "return 1", "return 2"), message("kimi: two"))
    stale = patch_text(repo, base, edited(RUNNER, "line 30\n", "line thirty\n"), message("runner: 30"))
    drifted = UPSTREAM_FILES[RUNNER].replace("line 29\nline 30\nline 31\n", "changed upstream\n")
    repo.git.checkout("--quiet", "--detach", base)
    moved = commit_files(repo, {RUNNER: drifted}, "upstream moved")
    patches = {"0001-good.patch": good, "0002-stale.patch": stale} if good_first else {"0001-stale.patch": stale}
    root = make_project(tmp_path / "p", patches)
    queue = PatchQueue(root)
    queue.reset_to(repo, moved)
    result = run_cli(root, "push", "--all")
    stale_name = "0002-stale.patch" if good_first else "0001-stale.patch"
    line = assert_one_line_error(result, stale_name, RUNNER, "hunk #1 at line 27")
    if good_first:
        assert "(stopped after 0001-good.patch): " in line
        assert queue.applied_names() == ["0001-good.patch"]
    else:
        assert "(nothing applied): " in line and "stopped after" not in line
        assert queue.applied_names() == []
    assert not queue.is_dirty()
    assert not (Path(queue.repo.git_dir) / "rebase-apply").exists()


def test_a_work_tree_with_no_commit_yet_is_made_the_base_whatever_files_it_holds(tmp_path, upstream):
    """A first `prepare` (or a clone) killed while it wrote the files leaves a repository with no
    commit and files of the release half written: the next prepare checks the base out over them
    instead of stopping at "untracked files would be overwritten". The twin: an empty one too."""
    repo, base = upstream
    for leftover in ("half written\n", None):
        root = make_project(tmp_path / f"p{leftover is None}", {})
        work = root / "build" / "src"
        git.Repo.init(work)
        if leftover is not None:
            (work / RUNNER).parent.mkdir(parents=True)
            (work / RUNNER).write_text(leftover)
        queue = PatchQueue(root)
        queue.reset_to(repo, base)
        assert (work / RUNNER).read_text() == UPSTREAM_FILES[RUNNER]
        assert queue.applied_names() == [] and not queue.is_dirty()


def test_interrupted_push_is_recovered_by_a_rerun(project):
    root, queue = project
    # Interrupt for real: a git hook that runs mid-apply sends SIGINT to the whole command.
    hook = Path(queue.repo.git_dir) / "hooks" / "pre-applypatch"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text("#!/bin/sh\nkill -INT -$(ps -o pgid= $PPID | tr -d ' ')\nsleep 5\n")
    hook.chmod(0o755)
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).parents[2] / "build.py"), "--root", str(root), "push", "--all"],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _, err = child.communicate(timeout=60)
    assert child.returncode != 0
    assert "Traceback" not in err
    hook.unlink()
    assert queue.applied_names() == []
    result = run_cli(root, "push", "--all")
    assert result.returncode == 0, result.stderr
    assert queue.applied_names() == ["0001-runner.patch", "0002-kimi.patch"]
    assert not queue.is_dirty()


def test_foreign_git_am_in_progress_is_not_touched(project, tmp_path):
    root, queue = project
    (queue.path / KIMI).write_text("conflicting local commit\n")
    queue.repo.git.commit("-qam", "local")
    with pytest.raises(git.GitCommandError):
        queue.repo.git.am(str(root / "patches" / "0002-kimi.patch"))
    result = run_cli(root, "push")
    assert_one_line_error(result, "git am", "did not start")
    assert (Path(queue.repo.git_dir) / "rebase-apply").exists()


def test_status_json_lists_patches_and_files(project):
    import json

    root, queue = project
    queue.push()
    data = json.loads(run_cli(root, "status", "--json").stdout)
    assert [(p["name"], p["applied"]) for p in data["patches"]] == [
        ("0001-runner.patch", True),
        ("0002-kimi.patch", False),
    ]
    assert data["patches"][1]["files"] == [KIMI]
    assert data["dirty"] is False


def test_new_without_edits_is_refused(project):
    root, queue = project
    assert_one_line_error(run_cli(root, "new", "0003-nothing"), "no edits")
    assert_one_line_error(run_cli(root, "refresh"), "no patch is applied")


def test_push_to_a_target_stops_there_and_refuses_one_already_applied(project):
    root, queue = project
    assert queue.push("0001-runner.patch") == ["0001-runner.patch"]
    assert queue.applied_names() == ["0001-runner.patch"]
    with pytest.raises(UserError) as again:
        queue.push("0001-runner.patch")
    assert (again.value.what, again.value.hint) == ("0001-runner.patch is already applied", "nothing to push")
    with pytest.raises(UserError, match="no patch named '0009-nope.patch'"):
        queue.push("0009-nope.patch")
    assert queue.applied_names() == ["0001-runner.patch"]
    with pytest.raises(UserError) as unapplied:  # the twin, for pop: a known patch not applied
        queue.pop("0002-kimi.patch")
    assert (unapplied.value.what, unapplied.value.hint) == ("0002-kimi.patch is not applied", "nothing to pop")
    assert queue.applied_names() == ["0001-runner.patch"]


def test_a_work_tree_history_that_left_the_series_is_named(project):
    """A commit made by hand above the patches, or one whose subject is not its patch's: the queue
    stops and says which, rather than pairing commits with the wrong patch files."""
    root, queue = project
    queue.push(all=True)
    (queue.path / KIMI).write_text("by hand\n")
    queue.repo.git.commit("-qam", "by hand")
    with pytest.raises(UserError) as extra:
        queue.applied_names()
    assert extra.value.what == f"{queue.path} has 3 commits above the base but the series lists 2 patches"
    assert extra.value.hint == "export them with `python build.py new NAME` or drop the extra commits"
    queue.repo.git.reset("--quiet", "--hard", "HEAD~2")
    queue.repo.git.commit("-q", "--allow-empty", "-m", "kimi: another subject")
    with pytest.raises(UserError) as diverged:
        queue.applied_names()
    assert diverged.value.what == (
        f"commit 'kimi: another subject' in {queue.path} does not match patch 0002-kimi.patch ('kimi: return two')"
    )
    assert diverged.value.hint == "the work tree history diverged from the series; export or reset it"


def test_uncommitted_edits_are_named_three_at_a_time(project):
    root, queue = project
    queue.push()
    for name in ("a.py", "b.py", "c.py"):
        (queue.path / name).write_text("mine\n")
    with pytest.raises(UserError) as three:
        queue.push()
    assert three.value.what == f"cannot push: {queue.path} has uncommitted edits (a.py, b.py, c.py)"
    (queue.path / "d.py").write_text("mine\n")
    with pytest.raises(UserError) as four:
        queue.pop()
    assert four.value.what == f"cannot pop: {queue.path} has uncommitted edits (a.py, b.py, c.py ...)"
    assert four.value.hint.startswith("fold them into a patch with `refresh` or `new NAME`")


def test_new_with_nothing_applied_goes_first_and_a_taken_or_nested_name_is_refused(project):
    root, queue = project
    (queue.path / KIMI).write_text("class KimiK25:\n    pass\n")
    for taken in ("0001-runner", "0001-runner.patch", "sub/0009-x"):
        with pytest.raises(UserError, match="is not a free patch file name"):
            queue.new(taken, "x\n\nUpstream-Status: Pending\nDrop-When: check:x\n")
    queue.new("0000-first", "first\n\nUpstream-Status: Pending\nDrop-When: check:x\n")
    assert read_series_names(root) == ["0000-first.patch", "0001-runner.patch", "0002-kimi.patch"]
    assert queue.applied_names() == ["0000-first.patch"]


def test_a_patch_to_a_file_with_crlf_lines_keeps_them(tmp_path, upstream):
    """git am strips a CR at the end of a diff line unless told to keep it: the file would lose
    its line ends."""
    crlf = "python/sglang/srt/windows.txt"
    _, queue, _ = one_file_queue(tmp_path, upstream, crlf, "one\r\ntwo\r\n", "one\r\nTWO\r\n", "crlf: two")
    queue.push()
    assert (queue.path / crlf).read_bytes() == b"one\r\nTWO\r\n"


def test_new_without_a_message_writes_the_template_to_fill_in(project):
    root, queue = project
    queue.push(all=True)
    (queue.path / KIMI).write_text("class KimiK25:\n    pass\n")
    queue.new("0003-kimi-passes")
    assert queue.applied_commits()[-1].message == (
        "kimi passes\n\nWhat broke, why, and what this patch changes.\n\n"
        "Upstream-Status: Pending\nDrop-When: check:CHECK-NAME\n"
    )
    assert "Subject: [PATCH] kimi passes" in (root / "patches" / "0003-kimi-passes.patch").read_text()


def test_refresh_without_a_patch_or_without_edits_names_what_is_missing(project):
    root, queue = project
    with pytest.raises(UserError) as nothing:
        queue.refresh()
    assert (nothing.value.what, nothing.value.hint) == (
        "no patch is applied to refresh",
        "push one first, or use `new NAME`",
    )
    for top in ("0001-runner.patch", "0002-kimi.patch"):  # the top one, with one or two applied
        queue.push()
        with pytest.raises(UserError) as clean:
            queue.refresh()
        assert clean.value.what == f"{queue.path} has no edits to fold into {top}"
        assert clean.value.hint == "edit files in the work tree first"


def test_exported_patches_carry_full_blob_ids_and_no_rename_headers(project):
    """Fixed format-patch options: full index lines (the same bytes whoever exports), and a moved
    file as a deletion plus an addition, which git am applies without rename detection."""
    root, queue = project
    queue.push(all=True)
    queue.repo.git.mv(KIMI, KIMI.replace("kimi_k25.py", "kimi_k2.py"))
    queue.new("0003-move-kimi", "kimi: move\n\nUpstream-Status: Pending\nDrop-When: check:x\n")
    text = (root / "patches" / "0003-move-kimi.patch").read_text()
    assert "rename from" not in text and "deleted file mode 100644" in text and "new file mode 100644" in text
    index = re.findall(r"(?m)^index ([0-9a-f]+)\.\.([0-9a-f]+)", text)
    assert index and all(len(h) == 40 for pair in index for h in pair)
    queue.pop(all=True)
    assert queue.push(all=True)[-1] == "0003-move-kimi.patch"  # the move round-trips through git am


def test_a_stale_patch_with_bytes_that_are_not_utf8_is_diagnosed(tmp_path, upstream):
    """The diff may carry any bytes (a file that is not UTF-8): naming its stale hunk must not fail."""
    repo, base = upstream
    stale = patch_text(repo, base, edited(RUNNER, "line 30\n", "line thirty\n"), message("runner: 30"))
    stale = stale.replace("+line thirty", "+line thirty # caf\udce9")
    repo.git.checkout("--quiet", "--detach", base)
    moved = commit_files(repo, {RUNNER: UPSTREAM_FILES[RUNNER].replace("line 29\nline 30\n", "changed\n")}, "moved")
    root = make_project(tmp_path / "p", {})
    (root / "patches" / "0001-stale.patch").write_bytes(stale.encode("utf-8", "surrogateescape"))
    (root / "patches" / "series").write_text("0001-stale.patch\n")
    queue = PatchQueue(root)
    queue.reset_to(repo, moved)
    assert_one_line_error(run_cli(root, "push"), "0001-stale.patch", f"{RUNNER} hunk #1 at line 27")
    with pytest.raises(UserError, match="hunk #1 at line 27"):
        queue.push()


def test_the_stale_hunk_is_named_by_its_number_within_its_own_file(tmp_path, upstream):
    """Three hunks in the runner, files before and after it: the third runner hunk is the stale
    one, numbered within the runner only (a count across files would say #2 or #4)."""
    repo, base = upstream
    runner = UPSTREAM_FILES[RUNNER]
    for old, new in (("line 5\n", "line five\n"), ("line 18\n", "line eighteen\n"), ("line 30\n", "line thirty\n")):
        runner = runner.replace(old, new)
    files = {
        RUNNER: runner,
        KIMI: UPSTREAM_FILES[KIMI].replace("return 1", "return 2"),
        "python/pyproject.toml": UPSTREAM_FILES["python/pyproject.toml"] + "version = '0'\n",
    }
    stale = patch_text(repo, base, files, message("three files"))
    assert stale.index("pyproject.toml") < stale.index("model_runner.py") < stale.index("kimi_k25.py")
    repo.git.checkout("--quiet", "--detach", base)
    moved = commit_files(repo, {RUNNER: UPSTREAM_FILES[RUNNER].replace("line 29\nline 30\n", "changed\n")}, "moved")
    root = make_project(tmp_path / "p", {"0001-three.patch": stale})
    queue = PatchQueue(root)
    queue.reset_to(repo, moved)
    assert_one_line_error(run_cli(root, "push"), "0001-three.patch", f"{RUNNER} hunk #3 at line 27")
    assert queue.applied_names() == []


def test_the_stale_hunk_of_a_path_holding_b_slash_is_numbered(tmp_path, upstream):
    """``diff --git a/a b/c.txt b/a b/c.txt``: the path is read from the ``+++ b/`` header, not split
    out of the diff line."""
    spaced = "python/sglang/srt/a b/c.txt"
    lines = "".join(f"row {i}\n" for i in range(1, 41))
    root, _, _ = one_file_queue(
        tmp_path,
        upstream,
        spaced,
        lines,
        lines.replace("row 3\n", "row three\n").replace("row 30\n", "row 30!\n"),
        "spaced: two hunks",
        onto=lambda repo: commit_files(repo, {spaced: lines.replace("row 29\nrow 30\n", "x\n")}, "moved"),
    )
    assert_one_line_error(run_cli(root, "push"), "0001-one.patch", f"{spaced} hunk #2 at line 27")


@pytest.mark.parametrize(
    "body",
    [
        "example:\ndiff --git a/x b/x",
        "a separator\n---\nafter it",
        f"a long one:\ndiff --git a/{'x' * 40} b/{'x' * 40}",
    ],
)
def test_a_message_git_am_would_cut_is_refused_by_new_and_by_refresh(project, body):
    root, queue = project
    queue.push(all=True)
    (queue.path / KIMI).write_text("class KimiK25:\n    pass\n")
    with pytest.raises(UserError) as new:
        queue.new("0003-x", f"subject\n\n{body}\n")
    cut = body.splitlines()[1]  # the offending line, quoted up to 40 characters
    assert (
        new.value.what.startswith(f"line 4 of the message of 0003-x.patch ('{cut[:40]}') ")
        and "is where `git am` would start the diff" in new.value.what
    )
    assert new.value.hint == "indent that line of the message, then rerun"
    assert not (root / "patches" / "0003-x.patch").exists()
    # a message amended by hand reaches refresh through the commit: refused the same way
    queue.repo.git.commit("--quiet", "--amend", "-m", f"kimi: return two\n\n{body}\n")
    (queue.path / KIMI).write_text("class KimiK25:\n    pass  # again\n")
    before = (root / "patches" / "0002-kimi.patch").read_bytes()
    with pytest.raises(UserError) as refresh:
        queue.refresh()
    assert "of the message of 0002-kimi.patch" in refresh.value.what
    assert "commit --amend`), then rerun" in refresh.value.hint
    assert (root / "patches" / "0002-kimi.patch").read_bytes() == before
    # the twin: indented, the same text is a message
    queue.new("0003-x", f"subject\n\n    {body.replace(chr(10), chr(10) + '    ')}\n")
    assert (root / "patches" / "0003-x.patch").exists()


def test_a_patch_on_a_file_upstream_no_longer_has_names_the_file(tmp_path, upstream):
    repo, base = upstream
    kimi = patch_text(repo, base, edited(KIMI, "return 1", "return 2"), message("kimi: two"))
    repo.git.checkout("--quiet", "--detach", base)
    gone = commit_files(repo, {KIMI: None}, "upstream removed kimi")
    root = make_project(tmp_path / "p", {"0001-kimi.patch": kimi})
    queue = PatchQueue(root)
    queue.reset_to(repo, gone)
    line = assert_one_line_error(
        run_cli(root, "push"),
        "0001-kimi.patch",
        f"{KIMI} does not exist upstream",
        "refresh the patch against this upstream",
    )
    assert "hunk" not in line and queue.applied_names() == [] and not queue.is_dirty()


def test_patch_file_edited_after_apply_wins_over_the_stale_commit(project, upstream):
    root, queue = project
    queue.push(all=True)
    patch = root / "patches" / "0001-runner.patch"
    patch.write_text(patch.read_text().replace("Why this change exists.", "Why, said better."))
    queue.reset_to(*upstream)  # e.g. `python build.py` after a `git pull` changed patches/
    queue.push(all=True)
    assert "Why, said better." in queue.applied_commits()[0].message
    assert queue.format_patch(queue.applied_commits()[0]) == patch.read_text()


@pytest.mark.parametrize(
    "damage, said, hint",
    [
        (
            lambda text: text[: text.index("@@", text.index("@@") + 2) + 40],
            "git says: corrupt patch at line",
            "git checkout -- patches/0002-kimi.patch",
        ),
        (lambda text: text.replace("\n", "\r\n"), "CRLF line endings", "dos2unix"),  # refused as the series is read
        # a hunk whose file header was lost; a diff cut off after its header
        (
            lambda text: text[: text.index("@@")],
            "git says: patch with only garbage at line",  # cut before its hunk
            "git checkout -- patches/0002-kimi.patch",
        ),
        (
            lambda text: text + "garbage\n" + text[text.index("@@") :],
            "git says: patch fragment without header at line",
            "git checkout -- patches/0002-kimi.patch",
        ),  # a hunk that lost its file's header
    ],
)
def test_a_damaged_patch_is_named_in_gits_words(project, damage, said, hint):
    root, queue = project
    queue.push()
    patch = root / "patches" / "0002-kimi.patch"
    patch.write_bytes(damage(patch.read_text()).encode())
    line = assert_one_line_error(run_cli(root, "push"), "0002-kimi.patch", said)
    assert hint in line and "refresh the patch against this upstream" not in line
    assert queue.applied_names() == ["0001-runner.patch"]


def test_a_mail_header_git_am_refuses_after_applying_is_named_not_taken_for_a_stale_hunk(project):
    """git am applies the diff, then refuses the header (``Date: not a date``): the diagnosis runs
    on the restored tree, so it says the diff applies and points at the header."""
    root, queue = project
    queue.push()
    patch = root / "patches" / "0002-kimi.patch"
    patch.write_text(re.sub(r"(?m)^Date: .*$", "Date: not a date", patch.read_text()))
    line = assert_one_line_error(
        run_cli(root, "push"), "0002-kimi.patch", "git am failed although the diff applies", "invalid date format"
    )
    assert line.endswith(": check the patch's mail header (From:, Date:, Subject:)")
    assert "hunk" not in line
    assert queue.applied_names() == ["0001-runner.patch"] and not queue.is_dirty()


@pytest.mark.parametrize(
    "hook_says, refused",
    [
        ("", "a git hook refused it: without a word"),
        ("echo not on a Friday >&2", "a git hook refused it: not on a Friday"),
    ],
)
@pytest.mark.parametrize("hooks_path", [False, True])
def test_a_hook_that_refuses_git_am_is_named_not_taken_for_a_mail_header(
    project, tmp_path, hook_says, refused, hooks_path
):
    """git am runs the work tree's applypatch-msg hook, which may refuse silently or in its own words:
    the error names the hook and where it lives (.git/hooks, or a core.hooksPath), not the header
    (the twin, a header git refuses, is the test above)."""
    root, queue = project
    queue.push()
    hooks = tmp_path / "maintainer-hooks" if hooks_path else Path(queue.repo.git_dir) / "hooks"
    hooks.mkdir(exist_ok=True)
    if hooks_path:
        queue.repo.git.config("core.hooksPath", str(hooks))
    (hooks / "applypatch-msg").write_text(f"#!/bin/sh\n{hook_says}\nexit 1\n")
    (hooks / "applypatch-msg").chmod(0o755)
    line = assert_one_line_error(
        run_cli(root, "push"), "0002-kimi.patch", f"git am failed although the diff applies ({refused})"
    )
    assert line.endswith(f": fix or remove the hook in {hooks}, then rerun")
    assert queue.applied_names() == ["0001-runner.patch"] and not queue.is_dirty()


@pytest.mark.parametrize(
    "stderr, words",
    [
        ("\n  stderr: 'fatal: bad object HEAD'", "git says: bad object HEAD"),
        ("\n  stderr: 'the hook says no'", "a git hook refused it: the hook says no"),
        ("\n  stderr: 'first line\nthe hook's last line'", "a git hook refused it: the hook's last line"),
        ("", "a git hook refused it: without a word"),
    ],
)
def test_git_ams_refusal_is_gits_error_else_its_hooks_last_line(project, stderr, words):
    root, queue = project
    refused, by_hook = am_refusal(queue.repo, stderr)
    assert refused == words and bool(by_hook) == words.startswith("a git hook")


def test_bad_queue_input_is_one_line(project, tmp_path):
    root, queue = project
    queue.push(all=True)
    (queue.path / KIMI).write_text("class KimiK25:\n    pass\n")
    assert_one_line_error(
        run_cli(root, "new", "0003-x", "-F", str(tmp_path / "missing.txt")), "missing.txt", "does not exist"
    )
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9\n")
    assert_one_line_error(run_cli(root, "new", "0003-x", "-F", str(tmp_path / "latin1.txt")), "not UTF-8")
    assert_one_line_error(
        run_cli(root, "pop", "0009-nope.patch"), "no patch named '0009-nope.patch'", "0001-runner.patch"
    )
    assert_one_line_error(run_cli(root, "push", "0009-nope.patch"), "no patch named '0009-nope.patch'")
    assert queue.applied_names() == ["0001-runner.patch", "0002-kimi.patch"]
    assert (queue.path / KIMI).read_text() == "class KimiK25:\n    pass\n"


def test_each_queue_command_is_logged_under_its_own_name(project):
    """`log` lists the operations `undo` steps back through by the command that made them."""
    root, queue = project
    queue.push(all=True)
    queue.pop()
    (queue.path / KIMI).write_text("class KimiK25:\n    pass\n")
    queue.new("0003-x", "x: a new patch\n\nUpstream-Status: Pending\nDrop-When: check:x\n")
    (queue.path / KIMI).write_text("class KimiK25:\n    x = 1\n")
    queue.refresh()
    queue.repo.git.commit(
        "--quiet",
        "--amend",
        "-m",
        "x: a new patch\n\nWhy, said by hand.\n\nUpstream-Status: Pending\nDrop-When: check:x",
    )
    queue.export()
    assert [e.op for e in log(line_of(root))] == ["export", "refresh", "new", "pop", "push", "prepare"]


def test_queue_commands_leave_the_stray_file_warning_to_the_build(project, capsys):
    """A file in patches/ that the series does not list is warned about once, where the series is
    read for the build; push and pop, which read it again for each patch, stay quiet."""
    root, queue = project
    (root / "patches" / "0009-stray.patch").write_text("not listed\n")
    queue.push(all=True)
    queue.pop()
    assert capsys.readouterr().err == ""


def test_a_patch_creating_a_file_upstream_now_has_is_stale_in_gits_words(tmp_path, upstream):
    """Neither a failed hunk nor a missing file nor damage: git's own reason reaches the user, with
    the advice for a stale patch (the twin of the damaged patches above)."""
    repo, base = upstream
    new = "python/sglang/srt/added.py"
    text = patch_text(repo, base, {new: "ours = 1\n"}, message("added: a new module"))
    repo.git.checkout("--quiet", "--detach", base)
    theirs = commit_files(repo, {new: "theirs = 1\n"}, "upstream adds the same module")
    root = make_project(tmp_path / "p", {"0001-added.patch": text})
    PatchQueue(root).reset_to(repo, theirs)
    line = assert_one_line_error(
        run_cli(root, "push"),
        "0001-added.patch",
        f"git says: {new}: already exists in working directory",
        "refresh the patch against this upstream",
    )
    assert "git checkout --" not in line


@pytest.mark.parametrize("added", [b"# caf\xe9\n", b"# caf\xc3\xa9\n"])
def test_a_change_whose_bytes_are_not_utf8_is_exported_byte_for_byte(project, added):
    """A file that is not UTF-8 (Latin-1): `new` exports the commit with its bytes as they are,
    and `pop` then finds the patch in sync with its commit (it ended in a traceback when writing
    it). The twin: the same change in UTF-8."""
    root, queue = project
    queue.push(all=True)
    (queue.path / KIMI).write_bytes((queue.path / KIMI).read_bytes() + added)
    result = run_cli(root, "new", "0003-latin", "-m", "latin: a comment\n\nUpstream-Status: Pending\n")
    assert result.returncode == 0, result.stderr
    assert b"\n+" + added in (root / "patches" / "0003-latin.patch").read_bytes()
    result = run_cli(root, "pop", "--all")
    assert result.returncode == 0, result.stderr
    assert queue.applied_names() == []

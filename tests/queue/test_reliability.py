"""The tool never loses or corrupts a maintainer's work (docs/reliability.md), on real git
repositories and synthetic releases served from 127.0.0.1, through the CLI as a user runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import git
import pytest
from helpers import REPO_ROOT, assert_one_line_error, commit_files, make_upstream, run_cli
from test_rebase import RUNNER, V2, env, make_repo, snapshot  # noqa: F401  (env is a fixture)

from sglpatch.lock import line_lock
from sglpatch.queue import rebase
from sglpatch.queue.snapshot import State
from sglpatch.queue.transaction_recovery import _replay_edits

KIMI = "python/sglang/srt/models/kimi_k25.py"
OTHER = "python/sglang/srt/other.py"


def work(root: Path) -> Path:
    return root / "build" / "src"


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stderr
    return result


def prepared(env, kinds=("clean", "moved")) -> Path:
    root = make_repo(env, list(kinds))
    ok(run_cli(root, "prepare", env=env["env"]))
    return root


# ---------------------------------------------------------------- the rebase journal


def stopped_at_conflict(env) -> Path:
    root = make_repo(env, ["clean", "conflict", "moved"])
    result = run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"])
    assert result.returncode == 1 and "stopped at 0002-conflict.patch" in result.stdout, result.stderr
    return root


def test_queue_commands_during_a_rebase_name_the_rebase_not_git(env):
    root = stopped_at_conflict(env)
    for command in (["pop"], ["push"], ["refresh"], ["export"], ["new", "0009-x"], ["prepare"], ["undo"]):
        line = assert_one_line_error(run_cli(root, *command, env=env["env"]), "rebase")
        assert "git am" not in line, line
        assert "rebase --abort" in line, line
    status = ok(run_cli(root, "status", env=env["env"]))
    assert "a rebase is in progress" in status.stdout and "rebase --continue" in status.stdout
    assert "<<<<<<<" in (work(root) / RUNNER).read_text(), "the conflict is still there"


def test_continue_after_a_hand_run_am_abort_refuses_and_abort_restores(env):
    before = snapshot(make_repo(env, ["clean", "conflict", "moved"]))
    root = env["root"]
    assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    git.Repo(work(root)).git.am("--abort")  # what the old `pop` told the maintainer to do
    line = assert_one_line_error(
        run_cli(root, "rebase", "--continue", env=env["env"]), "0002-conflict.patch", "no longer in progress"
    )
    assert "--skip" in line and "--abort" in line
    assert snapshot(root) == before, "nothing was written"
    ok(run_cli(root, "rebase", "--abort", env=env["env"]))
    assert snapshot(root) == before


def test_continue_refuses_a_head_that_is_not_the_resolution(env):
    root = stopped_at_conflict(env)
    repo = git.Repo(work(root))
    repo.git.am("--abort")
    (work(root) / OTHER).write_text("VALUE = 'something else'\n")
    repo.git.commit("-qam", "an unrelated commit")
    line = assert_one_line_error(
        run_cli(root, "rebase", "--continue", env=env["env"]),
        "not a resolution of 0002-conflict.patch",
        "an unrelated commit",
    )
    assert "--abort" in line


def test_a_resolution_committed_by_hand_with_git_am_continue_is_accepted(env):
    root = stopped_at_conflict(env)
    repo = git.Repo(work(root))
    (work(root) / RUNNER).write_text(V2[RUNNER].replace("line 10 upstream\n", "line ten upstream\n"))
    repo.git.add("--all")
    repo.git.am("--continue")
    report = json.loads(ok(run_cli(root, "rebase", "--continue", "--json", env=env["env"])).stdout)
    assert [(p["name"], p["verdict"]) for p in report["patches"]] == [
        ("0001-clean.patch", "clean"),
        ("0002-conflict.patch", "merged"),
        ("0003-moved.patch", "merged"),
    ]
    for name in ("0001-clean.patch", "0002-conflict.patch", "0003-moved.patch"):
        text = (root / "patches" / name).read_text()
        assert name.split("-", 1)[1].split(".")[0] + ": change" in text, f"{name} holds its own patch"
    assert "+line ten upstream" in (root / "patches" / "0002-conflict.patch").read_text()


def test_resolving_to_upstreams_version_is_obsolete_and_the_rest_pair_by_identity(env):
    root = stopped_at_conflict(env)
    (work(root) / RUNNER).write_text(V2[RUNNER])  # the maintainer takes upstream's side
    report = json.loads(ok(run_cli(root, "rebase", "--continue", "--json", env=env["env"])).stdout)
    assert {p["name"]: p["verdict"] for p in report["patches"]} == {
        "0001-clean.patch": "clean",
        "0002-conflict.patch": "obsolete",
        "0003-moved.patch": "merged",
    }
    assert not (root / "patches" / "0002-conflict.patch").exists()
    assert "moved: change" in (root / "patches" / "0003-moved.patch").read_text()
    assert "line thirty" in (root / "patches" / "0003-moved.patch").read_text()


def test_a_rebase_onto_an_older_release_is_refused_before_anything_changes(env):
    root = make_repo(env, ["clean"])
    env["index"].publish("sglang-0.9.0.tar.gz", b"not even read")
    before = snapshot(root)
    assert_one_line_error(run_cli(root, "rebase", "--onto", "0.9.0", env=env["env"]), "older than the pinned 1.0.0")
    assert_one_line_error(run_cli(root, "rebase", "--onto", "1.0.0.0", env=env["env"]), "already on SGLang 1.0.0.0")
    assert snapshot(root) == before and not (root / "build").exists()


def test_a_rebase_refuses_to_start_over_an_uncommitted_patch_file(env):
    root = make_repo(env, ["clean", "moved"])
    patch = root / "patches" / "0002-moved.patch"
    patch.write_text(patch.read_text().replace("Why this change exists.", "My uncommitted words."))
    before = snapshot(root)
    assert_one_line_error(
        run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]), "patches/0002-moved.patch", "not committed"
    )
    assert snapshot(root) == before
    git.Repo(root).git.commit("-qam", "my words")
    ok(run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]))
    assert "My uncommitted words." in patch.read_text()


def test_an_uncommitted_changelog_edit_survives_a_rebase(env):
    root = make_repo(env, ["clean"])
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## [Unreleased]\n\n### Added\n- my own note\n")
    ok(run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]))
    text = (root / "CHANGELOG.md").read_text()
    assert "- my own note" in text and "Rebased onto SGLang 1.1.0" in text


# ---------------------------------------------------------------- nothing uncommitted is overwritten


@pytest.mark.parametrize("command", [["refresh"], ["export"]])
def test_writers_refuse_an_uncommitted_patch_file_and_keep_the_edits(env, command):
    root = prepared(env)
    patch = root / "patches" / "0002-moved.patch"
    mine = patch.read_text().replace("Why this change exists.", "Edited by hand, not committed.")
    patch.write_text(mine)
    (work(root) / RUNNER).write_text((work(root) / RUNNER).read_text() + "work tree edit\n")
    line = assert_one_line_error(run_cli(root, *command, env=env["env"]), "patches/0002-moved.patch", "not committed")
    assert "git add patches/0002-moved.patch" in line
    assert patch.read_text() == mine
    assert (work(root) / RUNNER).read_text().endswith("work tree edit\n"), "the work tree is as it was"
    git.Repo(root).git.commit("-qam", "keep my edit")  # the twin: committed, it may be replaced
    ok(run_cli(root, *command, env=env["env"]))
    assert "Edited by hand" not in patch.read_text()


def racily_clean_edit(path: Path, committed: str, edit: str) -> None:
    """Edit ``path`` within the second git's index recorded it in, with the same size: only the
    index file's own mtime tells git to look at the content again (git's racy-clean rule)."""
    assert len(committed) == len(edit)
    time.sleep(1 - time.time() % 1 + 0.01)  # the start of a second: the three steps share it
    path.write_text(committed)
    subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=work_of(path), check=False)
    path.write_text(edit)
    time.sleep(1.1)  # the command that follows reads the index in a later second


def work_of(path: Path) -> Path:
    return next(p for p in path.parents if p.name == "src" and p.parent.name == "build")


def test_new_refuses_to_replace_an_untracked_file_of_the_same_name(env):
    # once intermittent: the snapshot copied git's index without its mtime, so an edit made in the
    # second of the last checkout looked clean and the roll-back lost it; racily_clean_edit pins it
    root = prepared(env)
    mine = root / "patches" / "0003-extra.patch"
    mine.write_text("my draft, never committed\n")
    racily_clean_edit(work(root) / OTHER, "VALUE = 2\n", "VALUE = 3\n")
    assert_one_line_error(
        run_cli(
            root,
            "new",
            "0003-extra",
            "-m",
            "extra\n\nUpstream-Status: Pending\nDrop-When: upstream>=9\n",
            env=env["env"],
        ),
        "patches/0003-extra.patch",
    )
    assert mine.read_text() == "my draft, never committed\n"
    assert (work(root) / OTHER).read_text() == "VALUE = 3\n"
    assert "0003-extra.patch" not in (root / "patches" / "series").read_text()


def test_the_tools_own_output_may_be_refreshed_again_without_a_commit(env):
    root = prepared(env)
    for value in ("VALUE = 10\n", "VALUE = 11\n"):
        ok(run_cli(root, "pop", env=env["env"]))
        (work(root) / OTHER).write_text(value)
        ok(run_cli(root, "refresh", env=env["env"]))
        ok(run_cli(root, "push", env=env["env"]))
    assert "+VALUE = 11" in (root / "patches" / "0001-clean.patch").read_text()


def test_new_keeps_the_series_comments_options_and_parked_entries(env):
    root = prepared(env)
    series = root / "patches" / "series"
    series.write_text(
        "# synthetic series\n0001-clean.patch -p1  # kept as is\n\n# parked:\n# 0007-parked.patch\n0002-moved.patch\n"
    )
    git.Repo(root).git.commit("-qam", "series with comments")
    ok(run_cli(root, "pop", env=env["env"]))
    (work(root) / KIMI).write_text("class KimiK25:\n    pass\n")
    ok(
        run_cli(
            root,
            "new",
            "0001b-between",
            "-m",
            "between\n\nUpstream-Status: Pending\nDrop-When: upstream>=9\n",
            env=env["env"],
        )
    )
    text = series.read_text()
    assert "0001-clean.patch -p1  # kept as is" in text
    assert "# 0007-parked.patch" in text and "# parked:" in text
    assert text.index("0001-clean.patch") < text.index("0001b-between.patch") < text.index("0002-moved.patch")


# ---------------------------------------------------------------- undo and the log


def test_undo_steps_back_through_refresh_and_pop_exactly(env):
    root = prepared(env)
    start = snapshot(root)
    (work(root) / RUNNER).write_text((work(root) / RUNNER).read_text() + "refreshed in\n")
    edited = (work(root) / RUNNER).read_text()
    ok(run_cli(root, "refresh", env=env["env"]))
    after_refresh = snapshot(root)
    assert after_refresh != start
    ok(run_cli(root, "pop", env=env["env"]))
    assert "pop" in ok(run_cli(root, "undo", env=env["env"])).stdout
    assert snapshot(root) == after_refresh
    assert "refresh" in ok(run_cli(root, "undo", env=env["env"])).stdout
    assert snapshot(root) == start
    assert (work(root) / RUNNER).read_text() == edited, "the edits are uncommitted again, not lost"
    assert git.Repo(work(root)).is_dirty()
    log = json.loads(ok(run_cli(root, "log", "--json", env=env["env"])).stdout)["entries"]
    assert [e["op"] for e in log[:4]] == ["undo refresh", "undo pop", "pop", "refresh"]


def test_undo_refuses_when_a_file_changed_since_and_when_there_is_nothing(env):
    root = make_repo(env, ["clean"])
    assert_one_line_error(run_cli(root, "undo", env=env["env"]), "nothing to undo")
    ok(run_cli(root, "prepare", env=env["env"]))
    (work(root) / OTHER).write_text("VALUE = 5\n")
    ok(run_cli(root, "refresh", env=env["env"]))
    patch = root / "patches" / "0001-clean.patch"
    patch.write_text(patch.read_text() + "\n")
    assert_one_line_error(run_cli(root, "undo", env=env["env"]), "patches/0001-clean.patch", "changed since `refresh`")
    assert patch.read_text().endswith("\n\n")


def test_undo_of_a_finished_rebase_returns_to_the_old_pin(env):
    root = make_repo(env, ["clean", "moved", "textual"])
    before = snapshot(root)
    ok(run_cli(root, "rebase", "--onto", "1.1.0", "--commit", "2" * 40, env=env["env"]))
    assert snapshot(root) != before
    latest = json.loads(ok(run_cli(root, "log", "--json", env=env["env"])).stdout)["entries"][0]
    assert (latest["op"], latest["summary"]) == (
        "rebase --onto 1.1.0",
        "Rebased onto SGLang 1.1.0: kept "
        "0001-clean.patch, 0002-moved.patch; dropped 0003-textual.patch "
        "(upstreamed in 1.1.0)",
    ), "the log says what the rebase did"
    ok(run_cli(root, "undo", env=env["env"]))
    assert snapshot(root) == before


# ---------------------------------------------------------------- one writer at a time


def test_a_second_writer_on_the_same_line_is_refused_with_one_line(env):
    root = prepared(env)
    with line_lock(root, "`build.py image`"):
        for command in (["push"], ["pop"], ["build"], ["rebase", "--onto", "1.1.0"], ["undo"]):
            assert_one_line_error(
                run_cli(root, *command, env=env["env"]), "another `build.py image` is running", f"pid {os.getpid()}"
            )
        ok(run_cli(root, "status", env=env["env"]))  # readers are not writers
    ok(run_cli(root, "pop", env=env["env"]))


# ---------------------------------------------------------------- interrupts


def interrupted_push(env, hook_kills: str, preexec=None) -> str:
    """`push --all` whose git am runs a hook that ``hook_kills``: exit 130, the line as before."""
    root = prepared(env)
    ok(run_cli(root, "pop", "--all", env=env["env"]))
    (work(root) / KIMI).write_text("an uncommitted edit\n")
    ok(
        run_cli(
            root, "new", "0003-kimi", "-m", "kimi\n\nUpstream-Status: Pending\nDrop-When: upstream>=9\n", env=env["env"]
        )
    )
    ok(run_cli(root, "pop", "--all", env=env["env"]))
    before = snapshot(root)
    head = git.Repo(work(root)).head.commit.hexsha
    hook = Path(git.Repo(work(root)).git_dir) / "hooks" / "pre-applypatch"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(f"#!/bin/sh\n{hook_kills}\nsleep 5\n")
    hook.chmod(0o755)
    child = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "build.py"), "--root", str(root), "push", "--all"],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=preexec,
        env={**os.environ, **env["env"]},
    )
    _, err = child.communicate(timeout=120)
    hook.unlink()
    assert child.returncode == 130, err
    assert "nothing was lost" in err and "Traceback" not in err and "does not apply" not in err
    assert snapshot(root) == before
    assert git.Repo(work(root)).head.commit.hexsha == head
    assert not (Path(git.Repo(work(root)).git_dir) / "rebase-apply").exists()
    ok(run_cli(root, "push", "--all", env=env["env"]))
    return err


# as a terminal's Ctrl-C or a scheduler's stop: the signal reaches the whole process group
GROUP = "kill -{} -$(ps -o pgid= $PPID | tr -d ' ')"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_push_exits_130_and_leaves_the_line_as_before(env, sig):
    interrupted_push(env, GROUP.format(int(sig)))


def test_a_group_ctrl_c_stops_a_push_started_with_sigint_ignored(env):
    # `build.py push &` in a script starts it with SIGINT ignored; git's own handlers still die
    # of it, so a Python that kept ignoring it would misread git's death as "does not apply"
    interrupted_push(
        env, GROUP.format(int(signal.SIGINT)), preexec=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)
    )


def test_a_git_killed_alone_is_an_interrupt_not_a_patch_that_does_not_apply(env):
    err = interrupted_push(env, "kill -9 $PPID")
    assert "error: interrupted (git was stopped by signal 9); nothing was lost" in err, err


def test_a_git_killed_alone_in_a_rebase_is_an_interrupt_not_a_conflict(env):
    root = prepared(env)
    hook = Path(git.Repo(work(root)).git_dir) / "hooks" / "pre-applypatch"
    hook.parent.mkdir(exist_ok=True)
    once = hook.parent / "killed-once"  # outside the line: the snapshot must not see it
    # the three-way am on the new release, not the queue's own push of the old series
    hook.write_text(
        f"#!/bin/sh\n[ -e {once} ] && exit 0\n"
        f'[ "$(git symbolic-ref --short HEAD)" = {rebase.REBASE_BRANCH} ] || exit 0\n'
        f"touch {once}\nkill -9 $PPID\nsleep 5\n"
    )
    hook.chmod(0o755)
    before = snapshot(root)
    result = run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"])
    assert result.returncode == 130 and "nothing was lost" in result.stderr, result.stderr
    assert "conflict" not in result.stdout + result.stderr and "Traceback" not in result.stderr
    assert snapshot(root) == before
    report = json.loads(ok(run_cli(root, "rebase", "--onto", "1.1.0", "--json", env=env["env"])).stdout)
    hook.unlink()
    assert {p["name"]: p["verdict"] for p in report["patches"]} == {
        "0001-clean.patch": "clean",
        "0002-moved.patch": "merged",
    }


def killed(root: Path, env, at: str, *command: str) -> None:
    result = run_cli(root, *command, env={**env["env"], "SGLPATCH_CRASH_AT": at})
    assert result.returncode == -signal.SIGKILL, result.stderr


@pytest.mark.parametrize("at", ["journal:committing", "file:patches/0002-moved.patch"])
def test_edits_made_after_a_kill_past_the_commit_point_survive_its_completion(env, at):
    root = prepared(env)
    (work(root) / RUNNER).write_text((work(root) / RUNNER).read_text() + "edit A\n")
    killed(root, env, at, "refresh")
    patch = root / "patches" / "0002-moved.patch"
    mine = patch.read_text() + "# my note\n"
    patch.write_text(mine)  # the user goes on: the file refresh was writing, and the work tree
    (work(root) / OTHER).write_text("VALUE = 'edit B'\n")
    result = ok(run_cli(root, "status", env=env["env"]))
    assert "completed the interrupted `refresh`, keeping the edits made since" in result.stderr
    assert patch.read_text() == mine
    assert (work(root) / OTHER).read_text() == "VALUE = 'edit B'\n"
    assert (work(root) / RUNNER).read_text().endswith("edit A\n")
    assert "+edit A" in git.Repo(work(root)).git.show("HEAD"), "refresh itself completed"
    assert not (root / "build" / "transaction.json").exists()


def test_completing_a_killed_command_keeps_hand_edits_of_files_it_did_not_write(env):
    root = prepared(env)  # found by the Hypothesis machine (200 examples): the other patch's note was lost
    ok(run_cli(root, "pop", env=env["env"]))
    killed(root, env, "journal:committing", "push")
    other = root / "patches" / "0001-clean.patch"
    mine = other.read_text().replace("Why this change exists.", "Why this change exists.\n\nHand note.")
    other.write_text(mine)
    (work(root) / "python" / "sglang" / "mine.py").write_text("MINE = 1\n")
    assert "keeping the edits made since" in ok(run_cli(root, "status", env=env["env"])).stderr
    assert other.read_text() == mine
    assert (work(root) / "python" / "sglang" / "mine.py").read_text() == "MINE = 1\n"


def test_a_kill_past_the_commit_point_without_later_edits_completes_the_command(env):
    root = prepared(env)  # the twin: nothing edited since, so the command's own result stands
    (work(root) / RUNNER).write_text((work(root) / RUNNER).read_text() + "edit A\n")
    killed(root, env, "journal:committing", "refresh")
    assert "+edit A" not in (root / "patches" / "0002-moved.patch").read_text()
    result = ok(run_cli(root, "status", env=env["env"]))
    assert "completed the interrupted `refresh`\n" in result.stderr
    assert "+edit A" in (root / "patches" / "0002-moved.patch").read_text()


def test_work_tree_edits_after_a_killed_pop_stay_as_the_user_left_them(env):
    root = prepared(env)  # pop had moved the work tree before its commit point: the edits sit on it
    killed(root, env, "journal:committing", "pop")
    (work(root) / RUNNER).write_text("rewritten by hand after the kill\n")
    result = ok(run_cli(root, "status", env=env["env"]))
    assert "keeping the edits made since" in result.stderr, result.stderr
    assert (work(root) / RUNNER).read_text() == "rewritten by hand after the kill\n"
    assert len(list(git.Repo(work(root)).iter_commits("refs/sglpatch/base..HEAD"))) == 1, "pop completed"


def test_work_tree_edits_that_conflict_with_a_killed_undo_keep_both_sides_and_undo_restores(env):
    root = prepared(env)  # undo moves the work tree after its commit point: the edits are replayed
    ok(run_cli(root, "pop", env=env["env"]))
    killed(root, env, "journal:committing", "undo")
    (work(root) / RUNNER).write_text("rewritten by hand after the kill\n")
    result = ok(run_cli(root, "status", env=env["env"]))
    assert f"resolve the conflict markers in {RUNNER}" in result.stderr, result.stderr
    merged = (work(root) / RUNNER).read_text()
    assert "<<<<<<<" in merged and "rewritten by hand after the kill" in merged and "line thirty" in merged
    assert len(list(git.Repo(work(root)).iter_commits("refs/sglpatch/base..HEAD"))) == 2, "the undo completed"
    ok(run_cli(root, "undo", env=env["env"]))
    assert (work(root) / RUNNER).read_text() == "rewritten by hand after the kill\n"


def test_the_files_a_replay_leaves_with_markers_are_named_whole(tmp_path):
    """The roll-forward's three-way merge names the files it leaves with conflict markers: a name
    with a space came out as two words and a non-ASCII one C-quoted. The twin: edits that do not
    overlap the command's leave no file named."""
    repo, base = make_upstream(tmp_path / "r", {"a b/c d.py": "x = 1\n", "caf\u00e9.py": "y = 1\n", "k.py": "k\n"})

    def state(commit: str) -> State:
        return State(head=commit, worktree=commit, worktree_tree=repo.commit(commit).tree.hexsha)

    after = commit_files(repo, {"a b/c d.py": "x = 2\n", "caf\u00e9.py": "y = 2\n"}, "the command")
    edited = commit_files(repo, {"a b/c d.py": "x = 3\n", "caf\u00e9.py": "y = 3\n"}, "edits since")
    assert _replay_edits(repo, state(base), state(after), state(edited))[2] == ["a b/c d.py", "caf\u00e9.py"]
    apart = commit_files(repo, {"a b/c d.py": "x = 2\n", "caf\u00e9.py": "y = 2\n", "k.py": "mine\n"}, "apart")
    assert _replay_edits(repo, state(base), state(after), state(apart))[2] == []


# ---------------------------------------------------------------- found by a bad-input probe


def test_a_refused_refresh_rolls_back_and_later_edits_survive(env):
    root = prepared(env)
    patch = root / "patches" / "0002-moved.patch"
    patch.write_text(patch.read_text() + "#hand edit\n")
    (work(root) / RUNNER).write_text((work(root) / RUNNER).read_text() + "edit A\n")
    assert_one_line_error(run_cli(root, "refresh", env=env["env"]), "not committed")
    assert not (root / "build" / "transaction.json").exists(), "no half-done transaction is left"
    assert len(list(git.Repo(work(root)).iter_commits("refs/sglpatch/base..HEAD"))) == 2
    (work(root) / OTHER).write_text("VALUE = 'edit B'\n")
    ok(run_cli(root, "status", env=env["env"]))
    assert (work(root) / OTHER).read_text() == "VALUE = 'edit B'\n"
    assert (work(root) / RUNNER).read_text().endswith("edit A\n")


def test_a_work_tree_without_its_git_directory_is_never_overwritten(env):
    root = prepared(env)
    (work(root) / RUNNER).write_text("precious\n")
    import shutil

    shutil.rmtree(work(root) / ".git")
    assert_one_line_error(run_cli(root, "prepare", env=env["env"]), "no git repository", "mv ")
    assert (work(root) / RUNNER).read_text() == "precious\n"


def test_a_damaged_work_tree_git_dir_never_reaches_the_users_repository(env):
    root = prepared(env)
    outer = git.Repo(root)
    branches, status = outer.git.branch(), outer.git.status("--short")
    (work(root) / ".git" / "HEAD").write_text("garbage\n")
    for command in (["prepare"], ["status"], ["pop"]):
        assert_one_line_error(run_cli(root, *command, env=env["env"]), ".git is damaged")
    assert outer.git.branch() == branches and outer.git.status("--short") == status


@pytest.mark.parametrize(
    "journal",
    [
        "[]",
        "{x",
        '{"op": "push"}',
        '{"op": "push", "phase": "running", "start": "' + "1" * 40 + '"}',
        '{"op": "push", "phase": "later", "start": "' + "1" * 40 + '"}',
    ],
)
def test_a_damaged_transaction_journal_is_one_line_naming_it(env, journal):
    root = prepared(env)
    (root / "build" / "transaction.json").write_text(journal)
    for command in (["status"], ["pop"], ["undo"]):
        assert_one_line_error(run_cli(root, *command, env=env["env"]), "transaction.json is damaged", "mv ")


@pytest.mark.parametrize("content", ["garbage\n", "0" * 39 + "1\n"])
def test_a_damaged_operation_log_is_named_damaged_not_empty(env, content):
    root = prepared(env)
    assert run_cli(root, "log", env=env["env"]).stdout.strip()  # the twin: a sound log lists its entries
    (work(root) / ".git" / "refs" / "sglpatch" / "log").write_text(content)
    for command in (["log"], ["undo"]):
        line = assert_one_line_error(run_cli(root, *command, env=env["env"]), "damaged", "refs/sglpatch/log")
        assert "move it aside and run `python build.py prepare`" in line  # never "no operation is recorded"


@pytest.mark.parametrize("record", ["sglpatch-synced.json", "sglpatch-written.json"])
def test_a_damaged_record_in_the_work_trees_git_is_named_and_read_as_empty(env, record):
    root = prepared(env)
    (work(root) / ".git" / record).write_text("{x")
    result = ok(run_cli(root, "prepare", env=env["env"]))
    assert f"{record} is damaged" in result.stderr and "Traceback" not in result.stderr


def test_a_damaged_rebase_journal_is_one_line_and_abort_still_works(env):
    root = make_repo(env, ["clean", "conflict"])
    before = snapshot(root)
    assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    (root / "build" / "rebase" / "state.json").write_text("{x")
    for command in (["status"], ["rebase", "--continue"], ["rebase", "--skip"]):
        assert_one_line_error(run_cli(root, *command, env=env["env"]), "rebase journal", "--abort")
    ok(run_cli(root, "rebase", "--abort", env=env["env"]))
    assert snapshot(root) == before


def test_undo_of_an_aborted_rebase_is_refused_and_names_the_kept_work(env):
    root = make_repo(env, ["clean", "conflict"])
    assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    ok(run_cli(root, "rebase", "--abort", env=env["env"]))
    before = snapshot(root)
    assert_one_line_error(run_cli(root, "undo", env=env["env"]), "cannot be undone", "git -C")
    assert snapshot(root) == before
    ok(run_cli(root, "status", env=env["env"]))


def test_a_subject_git_am_rewrites_is_still_its_own_patch(env):
    root = prepared(env)  # a tag and a two-line first paragraph: git am makes "tagged subject"
    (work(root) / KIMI).write_text("class KimiK25:\n    pass\n")
    ok(
        run_cli(
            root,
            "new",
            "0003-rfc",
            "-m",
            "[RFC] tagged\nsubject\n\nbody\n\nUpstream-Status: Pending\nDrop-When: upstream>=9\n",
            env=env["env"],
        )
    )
    for command in (["status"], ["pop"], ["push"], ["status"]):
        ok(run_cli(root, *command, env=env["env"]))
    assert git.Repo(work(root)).head.commit.summary == "tagged subject"
    assert "+ 0003-rfc.patch" in run_cli(root, "status", env=env["env"]).stdout


def test_more_bad_input_is_one_line(env):
    root = prepared(env)
    ok(run_cli(root, "pop", "--all", env=env["env"]))
    assert_one_line_error(run_cli(root, "pop", "0001-clean.patch", env=env["env"]), "is not applied")
    assert_one_line_error(
        run_cli(root, "rebase", "--onto", "1.1.0", "--commit", "zzz", env=env["env"]), "--commit 'zzz'", "40 hex"
    )
    assert not (root / "build" / "rebase").exists()


def test_a_lost_base_ref_and_a_damaged_object_store_are_named_with_the_way_out(env):
    root = prepared(env)
    ok(run_cli(root, "status", env=env["env"]))  # the twin: intact, status works
    objects = Path(git.Repo(work(root)).git_dir) / "objects"
    base = git.Repo(work(root)).git.rev_parse("refs/sglpatch/base")
    git.Repo(work(root)).git.update_ref("-d", "refs/sglpatch/base")
    for command in ("status", "pop", "refresh"):
        assert_one_line_error(run_cli(root, command, env=env["env"]), "lost its base ref", "prepare")
    git.Repo(work(root)).git.update_ref("refs/sglpatch/base", base)
    head_tree = git.Repo(work(root)).head.commit.tree.hexsha
    (objects / head_tree[:2] / head_tree[2:]).unlink()
    line = assert_one_line_error(run_cli(root, "status", env=env["env"]), "damaged repository", "fsck")
    assert head_tree in line or "HEAD" in line


def test_a_message_git_am_would_cut_is_refused_before_it_becomes_a_patch(env):
    root = prepared(env)
    (work(root) / KIMI).write_text("class KimiK25:\n    pass\n")
    trailers = "\n\nUpstream-Status: Pending\nDrop-When: upstream>=9\n"
    for bad in ("example:\ndiff --git a/x b/x", "a separator\n---\nafter it", "Index: foo.py"):
        assert_one_line_error(
            run_cli(root, "new", "0003-x", "-m", f"subject\n\n{bad}{trailers}", env=env["env"]),
            "where `git am` would start the diff",
        )
        assert not (root / "patches" / "0003-x.patch").exists()
        assert (work(root) / KIMI).read_text() == "class KimiK25:\n    pass\n"
    # the twin: the same text indented is a message, and the patch round-trips through git am
    ok(run_cli(root, "new", "0003-x", "-m", f"subject\n\n    diff --git a/x b/x\n ---{trailers}", env=env["env"]))
    ok(run_cli(root, "pop", env=env["env"]))
    ok(run_cli(root, "push", env=env["env"]))
    assert "diff --git a/x b/x" in git.Repo(work(root)).head.commit.message


def test_a_missing_pin_says_to_restore_it(env):
    root = prepared(env)
    (root / "upstream.toml").unlink()
    assert_one_line_error(run_cli(root, "build", env=env["env"]), "no pin file", "checkout -- upstream.toml")


def test_commands_before_the_first_prepare_say_to_prepare(env):
    root = make_repo(env, ["clean"])
    for command in (["pop"], ["push"], ["refresh"], ["export"], ["status"]):
        assert_one_line_error(run_cli(root, *command, env=env["env"]), "no work tree", "prepare")
    assert not (work(root) / ".git").exists()


def test_a_killed_writers_forked_workers_do_not_keep_the_line_locked(env):
    root = prepared(env)
    script = (
        "import os, signal, sys, time\n"
        f"sys.path.insert(0, {str(REPO_ROOT)!r})\n"
        "from sglpatch.lock import line_lock\n"
        f"with line_lock({str(root)!r}, '`build.py build`'):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60); os._exit(0)  # a worker, like the contract check's pool\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    child = subprocess.run([sys.executable, "-c", script], start_new_session=True)
    assert child.returncode == -9
    try:
        ok(run_cli(root, "pop", env=env["env"]))
    finally:
        subprocess.run(["pkill", "-f", r"time\.sleep\(60\)"], check=False)

"""`rebase --onto`: one test per verdict, on synthetic releases served by a local package index.

The releases are real sdists imported through the same code path as SGLang's; only their content
is small and made up so that each verdict can be provoked on purpose.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import git
import pytest
from helpers import (
    AUTHOR_ENV,
    LocalIndex,
    assert_one_line_error,
    commit_files,
    commit_project,
    make_upstream,
    message,
    patch_text,
    pin_text,
    run_cli,
    sdist_bytes,
)

from sglpatch.contract import checks
from sglpatch.git.env import git_env
from sglpatch.queue import rebase
from sglpatch.queue.line import line_dir
from sglpatch.queue.patch_queue import PatchQueue
from sglpatch.queue.series import read_series_names
from sglpatch.upstream import source
from sglpatch.upstream.pin import read_pin

RUNNER = "python/sglang/srt/model_executor/model_runner.py"
KIMI = "python/sglang/srt/models/kimi_k25.py"
OTHER = "python/sglang/srt/other.py"
NEVER = "upstream>=99"
OLD_COMMIT = "1" * 40
NEW_COMMIT = "2" * 40

V1 = {
    RUNNER: "".join(f"line {i}\n" for i in range(1, 41)),
    KIMI: (
        "class KimiK25:\n    def forward(self):\n        return 1\n"
        + "".join(f"    # note {i}\n" for i in range(8))
        + "\n    def load_weights(self):\n        pass\n"
    ),
    OTHER: "VALUE = 1\n",
    "python/pyproject.toml": "[project]\nname = 'sglang'\n",
}
V2 = {
    **V1,
    # five new lines at the top move every later hunk; line 10 is rewritten (conflict bait)
    RUNNER: "".join(f"new {i}\n" for i in range(5)) + V1[RUNNER].replace("line 10\n", "line 10 upstream\n"),
    # upstream now returns 2 and delegates, written differently from our patch
    KIMI: (
        V1[KIMI].replace("return 1", "return 2") + "\n    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
        "        return self.language_model.set_eagle3_layers_to_capture(layer_ids)\n"
    ),
}


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLPATCH_CACHE", str(tmp_path / "cache"))
    index = LocalIndex(tmp_path / "index")
    monkeypatch.setenv("SGLPATCH_INDEX_URL", index.url)
    source._CACHED_LISTING.clear()
    sha1 = index.publish("sglang-1.0.0.tar.gz", sdist_bytes("1.0.0", V1))
    index.publish("sglang-1.1.0.tar.gz", sdist_bytes("1.1.0", V2))
    upstream, base = make_upstream(tmp_path / "upstream-src", V1)
    checks.register("test-kimi-delegates", "KimiK25 delegates set_eagle3_layers_to_capture")(
        lambda tree: (
            [] if "def set_eagle3_layers_to_capture" in (tree / KIMI).read_text() else [checks.Finding("no delegation")]
        )
    )
    yield {
        "root": tmp_path / "project",
        "sha1": sha1,
        "upstream": upstream,
        "base": base,
        "index": index,
        "env": {"SGLPATCH_CACHE": str(tmp_path / "cache"), "SGLPATCH_INDEX_URL": index.url},
    }
    checks.REGISTRY.pop("test-kimi-delegates", None)
    index.close()
    source._CACHED_LISTING.clear()


PATCHES = {
    "clean": (OTHER, "VALUE = 1\n", "VALUE = 2\n", NEVER),
    "moved": (RUNNER, "line 30\n", "line thirty\n", NEVER),
    "conflict": (RUNNER, "line 10\n", "line ten\n", NEVER),
    "textual": (KIMI, "return 1", "return 2", NEVER),
    "semantic": (
        KIMI,
        "        pass\n",
        "        pass\n\n    def set_eagle3_layers_to_capture(self, ids=None):\n"
        "        self.language_model.set_eagle3_layers_to_capture(ids)\n",
        "check:test-kimi-delegates",
    ),
}


def make_repo(env, kinds: list[str]) -> Path:
    root = env["root"]
    (root / "patches").mkdir(parents=True)
    (root / "upstream.toml").write_text(pin_text("1.0.0", env["sha1"]))
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## [Unreleased]\n")
    names = []
    for number, kind in enumerate(kinds, 1):
        path, old, new, drop = PATCHES[kind]
        text = patch_text(
            env["upstream"], env["base"], {path: V1[path].replace(old, new)}, message(f"{kind}: change", drop=drop)
        )
        name = f"{number:04d}-{kind}.patch"
        (root / "patches" / name).write_text(text)
        names.append(name)
    (root / "patches" / "series").write_text("# synthetic series\n" + "".join(f"{n}\n" for n in names))
    (root / ".gitignore").write_text("/build/\n")
    commit_project(root, OLD_COMMIT)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    files = {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.parts and "build" not in p.parts
    }
    files["<gitlink>"] = git.Repo(root).git.ls_files("--stage", "upstream").encode()
    return files


def verdicts(report: dict) -> dict[str, str]:
    return {p["name"].split("-", 1)[1].removesuffix(".patch"): p["verdict"] for p in report["patches"]}


def test_every_verdict_but_conflict_and_the_repository_after(env):
    root = make_repo(env, ["clean", "moved", "textual", "semantic"])
    report = rebase.start(root, "1.1.0", commit=NEW_COMMIT)
    assert verdicts(report) == {"clean": "clean", "moved": "merged", "textual": "obsolete", "semantic": "obsolete"}
    details = {p["name"]: p["detail"] for p in report["patches"]}
    assert details["0002-moved.patch"] == f"moved {RUNNER}:27->32"
    assert "already contains" in details["0003-textual.patch"]
    assert "check:test-kimi-delegates" in details["0004-semantic.patch"]
    files = {p["name"]: p["files"] for p in report["patches"]}  # a dropped patch still names what it changed
    assert (files["0003-textual.patch"], files["0004-semantic.patch"]) == ([KIMI], [KIMI])
    # pin, series, patch files, gitlink and CHANGELOG all moved to 1.1.0
    pin = read_pin(root)
    assert (pin.version, pin.tag, pin.commit, pin.series_release) == ("1.1.0", "v1.1.0", NEW_COMMIT, 1)
    assert pin.artifact("sdist").filename == "sglang-1.1.0.tar.gz"
    assert read_series_names(root) == ["0001-clean.patch", "0002-moved.patch"]
    assert not (root / "patches" / "0003-textual.patch").exists()
    assert "@@ -32," in (root / "patches" / "0002-moved.patch").read_text()
    assert NEW_COMMIT in git.Repo(root).git.ls_files("--stage", "upstream")
    changelog = (root / "CHANGELOG.md").read_text()
    assert (
        "Rebased onto SGLang 1.1.0: kept 0001-clean.patch, 0002-moved.patch; dropped "
        "0003-textual.patch (upstreamed in 1.1.0), 0004-semantic.patch (upstreamed in 1.1.0)"
    ) in changelog
    # and the rebased series builds on the new release
    queue = PatchQueue(root)
    assert queue.applied_names() == ["0001-clean.patch", "0002-moved.patch"]
    assert run_cli(root, "prepare", env=env["env"]).returncode == 0


@pytest.mark.parametrize("spelling", ["v1.1.0", "1.1.0 ", "1.1", "1.1.0.0"])
def test_a_version_spelled_another_way_is_the_release_it_names(env, spelling):
    root = make_repo(env, ["clean"])
    result = run_cli(root, "rebase", "--onto", spelling, "--dry-run", "--json", env=env["env"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["onto"] == "1.1.0"
    tags = git.Repo(Path(env["env"]["SGLPATCH_CACHE"]) / "mirror").git.tag("--list", "release/*").splitlines()
    assert sorted(tags) == ["release/1.0.0", "release/1.1.0"]  # the release's own tag, no twin


def test_an_empty_onto_is_refused_not_taken_for_a_resume(env):
    root = make_repo(env, ["clean"])
    assert_one_line_error(run_cli(root, "rebase", "--onto", "", env=env["env"]), "'' is not a PEP 440 version")


def test_conflict_stops_with_markers_then_continue(env):
    root = make_repo(env, ["clean", "conflict", "moved"])
    result = run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"])
    assert result.returncode == 1
    assert "stopped at 0002-conflict.patch: conflict in " + RUNNER in result.stdout
    assert "--continue" in result.stdout and "--skip" in result.stdout and "--abort" in result.stdout
    worked = root / "build" / "src" / RUNNER
    assert "<<<<<<<" in worked.read_text()
    # a rerun before resolving neither starts over nor loses the markers
    assert_one_line_error(run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]), "in progress")
    assert_one_line_error(run_cli(root, "rebase", "--continue", env=env["env"]), "conflict markers remain")
    assert_one_line_error(run_cli(root, "build", env=env["env"]), "rebase is in progress")
    assert "<<<<<<<" in worked.read_text()
    # the maintainer resolves (in a fresh process, as after a crash) and goes on
    worked.write_text(V2[RUNNER].replace("line 10 upstream\n", "line ten upstream\n"))
    result = run_cli(root, "rebase", "--continue", "--json", env=env["env"])
    assert result.returncode == 0, result.stderr
    assert verdicts(json.loads(result.stdout)) == {"clean": "clean", "conflict": "merged", "moved": "merged"}
    assert read_series_names(root) == ["0001-clean.patch", "0002-conflict.patch", "0003-moved.patch"]
    assert "+line ten upstream" in (root / "patches" / "0002-conflict.patch").read_text()
    assert read_pin(root).version == "1.1.0"
    assert not (root / "build" / "rebase").exists()


def test_markers_staged_with_git_add_still_stop_continue(env):
    """`git add` is how git marks a conflict resolved; a file added with its markers still in must
    not reach the series (it did: the patch file was written with <<<<<<< in it). The twin: the
    same file resolved, then added, continues."""
    root = make_repo(env, ["clean", "conflict"])
    assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    work = git.Repo(root / "build" / "src")
    work.git.add(RUNNER)
    assert_one_line_error(run_cli(root, "rebase", "--continue", env=env["env"]), f"conflict markers remain in {RUNNER}")
    assert "<<<<<<<" not in (root / "patches" / "0002-conflict.patch").read_text()
    (root / "build" / "src" / RUNNER).write_text(V2[RUNNER].replace("line 10 upstream\n", "line ten upstream\n"))
    work.git.add(RUNNER)
    assert run_cli(root, "rebase", "--continue", env=env["env"]).returncode == 0
    assert "+line ten upstream" in (root / "patches" / "0002-conflict.patch").read_text()


def test_markers_committed_by_hand_never_reach_the_series(env):
    """A maintainer who finishes the stopped `git am` by hand with the markers in leaves no
    conflict for `--continue` to see, but the patch it would write adds them: refused, the series
    as it was, and `--abort` returns exactly to the state before. (The twin, a resolution that
    continues, is the staged-markers test above.)"""
    root = make_repo(env, ["clean", "conflict"])
    before = snapshot(root)
    assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    work = git.Repo(root / "build" / "src")
    work.git.add(RUNNER)
    work.git.am("--continue")
    assert_one_line_error(
        run_cli(root, "rebase", "--continue", env=env["env"]),
        f"0002-conflict.patch would add conflict markers to {RUNNER}",
        "rebase --abort",
    )
    assert snapshot(root) == before
    assert run_cli(root, "rebase", "--abort", env=env["env"]).returncode == 0
    assert snapshot(root) == before and read_pin(root).version == "1.0.0"


def test_edits_left_beside_a_resolution_committed_by_hand_are_refused_not_folded_in(env):
    """The maintainer finished `git am` by hand and then edited another file: `--continue` takes
    only what was committed, so it refuses and names the edits. The twin: without the stray edit
    the resolution is taken as it is."""
    root = make_repo(env, ["clean", "conflict"])
    assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    work = git.Repo(root / "build" / "src")
    (root / "build" / "src" / RUNNER).write_text(V2[RUNNER].replace("line 10 upstream\n", "line ten\n"))
    work.git.add(RUNNER)
    work.git.am("--continue")
    resolution = work.head.commit.hexsha
    (root / "build" / "src" / OTHER).write_text("VALUE = 'stray'\n")
    assert_one_line_error(
        run_cli(root, "rebase", "--continue", env=env["env"]),
        "no `git am` is in progress for 0002-conflict.patch",
        "uncommitted edits",
    )
    assert work.head.commit.hexsha == resolution and work.is_dirty()
    work.git.checkout("--", OTHER)
    result = run_cli(root, "rebase", "--continue", "--json", env=env["env"])
    assert result.returncode == 0, result.stderr
    assert verdicts(json.loads(result.stdout)) == {"clean": "clean", "conflict": "merged"}
    assert "+line ten" in (root / "patches" / "0002-conflict.patch").read_text()
    assert "stray" not in (root / "patches" / "0002-conflict.patch").read_text()


def test_conflict_markers_are_found_in_files_with_spaces_and_quoted_names(tmp_path):
    """A real three-way conflict in files git must quote or that hold spaces; `--name-only` split at
    whitespace lost them. The twin: once resolved, nothing is reported."""
    repo, base = make_upstream(tmp_path / "r", {"a b/c d.py": "x = 1\n", "caf\u00e9.py": "y = 1\n"})
    commit_files(repo, {"a b/c d.py": "x = 2\n", "caf\u00e9.py": "y = 2\n"}, "ours")
    repo.git.checkout("--quiet", "-b", "theirs", base)
    commit_files(repo, {"a b/c d.py": "x = 3\n", "caf\u00e9.py": "y = 3\n"}, "theirs")
    with pytest.raises(git.GitCommandError):
        repo.git.merge("--quiet", "master" if "master" in repo.heads else "main")
    queue = PatchQueue(tmp_path, work_tree=Path(repo.working_tree_dir))
    assert rebase._has_conflict_markers(queue) == ["a b/c d.py", "caf\u00e9.py"]
    repo.git.add("--all")  # staged with the markers in: still found
    assert rebase._has_conflict_markers(queue) == ["a b/c d.py", "caf\u00e9.py"]
    for name in ("a b/c d.py", "caf\u00e9.py"):
        (queue.path / name).write_text("resolved = True\n")
    assert rebase._has_conflict_markers(queue) == []


def test_conflict_markers_are_found_in_a_file_that_is_not_utf8(tmp_path):
    """A Latin-1 source file with a conflict: its markers are found, its bytes no reason to fail.
    The twin: resolved, nothing is reported."""
    repo, base = make_upstream(tmp_path / "r", {"latin.py": "x = 1\n"})
    root = Path(repo.working_tree_dir)
    for branch, value in (("ours", b"x = 2  # caf\xe9\n"), ("theirs", b"x = 3  # na\xefve\n")):
        repo.git.checkout("--quiet", "-b", branch, base)
        (root / "latin.py").write_bytes(value)
        repo.git.commit("-qam", branch, env={**AUTHOR_ENV})
    with pytest.raises(git.GitCommandError):
        repo.git.merge("--quiet", "ours")
    queue = PatchQueue(tmp_path, work_tree=root)
    assert rebase._has_conflict_markers(queue) == ["latin.py"]
    (root / "latin.py").write_bytes(b"x = 4  # r\xe9solu\n")
    assert rebase._has_conflict_markers(queue) == []


def test_a_file_upstream_deleted_is_found_unresolved_whatever_its_name_holds(tmp_path):
    """git lists unmerged paths as `mode sha stage<TAB>path`; a path may hold a tab itself. The
    twin: once the maintainer stages the file, it is resolved."""
    names = ["plain.py", "tab\there.py", "space here.py"]
    repo, base = make_upstream(tmp_path / "r", {name: "x = 1\n" for name in names})
    commit_files(repo, {name: "x = 2\n" for name in names}, "ours: the patch changes them")
    repo.git.checkout("--quiet", "-b", "theirs", base)
    commit_files(repo, {name: None for name in names}, "theirs: upstream deletes them")
    with pytest.raises(git.GitCommandError):
        repo.git.merge("--quiet", "master" if "master" in repo.heads else "main")
    assert rebase._deleted_upstream_unresolved(repo) == sorted(names)
    repo.git.add("--", "tab\there.py")
    assert rebase._deleted_upstream_unresolved(repo) == sorted(["plain.py", "space here.py"])


def test_the_files_git_am_stops_in_are_named_whole(tmp_path):
    """git am --3way names a conflicted file as it is: a name with a space was cut at it, so the
    stop named a file that does not exist and the per-file verdicts missed the real one. The twin:
    a plain name, and a file deleted on one side."""
    repo, base = make_upstream(tmp_path / "r", {"a b.py": "x = 1\n", "plain.py": "y = 1\n", "gone.py": "z = 1\n"})
    commit_files(repo, {"a b.py": "x = 2\n", "plain.py": "y = 2\n", "gone.py": "z = 2\n"}, "ours")
    patch = repo.git.format_patch("-1", "--stdout", strip_newline_in_stdout=False)
    repo.git.checkout("--quiet", "--detach", base)
    commit_files(repo, {"a b.py": "x = 3\n", "plain.py": "y = 3\n", "gone.py": None}, "theirs")
    (tmp_path / "ours.patch").write_text(patch)
    with pytest.raises(git.GitCommandError) as stopped:
        with repo.git.custom_environment(**git_env()):
            repo.git.am("--3way", str(tmp_path / "ours.patch"))
    assert "Merge conflict in a b.py" in stopped.value.stdout  # the premise: git's own words
    assert rebase.conflicted_files(stopped.value.stdout) == ["a b.py", "gone.py", "plain.py"]


def test_skip_drops_the_conflicting_patch(env):
    root = make_repo(env, ["conflict", "clean"])
    assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    result = run_cli(root, "rebase", "--skip", "--json", env=env["env"])
    assert result.returncode == 0, result.stderr
    assert verdicts(json.loads(result.stdout)) == {"conflict": "skipped", "clean": "clean"}
    assert read_series_names(root) == ["0002-clean.patch"]
    assert "0001-conflict.patch (dropped by the maintainer)" in (root / "CHANGELOG.md").read_text()


def test_status_during_a_rebase_says_where_it_stands(env):
    """Done, stopped at, pending, and the commands; the twin: no rebase, no rebase status."""
    root = make_repo(env, ["clean", "conflict", "moved"])
    assert rebase.progress(root) is None
    rebase.start(root, "1.1.0", commit=NEW_COMMIT)
    data = rebase.progress(root)
    assert (data["op"], data["stopped_at"], data["pending"]) == (
        "rebase --onto 1.1.0",
        "0002-conflict.patch",
        ["0003-moved.patch"],
    )
    assert [(s["name"], s["verdict"]) for s in data["done"]] == [("0001-clean.patch", "clean")]
    assert (data["continue"], data["abort"]) == ("python build.py rebase --continue", "python build.py rebase --abort")
    assert data["text"] == (
        "a rebase is in progress (`rebase --onto 1.1.0`): resolve the conflict, then `python build.py rebase "
        "--continue`; `--skip` drops the patch; `python build.py rebase --abort` returns to the state before\n"
        "= 0001-clean.patch  clean\n"
        f"! 0002-conflict.patch  stopped: conflict in {RUNNER}\n"
        "- 0003-moved.patch"
    )


def test_a_step_killed_midway_is_shown_interrupted_and_redone_once_by_continue(env):
    root = make_repo(env, ["clean", "conflict", "moved"])
    killed = run_cli(root, "rebase", "--onto", "1.1.0", env={**env["env"], "SGLPATCH_CRASH_AT": "rebase:applied"})
    assert killed.returncode == -9, killed.stderr
    data = rebase.progress(root)  # 0001 was applied in the work tree, its step not yet recorded
    assert (data["done"], data["stopped_at"], data["pending"]) == (
        [],
        "0001-clean.patch",
        ["0002-conflict.patch", "0003-moved.patch"],
    )
    assert data["text"].splitlines()[1:] == [
        "! 0001-clean.patch  interrupted",
        "- 0002-conflict.patch",
        "- 0003-moved.patch",
    ]
    resumed = run_cli(root, "rebase", "--continue", env=env["env"])
    assert resumed.returncode == 1 and "stopped at 0002-conflict.patch" in resumed.stdout, resumed.stderr
    assert [(s["name"], s["verdict"]) for s in rebase.progress(root)["done"]] == [("0001-clean.patch", "clean")]
    work = git.Repo(root / "build" / "src")
    new_base = rebase.State.load(root).new_base
    assert work.git.log("--format=%s", f"{new_base}..HEAD").splitlines() == ["clean: change"], "applied once"


def test_a_step_killed_inside_its_stopped_git_am_is_redone_by_continue(env):
    """Killed after `git am` stopped on the conflict but before the stop was recorded: the am is
    still in progress; --continue quits it, resets, and redoes the step, which stops again."""
    root = make_repo(env, ["conflict", "moved"])
    killed = run_cli(root, "rebase", "--onto", "1.1.0", env={**env["env"], "SGLPATCH_CRASH_AT": "rebase:applied"})
    assert killed.returncode == -9, killed.stderr
    assert (root / "build" / "src" / ".git" / "rebase-apply").is_dir(), "the premise: an am in progress"
    resumed = run_cli(root, "rebase", "--continue", env=env["env"])
    assert resumed.returncode == 1 and "stopped at 0001-conflict.patch" in resumed.stdout, resumed.stderr
    assert "Traceback" not in resumed.stderr


def test_a_git_am_continue_that_fails_is_one_error_and_the_rebase_stays_resumable(env):
    """A hook in the work tree's repository (pre-applypatch) refuses the resolution: one line with
    the hook's words and where it is, nothing recorded; the twin, the hook gone, --continue finishes."""
    root = make_repo(env, ["conflict"])
    assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    (root / "build" / "src" / RUNNER).write_text(V2[RUNNER].replace("line 10 upstream\n", "line ten upstream\n"))
    hook = root / "build" / "src" / ".git" / "hooks" / "pre-applypatch"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text("#!/bin/sh\necho 'the hook says no' >&2\nexit 1\n")
    hook.chmod(0o755)
    line = assert_one_line_error(
        run_cli(root, "rebase", "--continue", env=env["env"]),
        "git am --continue failed for 0001-conflict.patch: a git hook refused it: the hook says no",
    )
    assert line.endswith(f"fix or remove the hook in {hook.parent}, then `rebase --continue`")
    hook.unlink()
    done = run_cli(root, "rebase", "--continue", env=env["env"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "+line ten upstream" in (root / "patches" / "0001-conflict.patch").read_text()


def test_abort_reports_the_steps_done_and_with_a_damaged_journal_still_the_release(env):
    root = make_repo(env, ["clean", "conflict"])
    before = snapshot(root)
    rebase.start(root, "1.1.0", commit=NEW_COMMIT)
    report = rebase.resume(root, "abort")
    assert (report["onto"], report["aborted"]) == ("1.1.0", True)
    assert [(p["name"], p["verdict"]) for p in report["patches"]] == [("0001-clean.patch", "clean")]
    assert snapshot(root) == before
    rebase.start(root, "1.1.0", commit=NEW_COMMIT)
    (root / "build" / "rebase" / "state.json").write_text("{x")  # the journal lost: the release is in the op
    assert rebase.resume(root, "abort") == {"onto": "1.1.0", "aborted": True, "patches": []}
    assert snapshot(root) == before


def test_continue_without_its_journal_is_one_error_and_abort_still_works(env):
    """The patches the rebase started from are there, its journal is not (or is damaged): never
    guessed, named. The twin: with the journal, the same --continue gets as far as the unresolved conflict."""
    from sglpatch.errors import UserError

    root = make_repo(env, ["clean", "conflict"])
    before = snapshot(root)
    rebase.start(root, "1.1.0", commit=NEW_COMMIT)
    with pytest.raises(UserError, match="conflict markers remain"):
        rebase.resume(root, "continue")
    journal = root / "build" / "rebase" / "state.json"
    journal.unlink()
    for action in ("continue", "skip"):
        with pytest.raises(UserError) as error:
            rebase.resume(root, action)
        assert str(error.value) == (
            f"the rebase journal {journal} is missing: `python build.py rebase --abort` "
            "returns to the state before the rebase"
        )
    journal.write_text("{x")
    with pytest.raises(UserError) as error:
        rebase.resume(root, "continue")
    assert str(error.value) == (
        f"the rebase journal {journal} is damaged: `python build.py rebase --abort` "
        "returns to the state before the rebase"
    )
    assert rebase.resume(root, "abort")["aborted"] and snapshot(root) == before


def test_a_patch_copy_changed_during_a_rebase_stops_it_named(env):
    """The rebase replays the copies it took at its start; one edited since is never applied. The
    twin: the untouched copy of the same series goes through."""
    from sglpatch.errors import UserError

    root = make_repo(env, ["conflict", "moved"])
    before = snapshot(root)
    rebase.start(root, "1.1.0", commit=NEW_COMMIT)
    copy = root / "build" / "rebase" / "patches" / "0002-moved.patch"
    original = copy.read_bytes()
    copy.write_bytes(original.replace(b"line thirty", b"line 30 edited"))
    with pytest.raises(UserError) as error:
        rebase.resume(root, "skip")
    assert str(error.value) == (
        f"{copy} is not the 0002-moved.patch the rebase started from: "
        "`rebase --abort` returns to the state before the rebase"
    )
    copy.write_bytes(original)
    assert verdicts(rebase.resume(root, "continue")) == {"conflict": "skipped", "moved": "merged"}
    assert snapshot(root) != before


def test_a_rebase_killed_after_its_last_step_finishes_on_continue(env):
    root = make_repo(env, ["clean", "moved"])
    killed = run_cli(
        root, "rebase", "--onto", "1.1.0", env={**env["env"], "SGLPATCH_CRASH_AT": "rebase:finished-work-tree"}
    )
    assert killed.returncode == -9, killed.stderr
    data = rebase.progress(root)
    assert (data["stopped_at"], data["pending"]) == (None, [])
    assert [(s["name"], s["verdict"]) for s in data["done"]] == [
        ("0001-clean.patch", "clean"),
        ("0002-moved.patch", "merged"),
    ]
    assert_one_line_error(
        run_cli(root, "rebase", "--skip", env=env["env"]), "the rebase is not stopped at a patch", "rebase --continue"
    )
    result = run_cli(root, "rebase", "--continue", "--json", env=env["env"])
    assert result.returncode == 0, result.stderr
    assert verdicts(json.loads(result.stdout)) == {"clean": "clean", "moved": "merged"}
    assert read_pin(root).version == "1.1.0" and rebase.progress(root) is None


MOVED_RUNNER = "python/sglang/srt/model_executor/runner.py"


def test_a_patch_upstream_made_with_other_context_merges_to_no_change_and_is_dropped(env):
    """1.2.0 has our line 30 and a changed line 27, so the patch does not reverse-apply, yet the
    three-way merge leaves nothing to commit: obsolete, named by what happened. The twin: 1.1.0,
    where the same patch merges with a change."""
    env["index"].publish(
        "sglang-1.2.0.tar.gz",
        sdist_bytes(
            "1.2.0",
            {**V1, RUNNER: V1[RUNNER].replace("line 30\n", "line thirty\n").replace("line 27\n", "line 27 upstream\n")},
        ),
    )
    root = make_repo(env, ["clean", "moved"])
    assert verdicts(rebase.start(root, "1.1.0", dry_run=True)) == {"clean": "clean", "moved": "merged"}
    report = rebase.start(root, "1.2.0", commit=NEW_COMMIT)
    (moved,) = [p for p in report["patches"] if p["name"] == "0002-moved.patch"]
    assert (moved["verdict"], moved["detail"], moved["files"]) == (
        "obsolete",
        "merges to no change on SGLang 1.2.0",
        [RUNNER],
    )
    assert read_series_names(root) == ["0001-clean.patch"]
    assert "0002-moved.patch (upstreamed in 1.2.0)" in (root / "CHANGELOG.md").read_text()


def test_a_conflict_in_a_file_upstream_moved_names_both_paths(env):
    env["index"].publish(
        "sglang-1.3.0.tar.gz",
        sdist_bytes("1.3.0", {**{k: v for k, v in V2.items() if k != RUNNER}, MOVED_RUNNER: V2[RUNNER]}),
    )
    root = make_repo(env, ["conflict"])
    (patch,) = rebase.start(root, "1.3.0", dry_run=True)["patches"]
    assert (patch["verdict"], patch["detail"], patch["files"]) == (
        "conflict",
        f"three-way merge stopped in {MOVED_RUNNER}; {RUNNER} moved to {MOVED_RUNNER} upstream",
        [MOVED_RUNNER],
    )


def test_a_rebase_passes_its_named_step_boundaries_in_order(env, tmp_path, monkeypatch):
    """The crash tests kill a rebase at each of these (by name or by count); a step that loses or
    renames one is no longer proven to recover. After `prepare`'s own transaction: the start,
    each patch (its state saved before and after it is applied), the stop, and on `--skip` the
    end, whose files are written under the journal."""
    listing = tmp_path / "boundaries"
    monkeypatch.setenv("SGLPATCH_BOUNDARIES", str(listing))
    root = make_repo(env, ["clean", "conflict"])
    rebase.start(root, "1.1.0", commit=NEW_COMMIT)
    assert listing.read_text().split()[3:] == [
        "journal:rebase",
        "rebase:state",
        "rebase:on-new-base",
        "rebase:state",
        "rebase:state",
        "rebase:applied",
        "rebase:state",
        "rebase:state",
        "rebase:applied",
        "rebase:state",
    ]
    listing.unlink()
    report = rebase.resume(root, "skip")
    assert [(p["verdict"], p["detail"]) for p in report["patches"]][-1] == ("skipped", "dropped by the maintainer")
    assert listing.read_text().split() == [
        "rebase:state",
        "rebase:finished-work-tree",
        "journal:committing",
        "file:CHANGELOG.md",
        "file:patches/0002-conflict.patch",
        "file:patches/series",
        "file:upstream.toml",
        "gitlink",
        "journal:cleared",
    ]


def test_the_cli_pins_the_commit_it_is_given_and_none_without(env):
    root = make_repo(env, ["clean"])
    result = run_cli(root, "rebase", "--onto", "1.1.0", "--commit", NEW_COMMIT, env=env["env"])
    assert result.returncode == 0, result.stderr
    assert read_pin(root).commit == NEW_COMMIT
    assert git.Repo(root).git.ls_files("--stage", "upstream").startswith(f"160000 {NEW_COMMIT} ")
    env["index"].publish("sglang-1.2.0.tar.gz", sdist_bytes("1.2.0", V2))
    result = run_cli(root, "rebase", "--onto", "1.2.0", env=env["env"])
    assert result.returncode == 0, result.stderr
    assert read_pin(root).commit is None


def test_a_rebase_killed_before_its_first_step_shows_nothing_pending_and_continue_undoes_it(env):
    root = make_repo(env, ["clean", "conflict"])
    before = snapshot(root)
    killed = run_cli(root, "rebase", "--onto", "1.1.0", env={**env["env"], "SGLPATCH_CRASH_AT": "journal:rebase"})
    assert killed.returncode == -9, killed.stderr
    data = rebase.progress(root)  # the journal names the rebase; no step has begun
    assert (data["op"], data["done"], data["stopped_at"], data["pending"]) == ("rebase --onto 1.1.0", [], None, [])
    assert_one_line_error(
        run_cli(root, "rebase", "--continue", env=env["env"]),
        "`rebase --onto 1.1.0` was interrupted before its first step; the line is as it was before it",
        "rerun `python build.py rebase --onto 1.1.0`",
    )
    assert rebase.progress(root) is None and snapshot(root) == before


def test_a_head_that_is_no_resolution_of_the_stopped_patch_is_refused_with_the_way_out(env):
    root = make_repo(env, ["clean", "conflict"])
    assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    work = git.Repo(root / "build" / "src")
    before = work.head.commit.hexsha
    work.git.am("--abort")
    commit_files(work, {OTHER: "VALUE = 'unrelated'\n"}, "an unrelated commit")
    line = assert_one_line_error(
        run_cli(root, "rebase", "--continue", env=env["env"]),
        f"not a resolution of 0002-conflict.patch on top of {before[:12]}",
    )
    assert "('an unrelated commit')" in line and "put HEAD back, `rebase --skip`, or `rebase --abort`" in line


def test_a_conflicting_plain_diff_stops_as_a_conflict_not_a_header_refusal(env):
    """Without blob ids git am cannot fall back to a three-way merge: it says "Patch failed at"
    and leaves no unmerged path, which is still a conflict. The twin (a header git am refuses)
    is test_a_mail_header_git_am_refuses_is_named_by_a_dry_run_not_called_a_conflict."""
    root = make_repo(env, ["conflict"])
    patch = root / "patches" / "0001-conflict.patch"
    patch.write_text(
        "".join(line for line in patch.read_text().splitlines(keepends=True) if not line.startswith("index "))
    )
    commit_project(root, OLD_COMMIT)
    (verdict,) = rebase.start(root, "1.1.0", dry_run=True)["patches"]
    assert (verdict["verdict"], verdict["files"]) == ("conflict", [RUNNER])


def test_a_rebase_keeps_the_changelog_and_an_uncommitted_pin_edit(env):
    """The pin and CHANGELOG are edited, not replaced: earlier entries stay, and a comment not yet
    committed in upstream.toml is carried into the new pin (a patch file, replaced whole, would be
    refused instead: test_reliability)."""
    root = make_repo(env, ["clean"])
    earlier = "# Changelog\n\n## [Unreleased]\n\n### Added\n- an earlier note\n\n## [0.1.0]\n- the first release\n"
    (root / "CHANGELOG.md").write_text(earlier)
    commit_project(root, OLD_COMMIT)
    pin = root / "upstream.toml"
    pin.write_text("# the maintainer's note, not yet committed\n" + pin.read_text())
    series = root / "patches" / "series"
    series.write_text("# why these patches, not yet committed\n" + series.read_text())
    rebase.start(root, "1.1.0", commit=NEW_COMMIT)
    text = (root / "CHANGELOG.md").read_text()
    assert "- an earlier note" in text and text.endswith("## [0.1.0]\n- the first release\n")
    assert "Rebased onto SGLang 1.1.0: kept 0001-clean.patch" in text
    assert pin.read_text().startswith("# the maintainer's note, not yet committed\n")
    assert read_pin(root).version == "1.1.0"
    assert series.read_text() == "# why these patches, not yet committed\n# synthetic series\n0001-clean.patch\n"


def test_the_end_of_a_rebase_over_a_non_utf8_changelog_is_one_line_and_resumable(env):
    """The CHANGELOG is read at the end, after the last step: the error names it and what to do,
    and the rebase stays resumable. The twin: saved as UTF-8 again, --continue finishes."""
    root = make_repo(env, ["conflict"])
    assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    changelog = root / "CHANGELOG.md"
    changelog.write_bytes(changelog.read_bytes() + b"\xff\n")
    assert_one_line_error(
        run_cli(root, "rebase", "--skip", env=env["env"]),
        f"{changelog} is not UTF-8 text: save it as UTF-8, then rerun `rebase --continue`",
    )
    changelog.write_bytes(changelog.read_bytes().replace(b"\xff", b""))
    done = run_cli(root, "rebase", "--continue", env=env["env"])
    assert done.returncode == 0, done.stderr
    assert read_pin(root).version == "1.1.0"


def test_commits_added_by_hand_after_the_last_step_are_refused_and_abort_restores(env):
    root = make_repo(env, ["clean", "moved"])
    before = snapshot(root)
    killed = run_cli(
        root, "rebase", "--onto", "1.1.0", env={**env["env"], "SGLPATCH_CRASH_AT": "rebase:finished-work-tree"}
    )
    assert killed.returncode == -9, killed.stderr
    work = root / "build" / "src"
    commit_files(git.Repo(work), {OTHER: "VALUE = 'by hand'\n"}, "a commit the journal does not know")
    assert_one_line_error(
        run_cli(root, "rebase", "--continue", env=env["env"]),
        f"the commits in {work} do not match the rebase's journal (3 commits above SGLang 1.1.0, 2 patches kept)",
        "`rebase --abort` returns to the state before the rebase",
    )
    assert run_cli(root, "rebase", "--abort", env=env["env"]).returncode == 0
    assert snapshot(root) == before


def test_a_rebase_that_drops_every_patch_logs_that_it_kept_none(env):
    root = make_repo(env, ["textual"])
    rebase.start(root, "1.1.0", commit=NEW_COMMIT)
    assert (
        "- Rebased onto SGLang 1.1.0: kept none; dropped 0001-textual.patch (upstreamed in 1.1.0)"
        in (root / "CHANGELOG.md").read_text()
    )
    assert read_series_names(root) == []


def test_the_text_report_of_each_outcome():
    row = {"detail": "", "files": [], "file_verdicts": []}
    done = {
        "onto": "1.1.0",
        "patches": [
            {**row, "name": "a.p", "verdict": "clean"},
            {**row, "name": "b.p", "verdict": "obsolete", "detail": "already in"},
        ],
    }
    assert rebase.format_report(done) == (
        "rebase onto SGLang 1.1.0\npatch  verdict   detail\na.p    clean     \nb.p    obsolete  already in"
    )
    assert rebase.format_report({**done, "dry_run": True}).startswith(
        "rebase onto SGLang 1.1.0 (dry run: nothing changed)\npatch  verdict"
    )
    assert (
        rebase.format_report({"onto": "1.1.0", "aborted": True}) == "rebase onto 1.1.0 aborted; everything is as before"
    )
    stop = {"patch": "b.p", "work_tree": "/w", "command": "python build.py rebase", "files": ["x.py", "gone.py"]}
    conflict = {
        "onto": "1.1.0",
        "stopped": {**stop, "kind": "conflict"},
        "patches": [
            {**row, "name": "b.p", "verdict": "conflict", "detail": "three-way merge stopped in x.py, gone.py"}
        ],
    }
    assert rebase.format_report(conflict).splitlines()[-2:] == [
        "stopped at b.p: conflict in x.py, gone.py (markers in /w)",
        "resolve the files, then `python build.py rebase --continue`; or `--skip` to drop this patch; "
        "or `--abort` to undo the rebase",
    ]
    deleted = {"path": "gone.py", "verdict": "deleted", "detail": "", "hunks": []}
    conflict["patches"][0]["file_verdicts"] = [deleted]
    assert rebase.format_report(conflict).splitlines()[-2] == (
        "stopped at b.p: conflict in x.py (markers in /w); gone.py deleted upstream: port the change to where the "
        "code went, or leave it out (unless you `git add` it, --continue does not bring the file back)"
    )
    suspect = {**conflict, "stopped": {**stop, "kind": "suspect"}}
    report = rebase.format_report(suspect).splitlines()
    assert report[:2] == ["rebase onto SGLang 1.1.0", "patch  verdict   detail"]  # the table, then the stop
    assert report[-2:] == [
        "stopped at b.p: it merged, but what it uses may be gone (see above)",
        "fix it in /w (amend the commit, or leave the edits: --continue folds them in), then "
        "`python build.py rebase --continue` to accept it; or `--skip` to drop this patch; or `--abort` to undo the "
        "rebase",
    ]
    # what "see above" points at: a suspect patch's files, hunk by hunk; the twin: a clean one lists none
    hunk = {"verdict": "suspect", "detail": "", "old_start": 3}
    suspect_row = {
        **row,
        "name": "b.p",
        "verdict": "suspect",
        "detail": "merged, but x.py uses old_name",
        "file_verdicts": [{"path": "x.py", "verdict": "suspect", "detail": "", "hunks": [hunk]}],
    }
    assert "    x.py: suspect (1 suspect)" in rebase.format_report({**suspect, "patches": [suspect_row]}).splitlines()
    assert (
        "    x.py: suspect (1 suspect)"
        not in rebase.format_report({**done, "patches": [{**suspect_row, "verdict": "clean"}]}).splitlines()
    )


def test_continue_verifies_the_pinned_release_it_compares_against(env):
    """--continue reads the old release again (for the suspect check): its cached artifact is
    verified against the pin on that use too. The twin: intact, --continue gets to the conflict."""
    root = make_repo(env, ["conflict"])
    assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    assert_one_line_error(run_cli(root, "rebase", "--continue", env=env["env"]), "conflict markers remain")
    artifact = Path(env["env"]["SGLPATCH_CACHE"]) / "artifacts" / "sglang-1.0.0.tar.gz"
    artifact.write_bytes(artifact.read_bytes() + b"tampered")
    assert_one_line_error(
        run_cli(root, "rebase", "--continue", env=env["env"]),
        "checksum mismatch for sglang-1.0.0.tar.gz: upstream.toml says",
    )


def test_a_git_killed_during_the_upstreamed_check_interrupts_the_rebase(env, tmp_path, monkeypatch):
    """The check whether upstream already has a patch is a `git apply --reverse --check` that
    fails for every patch still needed; one killed by a signal (the OOM killer) is an interrupt,
    never read as "not upstreamed". The twin: the same git, not killed, gives the verdicts."""
    root = make_repo(env, ["clean"])
    real = shutil.which("git")
    wrapper = tmp_path / "git-killed-on-reverse-check"
    wrapper.write_text(f'#!/bin/sh\ncase "$*" in *"apply --check --reverse"*) kill -9 $$ ;; esac\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    rebase.start(root, "1.1.0", dry_run=True)  # prepares the mirror with the real git
    monkeypatch.setattr(git.Git, "GIT_PYTHON_GIT_EXECUTABLE", str(wrapper))
    with pytest.raises(KeyboardInterrupt, match="git was stopped by signal 9"):
        rebase.start(root, "1.1.0", dry_run=True)
    monkeypatch.setattr(git.Git, "GIT_PYTHON_GIT_EXECUTABLE", real)
    assert verdicts(rebase.start(root, "1.1.0", dry_run=True)) == {"clean": "clean"}


def test_abort_returns_exactly_to_the_state_before(env):
    root = make_repo(env, ["clean", "conflict"])
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## [Unreleased]\n- uncommitted note\n")
    before = snapshot(root)
    assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    queue_head = git.Repo(root / "build" / "src").commit("patched").hexsha
    result = run_cli(root, "rebase", "--abort", env=env["env"])
    assert result.returncode == 0, result.stderr
    assert "aborted" in result.stdout
    assert snapshot(root) == before
    work = git.Repo(root / "build" / "src")
    assert work.head.commit.hexsha == queue_head and not work.is_dirty(untracked_files=True)
    assert PatchQueue(root).applied_names() == ["0001-clean.patch", "0002-conflict.patch"]


def test_dry_run_reports_all_verdicts_and_changes_nothing(env):
    root = make_repo(env, ["clean", "conflict", "moved", "textual", "semantic"])
    before = snapshot(root)
    report = rebase.start(root, "1.1.0", dry_run=True)
    assert verdicts(report) == {
        "clean": "clean",
        "conflict": "conflict",
        "moved": "merged",
        "textual": "obsolete",
        "semantic": "obsolete",
    }
    assert snapshot(root) == before
    assert not (root / "build").exists()


def test_a_dry_run_exits_1_when_a_patch_conflicts_and_0_when_none_does(env):
    root = make_repo(env, ["clean", "conflict"])
    result = run_cli(root, "rebase", "--onto", "1.1.0", "--dry-run", env=env["env"])
    assert result.returncode == 1 and "conflict" in result.stdout, result.stderr
    assert not (root / "build").exists()
    twin = make_repo({**env, "root": env["root"].parent / "twin"}, ["clean", "moved"])
    result = run_cli(twin, "rebase", "--onto", "1.1.0", "--dry-run", env=env["env"])
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_mail_header_git_am_refuses_is_named_by_a_dry_run_not_called_a_conflict(env):
    """git am applies the diff and then refuses the Date: header: no resolution gets past that, so
    the dry run stops with one line naming the patch and git's words; its twin (the header intact)
    merges."""
    root = make_repo(env, ["clean", "moved"])
    patch = root / "patches" / "0002-moved.patch"
    good = patch.read_text()
    patch.write_text(re.sub(r"(?m)^Date: .*$", "Date: not a date", good))
    git.Repo(root).git.commit("-qam", "a bad date")
    before = snapshot(root)
    line = assert_one_line_error(
        run_cli(root, "rebase", "--onto", "1.1.0", "--dry-run", env=env["env"]),
        "patches/0002-moved.patch: git am refuses its mail header",
        "invalid date format: not a date",
        "fix the From:/Date: header",
    )
    assert "conflict" not in line and snapshot(root) == before
    patch.write_text(good)
    assert verdicts(rebase.start(root, "1.1.0", dry_run=True)) == {"clean": "clean", "moved": "merged"}


def test_a_hook_that_refuses_the_three_way_am_is_named_not_taken_for_a_mail_header(env):
    """The release's git am runs the work tree's pre-applypatch hook: a silent refusal there is named
    as the hook's, the line stays as it was, and the twin (the hook gone) rebases."""
    root = make_repo(env, ["clean"])
    assert run_cli(root, "prepare", env=env["env"]).returncode == 0
    hook = root / "build" / "src" / ".git" / "hooks" / "pre-applypatch"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(f'#!/bin/sh\n[ "$(git symbolic-ref --short HEAD)" = {rebase.REBASE_BRANCH} ] || exit 0\nexit 1\n')
    hook.chmod(0o755)
    before = snapshot(root)
    line = assert_one_line_error(
        run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]),
        "patches/0001-clean.patch: git am stopped although the diff applies (a git hook refused it: without a word)",
    )
    assert line.endswith(f"fix or remove the hook in {hook.parent}, then rerun") and "header" not in line
    assert snapshot(root) == before
    hook.unlink()
    done = run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"])
    assert done.returncode == 0, done.stdout + done.stderr


def test_bad_targets_are_one_line_errors(env):
    root = make_repo(env, ["clean"])
    assert_one_line_error(run_cli(root, "rebase", "--onto", "1.0.0", env=env["env"]), "already on SGLang 1.0.0")
    assert_one_line_error(run_cli(root, "rebase", "--onto", "7.7.7", env=env["env"]), "not on the package index")
    assert_one_line_error(run_cli(root, "rebase", "--onto", "main", env=env["env"]), "not a PEP 440 version")
    assert_one_line_error(run_cli(root, "rebase", "--continue", env=env["env"]), "no rebase is in progress")
    assert not (root / "build" / "rebase").exists()


# ---------------------------------------------------------------- lines


def add_line(root: Path, env, name: str = "next") -> Path:
    result = run_cli(root, "lines", "--add", name, env=env["env"])
    assert result.returncode == 0, result.stderr
    return line_dir(root, name)


def test_a_line_rebases_on_its_own_and_production_stays(env):
    root = make_repo(env, ["clean", "moved", "textual"])
    line = add_line(root, env)
    production = {k: v for k, v in snapshot(root).items() if not k.startswith("lines/") and k != "CHANGELOG.md"}
    result = run_cli(
        root, "--line", "next", "rebase", "--onto", "1.1.0", "--commit", NEW_COMMIT, "--json", env=env["env"]
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["line"] == "next"
    assert verdicts(report) == {"clean": "clean", "moved": "merged", "textual": "obsolete"}
    # the line moved, with its own pin, series and work tree
    assert read_pin(line).version == "1.1.0" and read_pin(line).series_release == 1
    assert read_series_names(line) == ["0001-clean.patch", "0002-moved.patch"]
    assert "@@ -32," in (line / "patches" / "0002-moved.patch").read_text()
    assert PatchQueue(line).applied_names() == ["0001-clean.patch", "0002-moved.patch"]
    # production did not: pin, series, patches, gitlink (the line has no submodule of its own)
    assert {k: v for k, v in snapshot(root).items() if not k.startswith("lines/") and k != "CHANGELOG.md"} == production
    assert OLD_COMMIT in git.Repo(root).git.ls_files("--stage", "upstream")
    assert not (root / "build").exists()
    # one changelog for the repository, naming the line
    assert (
        "Rebased the next line onto SGLang 1.1.0: kept 0001-clean.patch, 0002-moved.patch; dropped 0003-textual.patch"
    ) in (root / "CHANGELOG.md").read_text()
    assert not (line / "CHANGELOG.md").exists()
    listing = json.loads(run_cli(root, "lines", "--json", env=env["env"]).stdout)["lines"]
    assert [(r["line"], r["upstream"], r["version"]) for r in listing] == [
        ("production", "1.0.0", "1.0.0+kimi.3"),
        ("next", "1.1.0", "1.1.0+kimi.1"),
    ]


def test_a_bare_line_pins_any_release_and_carries_nothing_of_another_line(env):
    env["index"].publish("sglang-1.2.0.tar.gz", sdist_bytes("1.2.0", {**V2, OTHER: "VALUE = 2\n"}))
    root = make_repo(env, ["clean", "moved"])
    (root / "upstream.toml").write_text(
        (root / "upstream.toml").read_text() + '\n[series.accepted]\n"Some.finding" = "production only"\n'
    )
    git.Repo(root).git.commit("-qam", "production accepts a finding")
    changelog = (root / "CHANGELOG.md").read_text()
    result = run_cli(root, "lines", "--add", "exp", "--bare", "--release", "1.1.0", env=env["env"])
    assert result.returncode == 0, result.stderr
    line = line_dir(root, "exp")
    pin = read_pin(line)
    assert (pin.version, pin.series_local, pin.series_release) == ("1.1.0", "exp", 1)
    assert (pin.required_checks, pin.accepted, pin.changelog) == ((), (), False)
    assert [a.kind for a in pin.artifacts] == ["sdist"]
    assert pin.artifact("sdist").sha256 == hashlib.sha256(env["index"].files["sglang-1.1.0.tar.gz"]).hexdigest()
    assert read_series_names(line) == []
    assert (
        run_cli(root, "--line", "exp", "log", env=env["env"])
        .stdout.rstrip()
        .endswith("lines --add exp --bare --release 1.1.0")
    )
    # it works as a line: prepare, a patch of its own, a rebase that leaves CHANGELOG.md alone
    assert run_cli(root, "--line", "exp", "prepare", env=env["env"]).returncode == 0
    (line / "build" / "src" / KIMI).write_text("class KimiK25:\n    pass\n")
    assert (
        run_cli(
            root,
            "--line",
            "exp",
            "new",
            "0003-mine",  # 0001 and 0002 are production's: a number is one patch's in every line
            "-m",
            "mine\n\nUpstream-Status: Pending\nDrop-When: upstream>=9\n",
            env=env["env"],
        ).returncode
        == 0
    )
    git.Repo(root).git.add("--all")
    git.Repo(root).git.commit("-qm", "the exp line")
    result = run_cli(root, "--line", "exp", "rebase", "--onto", "1.2.0", env=env["env"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert read_pin(line).version == "1.2.0" and read_series_names(line) == ["0003-mine.patch"]
    assert (root / "CHANGELOG.md").read_text() == changelog, "a bare line keeps out of the CHANGELOG"
    # the twin: the maintainer turns the entries on, and the next rebase writes one
    (line / "upstream.toml").write_text(
        (line / "upstream.toml").read_text().replace("changelog = false", "changelog = true")
    )
    git.Repo(root).git.commit("-qam", "exp writes the changelog")
    env["index"].publish("sglang-1.3.0.tar.gz", sdist_bytes("1.3.0", {**V2, OTHER: "VALUE = 2\n"}))
    assert run_cli(root, "--line", "exp", "rebase", "--onto", "1.3.0", env=env["env"]).returncode == 0
    assert "Rebased the exp line onto SGLang 1.3.0" in (root / "CHANGELOG.md").read_text()


def test_a_bare_line_without_release_takes_the_source_lines_and_logs_it(env):
    root = make_repo(env, ["clean"])
    assert run_cli(root, "lines", "--add", "exp", "--bare", env=env["env"]).returncode == 0
    assert read_pin(line_dir(root, "exp")).version == "1.0.0"
    assert (
        run_cli(root, "--line", "exp", "log", env=env["env"])
        .stdout.rstrip()
        .endswith("lines --add exp --bare --release 1.0.0")
    )


def test_bad_bare_line_input_is_one_line(env):
    root = make_repo(env, ["clean"])
    assert_one_line_error(
        run_cli(root, "lines", "--add", "exp", "--release", "1.1.0", env=env["env"]),
        "--release pins a bare line only: add --bare, or copy the line and move it with `rebase --onto 1.1.0`",
    )
    assert_one_line_error(
        run_cli(root, "lines", "--add", "exp", "--bare", "--release", "7.7.7", env=env["env"]),
        "7.7.7 is not on the package index",
    )
    assert_one_line_error(run_cli(root, "lines", "--bare", env=env["env"]), "go with --add")
    # an index (a broken mirror) whose listing gives a sha256 that is not one: the pin it would write is named
    listing = env["index"].directory / "simple" / "sglang" / "index.html"
    listing.write_text(
        listing.read_text().replace(hashlib.sha256(env["index"].files["sglang-1.1.0.tar.gz"]).hexdigest(), "abc123")
    )
    assert_one_line_error(
        run_cli(root, "lines", "--add", "exp", "--bare", "--release", "1.1.0", env=env["env"]),
        "lines/exp/upstream.toml",
        "[upstream.artifacts.sdist] sha256: 'abc123' is not 64 hex digits",
    )
    assert not (root / "lines" / "exp").exists()


def test_a_conflict_on_a_line_names_its_work_tree_and_command_and_abort_restores(env):
    root = make_repo(env, ["clean", "conflict"])
    line = add_line(root, env)
    before = snapshot(root)
    result = run_cli(root, "--line", "next", "rebase", "--onto", "1.1.0", env=env["env"])
    assert result.returncode == 1, result.stderr
    work = line / "build" / "src"
    assert f"conflict in {RUNNER} (markers in {work})" in result.stdout
    assert "`python build.py --line next rebase --continue`" in result.stdout
    assert "<<<<<<<" in (work / RUNNER).read_text()
    # the production line knows nothing of it
    assert run_cli(root, "prepare", env=env["env"]).returncode == 0
    result = run_cli(root, "rebase", "--abort", "--line", "next", env=env["env"])
    assert result.returncode == 0, result.stderr
    assert snapshot(root) == before


def test_a_file_upstream_deleted_is_named_in_the_conflict(env):
    env["index"].publish("sglang-1.2.0.tar.gz", sdist_bytes("1.2.0", {k: v for k, v in V1.items() if k != OTHER}))
    root = make_repo(env, ["clean"])
    report = rebase.start(root, "1.2.0")
    assert report["stopped"]["patch"] == "0001-clean.patch"
    assert report["stopped"]["files"] == [OTHER]
    assert report["patches"][-1]["detail"] == f"three-way merge stopped in {OTHER} (deleted upstream)"
    assert [(f["path"], f["verdict"]) for f in report["patches"][-1]["file_verdicts"]] == [(OTHER, "deleted")]
    text = rebase.format_report(report)
    assert "markers" not in text and f"{OTHER} deleted upstream" in text
    # --continue without staging it leaves the file out: the patch had nothing else, so it is obsolete
    report = rebase.resume(root, "continue")
    assert verdicts(report) == {"clean": "obsolete"}
    assert not (root / "build" / "src" / OTHER).exists()


def test_a_file_upstream_deleted_comes_back_only_when_the_maintainer_stages_it(env):
    env["index"].publish("sglang-1.2.0.tar.gz", sdist_bytes("1.2.0", {k: v for k, v in V1.items() if k != OTHER}))
    root = make_repo(env, ["clean", "moved"])
    assert "stopped" in rebase.start(root, "1.2.0")
    git.Repo(root / "build" / "src").git.add(OTHER)  # the twin: the maintainer keeps the file
    report = rebase.resume(root, "continue")
    assert verdicts(report) == {"clean": "merged", "moved": "clean"}
    assert (root / "build" / "src" / OTHER).read_text() == "VALUE = 2\n"


def test_bad_line_names_are_one_line_errors(env):
    root = make_repo(env, ["clean"])
    assert_one_line_error(
        run_cli(root, "--line", "nope", "status", env=env["env"]), "unknown line 'nope'", "known lines: production"
    )
    assert_one_line_error(
        run_cli(root, "lines", "--add", "Bad Name", env=env["env"]),
        "cannot name a line: use lower-case letters, digits and '-', starting with a letter (not build, dist, patches, production",
    )
    assert_one_line_error(run_cli(root, "lines", "--add", "build", env=env["env"]), "cannot name a line")
    add_line(root, env)
    assert_one_line_error(
        run_cli(root, "lines", "--add", "next", env=env["env"]),
        "lines/next already exists: pick another name, or remove it (`git rm -r lines/next`)",
    )
    assert_one_line_error(
        run_cli(root, "lines", "--add", "other", "--from", "nope", env=env["env"]), "unknown line 'nope'"
    )
    assert not (root / "lines" / "other").exists()


def test_lines_add_killed_before_it_finishes_leaves_no_line(env):
    root = make_repo(env, ["clean"])
    killed = run_cli(root, "lines", "--add", "next", env={**env["env"], "SGLPATCH_CRASH_AT": "lines-add:copied"})
    assert killed.returncode == -9, killed.stderr
    listed = run_cli(root, "lines", "--json", env=env["env"])
    assert [line["line"] for line in json.loads(listed.stdout)["lines"]] == ["production"], listed.stdout
    # the copy is left hidden beside where the line goes (a rename there is atomic), named after it
    [leftover] = (root / "lines").iterdir()
    assert leftover.name.startswith(".next.") and leftover.name.endswith(".part")
    assert (leftover / "upstream.toml").is_file()
    add_line(root, env)  # the twin: not killed, the line is there and the leftover does not block it
    listed = run_cli(root, "lines", "--json", env=env["env"])
    assert [line["line"] for line in json.loads(listed.stdout)["lines"]] == ["production", "next"]


# ---------------------------------------------------------------- suspect merges

HELPER = "python/sglang/srt/helper.py"
MOVED_HELPER = "python/sglang/srt/utils/helper.py"
HELPER_V1 = (
    "class Helper:\n    def __init__(self):\n        self.ready = True\n\n    def old_name(self):\n"
    "        return 1\n" + "".join(f"    # pad {i}\n" for i in range(10)) + "\n    def keep(self):\n"
    "        return 2\n"
)
USES_OLD_NAME = HELPER_V1 + "\n    def use(self):\n        return self.old_name()\n"


def suspect_project(env, tmp_path) -> Path:
    """A line on 2.0.0 whose one patch calls Helper.old_name; 2.1.0 renames it, 2.2.0 keeps it."""
    files = {**V1, HELPER: HELPER_V1}
    sha = env["index"].publish("sglang-2.0.0.tar.gz", sdist_bytes("2.0.0", files))
    env["index"].publish(
        "sglang-2.1.0.tar.gz",
        sdist_bytes("2.1.0", {**files, HELPER: HELPER_V1.replace("def old_name", "def new_name")}),
    )
    env["index"].publish(
        "sglang-2.2.0.tar.gz", sdist_bytes("2.2.0", {**files, HELPER: HELPER_V1.replace("return 1", "return 11")})
    )
    upstream, base = make_upstream(tmp_path / "upstream-2", files)
    root = tmp_path / "suspect-project"
    (root / "patches").mkdir(parents=True)
    (root / "upstream.toml").write_text(pin_text("2.0.0", sha))
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## [Unreleased]\n")
    (root / "patches" / "0001-use.patch").write_text(
        patch_text(upstream, base, {HELPER: USES_OLD_NAME}, message("helper: use old_name", drop=NEVER))
    )
    (root / "patches" / "series").write_text("0001-use.patch\n")
    (root / ".gitignore").write_text("/build/\n")
    commit_project(root, OLD_COMMIT)
    return root


def test_a_clean_merge_that_calls_a_method_upstream_renamed_is_suspect(env, tmp_path):
    root = suspect_project(env, tmp_path)
    dry = run_cli(root, "rebase", "--onto", "2.1.0", "--dry-run", "--json", env=env["env"])
    assert dry.returncode == 1, "a suspect fails a scheduled dry run like a conflict"
    (patch,) = json.loads(dry.stdout)["patches"]
    assert patch["verdict"] == "suspect" and "old_name" in patch["detail"], patch
    (file,) = patch["file_verdicts"]
    assert file["verdict"] == "suspect" and [h["verdict"] for h in file["hunks"]] == ["suspect"]
    # the twin: where the method is still there, the same patch is merely clean
    twin = run_cli(root, "rebase", "--onto", "2.2.0", "--dry-run", "--json", env=env["env"])
    assert twin.returncode == 0 and json.loads(twin.stdout)["patches"][0]["verdict"] == "clean", twin.stdout
    # a real rebase stops on it; the maintainer's uncommitted fix is folded in by --continue
    result = run_cli(root, "rebase", "--onto", "2.1.0", env=env["env"])
    assert result.returncode == 1 and "it merged, but what it uses may be gone" in result.stdout, result.stdout
    helper = root / "build" / "src" / HELPER
    helper.write_text(helper.read_text().replace("self.old_name()", "self.new_name()"))
    result = run_cli(root, "rebase", "--continue", "--json", env=env["env"])
    assert result.returncode == 0, result.stdout + result.stderr
    (accepted,) = json.loads(result.stdout)["patches"]
    assert result.stdout.startswith('{\n  "'), "--json is indented for the maintainer who reads it"
    assert (accepted["detail"], accepted["files"]) == ("suspect merge accepted by the maintainer", [HELPER])
    assert "+        return self.new_name()" in (root / "patches" / "0001-use.patch").read_text()


METHODS = [f"m{i}" for i in range(1, 5)]
HELPER_MANY = (
    "class Helper:\n    def __init__(self):\n        self.ready = True\n\n"
    + "".join(f"    def {m}(self):\n        return {i}\n\n" for i, m in enumerate(METHODS))
    + "".join(f"    # pad {i}\n" for i in range(10))
)


@pytest.mark.parametrize("used, shown, more", [(1, 1, ""), (3, 3, ""), (4, 3, " (+1 more)")])
def test_a_suspect_verdict_names_at_most_three_findings_and_counts_the_rest(env, tmp_path, used, shown, more):
    """4.1.0 renames every method of Helper; the patch calls ``used`` of them."""
    files = {**V1, HELPER: HELPER_MANY}
    sha = env["index"].publish("sglang-4.0.0.tar.gz", sdist_bytes("4.0.0", files))
    renamed = HELPER_MANY
    for m in METHODS:
        renamed = renamed.replace(f"def {m}(self)", f"def new_{m}(self)")
    env["index"].publish("sglang-4.1.0.tar.gz", sdist_bytes("4.1.0", {**files, HELPER: renamed}))
    upstream, base = make_upstream(tmp_path / "upstream-4", files)
    calls = HELPER_MANY + "".join(f"\n    def use_{m}(self):\n        return self.{m}()\n" for m in METHODS[:used])
    root = tmp_path / "project-4"
    (root / "patches").mkdir(parents=True)
    (root / "upstream.toml").write_text(pin_text("4.0.0", sha))
    (root / "patches" / "0001-use.patch").write_text(
        patch_text(upstream, base, {HELPER: calls}, message("helper: use its methods", drop=NEVER))
    )
    (root / "patches" / "series").write_text("0001-use.patch\n")
    commit_project(root, OLD_COMMIT)
    (patch,) = rebase.start(root, "4.1.0", dry_run=True)["patches"]
    assert patch["verdict"] == "suspect"
    assert patch["detail"].startswith(f"merged, but {used} suspect: python/sglang/srt/helper.py:")
    assert patch["detail"].count("Helper has no method") == shown
    assert patch["detail"].endswith(f"4.0.0 has it at python/sglang/srt/helper.py:{5 + 3 * (shown - 1)}){more}")


def conflict_and_suspect_project(env, tmp_path) -> Path:
    """A line on 3.0.0 whose one patch rewrites RUNNER's line 10, calls Helper.old_name and sets
    OTHER's value. 3.1.0 rewrites line 10 (a conflict) and renames old_name; 3.2.0 rewrites line
    10 only; 3.3.0 is 3.1.0 with the helper moved to MOVED_HELPER."""
    files = {**V1, HELPER: HELPER_V1}
    line10 = V1[RUNNER].replace("line 10\n", "line 10 upstream\n")
    sha = env["index"].publish("sglang-3.0.0.tar.gz", sdist_bytes("3.0.0", files))
    env["index"].publish(
        "sglang-3.1.0.tar.gz",
        sdist_bytes("3.1.0", {**files, RUNNER: line10, HELPER: HELPER_V1.replace("def old_name", "def new_name")}),
    )
    env["index"].publish("sglang-3.2.0.tar.gz", sdist_bytes("3.2.0", {**files, RUNNER: line10}))
    env["index"].publish(
        "sglang-3.3.0.tar.gz",
        sdist_bytes(
            "3.3.0",
            {
                **{k: v for k, v in files.items() if k != HELPER},
                RUNNER: line10,
                MOVED_HELPER: HELPER_V1.replace("def old_name", "def new_name"),
            },
        ),
    )
    upstream, base = make_upstream(tmp_path / "upstream-3", files)
    root = tmp_path / "conflict-suspect-project"
    (root / "patches").mkdir(parents=True)
    (root / "upstream.toml").write_text(pin_text("3.0.0", sha))
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## [Unreleased]\n")
    (root / "patches" / "0001-both.patch").write_text(
        patch_text(
            upstream,
            base,
            {HELPER: USES_OLD_NAME, RUNNER: V1[RUNNER].replace("line 10\n", "line ten\n"), OTHER: "VALUE = 2\n"},
            message("runner and helper", drop=NEVER),
        )
    )
    (root / "patches" / "series").write_text("0001-both.patch\n")
    (root / ".gitignore").write_text("/build/\n")
    commit_project(root, OLD_COMMIT)
    return root


def _resolve_line_10(root: Path) -> None:
    runner = root / "build" / "src" / RUNNER
    text = runner.read_text()
    start, end = text.index("<<<<<<<"), text.index(">>>>>>>")
    runner.write_text(text[:start] + "line ten\n" + text[text.index("\n", end) + 1 :])


@pytest.mark.parametrize(
    "onto, suspect, helper", [("3.1.0", True, HELPER), ("3.2.0", False, HELPER), ("3.3.0", True, MOVED_HELPER)]
)
def test_a_resolved_conflict_is_checked_for_suspects_before_it_is_taken(env, tmp_path, onto, suspect, helper):
    """The files that merged around a conflict, and the resolution, are checked like any merge:
    on 3.1.0 the helper file merged cleanly but calls a method upstream renamed, so `--continue`
    stops again; on 3.2.0 (the twin) the method is still there and `--continue` finishes; on
    3.3.0 the helper also moved, and is checked where it now is. The file that merged cleanly
    beside them stays `clean`."""
    root = conflict_and_suspect_project(env, tmp_path)
    result = run_cli(root, "rebase", "--onto", onto, env=env["env"])
    assert result.returncode == 1 and "conflict" in result.stdout, result.stdout + result.stderr
    _resolve_line_10(root)
    result = run_cli(root, "rebase", "--continue", "--json", env=env["env"])
    data = json.loads(result.stdout)
    if not suspect:
        assert result.returncode == 0, result.stdout + result.stderr
        assert data["patches"][0]["detail"] == "conflict resolved by the maintainer"
        return
    assert result.returncode == 1 and data["stopped"]["kind"] == "suspect", result.stdout + result.stderr
    (patch,) = data["patches"]
    assert patch["verdict"] == "suspect" and patch["detail"].startswith("conflict resolved, but 1 suspect: ")
    assert "old_name" in patch["detail"], patch["detail"]
    by_path = {f["path"]: f["verdict"] for f in patch["file_verdicts"]}
    assert by_path == {helper: "suspect", RUNNER: "merged", OTHER: "clean"}, by_path
    hunks_by_path = {f["path"]: [h["verdict"] for h in f["hunks"]] for f in patch["file_verdicts"]}
    assert hunks_by_path == {helper: ["suspect"], RUNNER: ["merged"], OTHER: ["clean"]}, (
        "the resolved hunk is merged, not conflict"
    )
    # the maintainer fixes the call (uncommitted): the next --continue folds it in and goes on
    helper = root / "build" / "src" / helper
    helper.write_text(helper.read_text().replace("self.old_name()", "self.new_name()"))
    result = run_cli(root, "rebase", "--continue", "--json", env=env["env"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["patches"][0]["detail"] == "suspect merge accepted by the maintainer"
    text = (root / "patches" / "0001-both.patch").read_text()
    assert "+        return self.new_name()" in text and "+line ten" in text


def test_a_dry_run_verifies_the_pinned_release_against_the_pin(env):
    """A dry run starts from the pinned release: its cached artifact is checked against the pin's
    sha256 before anything is replayed. The twin: the artifact intact, the dry run reports."""
    root = make_repo(env, ["clean"])
    assert run_cli(root, "rebase", "--onto", "1.1.0", "--dry-run", env=env["env"]).returncode == 0
    artifact = Path(env["env"]["SGLPATCH_CACHE"]) / "artifacts" / "sglang-1.0.0.tar.gz"
    good = artifact.read_bytes()
    artifact.write_bytes(good + b"tampered")
    assert_one_line_error(
        run_cli(root, "rebase", "--onto", "1.1.0", "--dry-run", env=env["env"]),
        "checksum mismatch for sglang-1.0.0.tar.gz: upstream.toml says",
    )
    artifact.write_bytes(good)
    assert run_cli(root, "rebase", "--onto", "1.1.0", "--dry-run", env=env["env"]).returncode == 0


def test_a_moved_hunk_is_named_by_where_it_starts_in_the_old_file():
    """The detail names each hunk's start in the file the patch applies to (its `-` side); a hunk
    after one that adds lines starts elsewhere on its `+` side, which must not be shown."""

    def patch(first: int, second: int) -> str:
        return (
            f"diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -{first},2 +{first},3 @@\n a\n+added\n b\n"
            f"@@ -{second},1 +{second + 1},1 @@\n-c\n+d\n"
        )

    assert rebase._moved_hunks(patch(1, 20), patch(6, 25)) == "moved x.py:1->6, x.py:20->25"
    assert rebase._moved_hunks(patch(1, 20), patch(1, 20)) == ""


@pytest.mark.parametrize("added", [b"+VALUE = 2  # caf\xe9\n", b"+VALUE = 2  # caf\xc3\xa9\n"])
def test_a_patch_adding_bytes_that_are_not_utf8_is_rebased_with_them(env, added):
    """A diff may carry any bytes (a line of a Latin-1 file): the rebase replays it and writes the
    patch back byte for byte (it ended in a traceback when writing it). The twin: UTF-8 alike."""
    root = make_repo(env, ["clean", "moved"])
    patch = root / "patches" / "0001-clean.patch"
    patch.write_bytes(re.sub(rb"(?m)^\+VALUE = 2.*\n", added, patch.read_bytes()))
    commit_project(root, OLD_COMMIT)
    report = rebase.start(root, "1.1.0", commit=NEW_COMMIT)
    assert verdicts(report) == {"clean": "clean", "moved": "merged"}
    assert added in patch.read_bytes()
    assert (root / "build" / "src" / OTHER).read_bytes() == b"VALUE = 2  # " + added[len(b"+VALUE = 2  # ") :]


def test_a_rebase_holds_the_line_lock_and_names_itself_to_a_second_writer(env, monkeypatch):
    """While a rebase replays, another writer on the line is refused with one line naming the
    rebase; once it ended, the same command runs (the twin)."""
    root = make_repo(env, ["clean"])
    said = []
    boundary = rebase.boundary

    def second_writer(name: str) -> None:
        if name == "rebase:applied" and not said:
            said.append(run_cli(root, "pop", env=env["env"]))
        boundary(name)

    monkeypatch.setattr(rebase, "boundary", second_writer)
    rebase.start(root, "1.1.0", commit=NEW_COMMIT)
    assert_one_line_error(said[0], "another `rebase --onto 1.1.0` is running")
    assert run_cli(root, "pop", env=env["env"]).returncode == 0

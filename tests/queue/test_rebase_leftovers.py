"""What a rebase does with what an earlier one, or the maintainer, left behind.

Found by mutation testing of ``sglpatch/queue/rebase.py`` (the default run's sample, 2026-12-06): a
rebase that no longer cleared an earlier one's journal directory or reset its branch, a `--skip`
that kept a resolution the maintainer had already committed, and a CHANGELOG entry filed under
the wrong heading all passed every test. Each test here has its twin in the same test or beside
it. The ``env`` fixture (synthetic releases on 127.0.0.1) is test_rebase.py's.
"""

from __future__ import annotations

import json

import git
from helpers import run_cli
from test_rebase import OLD_COMMIT, RUNNER, V2, env, make_repo, verdicts  # noqa: F401  (env: a fixture)

from sglpatch.queue import rebase
from sglpatch.queue.patch_queue import BASE_REF
from sglpatch.queue.series import read_series_names


def test_a_rebase_starts_over_what_an_earlier_one_left_and_takes_none_of_it(env):
    """A journal directory holding a stale copy of a patch and a `sglpatch-rebase` branch on some
    other commit, as a rebase killed outside its transaction leaves them: the next rebase starts,
    replays the series from its own copies on the new release, and none of the stale content
    reaches the result. The twin: the same rebase without the leftovers ends the same."""
    results = {}
    for leftovers in (False, True):
        root = make_repo(env, ["clean", "moved"])
        assert run_cli(root, "prepare", env=env["env"]).returncode == 0
        if leftovers:
            stale = root / rebase.STATE_DIR / "patches"
            stale.mkdir(parents=True)
            (stale / "0001-clean.patch").write_text("not the patch\n")
            (stale / "0009-gone.patch").write_text("a patch of another series\n")
            work = git.Repo(root / "build" / "src")
            work.git.branch(rebase.REBASE_BRANCH, work.head.commit.hexsha)
        result = run_cli(root, "rebase", "--onto", "1.1.0", "--json", env=env["env"])
        assert result.returncode == 0, result.stderr
        assert verdicts(json.loads(result.stdout)) == {"clean": "clean", "moved": "merged"}
        assert not (root / rebase.STATE_DIR).exists()
        assert not git.Repo(root / "build" / "src").git.branch("--list", rebase.REBASE_BRANCH)
        results[leftovers] = {p.name: p.read_bytes() for p in (root / "patches").iterdir()}
        root.rename(root.with_name(f"project-{leftovers}"))
    assert results[True] == results[False]


def test_a_rebase_says_which_release_it_imports(env):
    """The import of the new release is the step that can take minutes: its progress line names
    the release, in a dry run and in the rebase itself (a line that said "None" passed), and not
    the release the series is on."""
    root = make_repo(env, ["clean"])
    for dry_run in (["--dry-run"], []):
        result = run_cli(root, "rebase", "--onto", "1.1.0", *dry_run, env=env["env"])
        assert result.returncode == 0, result.stderr
        assert "importing SGLang 1.1.0" in result.stderr.splitlines()
        assert "importing SGLang 1.0.0" not in result.stderr


def test_skip_drops_a_resolution_the_maintainer_already_committed(env):
    """The maintainer finished the stopped `git am` by hand, then decided to drop the patch:
    `--skip` must return the work tree to the commit before the patch, so the resolution is in
    neither the work tree nor the series, and the next patch is replayed on the new release as
    it is. The twin: `--continue` after the same hand commit keeps it."""
    for action, kept in (("--skip", False), ("--continue", True)):
        root = make_repo(env, ["conflict", "clean"])
        assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
        worked = root / "build" / "src" / RUNNER
        worked.write_text(V2[RUNNER].replace("line 10 upstream\n", "line ten upstream\n"))
        work = git.Repo(root / "build" / "src")
        work.git.add(RUNNER)
        work.git.am("--continue")
        result = run_cli(root, "rebase", action, "--json", env=env["env"])
        assert result.returncode == 0, result.stderr
        outcome = verdicts(json.loads(result.stdout))
        assert outcome == {"conflict": "merged" if kept else "skipped", "clean": "clean"}
        assert ("line ten upstream" in worked.read_text()) == kept
        assert read_series_names(root) == (["0001-conflict.patch"] if kept else []) + ["0002-clean.patch"]
        assert len(list(work.iter_commits(f"{BASE_REF}..HEAD"))) == (2 if kept else 1)
        root.rename(root.with_name(f"project{action}"))

"""A rebase's verdict per patch: clean, merged by git's three-way merge, obsolete when the
resolution takes upstream's side, dropped when its Drop-When: upstream>=X holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import git
from helpers import make_upstream, message, patch_text, run_cli, sdist_bytes
from test_rebase import KIMI, NEVER, OTHER, PATCHES, RUNNER, V1, V2, env, make_repo, verdicts  # noqa: F401  (env: a fixture)

from sglpatch.queue import rebase
from sglpatch.queue.series import read_series_names
from sglpatch.upstream.pin import read_pin


def with_kinds(monkeypatch, **kinds: tuple[str, str, str, str]) -> None:
    """Let test_rebase's ``make_repo`` build patches of this module's own kinds as well:
    kind=(path, old text, new text, Drop-When), the change made on release 1.0.0 (V1)."""
    for kind, spec in kinds.items():
        monkeypatch.setitem(PATCHES, kind, spec)


def ok(result):
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def by_kind(report: dict) -> dict[str, dict]:
    return {p["name"].split("-", 1)[1].removesuffix(".patch"): p for p in report["patches"]}


# ---------------------------------------------------------------- 1. clean is clean, three-way is merged

# Release 1.2.0 rewrites line 10 of the runner and nothing else: no line moves, so a patch whose
# context holds line 10 can only go in by git's three-way merge, at the very same lines.
V_CONTEXT = {**V1, RUNNER: V1[RUNNER].replace("line 10\n", "line 10 upstream\n")}
NEAR = (RUNNER, "line 12\n", "line twelve\n", NEVER)  # its context (lines 9 to 15) holds line 10


def test_an_unchanged_patch_is_clean_and_one_that_needs_the_three_way_merge_is_merged(env, monkeypatch):
    """Rebase verdicts, exactly: a patch whose file upstream did not touch applies as is and is
    `clean` (no detail); a patch whose context upstream changed goes in only by the three-way
    merge, at the same lines, and is `merged`, saying so; per file and per hunk alike."""
    env["index"].publish("sglang-1.2.0.tar.gz", sdist_bytes("1.2.0", V_CONTEXT))
    with_kinds(monkeypatch, near=NEAR)
    root = make_repo(env, ["clean", "near"])

    report = rebase.start(root, "1.2.0")
    assert "stopped" not in report, report
    patches = by_kind(report)
    clean, near = patches["clean"], patches["near"]
    assert (clean["verdict"], clean["detail"]) == ("clean", "")
    assert [(f["path"], f["verdict"], [h["verdict"] for h in f["hunks"]]) for f in clean["file_verdicts"]] == [
        (OTHER, "clean", ["clean"])
    ]
    assert (near["verdict"], near["detail"]) == ("merged", "three-way merge; same hunks")
    assert [(f["path"], f["verdict"], [h["verdict"] for h in f["hunks"]]) for f in near["file_verdicts"]] == [
        (RUNNER, "merged", ["merged"])
    ]
    # what was written back: the merge carried upstream's line into the patch's context
    assert read_series_names(root) == ["0001-clean.patch", "0002-near.patch"]
    rebased = (root / "patches" / "0002-near.patch").read_text()
    assert " line 10 upstream\n line 11\n-line 12\n+line twelve\n" in rebased
    assert "@@ -9,7 +9,7 @@" in rebased, "same lines as on 1.0.0"
    assert "Rebased onto SGLang 1.2.0: kept 0001-clean.patch, 0002-near.patch" in (root / "CHANGELOG.md").read_text()


def test_a_dry_run_gives_the_same_clean_and_merged_verdicts(env, monkeypatch):
    """The twin through the other replay path (the dry run's scratch repository): the same two
    patches get the same two verdicts, and nothing is written."""
    env["index"].publish("sglang-1.2.0.tar.gz", sdist_bytes("1.2.0", V_CONTEXT))
    with_kinds(monkeypatch, near=NEAR)
    root = make_repo(env, ["clean", "near"])
    result = ok(run_cli(root, "rebase", "--onto", "1.2.0", "--dry-run", "--json", env=env["env"]))
    patches = by_kind(json.loads(result.stdout))
    assert {k: (p["verdict"], p["detail"]) for k, p in patches.items()} == {
        "clean": ("clean", ""),
        "near": ("merged", "three-way merge; same hunks"),
    }
    assert not (root / "build").exists()


# ---------------------------------------------------------------- 2. taking upstream's side is obsolete

NOTE = (KIMI, "    # note 5\n", "    # note five\n", NEVER)  # a file upstream changed elsewhere: clean


def on_new_release(release_1_1: tuple[git.Repo, str], kind: str) -> str:
    """What `git format-patch` gives for patch ``kind``'s change made on release 1.1.0 (V2), with
    the same message, author and date: what the rebase may legitimately write for a kept patch."""
    path, old, new, drop = PATCHES[kind]
    assert V2[path].count(old) == 1
    return patch_text(*release_1_1, {path: V2[path].replace(old, new)}, message(f"{kind}: change", drop=drop))


def changed_lines(before: str, after: str) -> set[str]:
    """The kinds of line (their first word) in which two patch texts differ, line by line."""
    a, b = before.splitlines(), after.splitlines()
    assert len(a) == len(b), "a kept patch keeps its shape"
    return {x.split(" ", 1)[0] for x, y in zip(a, b) if x != y}


def test_resolving_a_conflict_to_upstreams_version_is_obsolete_and_every_other_patch_is_its_own(
    env, monkeypatch, tmp_path
):
    """A conflict the maintainer resolves by taking upstream's version ends `obsolete` (not
    `merged`): its file is deleted, it leaves the series (comments kept), the changelog says it
    was upstreamed, and every other patch file is exactly its own change as `git format-patch`
    writes it on the new release: byte-identical where upstream left its file alone, otherwise
    differing from before only in the `index` and `@@` lines (blob ids, line numbers)."""
    with_kinds(monkeypatch, note=NOTE)
    root = make_repo(env, ["clean", "conflict", "moved", "note"])
    before = {p.name: p.read_text() for p in (root / "patches").glob("*.patch")}
    result = run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"])
    assert result.returncode == 1 and "stopped at 0002-conflict.patch" in result.stdout, result.stdout + result.stderr
    (root / "build" / "src" / RUNNER).write_text(V2[RUNNER])  # the maintainer takes upstream's side

    report = json.loads(ok(run_cli(root, "rebase", "--continue", "--json", env=env["env"])).stdout)
    assert verdicts(report) == {"clean": "clean", "conflict": "obsolete", "moved": "merged", "note": "clean"}
    assert by_kind(report)["conflict"]["detail"] == "the resolution left no change"
    kept = ["0001-clean.patch", "0003-moved.patch", "0004-note.patch"]
    assert (root / "patches" / "series").read_text() == "# synthetic series\n" + "".join(f"{n}\n" for n in kept)
    assert sorted(p.name for p in (root / "patches").glob("*.patch")) == kept
    assert "dropped 0002-conflict.patch (upstreamed in 1.1.0)" in (root / "CHANGELOG.md").read_text()

    after = {name: (root / "patches" / name).read_text() for name in kept}
    assert after["0001-clean.patch"] == before["0001-clean.patch"], "upstream left its file alone"
    release_1_1 = make_upstream(tmp_path / "upstream-1.1.0", V2)
    for name in kept:
        kind = name.split("-", 1)[1].removesuffix(".patch")
        assert after[name] == on_new_release(release_1_1, kind), f"{name} holds its own change on 1.1.0"
        assert changed_lines(before[name], after[name]) <= {"index", "@@"}, name
    assert changed_lines(before["0003-moved.patch"], after["0003-moved.patch"]) == {"index", "@@"}
    assert changed_lines(before["0004-note.patch"], after["0004-note.patch"]) == {"index"}
    # and the series that was written builds on the new release, each commit its own patch
    ok(run_cli(root, "prepare", env=env["env"]))
    work = git.Repo(root / "build" / "src")
    assert [c.summary for c in work.iter_commits("refs/sglpatch/base..HEAD")][::-1] == [
        "clean: change",
        "moved: change",
        "note: change",
    ]


# ---------------------------------------------------------------- 3. Drop-When: upstream>=X


def drop_project(env, monkeypatch) -> Path:
    """1.0.0 with two patches: one dropped from 1.2.0 on, one from 1.10 on (after 1.2, as PEP
    440 orders them, though not as text). 1.2.0 changes nothing they touch."""
    env["index"].publish(
        "sglang-1.2.0.tar.gz",
        sdist_bytes("1.2.0", {**V2, "python/pyproject.toml": "[project]\nname = 'sglang'\nversion = '1.2.0'\n"}),
    )
    with_kinds(
        monkeypatch,
        until12=(OTHER, "VALUE = 1\n", "VALUE = 2\n", "upstream>=1.2.0"),
        until110=(RUNNER, "line 30\n", "line thirty\n", "upstream>=1.10"),
    )
    return make_repo(env, ["until12", "until110"])


def test_drop_when_upstream_keeps_the_patch_one_release_before_and_drops_it_on_the_release(env, monkeypatch):
    """`Drop-When: upstream>=1.2.0`: a rebase onto 1.1.0 (one release before) keeps the patch as
    it is; the next rebase, onto 1.2.0, drops it as obsolete, naming the condition, although it
    still applies cleanly. `upstream>=1.10` still keeps its patch on 1.2.0 (PEP 440: 1.2 < 1.10)."""
    root = drop_project(env, monkeypatch)
    report = json.loads(ok(run_cli(root, "rebase", "--onto", "1.1.0", "--json", env=env["env"])).stdout)
    assert verdicts(report) == {"until12": "clean", "until110": "merged"}
    assert read_series_names(root) == ["0001-until12.patch", "0002-until110.patch"]
    git.Repo(root).git.add("--all")
    git.Repo(root).git.commit("-qm", "rebased onto 1.1.0")

    report = json.loads(ok(run_cli(root, "rebase", "--onto", "1.2.0", "--json", env=env["env"])).stdout)
    assert verdicts(report) == {"until12": "obsolete", "until110": "clean"}
    assert by_kind(report)["until12"]["detail"] == "Drop-When upstream>=1.2.0 holds for 1.2.0"
    assert read_series_names(root) == ["0002-until110.patch"]
    assert not (root / "patches" / "0001-until12.patch").exists()
    assert read_pin(root).version == "1.2.0"
    assert "dropped 0001-until12.patch (upstreamed in 1.2.0)" in (root / "CHANGELOG.md").read_text()


def test_drop_when_upstream_holds_for_the_release_and_any_later_one_even_skipping_one(env, monkeypatch):
    """The twin from the other side: straight from 1.0.0 onto 1.2.0 (a release past 1.1.0) the
    condition holds too; a dry run says so as the rebase does."""
    root = drop_project(env, monkeypatch)
    dry = json.loads(ok(run_cli(root, "rebase", "--onto", "1.2.0", "--dry-run", "--json", env=env["env"])).stdout)
    assert verdicts(dry) == {"until12": "obsolete", "until110": "merged"}
    dry = json.loads(ok(run_cli(root, "rebase", "--onto", "1.1.0", "--dry-run", "--json", env=env["env"])).stdout)
    assert verdicts(dry) == {"until12": "clean", "until110": "merged"}

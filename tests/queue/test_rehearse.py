"""`rehearse` (``sglpatch.queue.rehearse`` and its command, ``sglpatch.cli.rehearse``): a dry run
of every line onto every newer release, cached, and the scheduled job that runs it."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import REPO_ROOT, run_cli, sdist_bytes
from test_rebase import OTHER, V2, add_line, env, make_repo, snapshot, verdicts  # noqa: F401  (env is a fixture)

from sglpatch.queue.line import line_dir


def test_rehearse_dry_runs_every_line_onto_every_newer_release(env):
    env["index"].publish("sglang-1.2.0.tar.gz", sdist_bytes("1.2.0", {**V2, OTHER: "VALUE = 2\n"}))
    root = make_repo(env, ["clean", "conflict", "textual"])
    add_line(root, env)
    assert run_cli(root, "--line", "next", "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    assert run_cli(root, "--line", "next", "rebase", "--skip", env=env["env"]).returncode == 0
    before = snapshot(root)
    result = run_cli(root, "rehearse", "--json", env=env["env"])
    assert result.returncode == 1, "a conflict in any release: a scheduled job fails on it"
    lines = {r["line"]: r for r in json.loads(result.stdout)["lines"]}
    production = lines["production"]
    assert production["from"] == "1.0.0" and [r["onto"] for r in production["releases"]] == ["1.1.0", "1.2.0"]
    assert [verdicts(r) for r in production["releases"]] == [
        {"clean": "clean", "conflict": "conflict", "textual": "obsolete"},
        {"clean": "obsolete", "conflict": "conflict", "textual": "obsolete"},
    ]
    assert lines["next"]["from"] == "1.1.0" and [r["onto"] for r in lines["next"]["releases"]] == ["1.2.0"]
    assert snapshot(root) == before, "a rehearsal changes nothing"
    result = run_cli(root, "--line", "next", "rehearse", "1.0.0", "1.2.0", env=env["env"])
    assert result.returncode == 0, "the twin: nothing needs a maintainer, exit 0"
    text = result.stdout
    assert "next: dry run onto SGLang 1.2.0: cached" in result.stderr, "the same dry run again: from the cache"
    # 1.0.0 is older than the line's pin: left out
    assert text == (
        "next line: SGLang 1.1.0 -> each newer release (dry runs)\n"
        "patch             1.2.0\n"
        "0001-clean.patch  obsolete\n"
    )
    # the twin: a changed patch is a new series, so its dry run runs again
    patch = line_dir(root, "next") / "patches" / "0001-clean.patch"
    patch.write_text(patch.read_text().replace("Why this change exists.", "Why it exists."))
    result = run_cli(root, "--line", "next", "rehearse", "1.2.0", env=env["env"])
    assert "1.2.0: cached" not in result.stderr and "next: dry run onto SGLang 1.2.0: " in result.stderr


def test_the_scheduled_rehearsal_runs_the_rehearse_command():
    import yaml

    data = yaml.safe_load((REPO_ROOT / ".github" / "workflows" / "rehearse.yml").read_text())
    assert "schedule" in data[True] and "workflow_dispatch" in data[True]  # YAML 1.1: on -> True
    steps = " ".join(str(s.get("run", "")) for s in data["jobs"]["rehearse"]["steps"])
    assert "pip install -r requirements.txt" in steps
    assert "python build.py rehearse --json > rehearsal.json" in steps


def test_a_cached_rehearsal_edited_on_disk_is_not_trusted(env):
    root = make_repo(env, ["clean", "conflict"])
    first = run_cli(root, "rehearse", "--json", env=env["env"])
    assert first.returncode == 1  # 0002 conflicts with 1.1.0
    entries = list((Path(env["env"]["SGLPATCH_CACHE"]) / "rehearsals").glob("*.json"))
    assert len(entries) == 1
    entry = json.loads(entries[0].read_text())
    for patch in entry["body"]["run"]["patches"]:
        patch["verdict"] = "clean"  # a cache that now says all is well
    entries[0].write_text(json.dumps(entry))
    again = run_cli(root, "rehearse", "--json", env=env["env"])
    assert "does not match its sha256" in again.stderr and ": cached" not in again.stderr
    assert again.returncode == 1 and found(again) == found(first)  # dry-run again: the conflict stands
    third = run_cli(root, "rehearse", "--json", env=env["env"])  # the twin: the rewritten entry is reused
    assert ": cached" in third.stderr and found(third) == found(first)


def found(result) -> list:
    return [[verdicts(r) for r in line["releases"]] for line in json.loads(result.stdout)["lines"]]

"""Tests that fail when the code is wrong (issue 20).

Mutation testing by hand found wrong behaviours that the whole fast suite let through. Each test
here pins one of them, on real temporary git repositories and synthetic releases served from
127.0.0.1 (the ``env`` fixture of test_rebase.py), and most have a twin for the opposite case, so
that neither "always" nor "never" passes:

- rebase verdicts: a patch that applies unchanged is ``clean``, one that needs git's three-way
  merge is ``merged``;
- a conflict resolved by taking upstream's version is ``obsolete``: the patch leaves the series
  and every other patch file is exactly its own patch on the new release;
- ``Drop-When: upstream>=X`` drops the patch on the release X and not one release before;
- ``lines --add NAME --from OTHER`` copies OTHER's pin and series, not production's;
- the overlay wheel's RECORD hashes and sizes are those of the bytes in the wheel, the patched
  files included.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import git
import pytest

from helpers import make_upstream, message, patch_text, run_cli, sdist_bytes
from sglpatch import rebase, wheel
from sglpatch.errors import UserError
from sglpatch.pin import read_pin
from sglpatch.series import read_series_names
from test_rebase import (KIMI, NEVER, OTHER, PATCHES, RUNNER, V1, V2, add_line, env,  # noqa: F401  (env: a fixture)
                         make_repo, verdicts)


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
        (OTHER, "clean", ["clean"])]
    assert (near["verdict"], near["detail"]) == ("merged", "three-way merge; same hunks")
    assert [(f["path"], f["verdict"], [h["verdict"] for h in f["hunks"]]) for f in near["file_verdicts"]] == [
        (RUNNER, "merged", ["merged"])]
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
        "clean": ("clean", ""), "near": ("merged", "three-way merge; same hunks")}
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
        env, monkeypatch, tmp_path):
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
        "clean: change", "moved: change", "note: change"]


# ---------------------------------------------------------------- 3. Drop-When: upstream>=X

def drop_project(env, monkeypatch) -> Path:
    """1.0.0 with two patches: one dropped from 1.2.0 on, one from 1.10 on (after 1.2, as PEP
    440 orders them, though not as text). 1.2.0 changes nothing they touch."""
    env["index"].publish("sglang-1.2.0.tar.gz", sdist_bytes(
        "1.2.0", {**V2, "python/pyproject.toml": "[project]\nname = 'sglang'\nversion = '1.2.0'\n"}))
    with_kinds(monkeypatch,
               until12=(OTHER, "VALUE = 1\n", "VALUE = 2\n", "upstream>=1.2.0"),
               until110=(RUNNER, "line 30\n", "line thirty\n", "upstream>=1.10"))
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


# ---------------------------------------------------------------- 4. lines --add --from

def line_files(line: Path) -> dict[str, bytes]:
    return {str(p.relative_to(line)): p.read_bytes() for p in [line / "upstream.toml", *(line / "patches").iterdir()]}


def production_and_next(env) -> tuple[Path, Path]:
    """Production on 1.0.0 with three patches; line `next` rebased onto 1.1.0, where it kept two
    (one of them rewritten): a pin and a series that differ from production's."""
    root = make_repo(env, ["clean", "moved", "textual"])
    nxt = add_line(root, env, "next")
    ok(run_cli(root, "--line", "next", "rebase", "--onto", "1.1.0", env=env["env"]))
    git.Repo(root).git.add("--all")
    git.Repo(root).git.commit("-qm", "the next line on 1.1.0")
    assert read_pin(root).version == "1.0.0" and read_pin(nxt).version == "1.1.0"
    assert read_series_names(root) != read_series_names(nxt)
    return root, nxt


def test_lines_add_from_another_line_copies_that_lines_pin_and_series(env):
    """`lines --add copy --from next` starts `copy` with next's pin (release 1.1.0, its
    artifacts, series release 1) and next's series, patch files byte for byte: not production's."""
    root, nxt = production_and_next(env)
    ok(run_cli(root, "lines", "--add", "copy", "--from", "next", env=env["env"]))
    copy = root / "lines" / "copy"
    assert line_files(copy) == line_files(nxt)
    assert read_pin(copy).version == "1.1.0" and read_pin(copy).series_release == 1
    assert read_series_names(copy) == ["0001-clean.patch", "0002-moved.patch"]
    listing = json.loads(ok(run_cli(root, "lines", "--json", env=env["env"])).stdout)["lines"]
    assert {r["line"]: r["upstream"] for r in listing} == {"production": "1.0.0", "next": "1.1.0", "copy": "1.1.0"}


def test_lines_add_without_from_copies_production(env):
    """The twin: without --from the new line is production's pin and series, byte for byte,
    whatever other lines exist."""
    root, nxt = production_and_next(env)
    ok(run_cli(root, "lines", "--add", "plain", env=env["env"]))
    plain = root / "lines" / "plain"
    assert line_files(plain) == line_files(root) != line_files(nxt)
    assert read_pin(plain).version == "1.0.0"
    assert read_series_names(plain) == ["0001-clean.patch", "0002-moved.patch", "0003-textual.patch"]


# ---------------------------------------------------------------- 5. the overlay wheel's RECORD

UPSTREAM_WHEEL = {
    "sglang/__init__.py": b"__version__ = '1.0.0'\n",
    "sglang/srt/models/kimi_k25.py": b"class KimiK25:\n    pass\n",
    "sglang/srt/untouched.py": b"VALUE = 1\n",
    "sglang/srt/gone.py": b"OLD = True\n",
    "sglang-1.0.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: sglang\nVersion: 1.0.0\n",
    "sglang-1.0.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
PATCHED = {  # the series' result, as upstream repository paths (None: the series deleted it)
    "python/sglang/srt/models/kimi_k25.py": b"class KimiK25:\n    def set_eagle3_layers_to_capture(self, ids):\n"
                                            b"        return self.language_model.set_eagle3_layers_to_capture(ids)\n",
    "python/sglang/srt/added.py": b"ADDED = 'by the series'\n",
    "python/sglang/srt/gone.py": None,
}


def record_of(members: dict[str, bytes]) -> bytes:
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    for name, data in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([name, f"sha256={digest}", len(data)])
    return rows.getvalue().encode()


def write_wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as whl:
        for name, data in members.items():
            whl.writestr(name, data)
    return path


def record_mismatches(path: Path) -> list[str]:
    """Every way the wheel's RECORD disagrees with its members (PEP 376/427, recomputed here:
    pip 23 installs a wheel with wrong RECORD hashes without a word), as "member: what"."""
    with zipfile.ZipFile(path) as whl:
        names = whl.namelist()
        (record,) = [n for n in names if n.endswith(".dist-info/RECORD")]
        rows = list(csv.reader(io.StringIO(whl.read(record).decode())))
        found = []
        listed = {row[0] for row in rows}
        found += [f"{n}: not in RECORD" for n in names if n not in listed]
        found += [f"{n}: in RECORD, not in the wheel" for n in listed if n not in names]
        for name, digest, size in rows:
            if name == record:
                found += [f"{name}: lists a hash for itself"] if digest or size else []
                continue
            if name not in names:
                continue
            data = whl.read(name)
            algorithm, _, value = digest.partition("=")
            if algorithm != "sha256" or value != base64.urlsafe_b64encode(
                    hashlib.sha256(data).digest()).rstrip(b"=").decode():
                found.append(f"{name}: hash {digest} is not the member's")
            if size != str(len(data)):
                found.append(f"{name}: size {size} is not the member's {len(data)}")
        return found


def overlay(tmp_path: Path) -> wheel.OverlayWheel:
    members = dict(UPSTREAM_WHEEL)
    members["sglang-1.0.0.dist-info/RECORD"] = record_of(members) + b"sglang-1.0.0.dist-info/RECORD,,\n"
    upstream = write_wheel(tmp_path / "sglang-1.0.0-py3-none-any.whl", members)
    assert record_mismatches(upstream) == [], "the premise: upstream's wheel is consistent"
    tree = tmp_path / "patched"
    for rel, data in PATCHED.items():
        if data is not None:
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            (tree / rel).write_bytes(data)
    changed = [*PATCHED, "python/pyproject.toml", "test/unrelated.py"]  # the last two: not in the wheel
    return wheel.build_overlay(upstream, tree, changed, "1.0.0+kimi.3", tmp_path / "dist",
                               {"upstream": {"version": "1.0.0"}, "patches": ["0001-kimi.patch"]})


def test_the_overlay_wheels_record_matches_every_member_byte_for_byte(tmp_path):
    """The RECORD of the overlay wheel lists every member but itself with the sha256 and size of
    the bytes in the wheel: the replaced and added files (the series' bytes, not upstream's), the
    dist-info that changed (METADATA's version, sglpatch.json) and every untouched file."""
    built = overlay(tmp_path)
    assert (built.replaced, built.added, built.removed) == (
        ("sglang/srt/models/kimi_k25.py",), ("sglang/srt/added.py",), ("sglang/srt/gone.py",))
    assert record_mismatches(built.path) == []
    info = "sglang-1.0.0+kimi.3.dist-info"
    with zipfile.ZipFile(built.path) as whl:
        rows = {r[0]: r[1:] for r in csv.reader(io.StringIO(whl.read(f"{info}/RECORD").decode()))}
        assert sorted(rows) == sorted(whl.namelist())
        assert "sglang/srt/gone.py" not in rows and rows[f"{info}/RECORD"] == ["", ""]
        for member, data in [("sglang/srt/models/kimi_k25.py", PATCHED["python/sglang/srt/models/kimi_k25.py"]),
                             ("sglang/srt/added.py", PATCHED["python/sglang/srt/added.py"]),
                             ("sglang/srt/untouched.py", UPSTREAM_WHEEL["sglang/srt/untouched.py"])]:
            assert whl.read(member) == data
            assert rows[member] == record_of({member: data}).decode().strip().split(",")[1:], member
        assert b"Version: 1.0.0+kimi.3\n" in whl.read(f"{info}/METADATA")



def test_a_wheels_data_directory_moves_to_the_new_version_and_pip_installs_its_script(tmp_path):
    """A wheel's scripts live under ``{name}-{version}.data/scripts/``; installers look for the
    directory of the wheel's own version, so the overlay renames it as it renames the dist-info.
    The twin: a top-level directory that only looks alike stays where it is."""
    members = dict(UPSTREAM_WHEEL)
    members["sglang-1.0.0.data/scripts/sglang-tool"] = b"#!python\nprint('tool')\n"
    members["sglang-1.0.0.database/x.py"] = b"X = 1\n"
    members["sglang-1.0.0.dist-info/RECORD"] = record_of(members) + b"sglang-1.0.0.dist-info/RECORD,,\n"
    upstream = write_wheel(tmp_path / "sglang-1.0.0-py3-none-any.whl", members)
    built = wheel.build_overlay(upstream, tmp_path / "patched", [], "1.0.0+kimi.3", tmp_path / "dist", {})
    with zipfile.ZipFile(built.path) as whl:
        names = whl.namelist()
    assert "sglang-1.0.0+kimi.3.data/scripts/sglang-tool" in names and "sglang-1.0.0.database/x.py" in names
    assert not [n for n in names if n.startswith(("sglang-1.0.0.data/", "sglang-1.0.0.dist-info/"))]
    assert record_mismatches(built.path) == []
    prefix = tmp_path / "prefix"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                                "--no-compile", "--disable-pip-version-check", "--prefix", str(prefix),
                                str(built.path)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr
    assert (prefix / "bin" / "sglang-tool").read_text().endswith("print('tool')\n")


def test_a_refused_upstream_wheel_leaves_no_half_written_wheel(tmp_path):
    """A METADATA without a Version is refused with one line; nothing is left in dist/, not even
    the partial file. The twin: the same wheel with its Version builds."""
    members = dict(UPSTREAM_WHEEL)
    members["sglang-1.0.0.dist-info/METADATA"] = b"Metadata-Version: 2.1\nName: sglang\n"
    upstream = write_wheel(tmp_path / "sglang-1.0.0-py3-none-any.whl", members)
    with pytest.raises(UserError, match="METADATA has no Version"):
        wheel.build_overlay(upstream, tmp_path / "patched", [], "1.0.0+kimi.3", tmp_path / "dist", {})
    assert list((tmp_path / "dist").iterdir()) == []
    members["sglang-1.0.0.dist-info/METADATA"] = UPSTREAM_WHEEL["sglang-1.0.0.dist-info/METADATA"]
    upstream = write_wheel(tmp_path / "sglang-1.0.0-py3-none-any.whl", members)
    built = wheel.build_overlay(upstream, tmp_path / "patched", [], "1.0.0+kimi.3", tmp_path / "dist", {})
    assert list((tmp_path / "dist").iterdir()) == [built.path]


def test_the_overlay_keeps_upstreams_member_attributes_and_times_and_writes_its_own_as_plain_files(tmp_path):
    """What an installer reads beside the bytes: an executable script stays executable, every
    member keeps upstream's time (rebuilds are byte-identical), and the files the overlay adds
    (a new module, sglpatch.json, RECORD) are regular, non-executable 0644 files stamped with
    upstream's newest time. RECORD's lines end in LF, the provenance is sorted, indented JSON.
    A METADATA whose description holds a "Version:" line keeps it; only the header changes.
    RECORD need not be upstream's last member."""
    when, script = (2024, 5, 6, 7, 8, 10), "sglang/srt/tool.sh"
    members = dict(UPSTREAM_WHEEL)
    members["sglang-1.0.0.dist-info/METADATA"] += b"\nVersion: 0.0.1 is what the old README said\n"
    members["sglang-1.0.0.dist-info/RECORD"] = record_of(members) + b"sglang-1.0.0.dist-info/RECORD,,\n"
    members[script] = b"#!/bin/sh\n"  # after RECORD
    upstream = tmp_path / "sglang-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(upstream, "w") as whl:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, when if name == script else (2024, 1, 2, 3, 4, 6))
            info.external_attr = (0o100755 if name == script else 0o100644) << 16
            whl.writestr(info, data)
    provenance = {"upstream": {"version": "1.0.0"}, "patches": ["0001-kimi.patch"], "a": 1}
    built = wheel.build_overlay(upstream, tmp_path / "patched" / "x", [], "1.0.0+kimi.3",
                                tmp_path / "new" / "dist", provenance)  # dist/ and its parent made
    info_dir = "sglang-1.0.0+kimi.3.dist-info"
    with zipfile.ZipFile(built.path) as whl:
        got = {i.filename: i for i in whl.infolist()}
        assert got[script].external_attr >> 16 == 0o100755 and got[script].date_time == when
        assert got["sglang/srt/untouched.py"].date_time == (2024, 1, 2, 3, 4, 6)
        for own in (f"{info_dir}/sglpatch.json", f"{info_dir}/RECORD"):
            assert got[own].external_attr >> 16 == 0o100644 and got[own].date_time == when, own
        assert b"\r" not in whl.read(f"{info_dir}/RECORD")
        assert whl.read(f"{info_dir}/sglpatch.json") == (json.dumps(provenance, indent=2, sort_keys=True) + "\n").encode()
        metadata = whl.read(f"{info_dir}/METADATA").decode()
    assert metadata.startswith("Metadata-Version: 2.1\nName: sglang\nVersion: 1.0.0+kimi.3\n")
    assert metadata.endswith("\nVersion: 0.0.1 is what the old README said\n")
    assert record_mismatches(built.path) == []
    # an added module gets the plain-file attributes too
    tree = tmp_path / "patched"
    (tree / "python" / "sglang").mkdir(parents=True)
    (tree / "python" / "sglang" / "new.py").write_text("NEW = 1\n")
    again = wheel.build_overlay(upstream, tree, ["python/sglang/new.py"], "1.0.0+kimi.4", tmp_path / "dist", {})
    with zipfile.ZipFile(again.path) as whl:
        assert whl.getinfo("sglang/new.py").external_attr >> 16 == 0o100644


def test_bad_versions_and_a_damaged_upstream_wheel_are_refused_without_a_partial_file(tmp_path):
    members = dict(UPSTREAM_WHEEL)
    members["sglang-1.0.0.dist-info/RECORD"] = record_of(members)
    upstream = write_wheel(tmp_path / "sglang-1.0.0-py3-none-any.whl", members)
    with pytest.raises(UserError) as other:
        wheel.build_overlay(upstream, tmp_path, [], "1.0.1+kimi.1", tmp_path / "dist", {})
    assert other.value.what == "local version 1.0.1+kimi.1 does not extend the wheel's 1.0.0"
    assert other.value.hint == "the pin and the upstream wheel disagree; rerun `python build.py`"
    (tmp_path / "damaged").mkdir()
    damaged = tmp_path / "damaged" / upstream.name
    damaged.write_bytes(b"not a zip")
    with pytest.raises(zipfile.BadZipFile):  # the sha256 check refuses it before a build gets here
        wheel.build_overlay(damaged, tmp_path, [], "1.0.0+kimi.1", tmp_path / "dist", {})
    assert not (tmp_path / "dist").exists() or list((tmp_path / "dist").iterdir()) == []

def test_a_record_with_upstreams_hash_for_a_patched_file_is_caught(tmp_path):
    """The twin: the same overlay with the RECORD row of the patched file put back to upstream's
    hash and size (the bug) is reported for that file, hash and size, and nothing else."""
    built = overlay(tmp_path)
    info = "sglang-1.0.0+kimi.3.dist-info"
    member = "sglang/srt/models/kimi_k25.py"
    with zipfile.ZipFile(built.path) as whl:
        members = {n: whl.read(n) for n in whl.namelist()}
    stale = record_of({member: UPSTREAM_WHEEL[member]}).decode().strip()
    rows = members[f"{info}/RECORD"].decode().splitlines(keepends=True)
    members[f"{info}/RECORD"] = "".join(stale + "\n" if r.startswith(member + ",") else r for r in rows).encode()
    (tmp_path / "stale").mkdir()
    found = record_mismatches(write_wheel(tmp_path / "stale" / built.path.name, members))
    assert [f.split(":")[0] for f in found] == [member, member], found
    assert "hash" in found[0] and f"size {len(UPSTREAM_WHEEL[member])} " in found[1]

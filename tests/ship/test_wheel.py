"""The overlay wheel: its RECORD matches every member byte for byte, upstream's member attributes
and data directory are kept, and a refused upstream wheel leaves no half-written file.
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

import pytest

from sglpatch.errors import UserError
from sglpatch.ship import wheel

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
            if (
                algorithm != "sha256"
                or value != base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            ):
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
    return wheel.build_overlay(
        upstream,
        tree,
        changed,
        "1.0.0+kimi.3",
        tmp_path / "dist",
        {"upstream": {"version": "1.0.0"}, "patches": ["0001-kimi.patch"]},
    )


def test_the_overlay_wheels_record_matches_every_member_byte_for_byte(tmp_path):
    """The RECORD of the overlay wheel lists every member but itself with the sha256 and size of
    the bytes in the wheel: the replaced and added files (the series' bytes, not upstream's), the
    dist-info that changed (METADATA's version, sglpatch.json) and every untouched file."""
    built = overlay(tmp_path)
    assert (built.replaced, built.added, built.removed) == (
        ("sglang/srt/models/kimi_k25.py",),
        ("sglang/srt/added.py",),
        ("sglang/srt/gone.py",),
    )
    assert record_mismatches(built.path) == []
    info = "sglang-1.0.0+kimi.3.dist-info"
    with zipfile.ZipFile(built.path) as whl:
        rows = {r[0]: r[1:] for r in csv.reader(io.StringIO(whl.read(f"{info}/RECORD").decode()))}
        assert sorted(rows) == sorted(whl.namelist())
        assert "sglang/srt/gone.py" not in rows and rows[f"{info}/RECORD"] == ["", ""]
        for member, data in [
            ("sglang/srt/models/kimi_k25.py", PATCHED["python/sglang/srt/models/kimi_k25.py"]),
            ("sglang/srt/added.py", PATCHED["python/sglang/srt/added.py"]),
            ("sglang/srt/untouched.py", UPSTREAM_WHEEL["sglang/srt/untouched.py"]),
        ]:
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
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-compile",
            "--disable-pip-version-check",
            "--prefix",
            str(prefix),
            str(built.path),
        ],
        capture_output=True,
        text=True,
    )
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
    built = wheel.build_overlay(
        upstream, tmp_path / "patched" / "x", [], "1.0.0+kimi.3", tmp_path / "new" / "dist", provenance
    )  # dist/ and its parent made
    info_dir = "sglang-1.0.0+kimi.3.dist-info"
    with zipfile.ZipFile(built.path) as whl:
        got = {i.filename: i for i in whl.infolist()}
        assert got[script].external_attr >> 16 == 0o100755 and got[script].date_time == when
        assert got["sglang/srt/untouched.py"].date_time == (2024, 1, 2, 3, 4, 6)
        for own in (f"{info_dir}/sglpatch.json", f"{info_dir}/RECORD"):
            assert got[own].external_attr >> 16 == 0o100644 and got[own].date_time == when, own
        assert b"\r" not in whl.read(f"{info_dir}/RECORD")
        assert (
            whl.read(f"{info_dir}/sglpatch.json") == (json.dumps(provenance, indent=2, sort_keys=True) + "\n").encode()
        )
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

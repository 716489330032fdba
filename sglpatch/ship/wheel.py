"""The overlay wheel: upstream's release wheel with the patched files swapped in.

Only the files the series touches change; everything else (compiled extensions, data, entry
points, platform tags) is upstream's, byte for byte. The version gets a PEP 440 local label so
`pip` and `importlib.metadata` tell the patched release from upstream's.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
import stat
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from packaging.utils import parse_wheel_filename
from packaging.version import Version

from sglpatch.errors import UserError

PACKAGE_PREFIX = "python/"  # upstream repo path prefix of what the wheel installs
REGULAR_FILE = (stat.S_IFREG | 0o644) << 16  # zip external attributes of a file the overlay adds


@dataclass(frozen=True)
class OverlayWheel:
    path: Path
    sha256: str
    replaced: tuple[str, ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def wheel_member(repo_path: str) -> str | None:
    """The wheel member for an upstream repository path, or None if the wheel does not ship it."""
    if repo_path.startswith(PACKAGE_PREFIX + "sglang/"):
        return repo_path[len(PACKAGE_PREFIX) :]
    return None


def build_overlay(
    upstream_wheel: Path, patched_tree: Path, changed: list[str], local_version: str, out_dir: Path, provenance: dict
) -> OverlayWheel:
    """Write the overlay wheel into ``out_dir``.

    ``changed`` are upstream-repository paths the series touches; each is read from
    ``patched_tree`` (a missing file there means the series deleted it).
    """
    name, version, build, tags = parse_wheel_filename(upstream_wheel.name)
    new_version = Version(local_version)
    if new_version.public != version.public:
        raise UserError(
            f"local version {local_version} does not extend the wheel's {version}",
            "the pin and the upstream wheel disagree; rerun `python build.py`",
        )
    tag = upstream_wheel.name.removesuffix(".whl").split("-", 2)[2]
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{name}-{new_version}-{tag}.whl"

    overrides: dict[str, bytes | None] = {}
    for repo_path in changed:
        member = wheel_member(repo_path)
        if member is not None:
            source = patched_tree / repo_path
            overrides[member] = source.read_bytes() if source.exists() else None

    partial = target.with_name(target.name + ".part")
    try:
        replaced, added, removed = _write_members(
            upstream_wheel, partial, overrides, f"{name}-{version}", new_version, f"{name}-{new_version}", provenance
        )
        partial.replace(target)
    except BaseException:  # a refused METADATA, a full disk, Ctrl-C: no half-written wheel is left
        partial.unlink(missing_ok=True)
        raise
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    return OverlayWheel(target, digest, tuple(replaced), tuple(added), tuple(removed))


def _write_members(
    upstream_wheel: Path,
    partial: Path,
    overrides: dict[str, bytes | None],
    old: str,
    new_version: Version,
    new: str,
    provenance: dict,
) -> tuple[list[str], list[str], list[str]]:
    """Upstream's members into ``partial`` with ``overrides`` applied and the dist-info of the new
    version; (replaced, added, removed) members. A member whose bytes stay upstream's is copied
    as upstream compressed it, its RECORD row taken from upstream's RECORD."""
    old_info, new_info = f"{old}.dist-info", f"{new}.dist-info"
    replaced, removed = [], []
    records: list[tuple[str, str, int]] = []
    with zipfile.ZipFile(upstream_wheel) as src, zipfile.ZipFile(partial, "w") as dst:  # _write compresses each member
        infos = src.infolist()
        upstream_hashes = _record_hashes(src, f"{old_info}/RECORD")
        timestamp = max(i.date_time for i in infos)
        upstream_members = {i.filename for i in infos}
        for info in infos:
            member = info.filename
            if member == f"{old_info}/RECORD":
                continue
            renamed = _under_version(member, old, new)
            known = upstream_hashes.get(member)
            if member not in overrides and member != f"{old_info}/METADATA" and known and not info.is_dir():
                _copy_compressed(src, dst, info, renamed)
                records.append((renamed, known, info.file_size))
                continue
            data = src.read(info)
            if member in overrides:
                if overrides[member] is None:
                    removed.append(member)
                    continue
                if overrides[member] != data:
                    replaced.append(member)
                data = cast(bytes, overrides[member])  # not None: checked above
            if member == f"{old_info}/METADATA":
                data = _with_version(data, new_version)
            _write(dst, renamed, data, info.date_time, info.external_attr)
            records.append((renamed, record_hash(data), len(data)))
        added = [m for m, data in overrides.items() if data is not None and m not in upstream_members]
        for member in sorted(added):
            content = cast(bytes, overrides[member])  # not None: `added` keeps only members with content
            _write(dst, member, content, timestamp, REGULAR_FILE)
            records.append((member, record_hash(content), len(content)))
        meta = json.dumps(provenance, indent=2, sort_keys=True).encode() + b"\n"
        _write(dst, f"{new_info}/sglpatch.json", meta, timestamp, REGULAR_FILE)
        records.append((f"{new_info}/sglpatch.json", record_hash(meta), len(meta)))
        _write(dst, f"{new_info}/RECORD", _record(records, f"{new_info}/RECORD"), timestamp, REGULAR_FILE)
    return replaced, sorted(added), removed


def _record_hashes(src: zipfile.ZipFile, record_name: str) -> dict[str, str]:
    """member -> its sha256 RECORD hash, from upstream's RECORD (whose wheel the pin's sha256
    vouches for); a member it lists without a sha256 is read and hashed instead."""
    try:
        rows = csv.reader(io.StringIO(src.read(record_name).decode()))
    except KeyError:
        return {}
    return {row[0]: row[1] for row in rows if len(row) == 3 and row[1].startswith("sha256=")}


def _copy_compressed(src: zipfile.ZipFile, dst: zipfile.ZipFile, info: zipfile.ZipInfo, name: str) -> None:
    """Copy one member's compressed bytes under ``name`` without inflating and deflating them
    again; the zip module offers no such copy, so the local header is written here (APPNOTE 4.3.7)."""
    fp = cast(io.BufferedReader, src.fp)
    fp.seek(info.header_offset)
    header = fp.read(30)
    if header[:4] != b"PK\x03\x04":
        raise UserError(f"the upstream wheel's member {info.filename} has no local header", "the artifact is damaged")
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    fp.seek(info.header_offset + 30 + name_length + extra_length)
    payload = fp.read(info.compress_size)
    copy = zipfile.ZipInfo(name, info.date_time)
    copy.compress_type, copy.external_attr = info.compress_type, info.external_attr
    copy.CRC, copy.compress_size, copy.file_size = info.CRC, info.compress_size, info.file_size
    copy.flag_bits = info.flag_bits & ~0x08  # sizes in the header, not in a trailing descriptor
    out = cast(io.BufferedWriter, dst.fp)
    copy.header_offset = out.tell()
    out.write(copy.FileHeader())
    out.write(payload)
    dst.filelist.append(copy)
    dst.NameToInfo[name] = copy
    dst.start_dir = out.tell()


def _under_version(member: str, old: str, new: str) -> str:
    """``member`` moved from the upstream version's ``.dist-info``/``.data`` directory to the new
    version's: installers find a wheel's scripts and headers only under ``{name}-{version}.data``."""
    top, sep, rest = member.partition("/")
    for suffix in (".dist-info", ".data"):
        if sep and top == old + suffix:
            return f"{new}{suffix}/{rest}"
    return member


def _record(records: list[tuple[str, str, int]], record_name: str) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")  # member names can contain commas
    for member, digest, size in records:
        writer.writerow([member, digest, size])
    writer.writerow([record_name, "", ""])
    return out.getvalue().encode()


def _with_version(metadata: bytes, version: Version) -> bytes:
    text, count = re.subn(r"^Version: .*$", f"Version: {version}", metadata.decode(), count=1, flags=re.M)
    if not count:
        raise UserError("the upstream wheel's METADATA has no Version field", "the artifact is damaged")
    return text.encode()


def _write(dst: zipfile.ZipFile, name: str, data: bytes, date_time, external_attr: int) -> None:
    info = zipfile.ZipInfo(name, date_time)
    info.external_attr = external_attr
    info.compress_type = zipfile.ZIP_DEFLATED
    dst.writestr(info, data)

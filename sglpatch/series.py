"""The quilt series: ``patches/series`` and the ``git format-patch`` files it lists.

Every patch carries trailers in its message:
``Upstream-Status:`` (Yocto convention) and ``Drop-When:`` (conditions under which the patch is
obsolete: ``check:<name>`` - a named check passes on the pristine upstream tree - or
``upstream>=<version>``; comma-separated, any one suffices).
"""

from __future__ import annotations

import email.header
import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .errors import UserError

PATCH_DIR = "patches"
SERIES_FILE = "series"
UPSTREAM_STATUSES = ("Pending", "Submitted", "Backport", "Denied", "Inappropriate", "Accepted")
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


@dataclass(frozen=True)
class DropCondition:
    kind: str  # "check" or "upstream"
    value: str  # check name, or the minimum version

    def __str__(self) -> str:
        return f"check:{self.value}" if self.kind == "check" else f"upstream>={self.value}"

    def holds_for_version(self, version: str) -> bool:
        return self.kind == "upstream" and Version(version) >= Version(self.value)


@dataclass(frozen=True)
class PatchEntry:
    name: str
    path: Path
    subject: str
    message: str
    files: tuple[str, ...]
    upstream_status: str | None
    drop_when: tuple[DropCondition, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Series:
    root: Path
    patches: tuple[PatchEntry, ...]
    stray: tuple[str, ...]  # files in patches/ that the series does not list

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.patches]

    def get(self, name: str) -> PatchEntry:
        for patch in self.patches:
            if patch.name == name:
                return patch
        raise UserError(f"no patch named '{name}' in {PATCH_DIR}/{SERIES_FILE}",
                        f"known patches: {', '.join(self.names) or 'none'}")

    def fingerprint(self) -> str:
        """sha256 over the series file and every listed patch, in order."""
        digest = hashlib.sha256((self.root / PATCH_DIR / SERIES_FILE).read_bytes())
        for patch in self.patches:
            digest.update(patch.name.encode() + b"\0" + patch.path.read_bytes())
        return digest.hexdigest()

    def check_names(self) -> list[str]:
        """Every check a patch's Drop-When names, in series order."""
        names = [c.value for p in self.patches for c in p.drop_when if c.kind == "check"]
        return list(dict.fromkeys(names))

    def touched_files(self) -> list[str]:
        seen: dict[str, None] = {}
        for patch in self.patches:
            seen.update(dict.fromkeys(patch.files))
        return list(seen)


def series_path(root: Path) -> Path:
    return root / PATCH_DIR / SERIES_FILE


def read_series_names(root: Path) -> list[str]:
    """The patch names listed in the series file, validated for form and duplicates."""
    path = series_path(root)
    if not path.is_file():
        raise UserError(f"no series file at {path}",
                        "create it: one patch file name per line, `#` for comments")
    names: list[str] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, *options = line.split()
        if options and options != ["-p1"]:
            raise UserError(f"{path}:{number}: unsupported options '{' '.join(options)}' for {name}",
                            "patches apply with -p1; remove the options")
        if "/" in name or name.startswith("."):
            raise UserError(f"{path}:{number}: '{name}' is not a file name in {PATCH_DIR}/",
                            "list bare patch file names")
        if name in names:
            raise UserError(f"{path}:{number}: '{name}' is listed twice", "remove the duplicate line")
        names.append(name)
    return names


def read_series(root: Path, *, warn=None) -> Series:
    names = read_series_names(root)
    directory = root / PATCH_DIR
    patches = []
    for name in names:
        path = directory / name
        if not path.is_file():
            raise UserError(f"{series_path(root)} lists {name}, but {path} does not exist",
                            "restore the file or remove it from the series")
        patches.append(parse_patch(path))
    stray = tuple(sorted(p.name for p in directory.glob("*")
                         if p.is_file() and p.name != SERIES_FILE and p.name not in names
                         and not p.name.startswith(".") and p.name != "README.md"))
    for name in stray:
        (warn or _warn)(f"warning: {PATCH_DIR}/{name} is not in the series and is ignored; "
                        f"add it to {PATCH_DIR}/{SERIES_FILE} or delete it")
    return Series(root, tuple(patches), stray)


def _warn(message: str) -> None:
    print(message, file=sys.stderr)


def parse_patch(path: Path) -> PatchEntry:
    text = path.read_text(errors="replace")
    header, sep, rest = text.partition("\n\n")
    subject_lines = _header_value(header, "Subject")
    if not sep or subject_lines is None or not text.startswith("From "):
        raise UserError(f"{path} is not a git format-patch file (no mail header with a Subject)",
                        "recreate it with `python build.py new` or `git format-patch`")
    body, _, diff = rest.partition("\n---\n")
    if not _DIFF_FILE.search(diff or rest):
        raise UserError(f"{path} contains no diff", "recreate the patch; an empty patch is not allowed")
    subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject_lines)
    trailers = parse_trailers(body)
    files = tuple(dict.fromkeys(b for _, b in _DIFF_FILE.findall(diff or rest)))
    return PatchEntry(
        name=path.name,
        path=path,
        subject=subject,
        message=body.strip(),
        files=files,
        upstream_status=trailers.get("Upstream-Status"),
        drop_when=parse_drop_when(trailers.get("Drop-When", ""), path),
    )


def _header_value(header: str, key: str) -> str | None:
    lines = header.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"{key}: "):
            value = line[len(key) + 2:]
            for cont in lines[i + 1:]:
                if not cont.startswith((" ", "\t")):
                    break
                value += cont
            decoded = email.header.decode_header(value)
            return "".join(part.decode(enc or "utf-8") if isinstance(part, bytes) else part
                           for part, enc in decoded).strip()
    return None


def parse_trailers(body: str) -> dict[str, str]:
    """Trailers of the last paragraph of a commit message (``Key: value`` lines)."""
    paragraphs = [p for p in body.strip().split("\n\n") if p.strip()]
    trailers: dict[str, str] = {}
    if paragraphs:
        for line in paragraphs[-1].splitlines():
            key, sep, value = line.partition(": ")
            if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", key):
                trailers[key] = value.strip()
    return trailers


def parse_drop_when(value: str, path: Path) -> tuple[DropCondition, ...]:
    conditions = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        if item.startswith("check:") and item[6:]:
            conditions.append(DropCondition("check", item[6:]))
        elif item.startswith("upstream>="):
            try:
                Version(item[10:])
            except InvalidVersion:
                raise UserError(f"{path}: Drop-When '{item}' names no valid version",
                                "write e.g. upstream>=0.5.12") from None
            conditions.append(DropCondition("upstream", item[10:]))
        else:
            raise UserError(f"{path}: cannot read Drop-When condition '{item}'",
                            "use check:<name> or upstream>=<version>")
    return tuple(conditions)


def trailer_problems(patch: PatchEntry) -> list[str]:
    """What a patch message lacks to explain itself; the build refuses such patches."""
    problems = []
    status = patch.upstream_status
    if not status:
        problems.append("no Upstream-Status: trailer")
    elif status.split()[0] not in UPSTREAM_STATUSES:
        problems.append(f"Upstream-Status '{status}' is not one of {', '.join(UPSTREAM_STATUSES)}")
    if not patch.drop_when:
        problems.append("no Drop-When: trailer saying when the patch can be dropped")
    return problems


def write_series(root: Path, names: list[str]) -> None:
    """Rewrite the series file with ``names``, keeping its comment lines at the top."""
    path = series_path(root)
    header = []
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                break
            header.append(line)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(header + names) + "\n")

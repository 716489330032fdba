"""The quilt series: ``patches/series`` and the ``git format-patch`` files it lists.

Every patch carries trailers in its message:
``Upstream-Status:`` (Yocto convention) and ``Drop-When:`` (conditions under which the patch is
obsolete: ``check:<name>`` - a named check passes on the pristine upstream tree - or
``upstream>=<version>``; comma-separated, any one suffices).
"""

from __future__ import annotations

import email.errors
import email.header
import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from sglpatch import output
from sglpatch.errors import UserError
from sglpatch.git.diffheader import sections, unprefixed_lines
from sglpatch.upstream.pin import decode_utf8, validate_version

PATCH_DIR = "patches"
SERIES_FILE = "series"
UPSTREAM_STATUSES = ("Pending", "Submitted", "Backport", "Denied", "Inappropriate", "Accepted")


@dataclass(frozen=True)
class DropCondition:
    kind: str  # "check" or "upstream"
    value: str  # check name, or the minimum version

    def __str__(self) -> str:
        return f"check:{self.value}" if self.kind == "check" else f"upstream>={self.value}"

    def holds_for_version(self, version: str) -> bool:
        """Whether ``version`` meets an ``upstream>=`` condition, compared as PEP 440."""
        return self.kind == "upstream" and validate_version(version) >= validate_version(self.value)


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
        raise UserError(
            f"no patch named '{name}' in {PATCH_DIR}/{SERIES_FILE}", f"known patches: {', '.join(self.names) or 'none'}"
        )

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


# ---------------------------------------------------------------- the series file


@dataclass(frozen=True)
class SeriesLine:
    """One line of the series file, kept verbatim when the series is rewritten."""

    text: str
    name: str | None = None  # the patch it lists; None: a comment, a blank or a parked (#) entry


_NAME_CHARS = re.compile(r"[A-Za-z0-9._+~-]+")
# What a listed name must not be, as (test, what is wrong). Quilt and git take more (any bytes but
# "/" and NUL), but names like `git format-patch`'s (0001-subject-words.patch) are what real series
# use, and they survive every tool, shell and file system on the way.
_NAME_RULES: tuple[tuple[Callable[[str], bool], str], ...] = (
    (lambda n: "/" in n or "\\" in n, f"is a path, not a file name in {PATCH_DIR}/"),
    (lambda n: n.startswith((".", "-")), "starts with '.' or '-'"),
    (lambda n: ".." in n, "contains '..'"),
    (lambda n: not _NAME_CHARS.fullmatch(n), "has characters other than letters, digits and . _ + ~ -"),
    (lambda n: not n.endswith((".patch", ".diff")), "does not end in .patch or .diff"),
)
_NAME_HINT = "name patches as `git format-patch` does, e.g. 0005-short-description.patch"


def name_problem(name: str) -> str | None:
    """What makes ``name`` unfit to list in the series, or None."""
    return next((what for test, what in _NAME_RULES if test(name)), None)


def _entry(text: str, where: str) -> str | None:
    """The patch name a series line lists (quilt syntax: NAME [-p1] [# comment]), or None."""
    fields = [f for f in re.split(r"[ \t]+", text) if f]
    comment = next((i for i, f in enumerate(fields) if f.startswith("#")), len(fields))
    if not comment:
        return None
    name, *options = fields[:comment]
    if problem := name_problem(name):
        raise UserError(f"{where}: {name!r} {problem}", _NAME_HINT)
    if options and options != ["-p1"]:
        raise UserError(
            f"{where}: unsupported options '{' '.join(options)}' for {name}",
            "patches apply with -p1; remove the options",
        )
    return name


def read_series_lines(path: Path) -> list[SeriesLine]:
    """Every line of the series file at ``path``, validated: UTF-8 with LF line ends, quilt syntax,
    patch names, no name twice. Errors name the file and line."""
    text = decode_utf8(path.read_bytes(), path, "save the series file as UTF-8")
    if "\r\n" in text:
        raise UserError(f"{path} has CRLF line endings", "convert with `dos2unix` or re-export")
    lines: list[SeriesLine] = []
    seen: dict[str, int] = {}  # casefolded: on macOS, A.patch and a.patch are one file
    for number, raw in enumerate(text.removesuffix("\n").split("\n") if text else [], 1):
        name = _entry(raw, f"{path}:{number}")
        if name and name.casefold() in seen:
            raise UserError(
                f"{path}:{number}: '{name}' is listed twice (also on line {seen[name.casefold()]})",
                "remove the duplicate line",
            )
        if name:
            seen[name.casefold()] = number
        lines.append(SeriesLine(raw, name))
    return lines


def read_series_names(root: Path) -> list[str]:
    """The patch names listed in the series file, validated for form and duplicates."""
    path = series_path(root)
    refuse_link(path)
    if not path.is_file():
        raise UserError(f"no series file at {path}", "create it: one patch file name per line, `#` for comments")
    return [line.name for line in read_series_lines(path) if line.name]


def refuse_link(path: Path) -> None:
    """A series or patch file is a file of the repository: a link would make the tool read, and
    rewrite, a file elsewhere."""
    if path.is_symlink():
        raise UserError(
            f"{path} is a symbolic link (to {os.readlink(path)}), not a file of the repository",
            f"replace it with a copy of what it points to (`cp --remove-destination {path.resolve()} {path}`)",
        )


def numbers_in_use(line_roots: list[Path]) -> dict[int, list[str]]:
    """Patch number -> the patch names that carry it, over the series of every line given (a
    number is a patch's for life, in every line it is ported to)."""
    used: dict[int, list[str]] = {}
    for line_root in line_roots:
        if series_path(line_root).is_file():
            for name in read_series_names(line_root):
                if m := re.match(r"(\d+)-", name):
                    used.setdefault(int(m.group(1)), []).append(name)
    return used


def read_series(root: Path, *, warn=None) -> Series:
    names = read_series_names(root)
    directory = root / PATCH_DIR
    patches = []
    for name in names:
        path = directory / name
        refuse_link(path)
        if not path.is_file():
            raise UserError(
                f"{series_path(root)} lists {name}, but {path} does not exist",
                "restore the file or remove it from the series",
            )
        patches.append(parse_patch(path))
    stray = tuple(
        sorted(
            p.name
            for p in directory.glob("*")
            if p.is_file()
            and p.name != SERIES_FILE
            and p.name not in names
            and not p.name.startswith(".")
            and p.name != "README.md"
        )
    )
    for name in stray:
        message = (
            f"{PATCH_DIR}/{name} is not in the series and is ignored; add it to {PATCH_DIR}/{SERIES_FILE} or delete it"
        )
        if warn:
            warn(f"warning: {message}")
        else:
            output.warn(message)
    return Series(root, tuple(patches), stray)


# What git's mailinfo takes as the author's address: <...> with something inside, or a bare
# address; "From: Name" alone gives git an empty ident, which it refuses.
_AUTHOR_EMAIL = re.compile(r"<[^<>\s]+>|^\S+@\S+$")


def _read_patch(path: Path) -> str:
    """A patch file's text. Its mail header and message (everything before the first diff) must
    be UTF-8 with LF line ends, as `git am` reads them; the diff may carry any bytes (lines of a
    file that is not UTF-8), which only show replaced here."""
    data = path.read_bytes()
    head, sep, diff = data.partition(b"\ndiff --git ")
    if b"\r\n" in head or re.search(rb"(?m)^diff --git [^\n]*\r$", data):
        raise UserError(f"{path} has CRLF line endings", "convert with `dos2unix` or re-export")
    message = decode_utf8(
        head, path, "git am reads the header and message as UTF-8: fix the encoding or re-export the patch"
    )
    return message + sep.decode() + diff.decode("utf-8", errors="replace")


def parse_patch(path: Path) -> PatchEntry:
    text = _read_patch(path)
    header, sep, rest = text.partition("\n\n")
    subject_lines = _header_value(header, "Subject", path)
    if not sep or subject_lines is None or not text.startswith("From "):
        raise UserError(
            f"{path} is not a git format-patch file (no mail header with a Subject)",
            "recreate it with `python build.py new` or `git format-patch`",
        )
    author = _header_value(header, "From", path)
    if author is None:
        raise UserError(
            f"{path} has no From: header, so `git am` has no author for it",
            "add `From: Name <email>` under the first line, or import it with `python build.py import`",
        )
    if not _AUTHOR_EMAIL.search(author):
        raise UserError(
            f"{path} has no e-mail address in its From: header ('{author[:60]}'), which `git am` "
            "refuses after applying the diff",
            "write it as `From: Name <email>`",
        )
    body, _, diff = rest.partition("\n---\n")
    files = tuple(dict.fromkeys(s.path for s in sections(diff or rest)))
    foreign = unprefixed_lines(diff or rest)
    if foreign:
        raise UserError(
            f"{path}: '{foreign[0][:80]}' names its files without git's a/ and b/ prefixes, "
            "so `git am` would strip the wrong directory",
            "move it out of patches/ and `python build.py import` it, which rewrites the prefixes",
        )
    if not files:
        raise UserError(f"{path} contains no diff", "recreate the patch; an empty patch is not allowed")
    subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject_lines)
    trailers = parse_trailers(body)
    return PatchEntry(
        name=path.name,
        path=path,
        subject=subject,
        message=body.strip(),
        files=files,
        upstream_status=trailers.get("Upstream-Status"),
        drop_when=parse_drop_when(trailers.get("Drop-When", ""), path),
    )


def am_subject(subject: str) -> str:
    """The subject ``git am`` gives the commit it makes from a patch with this subject (after
    `git mailinfo`): whitespace runs collapsed, leading ``[...]`` tags and ``Re:`` dropped."""
    subject = " ".join(subject.split())
    while True:
        stripped = re.sub(r"^(\[[^\]]*\]|[Rr][Ee]:)\s*", "", subject)
        if stripped == subject:
            return subject
        subject = stripped


# The lines git writes around a conflict (``<<<<<<< ours``, ``>>>>>>> theirs``); one spelling
# for a file in the work tree and for a line a patch adds.
_MARKER = r"(<<<<<<<|>>>>>>>)(?: |$)"
_CONFLICT_MARKER = re.compile(r"^\+" + _MARKER, re.M)
_CONFLICT_MARKER_IN_FILE = re.compile(r"^" + _MARKER, re.M)


def holds_conflict_markers(text: str) -> bool:
    """Does this file's text still hold a line git writes around a conflict?"""
    return _CONFLICT_MARKER_IN_FILE.search(text) is not None


def refuse_conflict_markers(text: str, name: str, hint: str) -> None:
    """Refuse to write the patch ``name`` when its diff adds a line git writes around a conflict
    (``<<<<<<< ours``, ``>>>>>>> theirs``): an unresolved merge must not reach the series."""
    marked = [s.path for s in sections(text) if _CONFLICT_MARKER.search(text, s.start, s.end)]
    if marked:
        raise UserError(f"{name} would add conflict markers to {', '.join(marked)}", hint)


def message_break(message: str) -> int | None:
    """The 1-based line of a commit message at which `git am` would take the diff to begin
    (git mailinfo's patchbreak: ``diff -``, ``Index: ``, ``--- NAME`` or a ``---`` line), so a
    patch made from it would not apply again; None when there is none."""
    for number, line in enumerate(message.splitlines(), 1):
        if line.startswith(("diff -", "Index: ")) or re.match(r"---( \S|\s*$)", line):
            return number
    return None


def commit_matches_patch(message: str, patch: PatchEntry) -> bool:
    """Whether a commit (its whole message) is the one ``git am`` makes or made from ``patch``;
    the commit's subject is its first paragraph, as `git format-patch` reads it."""
    first_paragraph = message.strip().split("\n\n", 1)[0]
    return am_subject(first_paragraph) == am_subject(patch.subject)


def _header_value(header: str, key: str, path: Path) -> str | None:
    lines = header.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"{key}: "):
            value = line[len(key) + 2 :]
            for cont in lines[i + 1 :]:
                if not cont.startswith((" ", "\t")):
                    break
                value += cont
            try:
                return "".join(
                    part.decode(enc or "utf-8") if isinstance(part, bytes) else part
                    for part, enc in email.header.decode_header(value)
                ).strip()
            except (ValueError, LookupError, email.errors.HeaderParseError) as exc:
                raise UserError(
                    f"{path}: the {key}: header cannot be decoded ({exc})",
                    "re-export the patch with `git format-patch`",
                ) from None
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
        if item == "unset":  # written by `import`: no condition yet, and the build says so
            continue
        if item.startswith("check:") and item[6:]:
            conditions.append(DropCondition("check", item[6:]))
        elif item.startswith("upstream>="):
            try:
                Version(item[10:])
            except InvalidVersion:
                raise UserError(
                    f"{path}: Drop-When '{item}' names no valid version", "write e.g. upstream>=0.5.12"
                ) from None
            conditions.append(DropCondition("upstream", item[10:]))
        else:
            raise UserError(
                f"{path}: cannot read Drop-When condition '{item}'", "use check:<name> or upstream>=<version>"
            )
    return tuple(conditions)


def trailer_problems(patch: PatchEntry) -> list[str]:
    """What a patch message lacks to explain itself; the build refuses such patches."""
    problems = []
    status = patch.upstream_status
    if not status:
        problems.append("no Upstream-Status: trailer")
    elif status.split()[0] == "Unset":  # written by `import`, which cannot know it
        problems.append(f"Upstream-Status is unset (imported): make it one of {', '.join(UPSTREAM_STATUSES)}")
    elif status.split()[0] not in UPSTREAM_STATUSES:
        problems.append(f"Upstream-Status '{status}' is not one of {', '.join(UPSTREAM_STATUSES)}")
    if not patch.drop_when and parse_trailers(patch.message).get("Drop-When") == "unset":
        problems.append(
            "Drop-When is unset (imported): say when the patch can be dropped (check:NAME or upstream>=VERSION)"
        )
    elif not patch.drop_when:
        problems.append("no Drop-When: trailer saying when the patch can be dropped")
    return problems


def render_series(root: Path, names: list[str]) -> str:
    """The series file listing ``names`` in order, everything else kept: a listed name keeps its
    line (options, trailing comment) in the new order; an unlisted one loses its line; a new one
    goes right after the name before it (the first: after the header comments). Comments, blank
    lines and parked (commented-out) entries stay in place."""
    path = series_path(root)
    old = read_series_lines(path) if path.exists() else []
    _check_names(names, path)
    lines = _keep_listed(old, names)
    header_end = next((i for i, line in enumerate(old) if line.name), len(old))
    listed = {line.name for line in old if line.name}
    for i, name in enumerate(names):
        if name not in listed:
            at = header_end if i == 0 else [line.name for line in lines].index(names[i - 1]) + 1
            lines.insert(at, SeriesLine(name, name))
    return "".join(f"{line.text}\n" for line in lines)


def _check_names(names: list[str], path: Path) -> None:
    for i, name in enumerate(names):
        if problem := name_problem(name):
            raise UserError(f"cannot list {name!r} in {path}: it {problem}", _NAME_HINT)
        if name.casefold() in (n.casefold() for n in names[:i]):
            raise UserError(f"cannot list '{name}' twice in {path}", "list each patch once")


def _keep_listed(old: list[SeriesLine], names: list[str]) -> list[SeriesLine]:
    """``old`` without the entries ``names`` drops; the kept entries' places filled in ``names``'
    order, each with its own line."""
    line_of = {line.name: line for line in old if line.name}
    kept = iter([name for name in names if name in line_of])
    return [
        line if line.name is None else line_of[next(kept)] for line in old if line.name is None or line.name in names
    ]


def write_series(root: Path, names: list[str]) -> None:
    """Rewrite the series file with ``names`` (render_series: comments and options kept)."""
    text = render_series(root, names)
    series_path(root).parent.mkdir(exist_ok=True)  # patches/, in the line's directory
    series_path(root).write_text(text, encoding="utf-8")

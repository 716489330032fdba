"""`import`: take patches made elsewhere into a line's series, as `quilt import` and
`gbp pq import` do.

Accepted: a plain diff (`git diff`, or `diff -u` with one leading directory as with -p1), a
`git format-patch` file, or an mbox of several. Each becomes a format-patch file in ``patches/``,
listed after the last entry of the series. What import cannot know it does not invent: a plain
diff's message says where it came from, and its trailers say ``Upstream-Status: Unset`` and
``Drop-When: unset``, which the build names until the maintainer sets them.
"""

from __future__ import annotations

import email.header
import email.utils
import hashlib
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.git.diffheader import git_line, name_line, sections, unquote, with_ab_prefixes
from sglpatch.git.env import git_bytes, git_text
from sglpatch.git.repo import AnyGitError, open_repo, run
from sglpatch.queue.line import all_lines, line_of
from sglpatch.queue.series import (
    PATCH_DIR,
    am_subject,
    decode_utf8,
    name_problem,
    numbers_in_use,
    parse_patch,
    read_series_names,
    render_series,
    series_path,
)
from sglpatch.queue.transaction import transaction

UNSET_STATUS = "Unset"
UNSET_DROP = "unset"
ZERO_FROM = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001"
_MAIL_START = re.compile(r"^From \S+ .*\d{4}$", re.M)  # an mbox From_ line
_GIT_DIFF = re.compile(r"^diff --git ", re.M)
# a `diff -u` file header: the command line `diff -r` writes before it (or svn's Index:), names
# C-quoted (GNU diff quotes one with a space) or up to the tab before the time stamp, then the
# first hunk's ranges
_NAME = r'"(?:[^"\\\n]|\\.)*"|[^\t\n]+?'
_PLAIN_FILE = re.compile(
    r"^(?:(?:diff (?!--git )|Index: |={20,})[^\n]*\n)*"
    rf"--- (?P<old>{_NAME})(?:\t(?P<old_time>[^\n]*))?\n"
    rf"\+\+\+ (?P<new>{_NAME})(?:\t(?P<new_time>[^\n]*))?\n"
    r"(?=@@ -(?P<before>[\d,]+) \+(?P<after>[\d,]+) @@)",
    re.M,
)
_EPOCH = re.compile(r"(1969-12-31|1970-01-01) ")  # `diff -N`'s time stamp of a file that is absent


@dataclass(frozen=True)
class Incoming:
    name: str  # the patch file name in patches/
    text: str  # the format-patch file


# ---------------------------------------------------------------- reading what comes in


def read_incoming(path: Path, subject: str | None, author: str, split: bool) -> list[tuple[str, str]]:
    """(subject, format-patch text) for every patch in the file at ``path``."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path} does not exist", "name the diff, patch or mbox to import") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}", "name a readable file") from None
    text = _incoming_text(data, path)
    if text.startswith("From ") or re.match(r"(From|Subject|Date): ", text):
        mails = [m for m in _split_mbox(text) if m.strip()]
        patches = [_as_mail(mail, path, author) for mail in mails]
    elif _GIT_DIFF.search(text) or _PLAIN_FILE.search(text):
        patches = [_wrap_diff(text, path, subject or _subject_from(path), author)]
    else:
        raise UserError(
            f"{path} holds no diff, format-patch or mbox",
            "import the output of `git diff`, `diff -u` or `git format-patch`",
        )
    if split:
        patches = [piece for patch in patches for piece in _split_per_file(patch, path, author)]
    return patches


_STRUCTURE = re.compile(rb"^(?:diff --git |--- |\+\+\+ |@@ |index |From |Subject: )[^\n]*\n", re.M)
_DIFF_START = re.compile(r"^(?:diff --git |--- )", re.M)


def _incoming_text(data: bytes, path: Path) -> str:
    """The file as text that gives back its bytes (``git_bytes``). A file saved with CRLF line
    ends (its diff's own lines end in CR too) is read back to LF; a diff whose content lines alone
    end in CR carries a CRLF file and keeps them. The header and message must be UTF-8, as git am
    reads them; the diff may carry any bytes (a file that is not UTF-8)."""
    structure = _STRUCTURE.findall(data)
    if structure and all(line.endswith(b"\r\n") for line in structure):
        data = data.replace(b"\r\n", b"\n")
    text = git_text(data)
    start = _DIFF_START.search(text)
    head = text[: start.start() if start else len(text)]
    decode_utf8(git_bytes(head), path, "save its header and message as UTF-8 (git am reads them as UTF-8)")
    return text


def _split_mbox(text: str) -> list[str]:
    starts = [m.start() for m in _MAIL_START.finditer(text)] or [0]
    if starts[0] != 0:
        starts.insert(0, 0)
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def _as_mail(mail: str, path: Path, author: str) -> tuple[str, str]:
    """A format-patch mail as is, with a From_ line and a From: header if it lacks them."""
    if not mail.startswith("From "):
        mail = f"{ZERO_FROM}\n{mail}"
    header, sep, rest = mail.partition("\n\n")
    if not sep or not _GIT_DIFF.search(rest) and not _PLAIN_FILE.search(rest):
        raise UserError(f"{path}: a mail in it has no diff", "import patches that change files")
    if not re.search(r"^Subject: ", header, re.M):
        raise UserError(
            f"{path}: a mail in it has no Subject: header", "add one, or import the plain diff with --subject"
        )
    if not re.search(r"^From: ", header, re.M):  # git am would stop on it: no author
        header += f"\nFrom: {author}"
    rest = _ab_prefixed(rest, path) if _GIT_DIFF.search(rest) else _git_headers(rest)
    mail = f"{header}\n\n{rest}"
    return _mail_subject(header), mail if mail.endswith("\n") else mail + "\n"


def _mail_subject(header: str) -> str:
    match = re.search(r"^Subject: (.*(?:\n[ \t].*)*)", header, re.M)
    assert match is not None  # _as_mail refused a mail without one
    value = "".join(match.group(1).split("\n"))
    decoded = "".join(
        p.decode(e or "utf-8") if isinstance(p, bytes) else p for p, e in email.header.decode_header(value)
    )
    return re.sub(r"^\[PATCH[^\]]*\]\s*", "", decoded).strip()


def _wrap_diff(diff: str, path: Path, subject: str, author: str) -> tuple[str, str]:
    """A plain diff as a format-patch mail whose message says only what is known."""
    diff = _ab_prefixed(diff, path) if _GIT_DIFF.search(diff) else _git_headers(diff)
    first = _GIT_DIFF.search(diff)
    assert first is not None  # both rewrites above end in git's diff --git lines
    diff = diff[first.start() :]  # what precedes the first file is not the diff
    digest = hashlib.sha256(git_bytes(diff)).hexdigest()[:12]
    body = (
        f"Imported from {path.name} (diff sha256 {digest}) by `python build.py import`;\n"
        "what it fixes and why is yet to be written here.\n\n"
        f"Upstream-Status: {UNSET_STATUS} [imported: say whether it is upstream]\n"
        f"Drop-When: {UNSET_DROP}\n"
    )
    header = (
        f"{ZERO_FROM}\nFrom: {author}\nDate: {email.utils.formatdate(localtime=False)}\n"
        f"Subject: [PATCH] {_encoded(subject)}\n"
    )
    return subject, f"{header}\n{body}---\n{diff if diff.endswith(chr(10)) else diff + chr(10)}"


def _ab_prefixed(diff: str, path: Path) -> str:
    """A git diff made with other prefixes (``--no-prefix``, ``i/``/``w/``) under ``a/`` and ``b/``,
    which `git am` strips: as it came, it would apply to the wrong paths or not at all."""
    try:
        return with_ab_prefixes(diff)
    except ValueError as exc:
        raise UserError(
            f"{path}: {exc}",
            "make the diff again with git's a/ and b/ prefixes (`git diff` or `git format-patch` without --no-prefix)",
        ) from None


def _git_headers(diff: str) -> str:
    """A `diff -u` made git-style: a ``diff --git`` line before each file, paths at -p1, a file
    created or deleted (``/dev/null``, or `diff -N`'s empty side stamped with the epoch) said so."""

    def header(match: re.Match) -> str:
        old, new = _strip_one(unquote(match["old"])), _strip_one(unquote(match["new"]))
        created = old == "/dev/null" or match["before"] == "0,0" and _EPOCH.match(match["old_time"] or "")
        deleted = new == "/dev/null" or match["after"] == "0,0" and _EPOCH.match(match["new_time"] or "")
        name = old if deleted else new
        if created:
            return f"{git_line(name, name)}new file mode 100644\n--- /dev/null\n{name_line('+++', 'b/' + name)}"
        if deleted:
            return f"{git_line(name, name)}deleted file mode 100644\n{name_line('---', 'a/' + name)}+++ /dev/null\n"
        return f"{git_line(name, name)}{name_line('---', 'a/' + name)}{name_line('+++', 'b/' + name)}"

    return _PLAIN_FILE.sub(header, diff)


def _strip_one(path: str) -> str:
    return path if path == "/dev/null" else path.split("/", 1)[-1]


def _split_per_file(patch: tuple[str, str], path: Path, author: str) -> list[tuple[str, str]]:
    subject, text = patch
    head, sep, diff = text.partition("\n---\n")
    starts = [m.start() for m in _GIT_DIFF.finditer(diff)]
    if len(starts) < 2:
        return [patch]
    pieces = []
    for a, b in zip(starts, starts[1:] + [len(diff)]):
        chunk = diff[a:b]
        file = sections(chunk)[0].path
        piece_subject = f"{subject} ({file})"
        piece_head = re.sub(
            r"^Subject: .*(?:\n[ \t].*)*",
            lambda _m: f"Subject: [PATCH] {_encoded(piece_subject)}",  # noqa: B023 (called at once)
            head,
            count=1,
            flags=re.M,
        )
        pieces.append((piece_subject, f"{piece_head}\n---\n{chunk}"))
    return pieces


def _encoded(subject: str) -> str:
    return subject if subject.isascii() else email.header.Header(subject, "utf-8").encode()


def _subject_from(path: Path) -> str:
    stem = re.sub(r"\.(diff|patch)$", "", path.name)
    return re.sub(r"^\d+[-_]", "", stem).replace("-", " ").replace("_", " ").strip() or stem


def default_author(root: Path) -> str:
    """The maintainer's git identity in the repository, as their own commit would have it."""
    try:
        ident = run(open_repo(line_of(root).repo), "var", "GIT_AUTHOR_IDENT")
    except (AnyGitError, ValueError):
        return "Unknown author <unknown@localhost>"
    return re.sub(r"\s+\d+ [+-]\d{4}$", "", ident)


# ---------------------------------------------------------------- naming and writing


def slug(subject: str) -> str:
    """`git format-patch`'s file name words for a subject."""
    words = re.sub(r"[^A-Za-z0-9._]+", "-", subject).strip("-.")
    return re.sub(r"\.+", ".", words)[:52].rstrip("-.") or "imported"


def plan(root: Path, patches: list[tuple[str, str]], name: str | None) -> list[Incoming]:
    names = read_series_names(root)
    line = line_of(root)
    following = max(numbers_in_use([other.root for other in all_lines(line.repo)]), default=0) + 1
    if name and len(patches) > 1:
        raise UserError(f"--name names one patch, but {len(patches)} come in", "leave --name out")
    planned: list[Incoming] = []
    for offset, (subject, text) in enumerate(patches):
        file = (
            (name if name.endswith(".patch") else f"{name}.patch")
            if name
            else f"{following + offset:04d}-{slug(am_subject(subject))}.patch"
        )
        problem = name_problem(file)
        if problem:
            raise UserError(f"'{file}' {problem}", "choose a name such as 0005-short-description.patch")
        if file in names or file in [p.name for p in planned] or (root / PATCH_DIR / file).exists():
            raise UserError(f"patches/{file} already exists", "pass another --name, or remove the old patch")
        planned.append(Incoming(file, text))
    return planned


def import_files(
    root: Path,
    files: list[Path],
    *,
    name: str | None = None,
    subject: str | None = None,
    author: str | None = None,
    split: bool = False,
) -> list[Path]:
    author = author or default_author(root)
    if not re.fullmatch(r"[^<>\n]+ <[^<>\s]+>", author):
        raise UserError(f"--author '{author}' is not 'Name <email>'", 'e.g. --author "A. Maintainer <am@example.org>"')
    incoming = [p for f in files for p in read_incoming(Path(f), subject if len(files) == 1 else None, author, split)]
    planned = plan(root, incoming, name)
    with transaction(root, "import", create=True) as tx:
        names = read_series_names(root)
        written = []
        for patch in planned:
            path = root / PATCH_DIR / patch.name
            tx.write(path, patch.text)
            names.append(patch.name)
            written.append(path)
        tx.write(series_path(root), render_series(root, names), whole=False)
        _check_readable(planned, root)
    return written


def _check_readable(planned: list[Incoming], root: Path) -> None:
    """Every imported file must read back as a patch of the series (header, subject, diff)."""
    with tempfile.TemporaryDirectory(prefix="sglpatch-import-") as tmp:
        for patch in planned:
            probe = Path(tmp) / patch.name
            probe.write_bytes(git_bytes(patch.text))
            parse_patch(probe)

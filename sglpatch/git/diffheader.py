"""Which file each section of a git diff is about, read the way git writes it.

A path may hold spaces, even " b/" (``diff --git a/x b/y.txt b/x b/y.txt``), and git C-quotes a
path with unusual bytes (``diff --git "a/caf\\303\\251.txt" "b/caf\\303\\251.txt"``, ``--- a/x y\\t``
for a name with a space). Splitting the ``diff --git`` line at whitespace loses such files, and
with them their hunks. A section's paths come from its ``rename``/``copy`` lines, else from the
``diff --git`` line, split where its two halves agree; a created or deleted file has no old or new
path (its ``new file mode``/``deleted file mode`` line, or ``/dev/null``).

Only git's default ``a/`` and ``b/`` prefixes are read (`git am` strips one leading directory);
:func:`with_ab_prefixes` rewrites a diff made with others (``--no-prefix``, ``diff.mnemonicPrefix``'s
``i/``/``w/``/``c/``/``o/``, ``--src-prefix``/``--dst-prefix``) so that it reads and applies the same.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from sglpatch.git.env import git_bytes, git_text

_SECTION = re.compile(r"^diff --git ", re.M)
_FROM_TO = re.compile(r"^(?:rename|copy) (from|to) (.*)$")
_HEADER = re.compile(r"^(rename from|rename to|copy from|copy to|---|\+\+\+) (.*)$")


@dataclass(frozen=True)
class Section:
    """One file's part of a diff: its old and new path (None for /dev/null) and its text span."""

    old: str | None
    new: str | None
    start: int
    end: int

    @property
    def path(self) -> str:
        return self.new or self.old or ""


def unquote(name: str) -> str:
    """A path as git writes it: C-quoted (octal bytes of UTF-8) when it holds unusual characters."""
    quoted = re.fullmatch(r'"(.*)"', name)  # a quoted name holds no raw newline
    return git_text(codecs.escape_decode(quoted[1].encode())[0]) if quoted else name


def git_line_paths(line: str) -> tuple[str, str] | None:
    """(old, new) named by a ``diff --git`` line, without their ``a/``/``b/``; None if not one."""
    if not line.startswith("diff --git "):
        return None
    rest = line[len("diff --git ") :].rstrip("\r\n")
    quoted = re.fullmatch(r'("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*")', rest) or re.fullmatch(
        r'("(?:[^"\\]|\\.)*") (\S+)', rest
    )
    if quoted:
        a, b = unquote(quoted.group(1)), unquote(quoted.group(2))
    else:
        half = (len(rest) - 1) // 2  # "a/P b/P": the two halves agree (no rename)
        if len(rest) % 2 == 1 and rest[2:half] == rest[half + 3 :] and rest[half] == " ":
            a, b = rest[:half], rest[half + 1 :]
        else:  # a rename without quoting: the last " b/" is the best guess the line allows
            a, _, b = rest.rpartition(" b/")
            b = "b/" + b
    if not (a.startswith("a/") and b.startswith("b/")):
        return None
    return a[2:], b[2:]


def _spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each ``diff --git`` section of ``text``, each to where the next begins."""
    starts = [m.start() for m in _SECTION.finditer(text)]
    return list(zip(starts, starts[1:] + [len(text)]))


def sections(text: str) -> list[Section]:
    """Every file section of ``text`` (a patch or a ``git diff``), in order."""
    out = []
    for start, end in _spans(text):
        lines = text[start:end].splitlines()
        named = git_line_paths(lines[0])
        if named is None:
            continue
        old: str | None
        new: str | None
        old, new = named
        for line in lines[1:]:
            if line.startswith("@@"):
                break  # the header ends at the first hunk
            moved = _FROM_TO.match(line)
            if moved:  # a rename or copy: its diff --git line cannot say where " b/" splits it
                old, new = (unquote(moved[2]), new) if moved[1] == "from" else (old, unquote(moved[2]))
            elif line.startswith(("new file mode ", "--- /dev/null")):
                old = None
            elif line.startswith(("deleted file mode ", "+++ /dev/null")):
                new = None
        out.append(Section(old, new, start, end))
    return out


def unprefixed_lines(text: str) -> list[str]:
    """The ``diff --git`` lines of ``text`` whose paths are not under ``a/`` and ``b/``."""
    return [line for line in re.findall(r"^diff --git .*$", text, re.M) if git_line_paths(line) is None]


def with_ab_prefixes(text: str) -> str:
    """``text`` with every section's paths under ``a/`` and ``b/``, whatever prefixes it was made
    with; ValueError names a ``diff --git`` line whose paths cannot be told apart from its prefixes."""
    spans = _spans(text)
    if not spans:
        return text
    out = [text[: spans[0][0]]]
    for start, end in spans:
        chunk = text[start:end]
        lines = chunk.splitlines(keepends=True)
        out.append(chunk if git_line_paths(lines[0]) else "".join(_reprefixed(lines)))
    return "".join(out)


def _reprefixed(lines: list[str]) -> list[str]:
    old, new = _bare_paths(lines)
    out = [git_line(old, new)]
    in_header = True
    for line in lines[1:]:
        in_header = in_header and not line.startswith("@@")
        if in_header and line.startswith(("--- ", "+++ ")) and not line[4:].startswith("/dev/null"):
            line = name_line(line[:3], "a/" + old if line.startswith("-") else "b/" + new)
        out.append(line)
    return out


def git_line(old: str, new: str) -> str:
    """The ``diff --git`` line git writes for ``old`` and ``new`` (paths without prefixes)."""
    return f"diff --git {quote('a/' + old)} {quote('b/' + new)}\n"


def name_line(kind: str, name: str) -> str:
    """A ``---`` or ``+++`` line as git writes it: a name with a space ends in a tab."""
    return f"{kind} {quote(name)}{chr(9) if ' ' in name else ''}\n"


def _bare_paths(lines: list[str]) -> tuple[str, str]:
    """(old, new) of one section, without whatever prefixes its ``diff --git`` line carries."""
    moved = {m[1]: unquote(m[2]) for m in map(_FROM_TO.match, lines[1:]) if m}  # never a hunk line (+-space)
    if moved:  # a rename or copy says both names
        return moved["from"], moved["to"]
    halves = _halves(lines[0][len("diff --git ") :].rstrip("\r\n"))
    found = [p for a, b in halves for p in _common_tails(a, b)]
    if not found:
        raise ValueError(f"cannot tell the paths of '{lines[0].rstrip()[:120]}' from its prefixes")
    path = max(found, key=len)
    return path, path


def _halves(rest: str) -> list[tuple[str, str]]:
    """Every way ``rest`` may be two names: the quoted forms as git writes them, else each space."""
    quoted = re.fullmatch(r'("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)', rest)
    if quoted:
        return [(unquote(quoted.group(1)), unquote(quoted.group(2)))]
    return [(rest[:i], rest[i + 1 :]) for i, c in enumerate(rest) if c == " "]


def _common_tails(a: str, b: str) -> list[str]:
    """The paths both names end with, each after a directory boundary (so a prefix is ``x/`` or nothing)."""
    return [a[i:] for i in range(len(a)) if (i == 0 or a[i - 1] == "/") and _is_tail(a[i:], b)]


def _is_tail(path: str, name: str) -> bool:
    return bool(path) and name.endswith(path) and (len(name) == len(path) or name[-len(path) - 1] == "/")


def quote(name: str) -> str:
    """``name`` as git writes it: C-quoted when it holds a quote, a backslash, a control or non-ASCII byte."""
    if not re.search(r'["\\\x00-\x1f\x7f-\U0010ffff]', name):
        return name
    escapes = {'"': '\\"', "\\": "\\\\", "\t": "\\t", "\n": "\\n"}
    body = "".join(
        escapes.get(c, c)
        if c.isascii() and (c in escapes or c.isprintable())
        else "".join(f"\\{b:03o}" for b in git_bytes(c))
        for c in name
    )
    return f'"{body}"'


def renamed_header(section: str, renamed: dict[str, str]) -> str:
    """One file's section with each name in its header that ``renamed`` maps (old -> new path)
    replaced, as git would write it; hunks and every other line as they are."""
    lines = section.splitlines(keepends=True)
    paths = git_line_paths(lines[0])
    if paths is None or not any(p in renamed for p in paths):
        return section
    out = [git_line(*(renamed.get(p, p) for p in paths))]
    for i, line in enumerate(lines[1:], 1):
        if line.startswith("@@"):
            return "".join(out + lines[i:])
        found = _HEADER.match(line)
        if found:
            kind, value = found.group(1), unquote(found.group(2).rstrip("\t"))
            prefix = {"---": "a/", "+++": "b/"}.get(kind, "")
            name = value.removeprefix(prefix)  # "/dev/null" is no path
            if name in renamed:
                line = name_line(kind, prefix + renamed[name]) if prefix else f"{kind} {quote(renamed[name])}\n"
        out.append(line)
    return "".join(out)

"""Which file each section of a git diff is about, read the way git writes it.

A path may hold spaces, even " b/" (``diff --git a/x b/y.txt b/x b/y.txt``), and git C-quotes a
path with unusual bytes (``diff --git "a/caf\\303\\251.txt" "b/caf\\303\\251.txt"``, ``--- a/x y\\t``
for a name with a space). Splitting the ``diff --git`` line at whitespace loses such files, and
with them their hunks. A section's paths come from its ``rename``/``copy`` lines, then its
``---``/``+++`` lines, and only then from the ``diff --git`` line, split where its two halves agree.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_SECTION = re.compile(r"^diff --git ", re.M)
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
    if len(name) >= 2 and name[0] == name[-1] == '"':
        return codecs.escape_decode(name[1:-1].encode())[0].decode("utf-8", "surrogateescape")
    return name


def git_line_paths(line: str) -> tuple[str, str] | None:
    """(old, new) named by a ``diff --git`` line, without their ``a/``/``b/``; None if not one."""
    if not line.startswith("diff --git "):
        return None
    rest = line[len("diff --git "):].rstrip("\r\n")
    quoted = re.fullmatch(r'("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*")', rest) or \
        re.fullmatch(r'("(?:[^"\\]|\\.)*") (\S+)', rest)
    if quoted:
        a, b = unquote(quoted.group(1)), unquote(quoted.group(2))
    else:
        half = (len(rest) - 1) // 2  # "a/P b/P": the two halves agree (no rename)
        if len(rest) % 2 == 1 and rest[2:half] == rest[half + 3:] and rest[half] == " ":
            a, b = rest[:half], rest[half + 1:]
        else:  # a rename without quoting: the last " b/" is the best guess the line allows
            a, _, b = rest.rpartition(" b/")
            b = "b/" + b
    if not (a.startswith("a/") and b.startswith("b/")):
        return None
    return a[2:], b[2:]


def sections(text: str) -> list[Section]:
    """Every file section of ``text`` (a patch or a ``git diff``), in order."""
    starts = [m.start() for m in _SECTION.finditer(text)]
    out = []
    for start, end in zip(starts, starts[1:] + [len(text)]):
        lines = text[start:end].splitlines()
        named = git_line_paths(lines[0])
        if named is None:
            continue
        old, new = named
        for line in lines[1:]:
            if line.startswith("@@"):
                break  # the header ends at the first hunk
            found = _HEADER.match(line)
            if not found:
                continue
            kind, value = found.group(1), unquote(found.group(2).rstrip("\t"))
            if kind in ("rename from", "copy from"):
                old = value
            elif kind in ("rename to", "copy to"):
                new = value
            elif value == "/dev/null":
                old, new = (None, new) if kind == "---" else (old, None)
            elif value[:2] == ("a/" if kind == "---" else "b/"):
                old, new = (value[2:], new) if kind == "---" else (old, value[2:])
        out.append(Section(old, new, start, end))
    return out

"""CHANGELOG.md in Keep a Changelog form: entries go under ``## [Unreleased]``."""

from __future__ import annotations

from pathlib import Path

CHANGELOG = "CHANGELOG.md"


def add_entry(root: Path, section: str, text: str) -> None:
    """Add a bullet under ``### <section>`` of the Unreleased release (created if missing)."""
    path = root / CHANGELOG
    path.write_text(with_entry(path.read_text() if path.exists() else None, section, text))


def with_entry(changelog: str | None, section: str, text: str) -> str:
    """``changelog`` (None: a new one) with a bullet added under ``### <section>`` of Unreleased."""
    lines = changelog.splitlines() if changelog is not None else ["# Changelog", ""]
    try:
        start = next(i for i, l in enumerate(lines) if l.strip().lower().startswith("## [unreleased]"))
    except StopIteration:
        first = next((i for i, l in enumerate(lines) if l.startswith("## ")), len(lines))
        lines[first:first] = ["## [Unreleased]", ""]
        start = first
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    heading = f"### {section}"
    if heading in lines[start:end]:
        at = lines.index(heading, start, end) + 1
        while at < end and lines[at].strip():
            at += 1
        lines[at:at] = [f"- {text}"]
    else:
        insert = start + 1
        lines[insert:insert] = ["", heading, f"- {text}"]
    return "\n".join(_tidy(lines)) + "\n"


def _tidy(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        if not line.strip() and out and not out[-1].strip():
            continue
        out.append(line)
    return out

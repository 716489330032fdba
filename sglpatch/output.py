"""The one way the tool speaks: results on stdout, progress and warnings on stderr.

Every module reports through here, so ``--json`` keeps stdout machine-readable and a quiet run
silences progress in one place. ``say`` is progress (a line a person watches go by), ``warn``
a thing the user should act on; both go to stderr and are flushed at once.
"""

from __future__ import annotations

import json
import sys

_QUIET = False


def set_quiet(quiet: bool) -> None:
    global _QUIET
    _QUIET = quiet


def say(message: str) -> None:
    """Progress: what the tool is doing now."""
    if not _QUIET:
        print(message, file=sys.stderr, flush=True)


def warn(message: str) -> None:
    """Something the user should act on; shown even when quiet."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def error(message: str) -> None:
    """The one line a failed command ends with."""
    print(f"error: {message}", file=sys.stderr, flush=True)


def figure(text: str) -> None:
    """A figure that rewrites itself in place (a download's percentage): a terminal only."""
    if sys.stderr.isatty():
        print(f"\r{text}", end="", file=sys.stderr, flush=True)


def figure_done() -> None:
    """Ends the line ``figure`` rewrote."""
    if sys.stderr.isatty():
        print(file=sys.stderr)


def relay(line: str) -> None:
    """A line of a child process's own output (docker build), passed on as it came."""
    sys.stderr.write(line)


def result(data: dict, text: str, *, as_json: bool) -> None:
    """A command's result on stdout: ``data`` as JSON with ``--json``, else ``text``."""
    print(json.dumps(data, indent=2) if as_json else text)

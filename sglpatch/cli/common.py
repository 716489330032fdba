"""What every command module shares: its result through sglpatch.output, and the line's lock."""

from __future__ import annotations

import functools

from sglpatch.lock import line_lock
from sglpatch.output import result


def emit(args, data: dict, text: str) -> None:
    """A command's result on stdout: ``data`` as JSON with ``--json``, else ``text``."""
    result(data, text, as_json=getattr(args, "json", False))


def writes(name: str):
    """A command that changes the line: it holds the line's lock from start to end."""

    def wrap(handler):
        @functools.wraps(handler)
        def run(args):
            with line_lock(args.root, f"`build.py {name}`"):
                return handler(args)

        return run

    return wrap


def build_text(data: dict) -> str:
    """What `build.py build` prints, from its result (``BuildResult.to_json()``)."""
    upstream = data["upstream"]
    return (
        f"upstream  SGLang {upstream['version']} ({upstream['tag']}, {upstream['commit'] or 'no commit pinned'})\n"
        f"patches   {len(data['patches'])} applied: {', '.join(data['patches']) or 'none'}\n"
        + "\n".join(f"wheel     {w['path']}\nsha256    {w['sha256']}" for w in data["wheels"])
    )

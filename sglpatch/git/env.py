"""A git environment that makes every commit and export reproducible.

User and system git configuration (diff.noprefix, diff.algorithm, format.*, hooks) would change
what `format-patch` writes; the queue's git commands run without them and with a fixed identity.
A work tree's own configuration cannot be switched off, so what of it would change a patch, an
applied file or a diff the tool reads is set back to git's defaults (PINNED_CONFIG; prefixes and
the multi-valued format.to/cc/headers are set by the diff commands' own flags).
"""

from __future__ import annotations

import os

FIXED_IDENTITY = ("sglpatch", "sglpatch@localhost")
# git's defaults, given at command-line scope, which wins over a repository's .git/config (color.diff
# also wins over a color.ui there)
PINNED_CONFIG = {
    "core.quotePath": "true",
    "core.autocrlf": "false",
    "apply.whitespace": "warn",
    "color.diff": "false",
    "diff.context": "3",
    "diff.interHunkContext": "0",
}


def git_env(date: str | None = None) -> dict[str, str]:
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_COMMITTER_NAME": FIXED_IDENTITY[0],
        "GIT_COMMITTER_EMAIL": FIXED_IDENTITY[1],
        "GIT_AUTHOR_NAME": FIXED_IDENTITY[0],
        "GIT_AUTHOR_EMAIL": FIXED_IDENTITY[1],
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_COUNT": str(len(PINNED_CONFIG)),
    }
    for number, (key, value) in enumerate(PINNED_CONFIG.items()):
        env[f"GIT_CONFIG_KEY_{number}"], env[f"GIT_CONFIG_VALUE_{number}"] = key, value
    if date:
        env["GIT_COMMITTER_DATE"] = date
        env["GIT_AUTHOR_DATE"] = date
    return env


def git_bytes(text: str) -> bytes:
    """What git printed, byte for byte: GitPython hands git's output over decoded as UTF-8 with
    surrogateescape, so a patch whose diff is not UTF-8 survives the round trip."""
    return text.encode("utf-8", "surrogateescape")


def git_text(data: bytes) -> str:
    """A file's bytes as GitPython would hand them over (the inverse of ``git_bytes``)."""
    return data.decode("utf-8", "surrogateescape")


def killing_signal(exc: Exception) -> int | None:
    """The signal a failed git command died of (GitPython's negative status), else None."""
    status = getattr(exc, "status", None)
    return -status if isinstance(status, int) and status < 0 else None


def raise_if_killed(exc: Exception) -> None:
    """A git child that died of a signal was interrupted, not refused: say so, never diagnose it.

    Python may ignore the SIGINT its git children get (a parent started it with SIGINT ignored),
    and a git killed alone (OOM killer, a stop aimed at it) leaves Python running; both are an
    interrupt of the command, and the transaction rolls back as for Ctrl-C.
    """
    signum = killing_signal(exc)
    if signum is not None:
        raise KeyboardInterrupt(f"git was stopped by signal {signum}") from None

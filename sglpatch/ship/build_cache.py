"""What a build reuses, keyed by content: the whole build, and the gate's verdict on a tree.

A **build record** is keyed by everything the build reads: the line's directory, its
``upstream.toml``, every file in its ``patches/``, this tool's own code, and the Python and zlib
that write the wheel. It holds what the build printed and, to be reused, everything it made must
still be as it left it: the work tree at the same commits with nothing uncommitted, no operation
interrupted, each wheel in ``dist/`` with its recorded sha256. Anything else rebuilds.

A **gate verdict** is keyed by the patched tree's git tree id, the checks asked for, the
acceptances and this tool's code: a patch edited without changing the tree (its message, say)
or a build whose wheel was deleted skips the checks; any change to a checked file reruns them.

Entries are ``sglpatch.cache``'s: each carries the sha256 of its own body and is dropped, with
a warning, when it does not match. Nothing here imports GitPython or the
checks: a reused build must answer before those would have loaded.
"""

from __future__ import annotations

import hashlib
import json
import sys
import zlib
from pathlib import Path

from sglpatch.cache import code_version, file_sha256, load_entry, store_entry
from sglpatch.git.run import run_git

FORMAT = 1  # bump when an entry's layout changes: old entries then miss
REUSED_NOTE = "build: inputs, work tree and wheels are as the last build left them: reused (--rebuild redoes it)"


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps([FORMAT, *parts], sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------- the whole build


def build_key(root: Path) -> str:
    """Everything a build of the line at ``root`` reads, as one sha256."""
    root = root.resolve()
    patches = root / "patches"
    files = sorted(p for p in patches.iterdir() if p.is_file()) if patches.is_dir() else []
    return _key(
        str(root),
        file_sha256(root / "upstream.toml"),
        [[p.name, file_sha256(p)] for p in files],
        code_version(),
        sys.version,
        zlib.ZLIB_RUNTIME_VERSION,
    )


def work_tree_state(work_tree: Path) -> dict | None:
    """The work tree's HEAD and base commits, or None when it holds anything uncommitted (or is
    not a git work tree at all)."""
    if not (work_tree / ".git").exists():  # gone, or never made here: a record of the same key is someone else's
        return None
    status = run_git(["status", "--porcelain=v2", "--branch", "--untracked-files=all"], cwd=work_tree)
    base = run_git(["rev-parse", "--verify", "--quiet", "refs/sglpatch/base"], cwd=work_tree)
    if status.returncode or base.returncode:
        return None
    lines = status.stdout.splitlines()
    if any(not line.startswith("#") for line in lines):
        return None
    head = next((line.split()[2] for line in lines if line.startswith("# branch.oid ")), None)
    return {"head": head, "base": base.stdout.strip()}


def reused_build(key: str, journal: Path, work_tree: Path) -> dict | None:
    """The result (``BuildResult.to_json()``) of the last build of exactly these inputs
    (``build_key``), when all it made is still as it left it; None: build."""
    body = load_entry("builds", key)
    if body is None or journal.exists():
        return None
    if work_tree_state(work_tree) != body["work_tree"]:
        return None
    for wheel in body["result"]["wheels"]:
        if file_sha256(Path(wheel["path"])) != wheel["sha256"]:
            return None
    return body["result"]


def record_build(key: str, result: dict, work_tree: Path) -> None:
    """Remember a finished build under the key of its inputs as read before it started."""
    state = work_tree_state(work_tree)
    if state is not None:
        store_entry("builds", key, {"result": result, "work_tree": state})


# ---------------------------------------------------------------- the gate's verdict


def gate_key(tree_id: str, checks: list[str], accepted: dict[str, str], compiled: list[str]) -> str:
    return _key(tree_id, checks, sorted(accepted.items()), sorted(compiled), code_version())


def reused_verdict(key: str) -> list[str] | None:
    """What a passing gate said on the same tree with the same checks; None: run the checks."""
    body = load_entry("verdicts", key)
    return None if body is None else list(body["said"])


def record_verdict(key: str, tree_id: str, said: list[str]) -> None:
    store_entry("verdicts", key, {"tree": tree_id, "said": said})

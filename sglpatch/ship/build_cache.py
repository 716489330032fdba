"""What a build reuses, keyed by content: the whole build, and the gate's verdict on a tree.

A **build record** is keyed by everything the build reads: the line's directory, its
``upstream.toml``, every file in its ``patches/``, this tool's own code, and the Python and zlib
that write the wheel. It holds what the build printed and, to be reused, everything it made must
still be as it left it: the work tree at the same commits with nothing uncommitted, no operation
interrupted, each wheel in ``dist/`` with its recorded sha256. Anything else rebuilds.

A **gate verdict** is keyed by the patched tree's git tree id, the checks asked for, the
acceptances and this tool's code: a patch edited without changing the tree (its message, say)
or a build whose wheel was deleted skips the checks; any change to a checked file reruns them.

Every entry carries the sha256 of its own body and is dropped, with a warning, when it does
not match: a cache edited on disk is never trusted. Nothing here imports GitPython or the
checks: a reused build must answer before those would have loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import zlib
from pathlib import Path

from sglpatch.cache import cache_dir
from sglpatch.git.run import run_git
from sglpatch.output import warn

KEEP = 256  # entries of each kind kept; the oldest go first (a key never hits again once its inputs moved on)
FORMAT = 1  # bump when an entry's layout changes: old entries then miss
REUSED_NOTE = "build: inputs, work tree and wheels are as the last build left them: reused (--rebuild redoes it)"
_PACKAGE = Path(__file__).resolve().parents[1]
_CODE_VERSION: list[str] = []


def code_version() -> str:
    """sha256 of this tool's own source: any edit to it (a check, the wheel writer) is a new key."""
    if not _CODE_VERSION:
        _CODE_VERSION.append(source_digest(_PACKAGE))
    return _CODE_VERSION[0]


def source_digest(package: Path) -> str:
    """sha256 of every ``.py`` file under ``package``, by relative path and content."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


# ---------------------------------------------------------------- entries on disk


def _entry_path(kind: str, key: str) -> Path:
    return cache_dir() / kind / f"{key}.json"


def _load(kind: str, key: str) -> dict | None:
    path = _entry_path(kind, key)
    try:
        entry = json.loads(path.read_bytes())
        body, digest = entry["body"], entry["sha256"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        warn(f"ignoring the unreadable cache entry {path}: it is rebuilt")
        return None
    if _digest(body) != digest or body.get("key") != key:
        warn(f"ignoring the cache entry {path}: its content does not match its sha256 (edited on disk?)")
        return None
    return body


def _store(kind: str, key: str, body: dict) -> None:
    path = _entry_path(kind, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps({"sha256": _digest({**body, "key": key}), "body": {**body, "key": key}}, sort_keys=True)
    fd, partial = tempfile.mkstemp(prefix=f".{key[:12]}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(data)
        os.replace(partial, path)  # readers see the old entry or the whole new one
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    _prune(path.parent)


def _prune(directory: Path) -> None:
    entries = list(directory.glob("*.json"))
    if len(entries) <= KEEP:
        return
    for stale in sorted(entries, key=_mtime)[: len(entries) - KEEP]:
        stale.unlink(missing_ok=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps([FORMAT, *parts], sort_keys=True).encode()).hexdigest()


def file_sha256(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError:
        return None


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
    body = _load("builds", key)
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
        _store("builds", key, {"result": result, "work_tree": state})


# ---------------------------------------------------------------- the gate's verdict


def gate_key(tree_id: str, checks: list[str], accepted: dict[str, str], compiled: list[str]) -> str:
    return _key(tree_id, checks, sorted(accepted.items()), sorted(compiled), code_version())


def reused_verdict(key: str) -> list[str] | None:
    """What a passing gate said on the same tree with the same checks; None: run the checks."""
    body = _load("verdicts", key)
    return None if body is None else list(body["said"])


def record_verdict(key: str, tree_id: str, said: list[str]) -> None:
    _store("verdicts", key, {"tree": tree_id, "said": said})

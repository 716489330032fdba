"""What a rebase reports: the data (``--json`` prints it as is) and its text for a person."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from sglpatch.queue import hunks
from sglpatch.queue.line import line_of
from sglpatch.queue.patch_queue import PatchQueue
from sglpatch.queue.rebase_state import State
from sglpatch.queue.rebase_verdicts import Verdict


def report_data(root: Path, state: State, conflict: Verdict | None = None) -> dict:
    line = line_of(root)
    data: dict[str, Any] = {
        "line": line.name,
        "onto": state.onto,
        "from": state.old_version,
        "patches": state.verdicts(),
    }
    if conflict:
        data["patches"].append(asdict(conflict))
        data["stopped"] = {
            "patch": conflict.name,
            "files": conflict.files,
            "kind": conflict.verdict,
            "work_tree": str(PatchQueue(root).path),
            "command": line.command("rebase"),
        }
    return data


def format_report(data: dict) -> str:
    if data.get("aborted"):
        return f"rebase onto {data['onto']} aborted; everything is as before"
    title = f"rebase onto SGLang {data['onto']}" + (" (dry run: nothing changed)" if data.get("dry_run") else "")
    width = max([len(p["name"]) for p in data["patches"]] + [5])
    rows = [f"{p['name']:<{width}}  {p['verdict']:<8}  {p['detail']}" for p in data["patches"]]
    lines = [title, f"{'patch':<{width}}  {'verdict':<8}  detail", *rows]
    for patch in data["patches"]:
        if patch["verdict"] in ("merged", "conflict", "suspect") and patch.get("file_verdicts"):
            lines += [f"    {hunks.summary(f)}" for f in patch["file_verdicts"]]
    if data.get("stopped", {}).get("kind") == "suspect":
        stop = data["stopped"]
        lines += [
            f"stopped at {stop['patch']}: it merged, but what it uses may be gone (see above)",
            f"fix it in {stop['work_tree']} (amend the commit, or leave the edits: --continue folds them "
            f"in), then `{stop['command']} --continue` to accept it; or `--skip` to drop this patch; "
            "or `--abort` to undo the rebase",
        ]
    elif "stopped" in data:
        stop = data["stopped"]
        deleted = [
            f["path"]
            for p in data["patches"]
            if p["name"] == stop["patch"]
            for f in p.get("file_verdicts", [])
            if f["verdict"] == "deleted"
        ]
        marked = [f for f in stop["files"] if f not in deleted]
        where = [f"conflict in {', '.join(marked)} (markers in {stop['work_tree']})"] if marked else []
        where += (
            [
                f"{', '.join(deleted)} deleted upstream: port the change to where the code went, or leave "
                "it out (unless you `git add` it, --continue does not bring the file back)"
            ]
            if deleted
            else []
        )
        lines += [
            f"stopped at {stop['patch']}: " + "; ".join(where),
            f"resolve the files, then `{stop['command']} --continue`; "
            "or `--skip` to drop this patch; or `--abort` to undo the rebase",
        ]
    return "\n".join(lines)

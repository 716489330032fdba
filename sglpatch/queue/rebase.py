"""`rebase --onto VERSION`: carry the series to a new upstream release, one verdict per patch.

The new release is imported into the same mirror as the old one, so the preimage blobs of every
patch exist and `git am --3way` can do a real three-way merge; there is never any fuzz. Verdicts:

- clean: applied as is, at the same lines;
- merged: applied at other lines or by three-way merge (what moved is reported);
- conflict: the merge stopped; markers are in build/src (`--continue`, `--skip`, `--abort`);
- obsolete: upstream already has it, textually (the change is present or merges to nothing) or
  semantically (a `Drop-When` condition holds on the pristine new release).

Everything the rebase will change in the repository is backed up first, so `--abort` (or a
failure) returns exactly to the state before; the state file lets a conflict resolution survive
a crash and a rerun.

Here: the entry points and the replay loop. One patch's verdict is ``rebase_verdicts``, the journal
``rebase_state``, `--continue`/`--skip` of a stopped step ``rebase_resolution``, the last step
``rebase_finish``, the report ``rebase_report``.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import asdict
from pathlib import Path

from packaging.version import Version

from sglpatch.errors import UserError
from sglpatch.git.repo import pinned_env, run
from sglpatch.lock import line_lock
from sglpatch.output import say
from sglpatch.queue.hunks import Moves
from sglpatch.queue.line import line_of
from sglpatch.queue.patch_queue import PatchQueue
from sglpatch.queue.prepare import prepare_tree
from sglpatch.queue.rebase_finish import finish_rebase

# The API (docs/INTERNAL-API.md), the command line and the tests reach these as rebase.NAME;
# they live with the step that uses them.
from sglpatch.queue.rebase_report import (
    format_report,  # noqa: F401
    report_data,
)
from sglpatch.queue.rebase_resolution import (  # noqa: F401
    _deleted_upstream_unresolved,
    _has_conflict_markers,
    continue_stopped,
    head_sha,
    record_step,
    skip_stopped,
)
from sglpatch.queue.rebase_state import REBASE_BRANCH, STATE_DIR, State, drop_scratch_state, patch_sha256
from sglpatch.queue.rebase_verdicts import (  # noqa: F401
    NEEDS_A_MAINTAINER,
    _moved_hunks,
    apply_one,
    check_suspects,
    conflicted_files,
    dry_run_verdicts,
    needs_a_maintainer,  # noqa: F401
)
from sglpatch.queue.series import parse_patch, read_series
from sglpatch.queue.transaction import resumed, transaction
from sglpatch.queue.transaction_journal import boundary, rebase_in_progress
from sglpatch.upstream import source
from sglpatch.upstream.pin import Pin, read_pin, validate_version

# ---------------------------------------------------------------- entry points


def start(root: Path, onto: str, commit: str | None = None, dry_run: bool = False) -> dict:
    version = validate_version(onto)
    pin = read_pin(root)  # the command's one read of the pin: passed down to every step below
    if version == Version(pin.version):
        raise UserError(f"the series is already on SGLang {version}", "name a newer release")
    if version < Version(pin.version):
        raise UserError(
            f"SGLang {version} is older than the pinned {pin.version}",
            "a rebase only moves a line forward; start an older line with `lines --add`",
        )
    onto = _as_released(version)  # `v0.5.10`, `0.5.10 `, `0.5.10.0` are 0.5.10, never a tag of their own
    if commit is not None and not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise UserError(
            f"--commit '{commit}' is not a full commit id (40 hex digits)",
            "give the upstream commit of the release, e.g. from `git ls-remote`",
        )
    if dry_run:
        series = read_series(root)
        old_base = source.prepare(pin, root)
        say(f"importing SGLang {onto}")
        new_base = source.import_release(onto)
        return dry_run_verdicts(
            series, onto, old_base, new_base, source.pristine_tree(onto), source.pristine_tree(pin.version, pin)
        )
    with line_lock(root, f"`rebase --onto {onto}`"):
        series = read_series(root)  # the command's one read of the series, under the line's lock
        # a transaction of its own: the rebase starts from here
        _, _, _, queue = prepare_tree(root, pin=pin, series=series)
        try:
            with transaction(root, f"rebase --onto {onto}", durable=True) as tx:
                return _start(root, tx, queue, series, pin, onto, commit)
        except BaseException:
            if not rebase_in_progress(line_of(root)):  # rolled back: drop its scratch state too
                drop_scratch_state(root, queue.repo)
            raise


def _as_released(version: Version) -> str:
    """``version`` as the index spells the release (PEP 440 equal); else its normal form, for
    the import to say the index lacks it."""
    return next((v for v in source.released_versions() if Version(v) == version), str(version))


def _start(root: Path, tx, queue: PatchQueue, series, pin, onto: str, commit: str | None) -> dict:
    tx.refuse_unsafe([p.path for p in series.patches])
    shutil.rmtree(root / STATE_DIR, ignore_errors=True)
    copies = root / STATE_DIR / "patches"
    copies.mkdir(parents=True)
    for patch in series.patches:
        shutil.copyfile(patch.path, copies / patch.name)
    state = State(
        onto,
        pin.version,
        commit,
        [{"name": p.name, "sha256": patch_sha256(copies / p.name)} for p in series.patches],
        old_base=queue.base.hexsha,
    )
    state.save(root)
    say(f"importing SGLang {onto}")
    state.new_base = source.import_release(onto)
    queue.fetch(source.open_mirror(), state.new_base)
    with pinned_env(queue.repo):
        run(queue.repo, "checkout", "--quiet", "-B", REBASE_BRANCH, state.new_base)
    boundary("rebase:on-new-base")
    state.save(root)
    return _replay(root, queue, state, tx, pin=pin)


def resume(root: Path, action: str) -> dict:
    line = line_of(root)
    if not rebase_in_progress(line):
        raise UserError("no rebase is in progress", "start one with `rebase --onto VERSION`")
    with resumed(root, f"rebase --{action}") as tx:
        queue = PatchQueue(root)
        if action == "abort":
            try:
                state = State.load(root)
            except UserError:
                state = None  # a damaged journal does not stop the way back
            return abort(root, queue, tx, state)
        state = State.load(root)
        if state is None and (root / STATE_DIR / "patches").is_dir():
            raise UserError(
                f"the rebase journal {root / STATE_DIR / 'state.json'} is missing",
                f"`{line.command('rebase', '--abort')}` returns to the state before the rebase",
            )
        if state is None or state.new_base is None:  # killed before its first step
            abort(root, queue, tx, state)
            raise UserError(
                f"`{tx.op}` was interrupted before its first step; the line is as it was before it",
                f"rerun `{line.command(*tx.op.split())}`",
            )
        pin = read_pin(root)  # the command's one read of the pin: still the old release's until the end
        trees = _trees(root, state, pin)
        if action == "skip":
            skip_stopped(queue, state)
        else:
            stopped = continue_stopped(queue, state, *trees)
            if stopped is not None:  # the resolution went in, but what it uses may be gone
                assert state.current is not None  # the stopped step continue_stopped judged
                state.current.update(stopped=True, conflict=asdict(stopped))
                state.save(root)
                tx.suspend()
                return report_data(root, state, conflict=stopped)
        state.save(root)
        return _replay(root, queue, state, tx, trees, pin=pin)


def abort(root: Path, queue: PatchQueue, tx, state: State | None) -> dict:
    tx.abandon()
    drop_scratch_state(root, queue.repo)
    onto = state.onto if state else tx.op.rpartition(" ")[2]
    return {"onto": onto, "aborted": True, "patches": state.verdicts() if state else []}


def progress(root: Path) -> dict | None:
    """Where a rebase in progress on the line stands (None: no rebase), for `status`."""
    line = line_of(root)
    journal = rebase_in_progress(line)
    if journal is None:
        return None
    state = State.load(root)
    steps = state.verdicts() if state else []
    current = state.current if state else None
    data = {
        "op": journal["op"],
        "done": steps,
        "stopped_at": current and current["name"],
        "pending": [p["name"] for p in (state.patches if state else [])][len(steps) + bool(current) :],
        "continue": line.command("rebase", "--continue"),
        "abort": line.command("rebase", "--abort"),
    }
    rows = [f"= {s['name']}  {s['verdict']}" for s in steps]
    if current:
        files = ", ".join(current.get("conflict", {}).get("files", []))
        rows.append(
            f"! {current['name']}  stopped: conflict in {files}"
            if current.get("stopped")
            else f"! {current['name']}  interrupted"
        )
    rows += [f"- {name}" for name in data["pending"]]
    data["text"] = "\n".join(
        [
            f"a rebase is in progress (`{journal['op']}`): resolve the conflict, then "
            f"`{data['continue']}`; `--skip` drops the patch; `{data['abort']}` "
            "returns to the state before",
            *rows,
        ]
    )
    return data


# ---------------------------------------------------------------- replay


def _trees(root: Path, state: State, pin: Pin | None = None) -> tuple[Path, Path]:
    """The pristine old and new releases, which the suspect check compares. ``pin``: the line's
    pin as the command read it (default: read here); still the old release's until the rebase
    finishes."""
    if pin is None:
        pin = read_pin(root)
    old = source.pristine_tree(state.old_version, pin if pin.is_version(state.old_version) else None)
    return old, source.pristine_tree(state.onto)


def _replay(
    root: Path, queue: PatchQueue, state: State, tx, trees: tuple[Path, Path] | None = None, *, pin: Pin | None = None
) -> dict:
    """Apply the patches not yet done, then finish. ``pin``: the line's pin as the command read it
    (default: read where needed)."""
    old_pristine, pristine = trees or _trees(root, state, pin)
    assert state.new_base is not None  # start() imported it before the first step
    moves = Moves.between(queue.repo, state.old_base, state.new_base)
    while len(state.steps) < len(state.patches):
        entry = state.patches[len(state.steps)]
        copy = root / STATE_DIR / "patches" / entry["name"]
        if not copy.is_file() or patch_sha256(copy) != entry["sha256"]:
            raise UserError(
                f"{copy} is not the {entry['name']} the rebase started from",
                "`rebase --abort` returns to the state before the rebase",
            )
        state.current = {"name": entry["name"], "head_before": head_sha(queue), "stopped": False}
        state.save(root)
        verdict = apply_one(queue.repo, parse_patch(copy), state.onto, pristine, moves)
        verdict = check_suspects(queue.repo, verdict, old_pristine, pristine)
        boundary("rebase:applied")
        if verdict.verdict in NEEDS_A_MAINTAINER:
            state.current.update(stopped=True, conflict=asdict(verdict))
            state.save(root)
            tx.suspend()
            return report_data(root, state, conflict=verdict)
        moved = head_sha(queue) != state.current["head_before"]
        record_step(state, verdict, head_sha(queue) if moved else None)
        state.save(root)
    return finish_rebase(root, queue, state, tx, pin=pin)

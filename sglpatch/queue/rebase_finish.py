"""The last step of a rebase: the new patches, series, pin, gitlink and changelog entry staged and
committed as one, the work tree moved onto the new release."""

from __future__ import annotations

from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.git.repo import first_parent_commits, pinned_env, run
from sglpatch.queue.changelog import CHANGELOG, with_entry
from sglpatch.queue.line import Line, line_of
from sglpatch.queue.patch_queue import BASE_REF, BRANCH, PatchQueue, format_patch
from sglpatch.queue.rebase_report import report_data
from sglpatch.queue.rebase_state import State, drop_scratch_state
from sglpatch.queue.rebase_verdicts import Verdict
from sglpatch.queue.series import PATCH_DIR, refuse_conflict_markers, render_series, series_path
from sglpatch.queue.snapshot import read_gitlink
from sglpatch.queue.transaction_journal import boundary
from sglpatch.upstream import source
from sglpatch.upstream.pin import PIN_FILE, Artifact, Pin, read_pin, render_pin


def finish_rebase(root: Path, queue: PatchQueue, state: State, tx, *, pin: Pin | None = None) -> dict:
    """Stage the new series, pin, gitlink and changelog entry, then commit them as one. ``pin``:
    the line's pin as the command read it, the old release's (default: read here)."""
    kept = [s for s in state.steps if s["verdict"] in ("clean", "merged")]
    dropped = [
        Verdict(**{k: s[k] for k in ("name", "verdict", "detail", "files")})
        for s in state.steps
        if s["verdict"] in ("obsolete", "skipped")
    ]
    chain = [c.hexsha for c in first_parent_commits(queue.repo, f"{state.new_base}..HEAD")][::-1]
    if chain != [s["commit"] for s in kept]:
        raise UserError(
            f"the commits in {queue.path} do not match the rebase's journal "
            f"({len(chain)} commits above SGLang {state.onto}, {len(kept)} patches kept)",
            "`rebase --abort` returns to the state before the rebase",
        )
    for step in kept:
        text = format_patch(queue.repo, step["commit"])
        refuse_conflict_markers(
            text,
            step["name"],
            "`rebase --abort` returns to the state before the rebase; "
            "rerun it and resolve in the work tree before `rebase --continue`",
        )
        tx.write(root / PATCH_DIR / step["name"], text)
    for verdict in dropped:
        if (root / PATCH_DIR / verdict.name).exists():
            tx.delete(root / PATCH_DIR / verdict.name)
    names = [s["name"] for s in kept]
    tx.write(series_path(root), render_series(root, names), whole=False)
    if pin is None:
        pin = read_pin(root)
    _stage_pin(root, state, tx, pin)
    line = line_of(root)
    # The new pin is only staged: the file still holds the old one, whose [series] changelog the
    # moved pin keeps as it is, so the pin read once serves here too.
    if pin.changelog:  # a line for experiments may keep out of the shared CHANGELOG
        _stage_changelog(line, _changelog_line(line, state.onto, names, dropped), tx)
    tx.preflight()  # refuse before the work tree moves, so a rerun of --continue can finish
    with pinned_env(queue.repo):
        run(queue.repo, "update-ref", BASE_REF, state.new_base)
        run(queue.repo, "checkout", "--quiet", "-B", BRANCH)
    boundary("rebase:finished-work-tree")
    tx.commit(_changelog_line(line, state.onto, names, dropped))
    drop_scratch_state(root, queue.repo)
    return report_data(root, state)


def _stage_changelog(line: Line, entry: str, tx) -> None:
    changelog = line.repo / CHANGELOG
    try:
        text = changelog.read_text(encoding="utf-8") if changelog.exists() else None
    except UnicodeDecodeError:
        raise UserError(f"{changelog} is not UTF-8 text", "save it as UTF-8, then rerun `rebase --continue`") from None
    tx.write(changelog, with_entry(text, "Changed", entry), whole=False)


def _stage_pin(root: Path, state: State, tx, pin: Pin) -> None:
    artifacts = []
    for kind in ("sdist", *source.wheel_kinds(state.onto)):
        path = source.release_artifact(state.onto, kind)
        if path is not None:
            artifacts.append(Artifact(kind, path.name, source.file_sha256(path)))
    moved = pin.with_release(state.onto, f"v{state.onto}", state.commit, tuple(artifacts))
    tx.write(root / PIN_FILE, render_pin(root, moved), whole=False)
    line = line_of(root)
    if state.commit and read_gitlink(line):
        tx.set_gitlink(f"160000 {state.commit}")


def _changelog_line(line: Line, onto: str, kept: list[str], dropped: list[Verdict]) -> str:
    what = "Rebased" if line.is_production else f"Rebased the {line.label()}"
    parts = [f"{what} onto SGLang {onto}: kept {', '.join(kept) or 'none'}"]
    if dropped:
        parts.append(
            "dropped "
            + ", ".join(
                f"{v.name} ({'upstreamed in ' + onto if v.verdict == 'obsolete' else 'dropped by the maintainer'})"
                for v in dropped
            )
        )
    return "; ".join(parts)

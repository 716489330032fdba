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
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import git
from packaging.version import Version

from sglpatch.contract import checks
from sglpatch.queue import hunks
from sglpatch.upstream import source
from sglpatch.queue.prepare import prepare_tree, say
from sglpatch.queue.changelog import CHANGELOG, with_entry
from sglpatch.errors import UserError
from sglpatch.git.diffheader import sections
from sglpatch.git.env import git_bytes, git_env, git_text, raise_if_killed
from sglpatch.queue.line import Line, line_of
from sglpatch.lock import line_lock
from sglpatch.upstream.pin import PIN_FILE, Artifact, read_pin, render_pin, validate_version
from sglpatch.queue.patch_queue import BASE_REF, BRANCH, PatchQueue, am_refusal, format_patch
from sglpatch.queue.hunks import Moves
from sglpatch.queue.series import PATCH_DIR, PatchEntry, commit_matches_patch, holds_conflict_markers, parse_patch, read_series, refuse_conflict_markers, render_series, series_path
from sglpatch.queue.snapshot import read_gitlink
from sglpatch.queue.transaction import boundary, rebase_in_progress, resumed, transaction

STATE_DIR = Path("build") / "rebase"
REBASE_BRANCH = "sglpatch-rebase"
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@", re.M)
# git's merge messages: "CONFLICT (content): Merge conflict in PATH",
# "CONFLICT (modify/delete): PATH deleted in HEAD and modified in ...", "... (rename/delete) ..."
_CONFLICT = re.compile(r"^CONFLICT \([^)]*\): (?:Merge conflict in (.+)|(.+?) deleted in )", re.M)  # names as they are


@dataclass
class Verdict:
    name: str
    verdict: str  # clean | merged | conflict | obsolete | skipped
    detail: str = ""
    files: list[str] = field(default_factory=list)
    file_verdicts: list[dict] = field(default_factory=list)  # hunks.FileVerdict, per file and hunk


@dataclass
class State:
    """The rebase journal. Each patch is known by its identity (name and sha256 of the file the
    rebase started from, copied into ``build/rebase/patches/``) and each finished step by the
    commit made for it, never by position alone."""

    onto: str
    old_version: str
    commit: str | None  # the upstream commit for the gitlink (--commit)
    patches: list[dict]  # the series at the start: {"name", "sha256"}, replayed in this order
    new_base: str | None = None
    old_base: str | None = None  # the release the series was on: upstream's moves are from it
    steps: list[dict] = field(default_factory=list)  # Verdict fields + "commit"
    current: dict | None = None  # the patch being applied: name, sha256, head_before, stopped

    def save(self, root: Path) -> None:
        path = root / STATE_DIR / "state.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)
        boundary("rebase:state")

    @classmethod
    def load(cls, root: Path) -> State | None:
        path = root / STATE_DIR / "state.json"
        if not path.exists():
            return None
        try:
            state = cls(**json.loads(path.read_text()))
            [(p["name"], p["sha256"]) for p in state.patches]  # noqa: B018  (shape check)
            return state
        except (ValueError, TypeError, KeyError, UnicodeDecodeError):
            raise UserError(f"the rebase journal {path} is damaged",
                            f"`{line_of(root).command('rebase', '--abort')}` returns to the state "
                            "before the rebase") from None

    def verdicts(self) -> list[dict]:
        return [{**{k: s[k] for k in ("name", "verdict", "detail", "files")},
                 "file_verdicts": s.get("file_verdicts", [])} for s in self.steps]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- entry points

def start(root: Path, onto: str, commit: str | None = None, dry_run: bool = False) -> dict:
    version = validate_version(onto)
    pin = read_pin(root)
    if version == Version(pin.version):
        raise UserError(f"the series is already on SGLang {onto}", "name a newer release")
    if version < Version(pin.version):
        raise UserError(f"SGLang {onto} is older than the pinned {pin.version}",
                        "a rebase only moves a line forward; start an older line with `lines --add`")
    if commit is not None and not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise UserError(f"--commit '{commit}' is not a full commit id (40 hex digits)",
                        "give the upstream commit of the release, e.g. from `git ls-remote`")
    if dry_run:
        series = read_series(root)
        old_base = source.prepare(pin, root)
        say(f"importing SGLang {onto}")
        new_base = source.import_release(onto)
        return _dry_run(series, onto, old_base, new_base, source.pristine_tree(onto),
                        source.pristine_tree(pin.version, pin))
    with line_lock(root, f"`rebase --onto {onto}`"):
        series = read_series(root)
        _, _, _, queue = prepare_tree(root)  # a transaction of its own: the rebase starts from here
        try:
            with transaction(root, f"rebase --onto {onto}", durable=True) as tx:
                return _start(root, tx, queue, series, pin, onto, commit)
        except BaseException:
            if not rebase_in_progress(line_of(root)):  # rolled back: drop its scratch state too
                _forget(root, queue.repo)
            raise


def _start(root: Path, tx, queue: PatchQueue, series, pin, onto: str, commit: str | None) -> dict:
    tx.refuse_unsafe([p.path for p in series.patches])
    shutil.rmtree(root / STATE_DIR, ignore_errors=True)
    copies = root / STATE_DIR / "patches"
    copies.mkdir(parents=True)
    for patch in series.patches:
        shutil.copyfile(patch.path, copies / patch.name)
    state = State(onto, pin.version, commit,
                  [{"name": p.name, "sha256": _sha256(copies / p.name)} for p in series.patches],
                  old_base=queue.base.hexsha)
    state.save(root)
    say(f"importing SGLang {onto}")
    state.new_base = source.import_release(onto)
    queue.fetch(source.open_mirror(), state.new_base)
    with queue.repo.git.custom_environment(**git_env()):
        queue.repo.git.checkout("--quiet", "-B", REBASE_BRANCH, state.new_base)
    boundary("rebase:on-new-base")
    state.save(root)
    return _replay(root, queue, state, tx)


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
            raise UserError(f"the rebase journal {root / STATE_DIR / 'state.json'} is missing",
                            f"`{line.command('rebase', '--abort')}` returns to the state before the rebase")
        if state is None or state.new_base is None:  # killed before its first step
            abort(root, queue, tx, state)
            raise UserError(f"`{tx.op}` was interrupted before its first step; the line is as it was before it",
                            f"rerun `{line.command(*tx.op.split())}`")
        trees = _trees(root, state)
        if action == "skip":
            _skip(queue, state)
        else:
            stopped = _continue(queue, state, *trees)
            if stopped is not None:  # the resolution went in, but what it uses may be gone
                state.current.update(stopped=True, conflict=asdict(stopped))
                state.save(root)
                tx.suspend()
                return _report(root, state, conflict=stopped)
        state.save(root)
        return _replay(root, queue, state, tx, trees)


def abort(root: Path, queue: PatchQueue, tx, state: State | None) -> dict:
    tx.abandon()
    _forget(root, queue.repo)
    onto = state.onto if state else tx.op.rpartition(" ")[2]
    return {"onto": onto, "aborted": True, "patches": state.verdicts() if state else []}


def _forget(root: Path, repo: git.Repo) -> None:
    """Drop the rebase's own scratch state once its transaction ended."""
    with repo.git.custom_environment(**git_env()):
        if repo.git.branch("--list", REBASE_BRANCH).strip() and repo.active_branch.name != REBASE_BRANCH:
            repo.git.branch("--quiet", "-D", REBASE_BRANCH)
    shutil.rmtree(root / STATE_DIR, ignore_errors=True)


def progress(root: Path) -> dict | None:
    """Where a rebase in progress on the line stands (None: no rebase), for `status`."""
    line = line_of(root)
    journal = rebase_in_progress(line)
    if journal is None:
        return None
    state = State.load(root)
    steps = state.verdicts() if state else []
    current = state.current if state else None
    data = {"op": journal["op"], "done": steps, "stopped_at": current and current["name"],
            "pending": [p["name"] for p in (state.patches if state else [])][len(steps) + bool(current):],
            "continue": line.command("rebase", "--continue"), "abort": line.command("rebase", "--abort")}
    rows = [f"= {s['name']}  {s['verdict']}" for s in steps]
    if current:
        files = ", ".join(current.get("conflict", {}).get("files", []))
        rows.append(f"! {current['name']}  stopped: conflict in {files}" if current.get("stopped")
                    else f"! {current['name']}  interrupted")
    rows += [f"- {name}" for name in data["pending"]]
    data["text"] = "\n".join([f"a rebase is in progress (`{journal['op']}`): resolve the conflict, then "
                               f"`{data['continue']}`; `--skip` drops the patch; `{data['abort']}` "
                               "returns to the state before", *rows])
    return data


# ---------------------------------------------------------------- resuming a stopped step

def _in_am(queue: PatchQueue) -> bool:
    return (Path(queue.repo.git_dir) / "rebase-apply").exists()


def _head(queue: PatchQueue) -> str:
    return queue.repo.head.commit.hexsha


def _skip(queue: PatchQueue, state: State) -> None:
    current = state.current
    if current is None:
        raise UserError("the rebase is not stopped at a patch", "run `rebase --continue`")
    _back_to_before(queue, current)
    _record_step(state, Verdict(current["name"], "skipped", "dropped by the maintainer"), None)


def _continue(queue: PatchQueue, state: State, old_tree: Path, new_tree: Path) -> Verdict | None:
    """Take the maintainer's resolution of the stopped patch. A resolved conflict is checked like
    any merge (the files that merged around the conflict and the resolution itself): the suspect
    verdict it returns stops the rebase again, and the next ``--continue`` accepts it."""
    current = state.current
    if current is None:
        return None  # every step had finished; the rebase was stopped before writing its result
    if not current.get("stopped"):
        _back_to_before(queue, current)
        state.current = None
        return None
    name, before = current["name"], current["head_before"]
    markers = _has_conflict_markers(queue)
    if markers:
        raise UserError(f"conflict markers remain in {', '.join(markers)}",
                        "resolve them, then `rebase --continue`")
    suspect = current.get("conflict", {}).get("verdict") == "suspect"
    if _in_am(queue):
        _finish_am(queue, state)
    elif suspect and queue.is_dirty() and _head(queue) != before:  # the maintainer's fix, not committed
        with queue.repo.git.custom_environment(**git_env()):
            queue.repo.git.add("--all")
            queue.repo.git.commit("--quiet", "--amend", "--no-edit", "--no-verify")
    elif queue.is_dirty():
        raise UserError(f"no `git am` is in progress for {name}, and {queue.path} has uncommitted edits",
                        "`rebase --skip` drops the patch, `rebase --abort` returns to the state before")
    head = _head(queue)
    if head == before:
        if not current.get("continued"):  # the am ended without us: aborted by hand
            raise UserError(f"the conflict in {name} is no longer in progress (was `git am --abort` run?) "
                            "and HEAD holds no resolution of it",
                            "`rebase --skip` drops the patch, `rebase --abort` returns to the state before the rebase")
        _record_step(state, Verdict(name, "obsolete", "the resolution left no change"), None)
        return None
    commit = queue.repo.commit(head)
    patch = parse_patch(queue.root / STATE_DIR / "patches" / name)
    if [p.hexsha for p in commit.parents] != [before] or not commit_matches_patch(commit.message, patch):
        raise UserError(f"HEAD in {queue.path} is {head[:12]} ('{commit.summary}'), not a resolution of {name} "
                        f"on top of {before[:12]}", "put HEAD back, `rebase --skip`, or `rebase --abort`")
    stopped_at = current.get("conflict", {})
    if suspect:
        _record_step(state, Verdict(name, "merged", "suspect merge accepted by the maintainer",
                                    stopped_at.get("files", [])), head)
        return None
    resolved = Verdict(name, "merged", "conflict resolved by the maintainer",
                       [f["path"] for f in stopped_at.get("file_verdicts", [])] or patch.files,
                       _resolved(stopped_at.get("file_verdicts", [])))
    checked = check_suspects(queue.repo, resolved, old_tree, new_tree)
    if checked.verdict == "suspect":
        return replace(checked, detail=f"conflict resolved, but {checked.detail.removeprefix('merged, but ')}")
    _record_step(state, replace(resolved, files=stopped_at.get("files", []), file_verdicts=[]), head)
    return None


def _resolved(file_verdicts: list[dict]) -> list[dict]:
    """The stopped patch's per-file verdicts once the maintainer resolved its conflicts."""
    return [{**f, "verdict": "merged" if f["verdict"] == "conflict" else f["verdict"],
             "hunks": [{**h, "verdict": "merged" if h["verdict"] == "conflict" else h["verdict"]}
                       for h in f["hunks"]]} for f in file_verdicts]


def _finish_am(queue: PatchQueue, state: State) -> None:
    """Commit the maintainer's resolution with the stopped `git am` (ours: HEAD has not moved)."""
    current = state.current
    if _head(queue) != current["head_before"]:
        raise UserError(f"HEAD in {queue.path} moved to {_head(queue)[:12]} while {current['name']} was "
                        f"stopped (it was {current['head_before'][:12]})", "put it back, or `rebase --abort`")
    current["continued"] = True  # from here an unmoved HEAD means "resolved to no change"
    state.save(queue.root)
    with queue.repo.git.custom_environment(**git_env()):
        for path in _deleted_upstream_unresolved(queue.repo):  # never resurrected by `add --all`
            queue.repo.git.rm("-q", "-f", "--", path)
        queue.repo.git.add("--all")
        boundary("rebase:resolution-added")
        try:
            queue.repo.git.am("--continue")
        except git.GitCommandError as exc:
            raise_if_killed(exc)
            if "No changes" not in (exc.stdout + exc.stderr):
                refused, by_hook = am_refusal(queue.repo, exc.stderr or "", "`rebase --continue`")
                raise UserError(f"git am --continue failed for {current['name']}: {refused}",
                                by_hook or "resolve it in the work tree, then `rebase --continue`") from None
            queue.repo.git.am("--skip")


def _deleted_upstream_unresolved(repo: git.Repo) -> list[str]:
    """Paths of a modify/delete conflict (the new release deleted them, the patch changes them)
    that the maintainer has neither staged (`git add`) nor removed: no stage 2, no stage 0."""
    stages: dict[str, set[str]] = {}
    for row in repo.git.ls_files("--unmerged", "-z").split("\0"):
        if row:
            info, path = row.split("\t", 1)
            stages.setdefault(path, set()).add(info.split()[2])
    return sorted(path for path, found in stages.items() if "2" not in found)


def _back_to_before(queue: PatchQueue, current: dict) -> None:
    """The work tree as it was before ``current``'s step: its `git am` ended and whatever it, or
    the maintainer by hand, committed for the patch dropped. A step killed midway is redone from
    there (it holds nothing of the user's); a skipped patch leaves nothing behind."""
    with queue.repo.git.custom_environment(**git_env()):
        if _in_am(queue):
            queue.repo.git.am("--quit")
        queue.repo.git.reset("--quiet", "--hard", current["head_before"])


def _record_step(state: State, verdict: Verdict, commit: str | None) -> None:
    state.steps.append({**asdict(verdict), "commit": commit})
    state.current = None


# ---------------------------------------------------------------- replay

def _trees(root: Path, state: State) -> tuple[Path, Path]:
    """The pristine old and new releases, which the suspect check compares."""
    pin = read_pin(root)  # still the old release's until the rebase finishes
    old = source.pristine_tree(state.old_version, pin if pin.is_version(state.old_version) else None)
    return old, source.pristine_tree(state.onto)


def _replay(root: Path, queue: PatchQueue, state: State, tx, trees: tuple[Path, Path] | None = None) -> dict:
    old_pristine, pristine = trees or _trees(root, state)
    moves = Moves.between(queue.repo, state.old_base, state.new_base)
    while len(state.steps) < len(state.patches):
        entry = state.patches[len(state.steps)]
        copy = root / STATE_DIR / "patches" / entry["name"]
        if not copy.is_file() or _sha256(copy) != entry["sha256"]:
            raise UserError(f"{copy} is not the {entry['name']} the rebase started from",
                            "`rebase --abort` returns to the state before the rebase")
        state.current = {"name": entry["name"], "head_before": _head(queue), "stopped": False}
        state.save(root)
        verdict = apply_one(queue.repo, parse_patch(copy), state.onto, pristine, moves)
        verdict = check_suspects(queue.repo, verdict, old_pristine, pristine)
        boundary("rebase:applied")
        if verdict.verdict in NEEDS_A_MAINTAINER:
            state.current.update(stopped=True, conflict=asdict(verdict))
            state.save(root)
            tx.suspend()
            return _report(root, state, conflict=verdict)
        moved = _head(queue) != state.current["head_before"]
        _record_step(state, verdict, _head(queue) if moved else None)
        state.save(root)
    return _finish(root, queue, state, tx)


def apply_one(repo: git.Repo, patch: PatchEntry, version: str, pristine: Path, moves: Moves) -> Verdict:
    """Replay one patch on HEAD and say what happened, per patch, per file and per hunk. A file
    upstream moved is followed to its new path; one it deleted is a conflict that says so."""
    reason = drop_reason(patch, version, pristine)
    if reason:
        return Verdict(patch.name, "obsolete", reason, list(patch.files))
    text = git_text(patch.path.read_bytes())
    followed, moved = moves.follow(text)
    files = [moved.get(f, f) for f in patch.files]
    with tempfile.TemporaryDirectory(prefix="sglpatch-apply-") as tmp, \
            repo.git.custom_environment(**git_env()):
        carried = patch.path
        if moved:
            carried = Path(tmp) / patch.name
            carried.write_bytes(git_bytes(followed))
        try:
            repo.git.apply("--check", "--reverse", str(carried))
            return Verdict(patch.name, "obsolete", f"SGLang {version} already contains the change", files)
        except git.GitCommandError as exc:
            raise_if_killed(exc)
        per_file = hunks.verdicts(repo, followed, moves, moved)
        notes = [f"{old} moved to {new} upstream" for old, new in moved.items()]
        before = repo.head.commit.hexsha
        try:
            output = repo.git.am("--3way", "--committer-date-is-author-date", str(carried))
        except git.GitCommandError as exc:
            raise_if_killed(exc)
            _refuse_mail_header(repo, patch, exc)
            conflicted = conflicted_files(exc.stdout or "") or files
            gone = [f for f in conflicted if f in moves.deleted and f not in moved]
            per_file = hunks.settle_conflicts(per_file, conflicted)
            where = ", ".join(f"{f} (deleted upstream)" if f in gone else f for f in conflicted)
            return Verdict(patch.name, "conflict", "; ".join([f"three-way merge stopped in {where}", *notes]),
                           conflicted, hunks.as_dicts(per_file))
        if repo.head.commit.hexsha == before:
            return Verdict(patch.name, "obsolete", f"merges to no change on SGLang {version}", files)
        shifted = _moved_hunks(followed, format_patch(repo, "HEAD"))
        detail = "; ".join(filter(None, ["three-way merge" if "3-way merge" in output else "", shifted, *notes]))
        kind = "merged" if detail else "clean"
        if "3-way merge" in output and not shifted:
            detail += "; same hunks"
        return Verdict(patch.name, kind, detail, files, hunks.as_dicts(per_file))


def check_suspects(repo: git.Repo, verdict: Verdict, old_tree: Path, new_tree: Path) -> Verdict:
    """A patch that went in (clean or merged) is ``suspect`` when its added lines use what the
    new release lost, or it leaves unpatched calls that upstream added."""
    if verdict.verdict not in ("clean", "merged"):
        return verdict
    files = [hunks.FileVerdict(f["path"], f["verdict"], f["detail"], [hunks.Hunk(**h) for h in f["hunks"]])
             for f in verdict.file_verdicts]
    found, files = hunks.suspects(repo, files, old_tree, new_tree, verdict.files)
    if not found:
        return verdict
    more = f" (+{len(found) - 3} more)" if len(found) > 3 else ""
    return replace(verdict, verdict="suspect", file_verdicts=hunks.as_dicts(files),
                   detail=f"merged, but {len(found)} suspect: " + "; ".join(map(str, found[:3])) + more)


def _refuse_mail_header(repo: git.Repo, patch: PatchEntry, exc: git.GitCommandError) -> None:
    """git am applied the diff and then refused the mail header (a Date: or From: it cannot
    read): bad input, not a conflict, and no resolution would get past it."""
    if "Patch failed at" in (exc.stdout or "") or repo.git.diff("--name-only", "--diff-filter=U"):
        return
    refused, by_hook = am_refusal(repo, exc.stderr or "")
    repo.git.am("--abort")
    if by_hook:
        raise UserError(f"{PATCH_DIR}/{patch.name}: git am stopped although the diff applies ({refused})", by_hook)
    raise UserError(f"{PATCH_DIR}/{patch.name}: git am refuses its mail header ({refused})",
                    f"fix the From:/Date: header of {PATCH_DIR}/{patch.name}, commit it, then rerun")


def conflicted_files(am_output: str) -> list[str]:
    """The paths `git am --3way` names in its CONFLICT lines, sorted."""
    return sorted({m.group(1) or m.group(2) for m in _CONFLICT.finditer(am_output)})


def drop_reason(patch: PatchEntry, version: str, pristine: Path) -> str | None:
    for condition in patch.drop_when:
        if condition.kind == "upstream" and condition.holds_for_version(version):
            return f"Drop-When {condition} holds for {version}"
        if condition.kind == "check" and checks.run_check(condition.value, pristine).passed:
            return f"Drop-When {condition}: the check passes on pristine SGLang {version}"
    return None


def _moved_hunks(old: str, new: str) -> str:
    """Which hunks now start at other lines: 'path: -120 -> -134, ...'."""
    def hunks(text):
        return [(s.path, int(m.group(1))) for s in sections(text)
                for m in map(_HUNK.match, text[s.start:s.end].splitlines()) if m]
    before, after = hunks(old), hunks(new)
    if len(before) != len(after):
        return f"hunks changed: {len(before)} before, {len(after)} now"
    moved = [f"{path}:{a}->{b}" for (path, a), (_, b) in zip(before, after) if a != b]
    return ("moved " + ", ".join(moved)) if moved else ""


def _has_conflict_markers(queue: PatchQueue) -> list[str]:
    """The files that differ from HEAD (staged with `git add` or not, or unmerged) and still hold a
    conflict marker; names as they are (``-z``: spaces, never C-quoted)."""
    with queue.repo.git.custom_environment(**git_env()):
        listed = queue.repo.git.diff("--name-only", "-z", "HEAD", "--") + "\0" + \
            queue.repo.git.diff("--name-only", "-z", "--diff-filter=U")
    files = {f for f in listed.split("\0") if f}
    # An unmerged path is listed by the first call unless its work-tree file matches HEAD (a
    # modify/delete kept as ours): the second call names it either way.
    return sorted(f for f in files if (queue.path / f).is_file()
                  and holds_conflict_markers((queue.path / f).read_text(errors="replace")))


def _dry_run(series, onto: str, old_base: str, new_base: str, pristine: Path, old_pristine: Path) -> dict:
    """Replay in a scratch repository that borrows the mirror's objects (git alternates: no copy
    of the two releases): nothing of ours moves."""
    with tempfile.TemporaryDirectory(prefix="sglpatch-dry-") as tmp:
        scratch = git.Repo.init(tmp)
        alternates = Path(scratch.git_dir) / "objects" / "info" / "alternates"
        alternates.write_text(str(Path(source.open_mirror().git_dir) / "objects") + "\n")
        with scratch.git.custom_environment(**git_env()):
            scratch.git.checkout("--quiet", "-B", REBASE_BRANCH, new_base)
            verdicts = []
            moves = Moves.between(scratch, old_base, new_base)
            for patch in series.patches:
                verdict = check_suspects(scratch, apply_one(scratch, patch, onto, pristine, moves), old_pristine,
                                         pristine)
                if verdict.verdict == "conflict":
                    scratch.git.am("--abort")
                verdicts.append(asdict(verdict))
    return {"onto": onto, "dry_run": True, "patches": verdicts}


def _finish(root: Path, queue: PatchQueue, state: State, tx) -> dict:
    """Stage the new series, pin, gitlink and changelog entry, then commit them as one."""
    kept = [s for s in state.steps if s["verdict"] in ("clean", "merged")]
    dropped = [Verdict(**{k: s[k] for k in ("name", "verdict", "detail", "files")})
               for s in state.steps if s["verdict"] in ("obsolete", "skipped")]
    chain = [c.hexsha for c in queue.repo.iter_commits(f"{state.new_base}..HEAD", first_parent=True)][::-1]
    if chain != [s["commit"] for s in kept]:
        raise UserError(f"the commits in {queue.path} do not match the rebase's journal "
                        f"({len(chain)} commits above SGLang {state.onto}, {len(kept)} patches kept)",
                        "`rebase --abort` returns to the state before the rebase")
    for step in kept:
        text = format_patch(queue.repo, step["commit"])
        refuse_conflict_markers(text, step["name"], "`rebase --abort` returns to the state before the rebase; "
                                "rerun it and resolve in the work tree before `rebase --continue`")
        tx.write(root / PATCH_DIR / step["name"], text)
    for verdict in dropped:
        if (root / PATCH_DIR / verdict.name).exists():
            tx.delete(root / PATCH_DIR / verdict.name)
    names = [s["name"] for s in kept]
    tx.write(series_path(root), render_series(root, names), whole=False)
    _stage_pin(root, state, tx)
    line = line_of(root)
    if read_pin(root).changelog:  # a line for experiments may keep out of the shared CHANGELOG
        _stage_changelog(line, _changelog_line(line, state.onto, names, dropped), tx)
    tx.preflight()  # refuse before the work tree moves, so a rerun of --continue can finish
    with queue.repo.git.custom_environment(**git_env()):
        queue.repo.git.update_ref(BASE_REF, state.new_base)
        queue.repo.git.checkout("--quiet", "-B", BRANCH)
    boundary("rebase:finished-work-tree")
    tx.commit(_changelog_line(line, state.onto, names, dropped))
    _forget(root, queue.repo)
    return _report(root, state)


def _stage_changelog(line: Line, entry: str, tx) -> None:
    changelog = line.repo / CHANGELOG
    try:
        text = changelog.read_text(encoding="utf-8") if changelog.exists() else None
    except UnicodeDecodeError:
        raise UserError(f"{changelog} is not UTF-8 text", "save it as UTF-8, then rerun `rebase --continue`") from None
    tx.write(changelog, with_entry(text, "Changed", entry), whole=False)


def _stage_pin(root: Path, state: State, tx) -> None:
    pin = read_pin(root)
    artifacts = []
    for kind in ("sdist", *source.wheel_kinds(state.onto)):
        path = source.release_artifact(state.onto, kind)
        if path is not None:
            artifacts.append(Artifact(kind, path.name, source._sha256(path)))
    moved = pin.with_release(state.onto, f"v{state.onto}", state.commit, tuple(artifacts))
    tx.write(root / PIN_FILE, render_pin(root, moved), whole=False)
    line = line_of(root)
    if state.commit and read_gitlink(line):
        tx.set_gitlink(f"160000 {state.commit}")


def _changelog_line(line: Line, onto: str, kept: list[str], dropped: list[Verdict]) -> str:
    what = "Rebased" if line.is_production else f"Rebased the {line.label()}"
    parts = [f"{what} onto SGLang {onto}: kept {', '.join(kept) or 'none'}"]
    if dropped:
        parts.append("dropped " + ", ".join(
            f"{v.name} ({'upstreamed in ' + onto if v.verdict == 'obsolete' else 'dropped by the maintainer'})"
            for v in dropped))
    return "; ".join(parts)


def _report(root: Path, state: State, conflict: Verdict | None = None) -> dict:
    line = line_of(root)
    data = {"line": line.name, "onto": state.onto, "from": state.old_version,
            "patches": state.verdicts()}
    if conflict:
        data["patches"].append(asdict(conflict))
        data["stopped"] = {"patch": conflict.name, "files": conflict.files, "kind": conflict.verdict,
                           "work_tree": str(PatchQueue(root).path),
                           "command": line.command("rebase")}
    return data


NEEDS_A_MAINTAINER = {"conflict", "suspect"}  # a dry run or rehearsal with one of these exits 1


def needs_a_maintainer(patches: list[dict]) -> bool:
    return any(p["verdict"] in NEEDS_A_MAINTAINER for p in patches)


# ---------------------------------------------------------------- CLI

def register_cli(sub, common) -> None:
    cmd = sub.add_parser("rebase", parents=[common], help="carry the series to a new upstream release",
                         description="Replay the series onto a new SGLang release with a verdict per patch.")
    group = cmd.add_mutually_exclusive_group(required=True)
    group.add_argument("--onto", metavar="VERSION", help="the new SGLang release (as on PyPI)")
    group.add_argument("--continue", dest="action", action="store_const", const="continue",
                       help="go on after resolving a conflict in the line's work tree (build/src)")
    group.add_argument("--skip", dest="action", action="store_const", const="skip",
                       help="drop the conflicting patch and go on")
    group.add_argument("--abort", dest="action", action="store_const", const="abort",
                       help="return exactly to the state before the rebase")
    cmd.add_argument("--commit", help="upstream git commit of the new release (moves the submodule)")
    cmd.add_argument("--dry-run", action="store_true", help="print the verdicts, change nothing")
    cmd.set_defaults(func=handler)


def handler(args) -> int:
    root = args.root
    if args.onto:
        data = start(root, args.onto, args.commit, args.dry_run)
    else:
        data = resume(root, args.action)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(format_report(data))
    return 1 if "stopped" in data or (data.get("dry_run") and needs_a_maintainer(data["patches"])) else 0


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
        lines += [f"stopped at {stop['patch']}: it merged, but what it uses may be gone (see above)",
                  f"fix it in {stop['work_tree']} (amend the commit, or leave the edits: --continue folds them "
                  f"in), then `{stop['command']} --continue` to accept it; or `--skip` to drop this patch; "
                  "or `--abort` to undo the rebase"]
    elif "stopped" in data:
        stop = data["stopped"]
        deleted = [f["path"] for p in data["patches"] if p["name"] == stop["patch"]
                   for f in p.get("file_verdicts", []) if f["verdict"] == "deleted"]
        marked = [f for f in stop["files"] if f not in deleted]
        where = [f"conflict in {', '.join(marked)} (markers in {stop['work_tree']})"] if marked else []
        where += [f"{', '.join(deleted)} deleted upstream: port the change to where the code went, or leave "
                  "it out (unless you `git add` it, --continue does not bring the file back)"] if deleted else []
        lines += [f"stopped at {stop['patch']}: " + "; ".join(where),
                  f"resolve the files, then `{stop['command']} --continue`; "
                  "or `--skip` to drop this patch; or `--abort` to undo the rebase"]
    return "\n".join(lines)

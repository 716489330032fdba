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

import json
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import git
from packaging.version import Version

from . import checks, source
from .build import REBASE_STATE, prepare_tree, say
from .changelog import CHANGELOG, add_entry
from .errors import UserError
from .gitenv import git_env
from .line import Line, all_lines, find_line, line_of
from .pin import PIN_FILE, Artifact, read_pin, validate_version, write_pin
from .queue import BASE_REF, BRANCH, PatchQueue, format_patch
from .series import PATCH_DIR, PatchEntry, parse_patch, read_series, write_series

STATE_DIR = REBASE_STATE.parent
REBASE_BRANCH = "sglpatch-rebase"
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@", re.M)
# git's merge messages: "CONFLICT (content): Merge conflict in PATH",
# "CONFLICT (modify/delete): PATH deleted in HEAD and modified in ...", "... (rename/delete) ..."
_CONFLICT = re.compile(r"^CONFLICT \([^)]*\): (?:Merge conflict in (\S+)|(\S+) deleted in )", re.M)


@dataclass
class Verdict:
    name: str
    verdict: str  # clean | merged | conflict | obsolete | skipped
    detail: str = ""
    files: list[str] = field(default_factory=list)


@dataclass
class State:
    onto: str
    old_version: str
    new_base: str
    old_head: str
    commit: str | None
    pending: list[str]
    verdicts: list[dict] = field(default_factory=list)

    def save(self, root: Path) -> None:
        path = root / STATE_DIR / "state.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, root: Path) -> State | None:
        path = root / STATE_DIR / "state.json"
        return cls(**json.loads(path.read_text())) if path.exists() else None


# ---------------------------------------------------------------- entry points

def start(root: Path, onto: str, commit: str | None = None, dry_run: bool = False) -> dict:
    validate_version(onto)
    pin = read_pin(root)
    if onto == pin.version:
        raise UserError(f"the series is already on SGLang {onto}", "name a newer release")
    if dry_run:
        series = read_series(root)
        old_base = source.prepare(pin, root)
        say(f"importing SGLang {onto}")
        new_base = source.import_release(onto)
        return _dry_run(series, onto, [old_base, new_base], source.pristine_tree(onto))
    _, series, _, queue = prepare_tree(root)
    say(f"importing SGLang {onto}")
    new_base = source.import_release(onto)
    pristine = source.pristine_tree(onto)
    queue.fetch(source.open_mirror(), new_base)
    _backup(root)
    state = State(onto, pin.version, new_base, queue.repo.head.commit.hexsha, commit, series.names)
    state.save(root)
    with queue.repo.git.custom_environment(**git_env()):
        queue.repo.git.checkout("--quiet", "-B", REBASE_BRANCH, new_base)
    return _replay(root, queue, state, pristine)


def resume(root: Path, action: str) -> dict:
    state = State.load(root)
    if state is None:
        raise UserError("no rebase is in progress", "start one with `rebase --onto VERSION`")
    queue = PatchQueue(root)
    if action == "abort":
        return abort(root, queue, state)
    name = state.pending[0]
    in_am = (Path(queue.repo.git_dir) / "rebase-apply").exists()
    with queue.repo.git.custom_environment(**git_env()):
        if action == "skip":
            if in_am:
                queue.repo.git.am("--skip")
            queue.repo.git.reset("--quiet", "--hard")
            state.verdicts.append(asdict(Verdict(name, "skipped", "dropped by the maintainer")))
        else:
            if _has_conflict_markers(queue):
                raise UserError(f"conflict markers remain in {', '.join(_has_conflict_markers(queue))}",
                                "resolve them, then `rebase --continue`")
            if in_am:
                before = queue.repo.head.commit.hexsha
                queue.repo.git.add("--all")
                try:
                    queue.repo.git.am("--continue")
                except git.GitCommandError as exc:
                    if "No changes" not in (exc.stdout + exc.stderr):
                        raise
                    queue.repo.git.am("--skip")
                if queue.repo.head.commit.hexsha == before:
                    verdict = Verdict(name, "obsolete", "the resolution left no change")
                else:
                    verdict = Verdict(name, "merged", "conflict resolved by the maintainer")
            else:  # a crash after `am --continue` finished: the commit is there already
                verdict = Verdict(name, "merged", "conflict resolved by the maintainer")
            state.verdicts.append(asdict(verdict))
    state.pending.pop(0)
    state.save(root)
    return _replay(root, queue, state, source.pristine_tree(state.onto))


def abort(root: Path, queue: PatchQueue, state: State) -> dict:
    with queue.repo.git.custom_environment(**git_env()):
        if (Path(queue.repo.git_dir) / "rebase-apply").exists():
            queue.repo.git.am("--abort")
        queue.repo.git.checkout("--quiet", "--force", BRANCH)
        queue.repo.git.reset("--quiet", "--hard", state.old_head)
        queue.repo.git.branch("--quiet", "-D", REBASE_BRANCH)
    _restore(root)
    shutil.rmtree(root / STATE_DIR)
    return {"onto": state.onto, "aborted": True, "patches": state.verdicts}


# ---------------------------------------------------------------- replay

def _replay(root: Path, queue: PatchQueue, state: State, pristine: Path) -> dict:
    while state.pending:
        name = state.pending[0]
        patch = parse_patch(root / PATCH_DIR / name)
        verdict = apply_one(queue.repo, patch, state.onto, pristine)
        if verdict.verdict == "conflict":
            state.save(root)
            return _report(root, state, conflict=verdict)
        state.verdicts.append(asdict(verdict))
        state.pending.pop(0)
        state.save(root)
    return _finish(root, queue, state)


def apply_one(repo: git.Repo, patch: PatchEntry, version: str, pristine: Path) -> Verdict:
    """Replay one patch on HEAD and say what happened."""
    reason = drop_reason(patch, version, pristine)
    if reason:
        return Verdict(patch.name, "obsolete", reason, list(patch.files))
    with repo.git.custom_environment(**git_env()):
        try:
            repo.git.apply("--check", "--reverse", str(patch.path))
            return Verdict(patch.name, "obsolete", f"SGLang {version} already contains the change",
                           list(patch.files))
        except git.GitCommandError:
            pass
        before = repo.head.commit.hexsha
        try:
            output = repo.git.am("--3way", "--committer-date-is-author-date", str(patch.path))
        except git.GitCommandError as exc:
            conflicted = conflicted_files(exc.stdout or "")
            if not conflicted:
                conflicted = [f for f in patch.files]
            return Verdict(patch.name, "conflict", f"three-way merge stopped in {', '.join(conflicted)}",
                           conflicted)
        if repo.head.commit.hexsha == before:
            return Verdict(patch.name, "obsolete", f"merges to no change on SGLang {version}",
                           list(patch.files))
        moved = _moved_hunks(patch.path.read_text(), format_patch(repo, "HEAD"))
        if "3-way merge" in output:
            return Verdict(patch.name, "merged", "three-way merge; " + (moved or "same hunks"),
                           list(patch.files))
        if moved:
            return Verdict(patch.name, "merged", moved, list(patch.files))
        return Verdict(patch.name, "clean", "", list(patch.files))


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
        out, current = [], None
        for line in text.splitlines():
            if line.startswith("diff --git "):
                current = line.rsplit(" b/", 1)[-1]
            m = _HUNK.match(line)
            if m and current:
                out.append((current, int(m.group(1))))
        return out
    before, after = hunks(old), hunks(new)
    if len(before) != len(after):
        return f"hunks changed: {len(before)} before, {len(after)} now"
    moved = [f"{path}:{a}->{b}" for (path, a), (_, b) in zip(before, after) if a != b]
    return ("moved " + ", ".join(moved)) if moved else ""


def _has_conflict_markers(queue: PatchQueue) -> list[str]:
    unmerged = queue.repo.git.diff("--name-only", "--diff-filter=U").split()
    files = set(unmerged) | {i.a_path for i in queue.repo.index.diff(None)}
    return sorted(f for f in files if (queue.path / f).is_file()
                  and re.search(r"^(<<<<<<<|>>>>>>>) ", (queue.path / f).read_text(errors="replace"), re.M))


def _dry_run(series, onto: str, bases: list[str], pristine: Path) -> dict:
    """Replay in a scratch repository holding only the two releases: nothing of ours moves."""
    with tempfile.TemporaryDirectory(prefix="sglpatch-dry-") as tmp:
        scratch = git.Repo.init(tmp)
        with scratch.git.custom_environment(**git_env()):
            for base in bases:
                scratch.git.fetch("--quiet", "--no-tags", str(source.open_mirror().git_dir), base)
            scratch.git.checkout("--quiet", "-B", REBASE_BRANCH, bases[-1])
            verdicts = []
            for patch in series.patches:
                verdict = apply_one(scratch, patch, onto, pristine)
                if verdict.verdict == "conflict":
                    scratch.git.am("--abort")
                verdicts.append(asdict(verdict))
    return {"onto": onto, "dry_run": True, "patches": verdicts}


def _finish(root: Path, queue: PatchQueue, state: State) -> dict:
    verdicts = [Verdict(**v) for v in state.verdicts]
    kept = [v.name for v in verdicts if v.verdict in ("clean", "merged")]
    dropped = [v for v in verdicts if v.verdict in ("obsolete", "skipped")]
    with queue.repo.git.custom_environment(**git_env()):
        commits = list(queue.repo.iter_commits(f"{state.new_base}..HEAD", first_parent=True))[::-1]
        for name, commit in zip(kept, commits):
            (root / PATCH_DIR / name).write_text(queue.format_patch(commit))
        queue.repo.git.update_ref(BASE_REF, state.new_base)
        queue.repo.git.checkout("--quiet", "-B", BRANCH)
        queue.repo.git.branch("--quiet", "-D", REBASE_BRANCH)
    for verdict in dropped:
        (root / PATCH_DIR / verdict.name).unlink(missing_ok=True)
    write_series(root, kept)
    _update_pin(root, state)
    line = line_of(root)
    add_entry(line.repo, "Changed", _changelog_line(line, state.onto, kept, dropped))
    shutil.rmtree(root / STATE_DIR)
    return _report(root, state)


def _update_pin(root: Path, state: State) -> None:
    pin = read_pin(root)
    artifacts = []
    for kind in ("sdist", *source.wheel_kinds(state.onto)):
        path = source.release_artifact(state.onto, kind)
        if path is not None:
            artifacts.append(Artifact(kind, path.name, source._sha256(path)))
    write_pin(root, pin.with_release(state.onto, f"v{state.onto}", state.commit, tuple(artifacts)))
    line = line_of(root)
    if state.commit and _gitlink(line):
        repo = git.Repo(line.repo)
        with repo.git.custom_environment(**git_env()):
            repo.git.update_index("--add", "--cacheinfo", f"160000,{state.commit},{line.submodule}")


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
            "patches": list(state.verdicts)}
    if conflict:
        data["patches"].append(asdict(conflict))
        data["stopped"] = {"patch": conflict.name, "files": conflict.files,
                           "work_tree": str(PatchQueue(root).path),
                           "command": line.command("rebase")}
    return data


# ---------------------------------------------------------------- backups

def _backed_up(root: Path) -> dict[str, Path]:
    """What a rebase may change, by backup name: the line's pin and series, the changelog."""
    line = line_of(root)
    return {PIN_FILE: root / PIN_FILE, PATCH_DIR: root / PATCH_DIR, CHANGELOG: line.repo / CHANGELOG}


def _backup(root: Path) -> None:
    backup = root / STATE_DIR / "backup"
    if backup.exists():
        shutil.rmtree(backup)
    backup.mkdir(parents=True)
    for name, src in _backed_up(root).items():
        if src.is_dir():
            shutil.copytree(src, backup / name)
        elif src.exists():
            shutil.copy2(src, backup / name)
    (backup / "gitlink").write_text(_gitlink(line_of(root)))


def _gitlink(line: Line) -> str:
    """The index entry of the line's upstream submodule ("<mode> <sha> <stage>\t<path>"), if any."""
    try:
        return git.Repo(line.repo).git.ls_files("--stage", "--", line.submodule)
    except git.exc.InvalidGitRepositoryError:
        return ""


def _restore(root: Path) -> None:
    backup = root / STATE_DIR / "backup"
    for name, target in _backed_up(root).items():
        saved = backup / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        if saved.is_dir():
            shutil.copytree(saved, target)
        elif saved.exists():
            shutil.copy2(saved, target)
    gitlink = (backup / "gitlink").read_text().split()
    if gitlink:
        line = line_of(root)
        repo = git.Repo(line.repo)
        with repo.git.custom_environment(**git_env()):
            repo.git.update_index("--add", "--cacheinfo", f"{gitlink[0]},{gitlink[1]},{line.submodule}")


# ---------------------------------------------------------------- bump rehearsal

VERDICT_MARKS = {"clean": "clean", "merged": "merged", "conflict": "CONFLICT", "obsolete": "obsolete"}


def rehearse(root: Path, releases: list[str] | None = None, progress=say) -> dict:
    """A dry-run rebase of the line at ``root`` onto every release newer than its pin (or those of
    the given ones that are newer), each from the pin: what the next bump would meet. Changes
    nothing."""
    pin = read_pin(root)
    for version in releases or ():
        validate_version(version)
    releases = [v for v in (releases if releases is not None else source.released_versions())
                if Version(v) > Version(pin.version)]
    line = line_of(root)
    runs = []
    for onto in releases:
        progress(f"{line.name}: dry run onto SGLang {onto}")
        runs.append(start(root, onto, dry_run=True))
    return {"line": line.name, "from": pin.version, "patches": read_series(root).names,
            "releases": [{"onto": r["onto"], "patches": r["patches"]} for r in runs]}


def format_rehearsal(data: dict) -> str:
    """One table per line: a row per patch, a column per release."""
    title = f"{data['line']} line: SGLang {data['from']} -> each newer release (dry runs)"
    if not data["releases"]:
        return f"{title}\n  no newer release on the index"
    names = data["patches"]
    width = max([len(n) for n in names] + [5])
    columns = [r["onto"] for r in data["releases"]]
    cells = {(p["name"], r["onto"]): VERDICT_MARKS.get(p["verdict"], p["verdict"])
             for r in data["releases"] for p in r["patches"]}
    col = max([len(c) for c in columns] + [len(m) for m in VERDICT_MARKS.values()])
    rows = [f"{'patch':<{width}}  " + "  ".join(f"{c:<{col}}" for c in columns)]
    rows += [f"{n:<{width}}  " + "  ".join(f"{cells.get((n, c), '-'):<{col}}" for c in columns)
             for n in names]
    return "\n".join([title, *(row.rstrip() for row in rows)])


def rehearse_handler(args) -> int:
    chosen = ([find_line(args.repo_root, args.line)] if getattr(args, "line", None)
              else all_lines(args.repo_root))
    results = [rehearse(line.root, args.releases or None) for line in chosen]
    if args.json:
        print(json.dumps({"lines": results}, indent=2))
    else:
        print("\n\n".join(format_rehearsal(r) for r in results))
    return 0


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
    cmd = sub.add_parser("rehearse", parents=[common],
                         help="dry-run rebase every line onto every newer release (a bump rehearsal)",
                         description="For each line (or --line), a dry-run `rebase --onto` of its "
                                     "series onto every SGLang release newer than its pin, each "
                                     "from the pin: a verdict table per line. Changes nothing.")
    cmd.add_argument("releases", nargs="*", metavar="VERSION",
                     help="only these releases (default: every newer release on the index)")
    cmd.set_defaults(func=rehearse_handler)


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
    return 1 if "stopped" in data else 0


def format_report(data: dict) -> str:
    if data.get("aborted"):
        return f"rebase onto {data['onto']} aborted; everything is as before"
    title = f"rebase onto SGLang {data['onto']}" + (" (dry run: nothing changed)" if data.get("dry_run") else "")
    width = max([len(p["name"]) for p in data["patches"]] + [5])
    rows = [f"{p['name']:<{width}}  {p['verdict']:<8}  {p['detail']}" for p in data["patches"]]
    lines = [title, f"{'patch':<{width}}  {'verdict':<8}  detail", *rows]
    if "stopped" in data:
        stop = data["stopped"]
        lines += [f"stopped at {stop['patch']}: conflict in {', '.join(stop['files'])} "
                  f"(markers in {stop['work_tree']})",
                  f"resolve the files, then `{stop['command']} --continue`; "
                  "or `--skip` to drop this patch; or `--abort` to undo the rebase"]
    return "\n".join(lines)

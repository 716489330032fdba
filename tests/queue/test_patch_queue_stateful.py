"""Random sequences of patch-queue operations on a real series never lose the maintainer's work.

A Hypothesis ``RuleBasedStateMachine`` drives the queue in-process (``sglpatch.queue.patch_queue.PatchQueue``,
``sglpatch.queue.transaction.undo``) on a real project: a git repository with a committed pin,
``patches/series`` and 2-3 patches made by ``git format-patch`` from a small synthetic upstream
release, prepared into ``build/src``. A step is one of:

- push (one / all / by name), pop (one / all / by name), refresh, new NAME, export, undo, status;
- the user edits ``build/src``: changes a tracked file, creates an untracked file, deletes a file;
- the user edits a patch file's message by hand, then maybe commits it (or everything) in the
  project repository;
- an interrupted command: ``build.py`` run in a child process that ``SGLPATCH_CRASH_AT=k`` kills
  with SIGKILL at its k-th step boundary; the next operation (the user may edit first) must
  recover: roll back to the state before the command, or forward to what the same command,
  uninterrupted, makes of a copy of the project.

After every step it checks:

- every edit the user made is still somewhere: in ``build/src`` or in a patch file the series lists
  (a deleted file: absent, or deleted by a listed patch); an uncommitted hand edit of a patch file
  is never overwritten;
- a refused operation (``UserError``) changed nothing: patch files, series, pin, work tree files
  and HEAD byte for byte, except that ``push`` stopping at a patch that does not apply keeps the
  patches before it applied (as quilt does);
- the series parses, and every listed patch file parses and holds its own patch (the Subject it
  was created with);
- the work tree matches the series: ``applied_names()`` works and the applied commits' subjects
  are the first N patches of the series, in order;
- no stray state after a completed operation: no ``build/transaction.json``, no ``rebase-apply``;
- ``undo`` restores exactly the state before the operation it undoes (what that operation changed:
  patch files and series, the work tree's files and HEAD; the rest stays as it is now), refuses
  with a ``UserError`` only when something that operation changed has changed since, and says
  "nothing to undo" when every operation is undone.

The whole suite runs 20 examples of up to 12 steps each (SGLPATCH_STATEFUL_EXAMPLES,
SGLPATCH_STATEFUL_STEPS), about 25 s on 2 cores when it passes: 5 in the fast set (``[quick]``), the
other 15 only in the whole suite (``[more]``, slow). A failure adds up to ~5 minutes of shrinking to
the shortest failing sequence. To run it longer::

    SGLPATCH_STATEFUL_EXAMPLES=500 SGLPATCH_STATEFUL_STEPS=30 python -m pytest tests/test_patch_queue_stateful.py

A failure prints the shrunk sequence of steps; ``--hypothesis-seed=N`` replays a run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers import (
    AUTHOR_ENV,
    UPSTREAM_FILES,
    commit_project,
    make_project,
    make_upstream,
    message,
    patch_text,
    run_cli,
)
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from sglpatch.errors import UserError
from sglpatch.queue import transaction
from sglpatch.queue.patch_queue import PatchQueue
from sglpatch.queue.series import parse_patch, read_series

EXAMPLES = int(os.environ.get("SGLPATCH_STATEFUL_EXAMPLES", "20"))
STEPS = int(os.environ.get("SGLPATCH_STATEFUL_STEPS", "12"))
QUICK = min(5, EXAMPLES)  # the fast set's share of EXAMPLES

RUNNER = "python/sglang/srt/model_executor/model_runner.py"
KIMI = "python/sglang/srt/models/kimi_k25.py"
PYPROJECT = "python/pyproject.toml"
# The project's first patches (2 or all 3): file name, subject, path, old text, new text.
INITIAL = [
    ("0001-runner.patch", "runner: spell out ten", RUNNER, "line 10\n", "line ten\n"),
    ("0002-kimi.patch", "kimi: return two", KIMI, "return 1", "return 2"),
    (
        "0003-pyproject.patch",
        "pyproject: add a version",
        PYPROJECT,
        "name = 'sglang'\n",
        "name = 'sglang'\nversion = '0'\n",
    ),
]
# The interrupted command and its uninterrupted twin commit at one fixed time, so the twin's
# result is byte for byte what the interrupted run must roll forward to.
FIXED_DATES = {"GIT_AUTHOR_DATE": "2026-02-02T00:00:00+00:00", "GIT_COMMITTER_DATE": "2026-02-02T00:00:00+00:00"}
INTERRUPTIBLE = ["push --all", "push", "pop --all", "pop", "refresh", "export", "new", "undo"]


def git_out(cwd: Path, *args: str) -> str | None:
    result = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else None


def project_git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env={**os.environ, **AUTHOR_ENV})


def new_message(subject: str) -> str:
    return f"{subject}\n\nWhy this change exists.\n\nUpstream-Status: Pending\nDrop-When: upstream>=99\n"


def read_journal(root: Path) -> dict | None:
    path = root / "build" / "transaction.json"
    return json.loads(path.read_text()) if path.exists() else None


def entry_after(root: Path, log0: str | None) -> tuple[str, str] | None:
    """(sha, operation) of the first log entry made after ``log0``, or None."""
    head = log_head(root)
    if not head or head == log0:
        return None
    span = f"{log0}..{head}" if log0 else head
    sha = git_out(root / "build" / "src", "rev-list", "--first-parent", "--reverse", span).split()[0]
    return sha, git_out(root / "build" / "src", "log", "-1", "--format=%s", sha)


def log_head(root: Path) -> str | None:
    src = root / "build" / "src"
    return git_out(src, "rev-parse", "--verify", "-q", transaction.LOG_REF) if (src / ".git").exists() else None


# ---------------------------------------------------------------- the observable state


@dataclass(frozen=True)
class Snap:
    """What a queue operation may change, read from disk (not through sglpatch)."""

    patches: dict[str, bytes]  # every file in patches/, the series included
    pin: bytes
    work: dict[str, bytes]  # every file in build/src outside .git
    head: str | None
    branch: str | None

    @property
    def work_tree(self) -> tuple:
        return self.work, self.head, self.branch

    def differences(self, other: Snap) -> str:
        out = []
        for kind, mine, theirs in (("patches/", self.patches, other.patches), ("build/src/", self.work, other.work)):
            for path in sorted(set(mine) | set(theirs)):
                if mine.get(path) != theirs.get(path):
                    out.append(f"{kind}{path}: {_short(mine.get(path))} -> {_short(theirs.get(path))}")
        if self.pin != other.pin:
            out.append("upstream.toml differs")
        if (self.head, self.branch) != (other.head, other.branch):
            out.append(f"HEAD {self.head} ({self.branch}) -> {other.head} ({other.branch})")
        return "; ".join(out)


def _short(data: bytes | None) -> str:
    if data is None:
        return "<absent>"
    text = data.decode(errors="replace")
    return repr(text if len(text) < 160 else text[:160] + "...")


def snap(root: Path) -> Snap:
    patches = {p.name: p.read_bytes() for p in sorted((root / "patches").iterdir()) if p.is_file()}
    src = root / "build" / "src"
    work = {}
    for directory, dirs, files in os.walk(src):
        if directory == str(src):
            dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            path = Path(directory) / name
            work[path.relative_to(src).as_posix()] = path.read_bytes()
    head = branch = None
    if (src / ".git").exists():
        head = git_out(src, "rev-parse", "--verify", "-q", "HEAD") or None
        branch = git_out(src, "symbolic-ref", "-q", "HEAD") or None
    return Snap(patches, (root / "upstream.toml").read_bytes(), work, head, branch)


@dataclass
class Done:
    """A logged operation that undo can step back over. ``before`` is None where it cannot be
    known (the user edited between a kill and the recovery)."""

    op: str
    before: Snap | None
    after: Snap | None

    def touched(self) -> set[str]:
        return {
            n
            for n in set(self.before.patches) | set(self.after.patches)
            if self.before.patches.get(n) != self.after.patches.get(n)
        }

    def moved_work_tree(self) -> bool:
        return self.before.work_tree != self.after.work_tree

    def changed_since(self, now: Snap) -> list[str]:
        """What undo would overwrite in ``now``: what this operation changed that changed since."""
        changed = [f"patches/{n}" for n in sorted(self.touched()) if now.patches.get(n) != self.after.patches.get(n)]
        if self.before.pin != self.after.pin != now.pin:
            changed.append("upstream.toml")
        if self.moved_work_tree() and now.work_tree != self.after.work_tree:
            changed.append("build/src")
        return changed

    def undone(self, now: Snap) -> Snap:
        """``now`` after undo of this operation: what it changed (a patch file, the pin, the work
        tree with HEAD) as it was before it, everything else as it is now."""
        patches = dict(now.patches)
        for name in self.touched():
            if name in self.before.patches:
                patches[name] = self.before.patches[name]
            else:
                patches.pop(name, None)
        pin = self.before.pin if self.before.pin != self.after.pin else now.pin
        work = self.before if self.moved_work_tree() else now
        return Snap(patches, pin, work.work, work.head, work.branch)


@dataclass
class Crash:
    """A killed command not recovered yet."""

    command: str
    expect: Snap | None  # the state once recovered; None: unknown (the user edited since the kill)
    log: str | None  # the log's head once recovered
    journal: dict  # what the kill left in build/transaction.json


@dataclass
class Model:
    subjects: dict[str, str] = field(default_factory=dict)  # patch file name -> its Subject
    edits: list[tuple[str, str]] = field(default_factory=list)  # (path in build/src, marker text)
    deleted: list[str] = field(default_factory=list)  # paths in build/src the user deleted
    notes: dict[str, list[str]] = field(default_factory=dict)  # patch file -> uncommitted hand notes
    done: list[Done] = field(default_factory=list)  # logged operations not undone, oldest first


# ---------------------------------------------------------------- the machine


class QueueMachine(RuleBasedStateMachine):
    workdir: Path  # set by the test: every example's project lives below it
    upstream: tuple  # (repo, release commit), shared: patch_text leaves it as it found it
    examples = 0

    def __init__(self):
        super().__init__()
        QueueMachine.examples += 1
        self.root = self.workdir / f"example-{QueueMachine.examples}"
        self.src = self.root / "build" / "src"
        self.model = Model()
        self.crash: Crash | None = None
        self.counter = 0

    def next_number(self) -> int:
        self.counter += 1
        return self.counter

    def teardown(self):
        try:
            if self.crash is not None:  # the example ended on a kill: the next command recovers
                self.status()
                self.check_all()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    @initialize(count=st.sampled_from([2, 3]))
    def make_project(self, count):
        repo, base = self.upstream
        patches = {}
        for name, subject, path, old, new in INITIAL[:count]:
            patches[name] = patch_text(repo, base, {path: UPSTREAM_FILES[path].replace(old, new)}, message(subject))
            self.model.subjects[name] = subject
        make_project(self.root, patches)
        (self.root / ".gitignore").write_text("/build/\n")
        commit_project(self.root, base)
        self.src.mkdir(parents=True)
        PatchQueue(self.root).reset_to(repo, base)  # made the work tree: not undoable, nothing was before it

    # ------------------------------------------------------------ queue operations, in-process

    def series_names(self) -> list[str]:
        return read_series(self.root, warn=lambda _m: None).names

    def pick_name(self, which: int) -> str:
        names = self.series_names() + ["9999-unknown.patch"]
        return names[which % len(names)]

    @rule(mode=st.sampled_from(["one", "all", "name"]), which=st.integers(0, 7))
    def push(self, mode, which):
        name = self.pick_name(which) if mode == "name" else None
        self.run_op("push", lambda q: q.push(name, all=mode == "all"))

    @rule(mode=st.sampled_from(["one", "all", "name"]), which=st.integers(0, 7))
    def pop(self, mode, which):
        name = self.pick_name(which) if mode == "name" else None
        self.run_op("pop", lambda q: q.pop(name, all=mode == "all"))

    @rule()
    def refresh(self):
        self.run_op("refresh", lambda q: q.refresh())

    @rule(suffix=st.booleans(), taken=st.integers(0, 9))
    def new(self, suffix, taken):
        number = self.next_number()
        names = self.series_names()
        if taken == 0 and names:  # now and then a name the series lists already: refused
            name = names[number % len(names)]
        else:
            name = f"{number + 100:04d}-user-{number}" + (".patch" if suffix else "")
        self.run_op(
            "new",
            lambda q: q.new(name, new_message(f"user: change {number}")),
            created=(name, f"user: change {number}"),
        )

    @rule()
    def export(self):
        self.run_op("export", lambda q: q.export())

    @rule()
    def undo(self):
        before, log0, crash = self.start_operation()
        try:
            entry = transaction.undo(self.root)
        except UserError as exc:
            self.recovery_entry(crash, log0)
            self.judge_undo(before, snap(self.root), refused=str(exc), crash=crash)
        else:
            self.recovery_entry(crash, log0)
            self.judge_undo(before, snap(self.root), undid=entry.op, crash=crash)

    @rule()
    def status(self):
        """A reader: finishes a killed command's recovery, changes nothing else."""
        before, log0, crash = self.start_operation()
        transaction.recover_if_idle(self.root)
        queue = PatchQueue(self.root)
        try:
            queue.status()
        finally:
            queue.repo.close()
        if before is not None:
            assert snap(self.root) == before, (
                "`status`" + after_kill(crash) + " changed: " + before.differences(snap(self.root))
            )
        assert log_head(self.root) == self.recovery_entry(crash, log0), "`status` logged an operation"

    # ------------------------------------------------------------ the user's own edits

    # (create_untracked_file has no arguments, so it is the rule Hypothesis's simplest examples
    # repeat: cheap, and it gives the next refresh or new something to do.)

    @rule()
    def create_untracked_file(self):
        """The user creates a file in build/src."""
        self.user_edit()
        number = self.next_number()
        path = f"python/sglang/user_{number}.py"
        (self.src / path).write_text(f"USER_{number} = {number}\n")
        self.model.edits.append((path, f"USER_{number} = {number}"))

    @rule(delete=st.booleans(), which=st.integers(0, 100), where=st.integers(0, 100))
    def user_edits_a_file(self, delete, which, where):
        """The user adds a line somewhere in a file of build/src, or deletes the file."""
        files = sorted(snap(self.root).work)
        if not files:
            return
        self.user_edit()
        path = files[which % len(files)]
        if delete:
            (self.src / path).unlink()
            # The user's own act takes away what their earlier edits put in this file.
            self.model.edits = [(p, m) for p, m in self.model.edits if p != path]
            self.model.deleted.append(path)
            return
        marker = f"# user edit {self.next_number()}"
        lines = (self.src / path).read_text().splitlines(keepends=True)
        lines.insert(where % (len(lines) + 1), marker + "\n")
        (self.src / path).write_text("".join(lines))
        self.model.edits.append((path, marker))

    def user_edit(self):
        if self.crash is not None:  # an edit before the recovery: what it should make of it is
            self.crash.expect = None  # not this test's to say, only that nothing is lost

    @rule(which=st.integers(0, 100), commit=st.sampled_from(["no", "the file", "everything"]))
    def user_edits_a_patch_message(self, which, commit):
        """The user adds a paragraph to a listed patch's message by hand, then maybe commits it
        (or everything, the tool's own writes included) in the project repository."""
        names = self.series_names()
        if not names:
            return
        self.user_edit()
        name = names[which % len(names)]
        path = self.root / "patches" / name
        text = path.read_text()
        body = text.index("\n\n") + 2
        note = f"Hand note {self.next_number()}."
        path.write_text(text[:body] + note + "\n\n" + text[body:])
        self.model.notes.setdefault(name, []).append(note)
        if commit != "no":
            project_git(self.root, "add", "--all" if commit == "everything" else f"patches/{name}")
            project_git(self.root, "commit", "-qm", f"hand edit of {name}")
            if commit == "everything":
                self.model.notes.clear()
            else:
                self.model.notes.pop(name)

    # ------------------------------------------------------------ an interrupted command

    @precondition(lambda self: self.crash is None or self.crash.expect is not None)
    @rule(command=st.sampled_from(INTERRUPTIBLE), k=st.integers(1, 6))
    def interrupted_command(self, command, k):
        argv, created = command.split(), None
        if argv == ["new"]:
            number = self.next_number()
            created = (f"{number + 100:04d}-user-{number}", f"user: change {number}")
            argv += [created[0], "-m", new_message(created[1])]
        before, log0, crash = self.start_operation()
        journal0 = read_journal(self.root)
        twin = self.workdir / f"{self.root.name}-twin"
        shutil.copytree(self.root, twin, symlinks=True)
        try:
            result = run_cli(self.root, *argv, env={"SGLPATCH_CRASH_AT": str(k), **FIXED_DATES})
            assert "Traceback" not in result.stderr, result.stderr
            if result.returncode != -signal.SIGKILL:  # it ended before its k-th boundary
                assert result.returncode in (0, 2), result.stderr
                event(f"{command}: not killed")
                self.judge(
                    command,
                    before,
                    log0,
                    snap(self.root),
                    log_head(self.root),
                    result.stderr.strip() if result.returncode else None,
                    crash=crash,
                    created=created,
                )
                return
            journal = read_journal(self.root)
            if crash is not None and journal == journal0:  # killed while recovering the last kill
                event("killed again while recovering")
                self.crash = crash
                return
            phase = journal["phase"] if journal else None
            event(f"{command}: killed at phase {phase}")
            assert phase in (None, "running", "committing"), journal
            if phase == "running" or (phase is None and log_head(self.root) == log0):
                expect, log = before, log0  # before its commit point: rolled back
            else:  # past its commit point: rolled forward, to what the twin does uninterrupted
                done = run_cli(twin, *argv, env=FIXED_DATES)
                assert "Traceback" not in done.stderr and done.returncode in (0, 2), done.stderr
                expect, log = snap(twin), log_head(twin)
                self.judge(
                    command,
                    before,
                    log0,
                    expect,
                    log,
                    done.stderr.strip() if done.returncode else None,
                    crash=crash,
                    created=created,
                    src=twin / "build" / "src",
                )
            if phase is None:  # killed after the journal was cleared: nothing is left to recover
                now = snap(self.root)
                assert now == expect, f"`{command}` killed at boundary {k}: " + expect.differences(now)
            else:
                self.crash = Crash(command, expect, log, journal)
        finally:
            shutil.rmtree(twin, ignore_errors=True)

    # ------------------------------------------------------------ judging an operation

    def start_operation(self) -> tuple[Snap | None, str | None, Crash | None]:
        """The state the next operation starts from (after recovery, if a command was killed)."""
        crash, self.crash = self.crash, None
        if crash is not None:
            return crash.expect, crash.log, crash
        return snap(self.root), log_head(self.root), None

    def run_op(self, op: str, call, created=None) -> None:
        before, log0, crash = self.start_operation()
        queue = PatchQueue(self.root)
        try:
            call(queue)
            refused = None
        except UserError as exc:
            refused = str(exc)
        finally:
            if queue._repo is not None:
                queue._repo.close()
        self.judge(op, before, log0, snap(self.root), log_head(self.root), refused, crash=crash, created=created)

    def judge(
        self,
        command: str,
        before: Snap | None,
        log0,
        after: Snap,
        log1,
        refused: str | None,
        *,
        crash=None,
        created=None,
        src: Path | None = None,
    ):
        """Judge an operation that ended (done or refused) against the state before it; update
        the model."""
        op = command.split()[0]
        if op == "undo":
            return self.judge_undo(before, after, refused=refused, undid=None if refused else "?", crash=crash)
        what = f"`{command}`" + after_kill(crash)
        log0 = self.recovery_entry(crash, log0)
        logged = log1 != log0
        event(
            f"{op}: "
            + ("refused" if refused and not logged else "stopped" if refused else "done")
            + (" after a kill" if crash else "")
        )
        if refused and not logged:
            assert before is None or after == before, f"{what} refused ({refused}) but changed: " + before.differences(
                after
            )
        elif refused:  # push stops at a patch that does not apply; the ones before it stay applied
            assert op == "push" and "does not apply" in refused, f"{what} refused ({refused}) but logged an entry"
            assert before is None or (after.patches, after.pin) == (before.patches, before.pin), (
                f"{what} refused ({refused}) but changed: " + before.differences(after)
            )
            assert not git_out(src or self.src, "status", "--porcelain"), f"{what} left edits in the work tree"
        else:
            assert logged, f"{what} succeeded without a log entry: undo would skip it"
        if logged:
            self.model.done.append(Done(op, before, after))
        if created and not refused:
            name = created[0] if created[0].endswith(".patch") else created[0] + ".patch"
            self.model.subjects[name] = created[1]

    def judge_undo(self, before: Snap | None, after: Snap, *, refused=None, undid=None, crash=None) -> None:
        done = self.model.done
        what = "`undo`" + after_kill(crash)
        event("undo: " + ("refused" if refused else "done") + (" after a kill" if crash else ""))
        if refused:
            assert before is None or after == before, f"{what} refused ({refused}) but changed: " + before.differences(
                after
            )
            if not done:
                assert "nothing to undo" in refused, f"{what} with every operation undone: {refused}"
            elif done[-1].before is not None and done[-1].before.head is not None and before is not None:
                # (The work tree's creation may refuse to be undone: nothing was there before it.)
                assert done[-1].changed_since(before), (
                    f"{what} of `{done[-1].op}` refused ({refused}) although nothing it changed changed since"
                )
            return
        assert done, f"{what} undid `{undid}` but every operation was undone already"
        target = done.pop()
        assert undid in ("?", target.op), f"{what} undid `{undid}`, but the last operation not undone is `{target.op}`"
        if target.before is None or before is None:
            return
        overwritten = target.changed_since(before)
        assert not overwritten, f"{what} of `{target.op}` overwrote what changed since: {', '.join(overwritten)}"
        expect = target.undone(before)
        assert after == expect, f"{what} of `{target.op}` did not restore the state before it: " + expect.differences(
            after
        )

    def recovery_entry(self, crash: Crash | None, log0: str | None) -> str | None:
        """A command killed past its commit point, then edits: its completion logs an entry of
        its own (the state found, for undo). Model it as an operation; return the log head the
        next operation starts from."""
        if crash is None or crash.expect is not None:
            return log0
        found = entry_after(self.root, log0)
        if found and found[1].startswith("complete the interrupted"):
            self.model.done.append(Done(found[1], None, None))
            return found[0]
        return log0

    # ------------------------------------------------------------ invariants

    def check_all(self):
        self.nothing_of_the_users_is_lost()
        self.series_and_work_tree_agree()
        self.no_stray_state()

    @invariant()
    def nothing_of_the_users_is_lost(self):
        if self.crash is not None:
            return
        now = snap(self.root)
        listed = [now.patches.get(name, b"").decode(errors="replace") for name in self.series_names()]
        for path, marker in self.model.edits:
            assert marker in now.work.get(path, b"").decode(errors="replace") or any(marker in t for t in listed), (
                f"the user's edit '{marker}' of {path} is neither in build/src nor in a listed patch"
            )
        for path in self.model.deleted:
            deletion = f"diff --git a/{path} b/{path}\ndeleted file mode"
            assert path not in now.work or any(deletion in t for t in listed), (
                f"the user's deletion of {path} is neither in build/src nor in a listed patch"
            )
        for name, notes in self.model.notes.items():
            text = now.patches.get(name, b"").decode(errors="replace")
            for note in notes:
                assert note in text, f"the uncommitted hand edit '{note}' of patches/{name} was overwritten"

    @invariant()
    def series_and_work_tree_agree(self):
        if self.crash is not None:
            return
        series = read_series(self.root, warn=lambda _m: None)
        for patch in series.patches:
            assert parse_patch(patch.path).subject == self.model.subjects.get(patch.name), (
                f"patches/{patch.name} holds '{patch.subject}', not its own patch"
            )
        queue = PatchQueue(self.root)
        try:
            applied = queue.applied_names()
        finally:
            queue.repo.close()
        subjects = git_out(self.src, "log", "--first-parent", "--reverse", "--format=%s", "refs/sglpatch/base..HEAD")
        subjects = subjects.splitlines() if subjects else []
        assert applied == series.names[: len(subjects)], f"applied {applied}, commits {subjects}"
        assert subjects == [self.model.subjects[n] for n in applied], f"applied {applied}, commits {subjects}"

    @invariant()
    def no_stray_state(self):
        if self.crash is not None:
            return
        assert read_journal(self.root) is None, f"a completed operation left a journal: {read_journal(self.root)}"
        assert not (self.src / ".git" / "rebase-apply").exists(), "a completed operation left a git am"
        assert not list((self.root / "patches").glob(".*.sglpatch-tmp")), "a completed operation left a temp file"


def after_kill(crash: Crash | None) -> str:
    return f" (the next operation after `{crash.command}` was killed)" if crash else ""


def run_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=STEPS,
        deadline=None,
        database=None,  # no .hypothesis/ directory in the repository
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )


@pytest.mark.parametrize(
    "examples",
    [
        pytest.param(QUICK, id="quick"),
        pytest.param(EXAMPLES - QUICK, id="more", marks=pytest.mark.slow),
    ],
)
def test_random_queue_operations_keep_the_users_work_and_the_series_consistent(tmp_path, monkeypatch, examples):
    if examples == 0:
        pytest.skip(f"SGLPATCH_STATEFUL_EXAMPLES={EXAMPLES}: the quick part runs them all")
    monkeypatch.setenv("SGLPATCH_CACHE", str(tmp_path / "cache"))
    QueueMachine.workdir = tmp_path
    QueueMachine.upstream = make_upstream(tmp_path / "upstream")
    run_state_machine_as_test(QueueMachine, settings=run_settings(examples))

"""The patch queue: the series applied to a git work tree, one commit per patch.

The work tree (``build/src``) is a git repository whose ``refs/sglpatch/base`` is the pristine
upstream commit; the commits ``base..HEAD`` are the applied patches, in series order. Only this
module moves patches between ``patches/`` and commits. No operation discards uncommitted edits.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.git.diffheader import sections
from sglpatch.git.env import git_bytes, raise_if_killed
from sglpatch.git.repo import (
    BadName,
    Commit,
    GitError,
    Repo,
    first_parent_commits,
    git_dir,
    head_sha,
    message_text,
    pinned_env,
    resolve_commit,
    run,
    summary_text,
    work_dir,
)
from sglpatch.queue.line import WORK_TREE, all_lines, line_of
from sglpatch.queue.series import (
    PATCH_DIR,
    Series,
    commit_matches_patch,
    message_break,
    numbers_in_use,
    parse_patch,
    read_series,
    read_series_names,
    refuse_conflict_markers,
    render_series,
    series_path,
)
from sglpatch.queue.snapshot import BASE_REF
from sglpatch.queue.transaction import transaction
from sglpatch.queue.transaction_journal import checked_repo
from sglpatch.queue.transaction_log import read_record
from sglpatch.queue.untracked import name_left_out

BRANCH = "patched"


@dataclass(frozen=True)
class PatchStatus:
    name: str
    applied: bool
    files: tuple[str, ...]


class PatchQueue:
    def __init__(self, root: Path, work_tree: Path | None = None):
        self.root = root
        self.path = work_tree or root / WORK_TREE
        self._repo: Repo | None = None

    # ------------------------------------------------------------ set-up

    @property
    def repo(self) -> Repo:
        if self._repo is None:
            prepare = line_of(self.root).command("prepare")
            if not (self.path / ".git").exists():
                raise UserError(f"no work tree at {self.path}", f"run `{prepare}` first")
            self._repo = checked_repo(self.path, prepare)
        return self._repo

    def _git(self):
        return pinned_env(self.repo)

    def reset_to(self, mirror: Repo, base: str, *, names: list[str] | None = None) -> None:
        """Make the work tree the pristine ``base`` with nothing applied (a fresh queue).

        Refuses when that would lose anything: uncommitted edits, or applied commits that differ
        from their patch files. ``names``: the series' patch names as the caller already read
        them (default: read the series file).
        """
        with transaction(self.root, "prepare", create=True):
            if self._has_head():
                self.refuse_foreign_am()
                self.ensure_clean("rebuild the work tree")
                if self._has_base():
                    self.ensure_exported(names=names)
            self.fetch(mirror, base)
            with self._git():
                run(self.repo, "update-ref", BASE_REF, base)
                run(self.repo, "checkout", "--quiet", "--force", "-B", BRANCH, base)

    def _has_head(self) -> bool:
        try:
            head_sha(self.repo)
            return True
        except ValueError:
            return False

    def fetch(self, mirror: Repo, commit: str) -> None:
        """Bring a pristine release commit (and its blobs, for three-way merges) from the mirror."""
        with self._git():
            run(self.repo, "fetch", "--quiet", "--no-tags", str(git_dir(mirror)), commit)

    def _has_base(self) -> bool:
        try:
            resolve_commit(self.repo, BASE_REF)
            return True
        except (BadName, ValueError):
            return False

    @property
    def base(self) -> Commit:
        try:
            return resolve_commit(self.repo, BASE_REF)
        except (BadName, ValueError):
            if not self._has_head():
                raise UserError(f"{self.path} holds no release yet", "run `python build.py prepare` first") from None
            raise UserError(
                f"{self.path} has lost its base ref {BASE_REF}, which marks the release under the patches",
                "rebuild the work tree with `python build.py prepare`",
            ) from None

    # ------------------------------------------------------------ state

    def applied_commits(self) -> list[Commit]:
        commits = list(first_parent_commits(self.repo, f"{self.base.hexsha}..HEAD"))
        return commits[::-1]

    def series(self) -> Series:
        return read_series(self.root, warn=lambda _msg: None)

    def applied_names(self, *, names: list[str] | None = None) -> list[str]:
        """The applied patches, bottom first. ``names``: the series' patch names as the caller
        already read them (default: read the series file)."""
        if names is None:
            names = read_series_names(self.root)
        commits = self.applied_commits()
        if len(commits) > len(names):
            raise UserError(
                f"{self.path} has {len(commits)} commits above the base but the series lists {len(names)} patches",
                "export them with `python build.py new NAME` or drop the extra commits",
            )
        for name, commit in zip(names, commits):
            patch = parse_patch(self.root / PATCH_DIR / name)
            if not commit_matches_patch(message_text(commit), patch):
                raise UserError(
                    f"commit '{summary_text(commit)}' in {self.path} does not match patch {name} ('{patch.subject}')",
                    "the work tree history diverged from the series; export or reset it",
                )
        return names[: len(commits)]

    def status(self) -> list[PatchStatus]:
        applied = set(self.applied_names())
        return [PatchStatus(p.name, p.name in applied, p.files) for p in self.series().patches]

    def is_dirty(self) -> bool:
        return self.repo.is_dirty(untracked_files=True)

    def ensure_clean(self, action: str) -> None:
        if self.is_dirty():
            changed = [line[3:] for line in run(self.repo, "status", "--porcelain").splitlines()]
            shown = ", ".join(changed[:3]) + (" ..." if len(changed) > 3 else "")
            raise UserError(
                f"cannot {action}: {self.path} has uncommitted edits ({shown})",
                "fold them into a patch with `refresh` or `new NAME`, or commit/stash them yourself",
            )

    def ensure_exported(self, *, names: list[str] | None = None) -> None:
        """Refuse to drop an applied commit that holds work its patch file does not.

        A commit that still is the one we made from (or exported to) the patch file is
        disposable even when the file changed since (edited in patches/, or pulled): the file is
        the newer truth. A commit changed in the work tree is only disposable once exported.
        """
        synced = self._synced()
        for name, commit in zip(self.applied_names(names=names), self.applied_commits()):
            if synced.get(name) == commit.hexsha:
                continue
            exported = git_bytes(self.format_patch(commit))
            if exported != (self.root / PATCH_DIR / name).read_bytes():
                raise UserError(
                    f"applied patch {name} in {self.path} differs from {PATCH_DIR}/{name}",
                    "run `python build.py export` to keep the commit, "
                    "or `git -C build/src reset --hard refs/sglpatch/base` to drop it",
                )

    def _synced_path(self) -> Path:
        return Path(git_dir(self.repo)) / "sglpatch-synced.json"

    def _synced(self) -> dict[str, str]:
        """Patch name -> the commit that was last identical to its patch file."""
        return read_record(self._synced_path(), "which applied commits match their patch files")

    def _mark_synced(self, name: str, commit: str) -> None:
        synced = self._synced()
        synced[name] = commit
        self._synced_path().write_text(json.dumps(synced, indent=1, sort_keys=True))

    # ------------------------------------------------------------ interrupted runs

    def refuse_foreign_am(self) -> None:
        """An am of ours never outlives its transaction (sglpatch.transaction rolls it back), so
        one in progress here was started by hand: leave it to its owner."""
        if (Path(git_dir(self.repo)) / "rebase-apply").exists():
            raise UserError(
                f"a `git am` that sglpatch did not start is in progress in {self.path}",
                "finish it (`git am --continue`) or abort it (`git am --abort`) there",
            )

    # ------------------------------------------------------------ push / pop

    def push(self, target: str | None = None, *, all: bool = False, series: Series | None = None) -> list[str]:
        """Apply the next patch, up to and including ``target``, or all. Returns applied names.
        ``series``: the series as the caller already read it (default: read it here)."""
        with transaction(self.root, "push"):
            self.refuse_foreign_am()
            if target is not None:
                (self.series() if series is None else series).get(target)  # an unknown name is named as such
            self.ensure_clean("push")
            names = read_series_names(self.root) if series is None else series.names
            applied = self.applied_names(names=names)
            pending = names[len(applied) :]
            if target is not None:
                if target in applied:
                    raise UserError(f"{target} is already applied", "nothing to push")
                pending = pending[: pending.index(target) + 1]  # listed (checked above), not applied
            elif not all:
                pending = pending[:1]
            if not pending:
                return pending
            if series is None:
                series = self.series()
            for name in pending:
                self._apply(series.get(name).path, name)
            return pending

    def _apply(self, patch: Path, name: str) -> None:
        try:
            with self._git():
                run(self.repo, "am", "--quiet", "--committer-date-is-author-date", "--keep-cr", str(patch.resolve()))
        except GitError as exc:
            raise_if_killed(exc)
            with self._git():  # first: git am may have applied the diff before it failed
                run(self.repo, "am", "--abort")
            where, hint = self._diagnose(patch, exc)
            top = self.applied_names()
            at = f"stopped after {top[-1]}" if top else "nothing applied"
            error = UserError(f"patch {name} does not apply: {where} ({at})", hint)
            error.keep_progress = True  # the patches before it stay applied, as quilt does
            raise error from None
        self._mark_synced(name, head_sha(self.repo))

    def _diagnose(self, patch: Path, am_error: GitError) -> tuple[str, str]:
        """Why git could not apply ``patch``, in git's own words, and what to do about it."""
        stale = "refresh the patch against this upstream, or use `rebase` for a new release"
        damaged = (
            f"restore {PATCH_DIR}/{patch.name} from git (`git checkout -- {PATCH_DIR}/{patch.name}`) or re-export it"
        )
        try:
            run(self.repo, "apply", "--check", str(patch.resolve()))
        except GitError as exc:
            stderr = exc.stderr or ""
            found = re.search(r"patch failed: (.+):(\d+)", stderr)
            if found:
                path, line = found.group(1), int(found.group(2))
                return f"{path} hunk #{_hunk_number(patch, path, line)} at line {line}", stale
            missing = re.search(r"error: (.+): (No such file or directory|does not exist in index)", stderr)
            if missing:
                return f"{missing.group(1)} does not exist upstream", stale
            said = git_says(stderr)
            if any(words in said for words in DAMAGED):
                return f"git says: {said}", damaged
            return f"git says: {said or 'it could not apply the patch'}", stale
        refused, by_hook = am_refusal(self.repo, am_error.stderr or "")
        return (
            f"git am failed although the diff applies ({refused})",
            by_hook or "check the patch's mail header (From:, Date:, Subject:)",
        )

    def pop(self, target: str | None = None, *, all: bool = False) -> list[str]:
        """Unapply the top patch, down to and including ``target``, or all. Returns popped names."""
        with transaction(self.root, "pop"):
            self.refuse_foreign_am()
            if target is not None:
                self.series().get(target)  # an unknown name is named as such
            self.ensure_clean("pop")
            applied = self.applied_names()
            if target is not None and target not in applied:
                raise UserError(f"{target} is not applied", "nothing to pop")
            if not applied:
                return []
            if all:
                keep = 0
            elif target is not None:
                keep = applied.index(target)
            else:
                keep = len(applied) - 1
            self.ensure_exported()
            commits = self.applied_commits()
            onto = commits[keep - 1] if keep else self.base
            with self._git():
                run(self.repo, "reset", "--quiet", "--hard", onto.hexsha)
            return applied[keep:][::-1]

    # ------------------------------------------------------------ new / refresh / export

    def new(self, name: str, message: str | None = None) -> Path:
        """Turn the work tree's uncommitted edits into a new patch above the top one."""
        with transaction(self.root, "new") as tx:
            self.refuse_foreign_am()
            if not name.endswith(".patch"):
                name += ".patch"
            names = read_series_names(self.root)
            if "/" in name or name in names:
                raise UserError(
                    f"'{name}' is not a free patch file name", "choose a new name such as 0005-short-description.patch"
                )
            self._refuse_a_taken_number(name)
            if not self.is_dirty():
                raise UserError(
                    f"{self.path} has no edits to put in a new patch",
                    "edit files in the work tree first, then run `new NAME`",
                )
            applied = self.applied_names()
            _refuse_message_break(message or "", name, "indent that line of the message, then rerun")
            self._commit(message or _template(name), what=f"the new patch {name}")
            position = names.index(applied[-1]) + 1 if applied else 0
            names.insert(position, name)
            path = self.export_one(self.applied_commits()[-1], name, tx)
            tx.write(series_path(self.root), render_series(self.root, names), whole=False)
            return path

    def _refuse_a_taken_number(self, name: str) -> None:
        """A number is a patch's for life in every line (docs/lines.md): another patch of any
        line holding it is refused; the same name (a patch ported between lines) is not."""
        number = re.match(r"(\d+)-", name)
        if number is None:
            return
        used = numbers_in_use([line.root for line in all_lines(line_of(self.root).repo)])
        taken = [other for other in used.get(int(number.group(1)), []) if other != name]
        if taken:
            free = f"{max(used) + 1:04d}"
            raise UserError(
                f"patch number {number.group(1)} is taken by {taken[0]}",
                f"a number belongs to one patch in every line: name it {free}-{name[number.end() :]}",
            )

    def refresh(self) -> Path:
        """Fold the work tree's uncommitted edits into the top patch and rewrite its file."""
        with transaction(self.root, "refresh") as tx:
            self.refuse_foreign_am()
            applied = self.applied_names()
            if not applied:
                raise UserError("no patch is applied to refresh", "push one first, or use `new NAME`")
            if not self.is_dirty():
                raise UserError(
                    f"{self.path} has no edits to fold into {applied[-1]}", "edit files in the work tree first"
                )
            self._commit(None, amend=True, what=f"patch {applied[-1]}")
            return self.export_one(self.applied_commits()[-1], applied[-1], tx)

    def _commit(self, message: str | None, amend: bool = False, *, what: str) -> None:
        with self._git():
            run(self.repo, "add", "--all")  # info/exclude keeps build products and editor files out
            name_left_out(self.repo, what)
            if amend:
                run(self.repo, "commit", "--quiet", "--amend", "--no-edit", "--no-verify")
            else:
                run(self.repo, "commit", "--quiet", "--no-verify", "-m", message)

    def export(self) -> list[Path]:
        """Rewrite the patch file of every applied patch from its commit."""
        with transaction(self.root, "export") as tx:
            return [self.export_one(c, n, tx) for n, c in zip(self.applied_names(), self.applied_commits())]

    def export_one(self, commit: Commit, name: str, tx) -> Path:
        """Stage ``commit`` as the patch file ``name`` in the transaction ``tx``."""
        path = self.root / PATCH_DIR / name
        _refuse_message_break(
            message_text(commit), name, f"indent it (`git -C {self.path} commit --amend`), then rerun"
        )
        text = self.format_patch(commit)
        refuse_conflict_markers(text, name, f"resolve them in {self.path}, then rerun")
        if not path.exists() or path.read_bytes() != git_bytes(text):
            tx.write(path, text)
        self._mark_synced(name, commit.hexsha)
        return path

    def format_patch(self, commit: Commit) -> str:
        return format_patch(self.repo, commit.hexsha)


def format_patch(repo: Repo, commit: str) -> str:
    """A commit as a patch file; fixed options make it byte-identical whoever runs it."""
    with pinned_env(repo):
        return run(
            repo,
            "format-patch",
            "--stdout",
            "--zero-commit",
            "--no-signature",
            "--full-index",
            "--no-numbered",
            "--subject-prefix=PATCH",
            "--no-renames",
            "--diff-algorithm=myers",
            # --no-add-header drops the To:, Cc: and other headers a repository's configuration adds
            "--src-prefix=a/",
            "--dst-prefix=b/",
            "--no-add-header",
            "--no-thread",
            "--no-signoff",
            "--no-from",
            "--no-base",
            "-1",
            commit,
            strip_newline_in_stdout=False,
        )


def _refuse_message_break(message: str, name: str, hint: str) -> None:
    cut = message_break(message)
    if cut:
        line = message.splitlines()[cut - 1]
        raise UserError(
            f"line {cut} of the message of {name} ('{line[:40]}') is where `git am` would start "
            "the diff, so the patch would not apply again",
            hint,
        )


def _template(name: str) -> str:
    title = re.sub(r"^\d+-", "", name.removesuffix(".patch")).replace("-", " ")
    return (
        f"{title}\n\nWhat broke, why, and what this patch changes.\n\n"
        "Upstream-Status: Pending\nDrop-When: check:CHECK-NAME\n"
    )


# What git apply says of a patch file that is damaged rather than stale (a patch without any diff is
# refused earlier, when the series is read).
DAMAGED = ("corrupt patch", "patch with only garbage", "patch fragment without header")


def git_says(stderr: str) -> str:
    """git's last error line, without its "error: "/"fatal: " prefix."""
    # GitPython quotes it as "  stderr: 'error: ...'"
    said = re.findall(r"(?:^|\s|')(?:error|fatal): (.+?)'?$", stderr, re.M)
    return said[-1].strip() if said else ""


def am_refusal(repo: Repo, stderr: str, again: str = "rerun") -> tuple[str, str]:
    """Why git am stopped on a patch whose diff applies, and, when a hook stopped it, what to do.

    git itself says why in an error: line (a mail header it cannot read); without one, a hook git am
    ran (applypatch-msg, pre-applypatch) refused it, in its own words or silently."""
    if said := git_says(stderr):
        return f"git says: {said}", ""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    words = re.sub(r"^stderr: '|'$", "", lines[-1]) if lines else "without a word"  # GitPython's quoting off
    hooks = Path(work_dir(repo), run(repo, "rev-parse", "--git-path", "hooks"))
    return f"a git hook refused it: {words}", f"fix or remove the hook in {hooks}, then {again}"


def _hunk_number(patch: Path, path: str, line: int) -> int:
    """Which hunk of ``path`` in ``patch`` starts at old-file ``line`` (as git reports it)."""
    text = patch.read_text(errors="replace")
    for section in sections(text):
        if path in (section.old, section.new):
            starts = [int(m.group(1)) for m in re.finditer(r"(?m)^@@ -(\d+)", text[section.start : section.end])]
            if line in starts:
                return starts.index(line) + 1
    return 1  # not found: git names the line where one of the file's hunks starts

"""The local git mirror of pristine releases: each release imported once, as one commit tagged
``release/<version>``, from the submodule at the pinned commit or from its verified PyPI artifact,
and checked again (objects, import format, provenance against the pin) on every use.

The mirror lives in the cache, outside the repository; its commits are laid out like upstream's
repository (``python/sglang/...``) so that old and new releases share one object store.
"""

from __future__ import annotations

import contextlib
import re
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from packaging.version import Version

from sglpatch.cache import cache_dir
from sglpatch.errors import UserError
from sglpatch.git.repo import (
    AnyGitError,
    GitError,
    NotARepository,
    Repo,
    git_dir,
    head_sha,
    init_repo,
    open_repo,
    pinned_env,
    run,
)
from sglpatch.git.run import run_git
from sglpatch.lock import exclusive
from sglpatch.output import say
from sglpatch.upstream.artifacts import PIN_SOURCE, file_sha256, release_artifact, verify
from sglpatch.upstream.pin import Artifact, Pin, validate_version


def release_tag(version: str) -> str:
    """The mirror's tag for a pristine release."""
    return f"release/{version}"


def mirror_path() -> Path:
    return cache_dir() / "mirror"


def open_mirror() -> Repo:
    path = mirror_path()
    with mirror_errors():
        if (path / "HEAD").exists():
            return open_repo(path)
        path.mkdir(parents=True, exist_ok=True)
        return init_repo(path, bare=True)


def mirror_lock(version: str):
    """One importer at a time: two processes importing into one mirror must not interleave."""
    return exclusive(
        cache_dir() / "mirror.lock",
        f"import of SGLang {version}",
        wait=True,
        where=f"on the shared cache {cache_dir()}",
    )


@contextlib.contextmanager
def mirror_errors():
    """A git failure in the mirror is a corrupt cache: one line naming the command that clears it."""
    try:
        yield
    except AnyGitError as exc:
        raise UserError(
            f"the git mirror {mirror_path()} is corrupt ({_git_reason(exc)})",
            f"clear it with `rm -rf {mirror_path()}` and rerun (releases are imported again from the cached artifacts)",
        ) from None


def _git_reason(exc: AnyGitError) -> str:
    """The last line git printed, without GitPython's framing."""
    if isinstance(exc, NotARepository):
        return "not a git repository"
    text = getattr(exc, "stderr", None) or ""
    lines = [line.strip().removeprefix("stderr: ").strip("'").strip() for line in text.splitlines()]
    return next((line for line in reversed(lines) if line), type(exc).__name__)


def import_release(version: str, pin: Pin | None = None, submodule: Path | None = None) -> str:
    """Ensure ``release/<version>`` exists in the mirror, intact and made from what the pin names;
    return its commit SHA.

    Every call verifies: the cached artifact against the pin's sha256, the tag's commit against
    the artifact (or pinned commit) it was made from, and that commit's tree objects. A tag that
    fails is imported again; a pin that disagrees with the verified artifact is an error.
    Uses the populated submodule when it holds the pinned commit, else the PyPI artifact.
    """
    validate_version(version)
    pin = _pin_for(version, pin)
    with mirror_lock(version), mirror_errors():
        mirror = open_mirror()
        pinned = _pinned_source(pin)
        if pinned is not None:
            _recheck_cached(pinned)
        commit = _verified_tag(mirror, version, pin, pinned)
        if commit is None:
            commit = _import(mirror, version, pin, submodule)
        return commit


def _pin_for(version: str, pin: Pin | None) -> Pin | None:
    """The pin, when it pins ``version``: a pin says nothing about other releases."""
    return pin if pin is not None and Version(pin.version) == Version(version) else None


def _pinned_source(pin: Pin | None) -> Artifact | None:
    """The pinned artifact a release is imported from: the sdist, else the wheel."""
    if pin is None:
        return None
    return pin.artifact("sdist") or pin.artifact("wheel")


def _recheck_cached(pinned: Artifact) -> None:
    cached = cache_dir() / "artifacts" / pinned.filename
    if cached.exists():
        verify(cached, pinned.sha256, PIN_SOURCE)


def _import(mirror: Repo, version: str, pin: Pin | None, submodule: Path | None) -> str:
    if pin is not None and submodule is not None and _submodule_at(submodule, pin):
        with pinned_env(mirror):
            run(mirror, "fetch", str(submodule), pin.commit)
        commit = pin.commit
        assert commit is not None  # _submodule_at matched the submodule's HEAD to it
    else:
        commit = _import_artifact(mirror, version, pin)
    problem = _commit_problem(mirror, commit)
    if problem:  # the objects were there, so git did not write them again: they are corrupt
        raise UserError(
            f"the git mirror {mirror_path()} is corrupt: a fresh import of SGLang {version} {problem}",
            f"clear it with `rm -rf {mirror_path()}` and rerun",
        )
    run(mirror, "update-ref", f"refs/tags/{release_tag(version)}", commit)
    return commit


def _verified_tag(mirror: Repo, version: str, pin: Pin | None, pinned: Artifact | None) -> str | None:
    """The tag's commit when it is intact and made from what the pin names; None (and the tag
    deleted) when it is absent or has to be imported again."""
    tag = release_tag(version)
    commit = _tag_commit(mirror, tag)
    if commit is None:
        return None
    problem = (
        _commit_problem(mirror, commit)
        or _format_problem(mirror, commit)
        or _provenance_problem(mirror, commit, tag, pin, pinned)
    )
    if problem is None:
        return commit
    say(f"{tag} in the mirror {problem}: importing it again")
    _drop_ref(mirror, f"refs/tags/{tag}")
    return None


def _tag_commit(mirror: Repo, tag: str) -> str | None:
    ref = f"refs/tags/{tag}"
    try:
        return run(mirror, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except GitError:
        pass
    try:
        run(mirror, "show-ref", "--verify", ref)
    except GitError as exc:
        if "not a valid ref" in str(exc.stderr):
            return None  # no such tag: a first import
    say(f"{tag} in the mirror points to a missing or broken object: importing it again")
    _drop_ref(mirror, ref)
    return None


def _drop_ref(mirror: Repo, ref: str) -> None:
    try:
        run(mirror, "update-ref", "-d", ref)
    except GitError:
        raise UserError(
            f"the git mirror {mirror_path()} has a broken {ref} that git cannot delete",
            f"clear it with `rm -rf {mirror_path()}` and rerun",
        ) from None


def _commit_problem(mirror: Repo, commit: str) -> str | None:
    """Why ``commit`` is not intact in the mirror (its commit, tree and blob objects), or None.

    A full `git fsck` is too slow for a mirror of many releases; this checks that every object
    of this one commit's tree exists."""
    try:
        run(mirror, "cat-file", "-e", f"{commit}^{{commit}}")
        run(mirror, "rev-parse", "--verify", f"{commit}^{{tree}}")
        listing = run(mirror, "ls-tree", "-r", "--full-tree", commit)
    except GitError:
        return f"points to a commit {commit[:12]} whose objects are missing or corrupt"
    blobs = [
        fields[2] for line in listing.splitlines() if len(fields := line.split(None, 3)) == 4 and fields[1] == "blob"
    ]
    checked = run_git(["--git-dir", str(git_dir(mirror)), "cat-file", "--batch-check"], input="\n".join(blobs) + "\n")
    missing = sum(line.endswith(" missing") for line in checked.stdout.splitlines())
    if checked.returncode != 0 or missing:
        return f"points to a commit {commit[:12]} whose tree lacks {missing or 'some'} file objects"
    return None


# Marks a wheel import that keeps the wheel's executable bits; sdist imports (tar keeps modes)
# are unchanged, so their commits stay what they were on every machine.
WHEEL_FORMAT = "Import-Format: 2 (file modes)\n"
_MADE_FROM = re.compile(r"^Imported from PyPI: (?P<name>\S+)\nsha256: (?P<sha256>[0-9a-f]{64})$", re.M)


def _format_problem(mirror: Repo, commit: str) -> str | None:
    message = run(mirror, "log", "-1", "--format=%B", commit)
    made_from = _MADE_FROM.search(message)
    if made_from and made_from["name"].endswith(".whl") and WHEEL_FORMAT not in message:
        return "was imported from a wheel by an older sglpatch, which lost executable bits"
    return None


def _provenance_problem(mirror: Repo, commit: str, tag: str, pin: Pin | None, pinned: Artifact | None) -> str | None:
    """Why ``commit`` is not made from what the pin names, or None. Raises when the pin's sha256
    disagrees with the artifact the commit was verifiably made from and no cached file settles it."""
    if pin is None or pinned is None or (pin.commit and commit == pin.commit):
        return None  # nothing pinned to compare with, or the pinned upstream commit itself
    made_from = _MADE_FROM.search(run(mirror, "log", "-1", "--format=%B", commit))
    if made_from is None:
        return f"({commit[:12]}) records no artifact it was imported from"
    name, sha256 = made_from["name"], made_from["sha256"]
    if name != pinned.filename:
        return f"was imported from {name}, not from the pinned {pinned.filename}"
    if sha256 == pinned.sha256:
        return None
    if (cache_dir() / "artifacts" / pinned.filename).exists():  # verified against the pin above
        return f"was imported from a {name} with sha256 {sha256}, not the pinned {pinned.sha256}"
    raise UserError(
        f"checksum mismatch for {name}: {PIN_SOURCE} says {pinned.sha256}, but {tag} in the "
        f"mirror was imported from a {name} verified as {sha256}",
        f"correct the sha256 of [upstream.artifacts.{pinned.kind}] in {PIN_SOURCE}; if it is "
        f"right, clear the mirror's tag with `git -C {mirror_path()} tag -d {tag}` and rerun",
    )


def _submodule_at(path: Path, pin: Pin) -> bool:
    if not pin.commit or not (path / ".git").exists():
        return False
    try:
        return head_sha(open_repo(path)) == pin.commit
    except (NotARepository, ValueError, GitError):
        return False


def _import_artifact(mirror: Repo, version: str, pin: Pin | None) -> str:
    pinned = _pinned_source(pin)
    if pinned is not None:  # exactly the artifact the pin names, verified against it
        artifact = release_artifact(version, pinned.kind, pin)
    else:
        artifact = release_artifact(version, "sdist", pin) or release_artifact(version, "wheel", pin)
    if artifact is None:
        raise UserError(
            f"SGLang {version} has neither an sdist nor a usable wheel on the index", "pick another release"
        )
    with tempfile.TemporaryDirectory(prefix="sglpatch-import-") as tmp:
        # The scratch index goes beside the tree, inside tmp: never a shared /tmp/index.
        tree = Path(tmp) / "tree"
        _extract(artifact, tree / "python")
        return _commit_tree(mirror, tree, version, artifact)


def _extract(artifact: Path, dest: Path) -> None:
    """Lay an artifact out as upstream's ``python/`` directory."""
    dest.mkdir(parents=True)
    if artifact.name.endswith(".tar.gz"):
        with tarfile.open(artifact) as tar:
            for member in tar.getmembers():
                parts = PurePosixPath(member.name).parts[1:]  # drop "sglang-<version>/"
                if not parts or not (member.isfile() or member.isdir()):
                    continue
                member.name = str(PurePosixPath(*parts))
                try:
                    tar.extract(member, dest, filter="data")
                except tarfile.FilterError as exc:
                    raise _outside(artifact, member.name, f" ({exc})") from None
        return
    with zipfile.ZipFile(artifact) as whl:
        for name in whl.namelist():
            if PurePosixPath(name).is_absolute() or ".." in PurePosixPath(name).parts:
                raise _outside(artifact, name, "")
            top = name.split("/", 1)[0]
            # Compiled extensions of platform wheels are build outputs, not source.
            if top.endswith((".dist-info", ".data")) or name.endswith((".so", "/")):
                continue
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(whl.read(name))
            if (whl.getinfo(name).external_attr >> 16) & 0o111:  # the Unix mode the wheel records
                target.chmod(0o755)


def _outside(artifact: Path, member: str, why: str) -> UserError:
    return UserError(
        f"{artifact.name} holds {member}, which would be written outside its tree{why}",
        "pin another release of SGLang, or the other artifact of this one",
    )


def _commit_tree(mirror: Repo, tree: Path, version: str, artifact: Path) -> str:
    # A scratch index keeps the bare mirror's own state untouched.
    with pinned_env(
        mirror, date="2000-01-01T00:00:00+00:00", GIT_WORK_TREE=str(tree), GIT_INDEX_FILE=str(tree.parent / "index")
    ):
        run(mirror, "add", "--all", "--force", ".")
        tree_sha = run(mirror, "write-tree")
        message = f"SGLang {version}\n\nImported from PyPI: {artifact.name}\nsha256: {file_sha256(artifact)}\n" + (
            WHEEL_FORMAT if artifact.suffix == ".whl" else ""
        )
        return run(mirror, "commit-tree", tree_sha, "-m", message)

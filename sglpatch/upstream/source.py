"""Getting a pristine SGLang release: from the submodule, or from its PyPI artifact.

Every release ends up as one commit in a local git mirror (outside the repository), laid out
like upstream's repository (``python/sglang/...``) so that patches use upstream's paths and old
and new releases share one object store for three-way merges.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import git
from packaging.utils import parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from sglpatch.cache import cache_dir
from sglpatch.errors import UserError
from sglpatch.git.env import git_env
from sglpatch.lock import exclusive
from sglpatch.upstream.pin import Artifact, Pin, validate_version

DEFAULT_INDEX = "https://pypi.org/simple"
PROJECT = "sglang"
# Wheel-only releases (0.5.11+) ship platform wheels; the source inside is the same for all.
# Artifact kinds: "sdist"; "wheel", the one the import, the tests and Python 3.11 use; and
# "wheel-cpXY", every other x86_64 CPython wheel of a platform-wheel release, since an overlay
# wheel only installs on the Python its upstream wheel was built for.
PREFERRED_WHEEL_TAGS = ("py3-none-any", "cp311-cp311-manylinux_2_34_x86_64")
_CPYTHON_X86_64 = re.compile(r"-(cp3\d+)-\1-manylinux_[0-9_]+_x86_64\.whl$")
# Where expected hashes come from, as error messages name them.
PIN_SOURCE = "upstream.toml"
INDEX_SOURCE = "the package index"
# Seconds a stalled index may keep us waiting for its next bytes: a hung connection is an error
# naming the index, never a job that hangs until CI kills it.
INDEX_TIMEOUT = 60
DOWNLOAD_TIMEOUT = 120


def index_url() -> str:
    return os.environ.get("SGLPATCH_INDEX_URL", DEFAULT_INDEX).rstrip("/")


def release_tag(version: str) -> str:
    """The mirror's tag for a pristine release."""
    return f"release/{version}"


# ---------------------------------------------------------------- PyPI artifacts

@dataclass(frozen=True)
class RemoteFile:
    filename: str
    url: str
    sha256: str


def _index_listing() -> dict:
    url = f"{index_url()}/{PROJECT}/"
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=INDEX_TIMEOUT) as response:
            return json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UserError(f"cannot reach the package index {url} ({reason})",
                        "connect to PyPI once so the artifact can be cached") from None


def released_versions() -> list[str]:
    """Every final (non pre-release) SGLang release on the index, oldest first."""
    found = {_filename_version(f["filename"]) for f in _index_listing().get("files", [])
             if not f.get("yanked")}
    return [str(v) for v in sorted(v for v in found if v is not None and not v.is_prerelease)]


def _index_files(version: str) -> list[RemoteFile]:
    listing = _index_listing()
    files = []
    for f in listing.get("files", []):
        name = f["filename"]
        if _filename_version(name) == Version(version) and not f.get("yanked"):
            files.append(RemoteFile(name, f["url"], f["hashes"]["sha256"].lower()))
    return files


def _filename_version(name: str) -> Version | None:
    try:
        if name.endswith(".whl"):
            return parse_wheel_filename(name)[1]
        if name.endswith(".tar.gz"):
            return parse_sdist_filename(name)[1]
    except Exception:  # other projects' or malformed names are simply not ours
        return None
    return None


def _choose(files: list[RemoteFile], kind: str) -> RemoteFile | None:
    if kind == "sdist":
        return next((f for f in files if f.filename.endswith(".tar.gz")), None)
    if kind.startswith("wheel-"):
        return next((f for f in files if (m := _CPYTHON_X86_64.search(f.filename))
                     and m.group(1) == kind[len("wheel-"):]), None)
    if kind != "wheel":
        raise ValueError(f"unknown artifact kind {kind!r}")
    for tag in PREFERRED_WHEEL_TAGS:
        match = next((f for f in files if f.filename.endswith(f"-{tag}.whl")), None)
        if match:
            return match
    return None


def _expected(version: str, kind: str, pin: Pin | None) -> Artifact | None:
    if pin is not None and Version(pin.version) == Version(version):
        return pin.artifact(kind)
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def release_artifact(version: str, kind: str, pin: Pin | None = None) -> Path | None:
    """The cached, sha256-verified PyPI artifact (``"sdist"`` or ``"wheel"``) of a release.

    The expected hash comes from the pin when it pins ``version``, else from the index.
    None when the release has no such artifact (no sdist from 0.5.11 on).
    """
    validate_version(version)
    store = cache_dir() / "artifacts"
    store.mkdir(parents=True, exist_ok=True)
    expected = _expected(version, kind, pin)
    if expected is not None:
        cached = store / expected.filename
        if cached.exists():
            _verify(cached, expected.sha256, PIN_SOURCE)
            return cached
    remote = _find_remote(version, kind)
    if remote is None:
        return None
    if expected is not None and remote.filename != expected.filename:
        raise UserError(f"the index offers {remote.filename} but the pin names {expected.filename}",
                        "correct the artifact file name in upstream.toml")
    want = expected.sha256 if expected else remote.sha256
    target = store / remote.filename
    if not target.exists():
        _download(remote, target)
    _verify(target, want, PIN_SOURCE if expected else INDEX_SOURCE)
    return target


def wheel_kinds(version: str) -> list[str]:
    """The wheel artifact kinds of a release: "wheel", then "wheel-cpXY" for each other x86_64
    CPython wheel it publishes (none for a py3-none-any release)."""
    primary = _find_remote(version, "wheel")
    if primary is None:
        return []
    others = sorted({m.group(1) for f in _CACHED_LISTING[version]
                     if (m := _CPYTHON_X86_64.search(f.filename)) and f.filename != primary.filename},
                    key=lambda tag: int(tag[3:]))
    if primary.filename.endswith("-py3-none-any.whl"):
        return ["wheel"]
    return ["wheel", *(f"wheel-{tag}" for tag in others)]


_CACHED_LISTING: dict[str, list[RemoteFile]] = {}


def index_artifacts(version: str) -> tuple[Artifact, ...]:
    """The release's sdist and wheels as a pin names them, with the sha256 the index publishes
    (every use verifies the file against it)."""
    kinds = ["sdist", *wheel_kinds(version)]
    found = [(kind, _find_remote(version, kind)) for kind in kinds]
    return tuple(Artifact(kind, remote.filename, remote.sha256) for kind, remote in found if remote)


def _find_remote(version: str, kind: str) -> RemoteFile | None:
    if version not in _CACHED_LISTING:
        _CACHED_LISTING[version] = _index_files(version)
    files = _CACHED_LISTING[version]
    if not files:
        raise UserError(f"SGLang {version} is not on the package index",
                        "name a released version (see `pip index versions sglang`)")
    return _choose(files, kind)


def _download(remote: RemoteFile, target: Path) -> None:
    partial = target.with_name(target.name + ".part")
    try:
        with urllib.request.urlopen(remote.url, timeout=DOWNLOAD_TIMEOUT) as response, partial.open("wb") as out:
            total = int(response.headers.get("Content-Length") or 0)
            done = 0
            for block in iter(lambda: response.read(1 << 20), b""):
                out.write(block)
                done += len(block)
                _progress(f"downloading {remote.filename}", done, total)
    except (urllib.error.URLError, OSError) as exc:
        partial.unlink(missing_ok=True)
        reason = getattr(exc, "reason", exc)
        raise UserError(f"download of {remote.filename} failed ({reason})",
                        "check the connection to PyPI and rerun") from None
    finally:
        _progress_done()
    partial.replace(target)


def _verify(path: Path, sha256: str, source: str) -> None:
    """The file hashes to ``sha256``; else it is moved aside (never used again) and one line says
    which hash each side has."""
    actual = _sha256(path)
    if actual != sha256:
        bad = path.with_name(path.name + ".sha256-mismatch")
        path.replace(bad)
        fix = (f"correct the sha256 of {path.name} in {PIN_SOURCE} if it is wrong; else rerun to "
               "download the file again" if source == PIN_SOURCE else "rerun to download it again")
        raise UserError(f"checksum mismatch for {path.name}: {source} says {sha256}, the file has {actual}",
                        f"{fix} (the file was moved aside to {bad})")


def _progress(label: str, done: int, total: int) -> None:
    if sys.stderr.isatty():
        figure = f"{done * 100 // total}%" if total else f"{done >> 20} MiB"
        print(f"\r{label}: {figure}", end="", file=sys.stderr, flush=True)


def _progress_done() -> None:
    if sys.stderr.isatty():
        print(file=sys.stderr)


# ---------------------------------------------------------------- the mirror

def mirror_path() -> Path:
    return cache_dir() / "mirror"


def open_mirror() -> git.Repo:
    path = mirror_path()
    with _mirror_errors():
        if (path / "HEAD").exists():
            return git.Repo(path)
        path.mkdir(parents=True, exist_ok=True)
        return git.Repo.init(path, bare=True)


def _mirror_lock(version: str):
    """One importer at a time: two processes importing into one mirror must not interleave."""
    return exclusive(cache_dir() / "mirror.lock", f"import of SGLang {version}", wait=True,
                     where=f"on the shared cache {cache_dir()}")


@contextlib.contextmanager
def _mirror_errors():
    """A git failure in the mirror is a corrupt cache: one line naming the command that clears it."""
    try:
        yield
    except git.exc.GitError as exc:
        raise UserError(f"the git mirror {mirror_path()} is corrupt ({_git_reason(exc)})",
                        f"clear it with `rm -rf {mirror_path()}` and rerun (releases are imported "
                        "again from the cached artifacts)") from None


def _git_reason(exc: git.exc.GitError) -> str:
    """The last line git printed, without GitPython's framing."""
    if isinstance(exc, git.exc.InvalidGitRepositoryError):
        return "not a git repository"
    text = getattr(exc, "stderr", None) or ""
    lines = [line.strip().removeprefix("stderr: ").strip("'").strip() for line in text.splitlines()]
    return next((line for line in reversed(lines) if line), type(exc).__name__)


def _note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


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
    with _mirror_lock(version), _mirror_errors():
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
        _verify(cached, pinned.sha256, PIN_SOURCE)


def _import(mirror: git.Repo, version: str, pin: Pin | None, submodule: Path | None) -> str:
    if pin is not None and submodule is not None and _submodule_at(submodule, pin):
        with mirror.git.custom_environment(**git_env()):
            mirror.git.fetch(str(submodule), pin.commit)
        commit = pin.commit
    else:
        commit = _import_artifact(mirror, version, pin)
    problem = _commit_problem(mirror, commit)
    if problem:  # the objects were there, so git did not write them again: they are corrupt
        raise UserError(f"the git mirror {mirror_path()} is corrupt: a fresh import of SGLang {version} "
                        f"{problem}", f"clear it with `rm -rf {mirror_path()}` and rerun")
    mirror.git.update_ref(f"refs/tags/{release_tag(version)}", commit)
    return commit


def _verified_tag(mirror: git.Repo, version: str, pin: Pin | None, pinned: Artifact | None) -> str | None:
    """The tag's commit when it is intact and made from what the pin names; None (and the tag
    deleted) when it is absent or has to be imported again."""
    tag = release_tag(version)
    commit = _tag_commit(mirror, tag)
    if commit is None:
        return None
    problem = (_commit_problem(mirror, commit) or _format_problem(mirror, commit)
               or _provenance_problem(mirror, commit, tag, pin, pinned))
    if problem is None:
        return commit
    _note(f"{tag} in the mirror {problem}: importing it again")
    _drop_ref(mirror, f"refs/tags/{tag}")
    return None


def _tag_commit(mirror: git.Repo, tag: str) -> str | None:
    ref = f"refs/tags/{tag}"
    try:
        return mirror.git.rev_parse("--verify", "--quiet", f"{ref}^{{commit}}")
    except git.exc.GitCommandError:
        pass
    try:
        mirror.git.show_ref("--verify", ref)
    except git.exc.GitCommandError as exc:
        if "not a valid ref" in str(exc.stderr):
            return None  # no such tag: a first import
    _note(f"{tag} in the mirror points to a missing or broken object: importing it again")
    _drop_ref(mirror, ref)
    return None


def _drop_ref(mirror: git.Repo, ref: str) -> None:
    try:
        mirror.git.update_ref("-d", ref)
    except git.exc.GitCommandError:
        raise UserError(f"the git mirror {mirror_path()} has a broken {ref} that git cannot delete",
                        f"clear it with `rm -rf {mirror_path()}` and rerun") from None


def _commit_problem(mirror: git.Repo, commit: str) -> str | None:
    """Why ``commit`` is not intact in the mirror (its commit, tree and blob objects), or None.

    A full `git fsck` is too slow for a mirror of many releases; this checks that every object
    of this one commit's tree exists."""
    try:
        mirror.git.cat_file("-e", f"{commit}^{{commit}}")
        mirror.git.rev_parse("--verify", f"{commit}^{{tree}}")
        listing = mirror.git.ls_tree("-r", "--full-tree", commit)
    except git.exc.GitCommandError:
        return f"points to a commit {commit[:12]} whose objects are missing or corrupt"
    blobs = [fields[2] for line in listing.splitlines()
             if len(fields := line.split(None, 3)) == 4 and fields[1] == "blob"]
    checked = subprocess.run([git.Git.GIT_PYTHON_GIT_EXECUTABLE or "git", "--git-dir", str(mirror.git_dir), "cat-file", "--batch-check"],
                             input="\n".join(blobs) + "\n", capture_output=True, text=True,
                             env={**os.environ, **git_env()})
    missing = sum(line.endswith(" missing") for line in checked.stdout.splitlines())
    if checked.returncode != 0 or missing:
        return f"points to a commit {commit[:12]} whose tree lacks {missing or 'some'} file objects"
    return None


# Marks a wheel import that keeps the wheel's executable bits; sdist imports (tar keeps modes)
# are unchanged, so their commits stay what they were on every machine.
WHEEL_FORMAT = "Import-Format: 2 (file modes)\n"
_MADE_FROM = re.compile(r"^Imported from PyPI: (?P<name>\S+)\nsha256: (?P<sha256>[0-9a-f]{64})$", re.M)


def _format_problem(mirror: git.Repo, commit: str) -> str | None:
    message = mirror.git.log("-1", "--format=%B", commit)
    made_from = _MADE_FROM.search(message)
    if made_from and made_from["name"].endswith(".whl") and WHEEL_FORMAT not in message:
        return "was imported from a wheel by an older sglpatch, which lost executable bits"
    return None


def _provenance_problem(mirror: git.Repo, commit: str, tag: str, pin: Pin | None,
                        pinned: Artifact | None) -> str | None:
    """Why ``commit`` is not made from what the pin names, or None. Raises when the pin's sha256
    disagrees with the artifact the commit was verifiably made from and no cached file settles it."""
    if pin is None or pinned is None or (pin.commit and commit == pin.commit):
        return None  # nothing pinned to compare with, or the pinned upstream commit itself
    made_from = _MADE_FROM.search(mirror.git.log("-1", "--format=%B", commit))
    if made_from is None:
        return f"({commit[:12]}) records no artifact it was imported from"
    name, sha256 = made_from["name"], made_from["sha256"]
    if name != pinned.filename:
        return f"was imported from {name}, not from the pinned {pinned.filename}"
    if sha256 == pinned.sha256:
        return None
    if (cache_dir() / "artifacts" / pinned.filename).exists():  # verified against the pin above
        return f"was imported from a {name} with sha256 {sha256}, not the pinned {pinned.sha256}"
    raise UserError(f"checksum mismatch for {name}: {PIN_SOURCE} says {pinned.sha256}, but {tag} in the "
                    f"mirror was imported from a {name} verified as {sha256}",
                    f"correct the sha256 of [upstream.artifacts.{pinned.kind}] in {PIN_SOURCE}; if it is "
                    f"right, clear the mirror's tag with `git -C {mirror_path()} tag -d {tag}` and rerun")


def _submodule_at(path: Path, pin: Pin) -> bool:
    if not pin.commit or not (path / ".git").exists():
        return False
    try:
        return git.Repo(path).head.commit.hexsha == pin.commit
    except (git.exc.InvalidGitRepositoryError, ValueError, git.exc.GitCommandError):
        return False


def _import_artifact(mirror: git.Repo, version: str, pin: Pin | None) -> str:
    pinned = _pinned_source(pin)
    if pinned is not None:  # exactly the artifact the pin names, verified against it
        artifact = release_artifact(version, pinned.kind, pin)
    else:
        artifact = release_artifact(version, "sdist", pin) or release_artifact(version, "wheel", pin)
    if artifact is None:
        raise UserError(f"SGLang {version} has neither an sdist nor a usable wheel on the index",
                        "pick another release")
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
    return UserError(f"{artifact.name} holds {member}, which would be written outside its tree{why}",
                     "pin another release of SGLang, or the other artifact of this one")


def _commit_tree(mirror: git.Repo, tree: Path, version: str, artifact: Path) -> str:
    env = git_env(date="2000-01-01T00:00:00+00:00") | {"GIT_WORK_TREE": str(tree),
                                                     "GIT_INDEX_FILE": str(tree.parent / "index")}
    # A scratch index keeps the bare mirror's own state untouched.
    with mirror.git.custom_environment(**env):
        mirror.git.add("--all", "--force", ".")
        tree_sha = mirror.git.write_tree()
        message = (f"SGLang {version}\n\nImported from PyPI: {artifact.name}\n"
                   f"sha256: {_sha256(artifact)}\n" + (WHEEL_FORMAT if artifact.suffix == ".whl" else ""))
        return mirror.git.commit_tree(tree_sha, "-m", message)


# ---------------------------------------------------------------- trees

# The checkout's own submodule: a pristine tree of the pinned release comes from it when it is
# populated at the pinned commit (import_release ignores it for every other release).
SUBMODULE = Path(__file__).resolve().parents[2] / "upstream"


def prepare(pin: Pin, root: Path) -> str:
    """Import the pinned release into the mirror; return the base commit."""
    return import_release(pin.version, pin, root / "upstream")


def pristine_tree(version: str, pin: Pin | None = None) -> Path:
    """A cached, read-only checkout of a pristine release (``python/sglang/...``).

    Its stamp records the commit and a digest of every file; a checkout that no longer matches
    (a file deleted, added or edited) is checked out again."""
    with _mirror_lock(version), _mirror_errors():
        commit = import_release(version, pin, SUBMODULE)
        target = cache_dir() / "trees" / version
        problem = _checkout_problem(target, commit)
        if problem is None:
            return target
        if target.exists() or target.is_symlink():
            _note(f"the cached tree {target} {problem}: checking it out again")
            _remove(target)
        _checkout(commit, target)
        return target


STAMP = ".sglpatch-commit"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _checkout(commit: str, target: Path) -> None:
    partial = target.with_name(target.name + ".part")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    data = io.BytesIO()
    open_mirror().archive(data, commit, format="tar")
    data.seek(0)
    with tarfile.open(fileobj=data) as tar:
        try:
            tar.extractall(partial, filter="data")
        except tarfile.FilterError as exc:  # only a commit fetched from the submodule can hold one
            _remove(partial)
            raise UserError(f"the commit {commit[:12]} holds {exc.tarinfo.name}, which a checkout would write "
                            f"outside its tree ({exc})", "pin a commit of a real release in upstream.toml "
                            "(or leave the submodule empty: releases are then imported from PyPI)") from None
    count, digest = _tree_digest(partial)
    (partial / STAMP).write_text(f"{commit}\nfiles {count}\nsha256 {digest}\n")
    partial.replace(target)


def _checkout_problem(target: Path, commit: str) -> str | None:
    """Why the checkout at ``target`` is not a complete, unmodified checkout of ``commit``."""
    try:
        stamp = (target / STAMP).read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return "has no stamp"
    if len(stamp) != 3:
        return "has a stamp without a file digest"
    if stamp[0] != commit:
        return "is of another commit"
    try:
        count, digest = _tree_digest(target)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stamp[1:] != [f"files {count}", f"sha256 {digest}"]:
        return f"no longer matches its stamp ({count} files now; files deleted, added or edited)"
    return None


def _tree_digest(root: Path) -> tuple[int, str]:
    """The number of files under ``root`` (the stamp aside) and a sha256 of their paths and bytes."""
    digest = hashlib.sha256()
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in sorted(filenames + links):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if rel == STAMP:
                continue
            count += 1
            if os.path.islink(path):
                data = b"link:" + os.readlink(path).encode()
            else:
                with open(path, "rb") as fh:
                    data = fh.read()
            digest.update(f"{rel}\0{len(data)}\0".encode())
            digest.update(data)
    return count, digest.hexdigest()


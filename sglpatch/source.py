"""Getting a pristine SGLang release: from the submodule, or from its PyPI artifact.

Every release ends up as one commit in a local git mirror (outside the repository), laid out
like upstream's repository (``python/sglang/...``) so that patches use upstream's paths and old
and new releases share one object store for three-way merges.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
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

from .cache import cache_dir
from .errors import UserError
from .gitenv import git_env
from .pin import Artifact, Pin, validate_version

DEFAULT_INDEX = "https://pypi.org/simple"
PROJECT = "sglang"
# Wheel-only releases (0.5.11+) ship platform wheels; the source inside is the same for all.
# Artifact kinds: "sdist"; "wheel", the one the import, the tests and Python 3.11 use; and
# "wheel-cpXY", every other x86_64 CPython wheel of a platform-wheel release, since an overlay
# wheel only installs on the Python its upstream wheel was built for.
PREFERRED_WHEEL_TAGS = ("py3-none-any", "cp311-cp311-manylinux_2_34_x86_64")
_CPYTHON_X86_64 = re.compile(r"-(cp3\d+)-\1-manylinux_[0-9_]+_x86_64\.whl$")


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
        with urllib.request.urlopen(request, timeout=60) as response:
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
            _verify(cached, expected.sha256, "the pin")
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
    _verify(target, want, "the pin" if expected else "the package index")
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
        with urllib.request.urlopen(remote.url, timeout=120) as response, partial.open("wb") as out:
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
    actual = _sha256(path)
    if actual != sha256:
        bad = path.with_name(path.name + ".sha256-mismatch")
        path.replace(bad)
        raise UserError(f"checksum mismatch for {path.name}: {source} says {sha256}, got {actual}",
                        f"the file was moved aside to {bad}; check {source} and rerun")


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
    if (path / "HEAD").exists():
        return git.Repo(path)
    path.mkdir(parents=True, exist_ok=True)
    return git.Repo.init(path, bare=True)


def import_release(version: str, pin: Pin | None = None, submodule: Path | None = None) -> str:
    """Ensure ``release/<version>`` exists in the mirror; return its commit SHA.

    Uses the populated submodule when it holds the pinned commit, else the PyPI artifact.
    """
    validate_version(version)
    mirror = open_mirror()
    tag = release_tag(version)
    if tag in [t.name for t in mirror.tags]:
        return mirror.tags[tag].commit.hexsha
    if pin is not None and submodule is not None and _submodule_at(submodule, pin):
        with mirror.git.custom_environment(**git_env()):
            mirror.git.fetch(str(submodule), pin.commit)
        mirror.create_tag(tag, ref=pin.commit)
        return pin.commit
    commit = _import_artifact(mirror, version, pin)
    mirror.create_tag(tag, ref=commit)
    return commit


def _submodule_at(path: Path, pin: Pin) -> bool:
    if not pin.commit or not (path / ".git").exists():
        return False
    try:
        return git.Repo(path).head.commit.hexsha == pin.commit
    except (git.exc.InvalidGitRepositoryError, ValueError, git.exc.GitCommandError):
        return False


def _import_artifact(mirror: git.Repo, version: str, pin: Pin | None) -> str:
    sdist = release_artifact(version, "sdist", pin)
    artifact = sdist or release_artifact(version, "wheel", pin)
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
                tar.extract(member, dest, filter="data")
        return
    with zipfile.ZipFile(artifact) as whl:
        for name in whl.namelist():
            top = name.split("/", 1)[0]
            # Compiled extensions of platform wheels are build outputs, not source.
            if top.endswith((".dist-info", ".data")) or name.endswith((".so", "/")):
                continue
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(whl.read(name))


def _commit_tree(mirror: git.Repo, tree: Path, version: str, artifact: Path) -> str:
    env = git_env(date="2000-01-01T00:00:00+00:00") | {"GIT_WORK_TREE": str(tree),
                                                     "GIT_INDEX_FILE": str(tree.parent / "index")}
    # A scratch index keeps the bare mirror's own state untouched.
    with mirror.git.custom_environment(**env):
        mirror.git.add("--all", "--force", ".")
        tree_sha = mirror.git.write_tree()
        message = (f"SGLang {version}\n\nImported from PyPI: {artifact.name}\n"
                   f"sha256: {_sha256(artifact)}\n")
        return mirror.git.commit_tree(tree_sha, "-m", message)


# ---------------------------------------------------------------- trees

def prepare(pin: Pin, root: Path) -> str:
    """Import the pinned release into the mirror; return the base commit."""
    return import_release(pin.version, pin, root / "upstream")


def pristine_tree(version: str, pin: Pin | None = None) -> Path:
    """A cached, read-only checkout of a pristine release (``python/sglang/...``)."""
    commit = import_release(version, pin, _default_submodule(pin))
    target = cache_dir() / "trees" / version
    stamp = target / ".sglpatch-commit"
    if stamp.exists() and stamp.read_text() == commit:
        return target
    if target.exists():
        shutil.rmtree(target)
    partial = target.with_name(target.name + ".part")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    data = io.BytesIO()
    open_mirror().archive(data, commit, format="tar")
    data.seek(0)
    with tarfile.open(fileobj=data) as tar:
        tar.extractall(partial, filter="data")
    (partial / ".sglpatch-commit").write_text(commit)
    partial.replace(target)
    return target


def _default_submodule(pin: Pin | None) -> Path | None:
    if pin is None:
        return None
    return Path(__file__).resolve().parent.parent / "upstream"

"""What an image build is, computed from the repository without running anything: the tags, the
build args and labels derived from the pin (`upstream.toml`), the series and the checkout, the
checks on what the command line may add, and the build context of exactly the overlay wheels.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from packaging.utils import parse_wheel_filename
from packaging.version import InvalidVersion, Version

from sglpatch.errors import UserError
from sglpatch.git.run import run_git
from sglpatch.queue.line import line_of
from sglpatch.ship.dockerfile import dockerfile_arg_defaults, dockerfile_args, dockerfile_labels, substitute
from sglpatch.upstream.pin import Pin, read_pin

DOCKERFILE = Path("docker") / "Dockerfile"
DIST = "dist"
UPSTREAM_IMAGE = "lmsysorg/sglang"
CUDA_FLAVOR = "cu130"
PLATFORM = "linux/amd64"
REPO_ENV = "SGLPATCH_IMAGE_REPO"
DEFAULT_REPO = "sglang-kimi"
SOURCE_ENV = "SGLPATCH_IMAGE_SOURCE"
CONTEXT_PLACEHOLDER = "<context>"
# Build args `plan` derives from the pin, the series and the checkout (never from the command line).
DERIVED_ARGS = frozenset(
    {
        "BASE_IMAGE",
        "OCI_SOURCE",
        "OCI_REVISION",
        "OCI_VERSION",
        "UPSTREAM_VERSION",
        "UPSTREAM_COMMIT",
        "SERIES_VERSION",
        "SERIES_SHA256",
    }
)
# flashinfer-python builds the allreduce-fusion module for SM12x from this release on.
MIN_FLASHINFER = Version("0.6.17")

_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_REPO = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")


@dataclass(frozen=True)
class ImagePlan:
    """Everything `docker buildx build` needs, computed from the repository without running it."""

    root: Path  # the line's directory (pin, series, dist/); docker/ is the repository's
    repo: str
    tags: tuple[str, ...]
    build_args: dict[str, str]
    wheel_name: str
    push: bool
    dirty: bool
    series_tag: str
    flashinfer_version: str | None = None  # None: the Dockerfile's default
    context_files: tuple[str, ...] = field(default=())
    extra_build_args: tuple[tuple[str, str], ...] = field(default=())  # --build-arg KEY=VALUE

    @property
    def image(self) -> str:
        return self.tags[0]

    @property
    def repo_root(self) -> Path:
        """Where `--file docker/Dockerfile` resolves: every line builds the one Dockerfile."""
        return line_of(self.root).repo

    @property
    def dist(self) -> str:
        """The line's dist/ as the repository names it: ``dist`` or ``lines/<name>/dist``."""
        return str((self.root / DIST).relative_to(self.repo_root))

    def argv(self, context: str = CONTEXT_PLACEHOLDER) -> list[str]:
        argv = ["docker", "buildx", "build", "--file", str(DOCKERFILE), "--platform", PLATFORM, "--progress", "plain"]
        for key, value in self.all_build_args().items():
            argv += ["--build-arg", f"{key}={value}"]
        for tag in self.tags:
            argv += ["--tag", tag]
        argv.append("--load")  # a push goes tag by tag afterwards (sglpatch.registry), never moving a release
        argv.append(context)
        return argv

    def push_argv(self) -> list[list[str]]:
        """What `--push` runs after the build, one `docker push` per tag (sglpatch.registry)."""
        return [["docker", "push", tag] for tag in self.tags] if self.push else []

    def all_build_args(self) -> dict[str, str]:
        """What `--build-arg` passes: the derived args, then the FlashInfer pin and `--build-arg`."""
        args = dict(self.build_args)
        if self.flashinfer_version:
            args["FLASHINFER_VERSION"] = self.flashinfer_version
        args.update(self.extra_build_args)
        return args

    def labels(self, dockerfile_text: str | None = None) -> dict[str, str]:
        """The labels the image will carry: the Dockerfile's LABEL lines with our build args."""
        text = dockerfile_text if dockerfile_text is not None else (self.repo_root / DOCKERFILE).read_text()
        values = dict(dockerfile_arg_defaults(text))
        values.update(self.all_build_args())
        return {key: substitute(value, values) for key, value in dockerfile_labels(text).items()}

    def to_json(self) -> dict:
        return {
            "image": self.image,
            "tags": list(self.tags),
            "series_tag": self.series_tag,
            "build_args": self.all_build_args(),
            "labels": self.labels(),
            "context_files": list(self.context_files),
            "wheel": f"{self.dist}/{self.wheel_name}",
            "wheels": [f"{self.dist}/{name}" for name in self.context_files],
            "argv": self.argv(),
            "push": self.push,
            "push_argv": self.push_argv(),
        }


# ---------------------------------------------------------------- derived names


def series_tag(pin: Pin) -> str:
    """``0.5.9-kimi.1``: the pin's local version in a form Docker accepts as a tag."""
    return pin.local_version.replace("+", "-")


def image_tag(pin: Pin) -> str:
    """``0.5.9-kimi.1-cu130``: upstream version, series version, CUDA flavour."""
    tag = f"{series_tag(pin)}-{CUDA_FLAVOR}"
    if not _TAG.fullmatch(tag):
        raise UserError(
            f"'{tag}' (from upstream.toml) is not a valid image tag",
            "fix [series] local in upstream.toml: letters, digits, '.', '_', '-'",
        )
    return tag


def base_image(pin: Pin) -> str:
    """Upstream's CUDA 13 image for the pinned release, e.g. ``lmsysorg/sglang:v0.5.9-cu130``."""
    return f"{UPSTREAM_IMAGE}:{pin.tag}-{CUDA_FLAVOR}"


def wheel_name(pin: Pin) -> str:
    """The primary overlay wheel's file name: upstream's wheel name with the local version."""
    return wheel_names(pin)[0]


def wheel_names(pin: Pin) -> tuple[str, ...]:
    """Every overlay wheel's file name, the primary first (`sglpatch.build` makes one per pinned
    upstream wheel)."""
    uploads = [a.filename for a in pin.wheels] or [f"sglang-{pin.version}-py3-none-any.whl"]
    names = []
    for upstream in uploads:
        name, _, _, _ = parse_wheel_filename(upstream)
        tag = upstream.removesuffix(".whl").split("-", 2)[2]
        names.append(f"{name}-{Version(pin.local_version)}-{tag}.whl")
    return tuple(names)


def series_fingerprint(root: Path) -> str:
    """sha256 over patches/series and every patch it lists (`Series.fingerprint`)."""
    from sglpatch.queue.series import read_series

    return read_series(root).fingerprint()


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    # The user's own checkout, read as the user's git sees it (their configuration applies).
    try:
        return run_git(["-C", str(root), *args], program="git", user_config=True)
    except FileNotFoundError:
        raise UserError("the git program was not found", "install git (e.g. apt-get install git)") from None


def git_revision(root: Path) -> tuple[str, bool]:
    """HEAD's commit and whether tracked files differ from it."""
    head = _git(root, "rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        raise UserError(
            f"{root} is not a git work tree with a commit",
            "the image's revision label names the commit it was built from: commit first",
        )
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return head.stdout.strip(), bool(status.stdout.strip())


def source_url(root: Path) -> str:
    """Where the repository lives: $SGLPATCH_IMAGE_SOURCE, GitHub Actions' repository, or origin."""
    if os.environ.get(SOURCE_ENV):
        return _public_url(os.environ[SOURCE_ENV])
    if os.environ.get("GITHUB_REPOSITORY"):
        server = os.environ.get("GITHUB_SERVER_URL", "https://github.com")
        return f"{server.rstrip('/')}/{os.environ['GITHUB_REPOSITORY']}"
    origin = _git(root, "config", "--get", "remote.origin.url")
    return _public_url(origin.stdout.strip()) if origin.returncode == 0 else ""


def _public_url(url: str) -> str:
    """An https URL without credentials or `.git` (labels are public)."""
    url = url.strip()
    scp = re.fullmatch(r"(?:[^@/]+@)?([^:/]+):(?!//)(.+)", url)
    if scp:
        url = f"https://{scp.group(1)}/{scp.group(2)}"
    parts = urlsplit(url)
    scheme, netloc = parts.scheme, parts.hostname or ""
    if scheme in ("ssh", "git", "git+ssh"):
        scheme = "https"  # an ssh port says nothing about the web address
    elif parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((scheme, netloc, parts.path.removesuffix(".git").rstrip("/"), "", ""))


# ---------------------------------------------------------------- planning


def resolve_repo(repo: str | None) -> str:
    repo = repo or os.environ.get(REPO_ENV) or DEFAULT_REPO
    if not _REPO.fullmatch(repo):
        raise UserError(
            f"'{repo}' is not an image repository name", "use e.g. ghcr.io/OWNER/sglang-kimi (lower case, no tag)"
        )
    return repo


def resolve_tag(repo: str, tag: str) -> str:
    """`--tag T`: a bare tag goes onto the repository, a full reference is taken as given."""
    if "/" in tag or ":" in tag:
        ref_repo, _, ref_tag = tag.rpartition(":")
        if not ref_repo or "/" in ref_tag or not _TAG.fullmatch(ref_tag) or not _REPO.fullmatch(ref_repo):
            raise UserError(f"'{tag}' is not an image reference", "use TAG or REPOSITORY:TAG")
        return tag
    if not _TAG.fullmatch(tag):
        raise UserError(f"'{tag}' is not a valid image tag", "letters, digits, '.', '_', '-'; at most 128")
    return f"{repo}:{tag}"


def resolve_base_image(ref: str) -> str:
    """`--base-image REF`: a repository with a tag or a digest (a bare name would mean :latest)."""
    match = re.fullmatch(r"(?P<repo>[^:@]+(?::[0-9]+/[^:@]+)?)(?::(?P<tag>[^:@/]+))?(?:@sha256:[0-9a-f]{64})?", ref)
    if (
        not match
        or not _REPO.fullmatch(match["repo"])
        or ("@" not in ref and not match["tag"])
        or (match["tag"] and not _TAG.fullmatch(match["tag"]))
    ):
        raise UserError(
            f"'{ref}' is not a base image reference",
            "use REPOSITORY:TAG or REPOSITORY@sha256:DIGEST, e.g. lmsysorg/sglang:v0.5.9-cu130",
        )
    return ref


def parse_build_args(pairs: list[str] | tuple[str, ...], dockerfile_text: str) -> tuple[tuple[str, str], ...]:
    """`--build-arg KEY=VALUE` (repeatable): only ARGs the Dockerfile declares and the pin does not
    derive, so nothing can contradict the labels."""
    declared = dockerfile_args(dockerfile_text)
    parsed = []
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise UserError(f"--build-arg '{pair}' is not KEY=VALUE", "e.g. --build-arg FLASHINFER_PREBUILD_JIT=0")
        if key in DERIVED_ARGS:
            raise UserError(
                f"--build-arg {key} is derived from the pin and the series",
                "use --base-image for the base; the others follow upstream.toml",
            )
        if key == "FLASHINFER_VERSION":
            raise UserError("--build-arg FLASHINFER_VERSION bypasses the sm_120 check", "use --flashinfer-version V")
        if key not in declared:
            raise UserError(
                f"--build-arg {key}: docker/Dockerfile declares no such ARG",
                f"one of {', '.join(sorted(declared - DERIVED_ARGS - {'FLASHINFER_VERSION'}))}",
            )
        parsed.append((key, value))
    return tuple(parsed)


def plan(
    root: Path,
    *,
    repo: str | None = None,
    extra_tags: list[str] | tuple[str, ...] = (),
    push: bool = False,
    flashinfer_version: str | None = None,
    base: str | None = None,
    build_arg_pairs: list[str] | tuple[str, ...] = (),
) -> ImagePlan:
    root = Path(root)
    extra_args = parse_build_args(build_arg_pairs, (line_of(root).repo / DOCKERFILE).read_text())
    pin = read_pin(root)
    if flashinfer_version is None:
        flashinfer_version = pin.image_flashinfer  # the line's own FlashInfer, if it names one
    fingerprint = series_fingerprint(root)
    revision, dirty = git_revision(root)
    repo = resolve_repo(repo)
    if push and "/" not in repo:
        raise UserError(
            f"--push needs a registry in the repository name, not '{repo}'",
            f"pass --repo ghcr.io/OWNER/sglang-kimi or set {REPO_ENV}",
        )
    if push and dirty:
        raise UserError(
            "the work tree has uncommitted changes to tracked files",
            "commit them first: a pushed image's revision label must name what it was built from",
        )
    if flashinfer_version is not None:
        try:
            if Version(flashinfer_version) < MIN_FLASHINFER:
                raise UserError(
                    f"flashinfer {flashinfer_version} cannot build allreduce fusion for sm_120",
                    f"use {MIN_FLASHINFER} or later (see docs/deploy.md)",
                )
        except InvalidVersion:
            raise UserError(f"'{flashinfer_version}' is not a version", "e.g. 0.6.17") from None
    tags = [f"{repo}:{image_tag(pin)}"]
    tags += [t for t in (resolve_tag(repo, t) for t in extra_tags) if t not in tags]
    wheels = wheel_names(pin)
    build_args = {
        "BASE_IMAGE": resolve_base_image(base) if base else base_image(pin),
        "OCI_SOURCE": source_url(root),
        "OCI_REVISION": revision + ("-dirty" if dirty else ""),
        "OCI_VERSION": pin.local_version,
        "UPSTREAM_VERSION": pin.version,
        "UPSTREAM_COMMIT": pin.commit or "",
        "SERIES_VERSION": f"{pin.series_local}.{pin.series_release}",
        "SERIES_SHA256": fingerprint,
    }
    return ImagePlan(
        root,
        repo,
        tuple(tags),
        build_args,
        wheels[0],
        push,
        dirty,
        series_tag(pin),
        flashinfer_version,
        wheels,
        extra_args,
    )


def assemble_context(image_plan: ImagePlan, wheels: list[Path], dest: Path) -> list[str]:
    """Fill ``dest`` (an empty directory) with exactly what the Dockerfile takes from its context:
    the overlay wheels the pin names, nothing else."""
    names = sorted(w.name for w in wheels)
    if names != sorted(image_plan.context_files):
        raise UserError(
            f"the wheels are {', '.join(names)}, the pin says {', '.join(image_plan.context_files)}",
            "rerun `python build.py` so the wheels match upstream.toml",
        )
    if any(dest.iterdir()):
        raise UserError(f"the build context {dest} is not empty", "use a fresh directory")
    for wheel in wheels:
        shutil.copy2(wheel, dest / wheel.name)
    return sorted(p.name for p in dest.iterdir())

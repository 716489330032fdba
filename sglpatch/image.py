"""The Blackwell CUDA 13 image: `python build.py image [--tag T] [--push] [--dry-run] [--json]`.

Everything that names a version comes from the pin (`upstream.toml`) and the series: the base
image (upstream's `<tag>-cu130`), the overlay wheel's file name, the image tag
(`<repo>:<upstream>-<series>-cu130`) and the labels. Only the FlashInfer pin lives in
`docker/Dockerfile` (build arg `FLASHINFER_VERSION`), because it is a property of the image.

The build context is a fresh temporary directory holding exactly the overlay wheel: the Dockerfile
takes nothing else from it. The command runs as an argument list, never through a shell.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from packaging.utils import parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .errors import UserError
from .pin import Pin, read_pin

DOCKERFILE = Path("docker") / "Dockerfile"
DIST = "dist"
UPSTREAM_IMAGE = "lmsysorg/sglang"
CUDA_FLAVOR = "cu130"
PLATFORM = "linux/amd64"
REPO_ENV = "SGLPATCH_IMAGE_REPO"
DEFAULT_REPO = "sglang-kimi"
SOURCE_ENV = "SGLPATCH_IMAGE_SOURCE"
CONTEXT_PLACEHOLDER = "<context>"
# flashinfer-python builds the allreduce-fusion module for SM12x from this release on.
MIN_FLASHINFER = Version("0.6.17")

_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_REPO = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")


@dataclass(frozen=True)
class ImagePlan:
    """Everything `docker buildx build` needs, computed from the repository without running it."""

    root: Path
    repo: str
    tags: tuple[str, ...]
    build_args: dict[str, str]
    wheel_name: str
    push: bool
    dirty: bool
    series_tag: str
    flashinfer_version: str | None = None  # None: the Dockerfile's default
    context_files: tuple[str, ...] = field(default=())

    @property
    def image(self) -> str:
        return self.tags[0]

    def argv(self, context: str = CONTEXT_PLACEHOLDER) -> list[str]:
        argv = ["docker", "buildx", "build", "--file", str(DOCKERFILE), "--platform", PLATFORM]
        args = dict(self.build_args)
        if self.flashinfer_version:
            args["FLASHINFER_VERSION"] = self.flashinfer_version
        for key, value in args.items():
            argv += ["--build-arg", f"{key}={value}"]
        for tag in self.tags:
            argv += ["--tag", tag]
        argv.append("--push" if self.push else "--load")
        argv.append(context)
        return argv

    def labels(self, dockerfile_text: str | None = None) -> dict[str, str]:
        """The labels the image will carry: the Dockerfile's LABEL lines with our build args."""
        text = dockerfile_text if dockerfile_text is not None else (self.root / DOCKERFILE).read_text()
        values = dict(dockerfile_arg_defaults(text))
        values.update(self.build_args)
        if self.flashinfer_version:
            values["FLASHINFER_VERSION"] = self.flashinfer_version
        return {key: _substitute(value, values) for key, value in dockerfile_labels(text).items()}

    def to_json(self) -> dict:
        return {
            "image": self.image,
            "tags": list(self.tags),
            "series_tag": self.series_tag,
            "build_args": dict(self.build_args),
            "labels": self.labels(),
            "context_files": list(self.context_files),
            "wheel": f"{DIST}/{self.wheel_name}",
            "argv": self.argv(),
            "push": self.push,
        }


# ---------------------------------------------------------------- derived names

def series_tag(pin: Pin) -> str:
    """``0.5.9-kimi.1``: the pin's local version in a form Docker accepts as a tag."""
    return pin.local_version.replace("+", "-")


def image_tag(pin: Pin) -> str:
    """``0.5.9-kimi.1-cu130``: upstream version, series version, CUDA flavour."""
    tag = f"{series_tag(pin)}-{CUDA_FLAVOR}"
    if not _TAG.fullmatch(tag):
        raise UserError(f"'{tag}' (from upstream.toml) is not a valid image tag",
                        "fix [series] local in upstream.toml: letters, digits, '.', '_', '-'")
    return tag


def base_image(pin: Pin) -> str:
    """Upstream's CUDA 13 image for the pinned release, e.g. ``lmsysorg/sglang:v0.5.9-cu130``."""
    return f"{UPSTREAM_IMAGE}:{pin.tag}-{CUDA_FLAVOR}"


def wheel_name(pin: Pin) -> str:
    """The overlay wheel's file name: upstream's wheel name with the local version."""
    artifact = pin.artifact("wheel")
    upstream = artifact.filename if artifact else f"sglang-{pin.version}-py3-none-any.whl"
    name, _, _, _ = parse_wheel_filename(upstream)
    tag = upstream.removesuffix(".whl").split("-", 2)[2]
    return f"{name}-{Version(pin.local_version)}-{tag}.whl"


def series_fingerprint(root: Path) -> str:
    """sha256 over patches/series and every patch it lists (`Series.fingerprint`)."""
    from .series import read_series

    return read_series(root).fingerprint()


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    except FileNotFoundError:
        raise UserError("the git program was not found", "install git (e.g. apt-get install git)") from None


def git_revision(root: Path) -> tuple[str, bool]:
    """HEAD's commit and whether tracked files differ from it."""
    head = _git(root, "rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        raise UserError(f"{root} is not a git work tree with a commit",
                        "the image's revision label names the commit it was built from: commit first")
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


# ---------------------------------------------------------------- Dockerfile reading

def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out, buf = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are ignored by Docker
        if stripped.endswith("\\"):
            buf += stripped[:-1]
            continue
        buf += stripped
        keyword, _, rest = buf.partition(" ")
        out.append((keyword.upper(), rest.strip()))
        buf = ""
    return out


def dockerfile_arg_defaults(text: str) -> dict[str, str]:
    defaults = {}
    for keyword, rest in dockerfile_instructions(text):
        if keyword == "ARG":
            name, eq, value = rest.partition("=")
            if eq:
                defaults[name.strip()] = value.strip().strip('"')
    return defaults


def dockerfile_args(text: str) -> set[str]:
    return {rest.partition("=")[0].strip() for keyword, rest in dockerfile_instructions(text)
            if keyword == "ARG"}


def dockerfile_labels(text: str) -> dict[str, str]:
    labels = {}
    for keyword, rest in dockerfile_instructions(text):
        if keyword == "LABEL":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                labels[key] = value
    return labels


def _substitute(value: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m.group(1) or m.group(2), ""), value)


# ---------------------------------------------------------------- planning

def resolve_repo(repo: str | None) -> str:
    repo = repo or os.environ.get(REPO_ENV) or DEFAULT_REPO
    if not _REPO.fullmatch(repo):
        raise UserError(f"'{repo}' is not an image repository name",
                        "use e.g. ghcr.io/OWNER/sglang-kimi (lower case, no tag)")
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


def plan(root: Path, *, repo: str | None = None, extra_tags: list[str] | tuple[str, ...] = (),
         push: bool = False, flashinfer_version: str | None = None) -> ImagePlan:
    root = Path(root)
    pin = read_pin(root)
    fingerprint = series_fingerprint(root)
    revision, dirty = git_revision(root)
    repo = resolve_repo(repo)
    if push and "/" not in repo:
        raise UserError(f"--push needs a registry in the repository name, not '{repo}'",
                        f"pass --repo ghcr.io/OWNER/sglang-kimi or set {REPO_ENV}")
    if push and dirty:
        raise UserError("the work tree has uncommitted changes to tracked files",
                        "commit them first: a pushed image's revision label must name what it was built from")
    if flashinfer_version is not None:
        try:
            if Version(flashinfer_version) < MIN_FLASHINFER:
                raise UserError(f"flashinfer {flashinfer_version} cannot build allreduce fusion for sm_120",
                                f"use {MIN_FLASHINFER} or later (see docs/deploy.md)")
        except InvalidVersion:
            raise UserError(f"'{flashinfer_version}' is not a version", "e.g. 0.6.17") from None
    tags = [f"{repo}:{image_tag(pin)}"]
    tags += [t for t in (resolve_tag(repo, t) for t in extra_tags) if t not in tags]
    wheel = wheel_name(pin)
    build_args = {
        "BASE_IMAGE": base_image(pin),
        "SGLANG_WHEEL": wheel,
        "OCI_SOURCE": source_url(root),
        "OCI_REVISION": revision + ("-dirty" if dirty else ""),
        "OCI_VERSION": pin.local_version,
        "UPSTREAM_VERSION": pin.version,
        "UPSTREAM_COMMIT": pin.commit or "",
        "SERIES_VERSION": f"{pin.series_local}.{pin.series_release}",
        "SERIES_SHA256": fingerprint,
    }
    return ImagePlan(root, repo, tuple(tags), build_args, wheel, push, dirty, series_tag(pin),
                     flashinfer_version, (wheel,))


def assemble_context(image_plan: ImagePlan, wheel: Path, dest: Path) -> list[str]:
    """Fill ``dest`` (an empty directory) with exactly what the Dockerfile takes from its context."""
    if wheel.name != image_plan.wheel_name:
        raise UserError(f"the wheel is {wheel.name}, the pin says {image_plan.wheel_name}",
                        "rerun `python build.py` so the wheel matches upstream.toml")
    if any(dest.iterdir()):
        raise UserError(f"the build context {dest} is not empty", "use a fresh directory")
    shutil.copy2(wheel, dest / wheel.name)
    return sorted(p.name for p in dest.iterdir())


# ---------------------------------------------------------------- running

def require_docker() -> None:
    """The docker client, its buildx plugin and a reachable engine, or one clear error."""
    hint = "run on a machine with Docker, or use --dry-run to print the command"
    if shutil.which("docker") is None:
        raise UserError("the docker client was not found", hint)
    probe = subprocess.run(["docker", "buildx", "version"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise UserError("the docker buildx plugin is missing (`docker buildx version` failed)",
                        "install docker-buildx-plugin, or use --dry-run to print the command")
    info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                          capture_output=True, text=True)
    if info.returncode != 0 or not info.stdout.strip():
        reason = (info.stderr or info.stdout).strip().splitlines()
        raise UserError(f"no Docker engine is reachable ({reason[-1] if reason else 'docker info failed'})",
                        "start dockerd or set DOCKER_HOST; --dry-run prints the command without building")


def ensure_wheel(root: Path) -> Path:
    """Run the main job (`python build.py`) so the wheel matches the series the labels name.

    It prepares and checks the patched tree and rewrites dist/ only from cached, verified inputs,
    so calling it on every image build costs little and never ships a stale wheel.
    """
    from .build import build

    return Path(build(root).wheel)


def format_command(argv: list[str]) -> str:
    """One argument (or flag and value) per line, shell-quoted, so it can be pasted as is."""
    lines, i = [shlex.join(argv[:3])], 3
    while i < len(argv):
        if argv[i].startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--") \
                and argv[i] not in ("--push", "--load"):
            lines.append(f"{shlex.quote(argv[i])} {shlex.quote(argv[i + 1])}")
            i += 2
        else:
            lines.append(argv[i] if argv[i] == CONTEXT_PLACEHOLDER else shlex.quote(argv[i]))
            i += 1
    return " \\\n  ".join(lines)


def dry_run_text(image_plan: ImagePlan) -> str:
    files = "\n".join(f"  {name}  (from {DIST}/{name}, built by `python build.py`)"
                      for name in image_plan.context_files)
    return (f"# build context: a fresh temporary directory ({CONTEXT_PLACEHOLDER}) holding exactly\n"
            f"{files}\n"
            f"# command, run from the repository root:\n"
            f"{format_command(image_plan.argv())}")


def run_build(image_plan: ImagePlan) -> None:
    require_docker()
    wheel = ensure_wheel(image_plan.root)
    with tempfile.TemporaryDirectory(prefix="sglpatch-image-") as tmp:
        context = Path(tmp)
        assemble_context(image_plan, wheel, context)
        argv = image_plan.argv(str(context))
        print(f"$ {shlex.join(argv)}", file=sys.stderr, flush=True)
        code = subprocess.run(argv, cwd=image_plan.root, stdout=sys.stderr).returncode
    if code != 0:
        raise UserError(f"docker buildx build failed (exit {code})", "see the build log above")


# ---------------------------------------------------------------- CLI

def handler(args) -> int:
    root = Path(getattr(args, "root", None) or Path.cwd())
    image_plan = plan(root, repo=args.repo, extra_tags=args.tag or (), push=args.push,
                      flashinfer_version=args.flashinfer_version)
    if args.dry_run:
        if args.json:
            print(json.dumps({"dry_run": True, **image_plan.to_json()}, indent=2))
        else:
            print(dry_run_text(image_plan))
        return 0
    run_build(image_plan)
    data = {"dry_run": False, **image_plan.to_json()}
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        verb = "pushed" if image_plan.push else "built"
        print("\n".join(f"{verb} {tag}" for tag in image_plan.tags))
    return 0


def register_cli(subparsers, common=None) -> None:
    help_text = "build the Blackwell CUDA 13 image (docker buildx) from the overlay wheel"
    parents = [common] if common is not None else []
    cmd = subparsers.add_parser("image", parents=parents, help=help_text, description=help_text)
    if common is None:
        cmd.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    cmd.add_argument("--tag", action="append", metavar="T",
                     help="an extra tag (TAG or REPOSITORY:TAG) besides the derived "
                          "<repo>:<upstream>-<series>-cu130; repeatable")
    cmd.add_argument("--repo", default=None,
                     help=f"image repository (default: ${REPO_ENV}, else '{DEFAULT_REPO}')")
    cmd.add_argument("--push", action="store_true", help="push to the registry instead of --load")
    cmd.add_argument("--dry-run", action="store_true",
                     help="print the build context and the exact command; run nothing")
    cmd.add_argument("--flashinfer-version", default=None, metavar="V",
                     help=f"override the Dockerfile's FLASHINFER_VERSION (>= {MIN_FLASHINFER})")
    cmd.set_defaults(func=handler)

"""The Blackwell CUDA 13 image: `python build.py image [--tag T] [--push] [--dry-run] [--json]`.

Everything that names a version comes from the pin (`upstream.toml`) and the series: the base
image (upstream's `<tag>-cu130`), the overlay wheel's file name, the image tag
(`<repo>:<upstream>-<series>-cu130`) and the labels. Only the FlashInfer pin lives in
`docker/Dockerfile` (build arg `FLASHINFER_VERSION`), because it is a property of the image.

The build context is a fresh temporary directory holding exactly the overlay wheels (one per
pinned upstream wheel: one py3-none-any wheel, or one per CPython for a platform-wheel release);
the Dockerfile lets pip pick the one for the base image's Python and takes nothing else. The
command runs as an argument list, never through a shell.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from packaging.utils import parse_wheel_filename
from packaging.version import InvalidVersion, Version

from sglpatch.ship import registry, sbom
from sglpatch.errors import UserError
from sglpatch.queue.line import line_of
from sglpatch.lock import line_lock
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
DERIVED_ARGS = frozenset({"BASE_IMAGE", "OCI_SOURCE", "OCI_REVISION", "OCI_VERSION",
                          "UPSTREAM_VERSION", "UPSTREAM_COMMIT", "SERIES_VERSION", "SERIES_SHA256"})
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
        argv = ["docker", "buildx", "build", "--file", str(DOCKERFILE), "--platform", PLATFORM,
                "--progress", "plain"]
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
        return {key: _substitute(value, values) for key, value in dockerfile_labels(text).items()}

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
        raise UserError(f"'{tag}' (from upstream.toml) is not a valid image tag",
                        "fix [series] local in upstream.toml: letters, digits, '.', '_', '-'")
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


def resolve_base_image(ref: str) -> str:
    """`--base-image REF`: a repository with a tag or a digest (a bare name would mean :latest)."""
    match = re.fullmatch(r"(?P<repo>[^:@]+(?::[0-9]+/[^:@]+)?)(?::(?P<tag>[^:@/]+))?(?:@sha256:[0-9a-f]{64})?", ref)
    if not match or not _REPO.fullmatch(match["repo"]) or ("@" not in ref and not match["tag"]) \
            or (match["tag"] and not _TAG.fullmatch(match["tag"])):
        raise UserError(f"'{ref}' is not a base image reference",
                        "use REPOSITORY:TAG or REPOSITORY@sha256:DIGEST, e.g. lmsysorg/sglang:v0.5.9-cu130")
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
            raise UserError(f"--build-arg {key} is derived from the pin and the series",
                            "use --base-image for the base; the others follow upstream.toml")
        if key == "FLASHINFER_VERSION":
            raise UserError("--build-arg FLASHINFER_VERSION bypasses the sm_120 check",
                            "use --flashinfer-version V")
        if key not in declared:
            raise UserError(f"--build-arg {key}: docker/Dockerfile declares no such ARG",
                            f"one of {', '.join(sorted(declared - DERIVED_ARGS - {'FLASHINFER_VERSION'}))}")
        parsed.append((key, value))
    return tuple(parsed)


def plan(root: Path, *, repo: str | None = None, extra_tags: list[str] | tuple[str, ...] = (),
         push: bool = False, flashinfer_version: str | None = None, base: str | None = None,
         build_arg_pairs: list[str] | tuple[str, ...] = ()) -> ImagePlan:
    root = Path(root)
    extra_args = parse_build_args(build_arg_pairs, (line_of(root).repo / DOCKERFILE).read_text())
    pin = read_pin(root)
    if flashinfer_version is None:
        flashinfer_version = pin.image_flashinfer  # the line's own FlashInfer, if it names one
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
    return ImagePlan(root, repo, tuple(tags), build_args, wheels[0], push, dirty, series_tag(pin),
                     flashinfer_version, wheels, extra_args)


def assemble_context(image_plan: ImagePlan, wheels: list[Path], dest: Path) -> list[str]:
    """Fill ``dest`` (an empty directory) with exactly what the Dockerfile takes from its context:
    the overlay wheels the pin names, nothing else."""
    names = sorted(w.name for w in wheels)
    if names != sorted(image_plan.context_files):
        raise UserError(f"the wheels are {', '.join(names)}, the pin says {', '.join(image_plan.context_files)}",
                        "rerun `python build.py` so the wheels match upstream.toml")
    if any(dest.iterdir()):
        raise UserError(f"the build context {dest} is not empty", "use a fresh directory")
    for wheel in wheels:
        shutil.copy2(wheel, dest / wheel.name)
    return sorted(p.name for p in dest.iterdir())


# ---------------------------------------------------------------- running

@dataclass(frozen=True)
class Builder:
    """How this machine runs BuildKit: `docker buildx build`, or (no buildx plugin) the classic
    `docker build` of a client older than 23, which still speaks BuildKit itself (Debian's docker.io
    20.10). Newer clients without buildx refuse BuildKit, so they cannot build this Dockerfile."""

    client: str
    buildx: bool

    def build_argv(self, image_plan: "ImagePlan", context: str) -> list[str]:
        argv = image_plan.argv(context)
        if self.buildx:
            return [self.client, *argv[1:]]
        return [self.client, "build", *(a for a in argv[3:] if a != "--load")]

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_BUILDKIT": "1"}

    def describe(self) -> str:
        return f"{self.client} buildx build" if self.buildx else f"{self.client} build (BuildKit)"


def _docker_clients() -> list[str]:
    """Every `docker` on PATH, in PATH order, each executable once."""
    seen, found = set(), []
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = Path(entry or ".") / "docker"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            real = candidate.resolve()
            if real not in seen:
                seen.add(real)
                found.append(str(candidate))
    return found


def _client_version(client: str) -> Version | None:
    out = subprocess.run([client, "--version"], capture_output=True, text=True)
    match = re.search(r"version (\d+\.\d+(?:\.\d+)?)", out.stdout)
    return Version(match.group(1)) if out.returncode == 0 and match else None


def find_builder() -> Builder:
    """The docker client to build with, or one clear error."""
    hint = "run on a machine with Docker, or use --dry-run to print the command"
    clients = _docker_clients()
    if not clients:
        raise UserError("the docker client was not found", hint)
    if subprocess.run([clients[0], "buildx", "version"], capture_output=True).returncode == 0:
        return Builder(clients[0], buildx=True)
    for client in clients:
        version = _client_version(client)
        if version is not None and version < Version("23"):
            return Builder(client, buildx=False)
    raise UserError("the docker buildx plugin is missing and no docker client here runs BuildKit without it",
                    "install docker-buildx-plugin (or Debian's docker.io, whose 20.10 client does), "
                    "or use --dry-run to print the command")


def engine_version(builder: Builder) -> tuple[str | None, str]:
    """The engine's version, or None and why it is not reachable."""
    info = subprocess.run([builder.client, "info", "--format", "{{.ServerVersion}}"],
                          capture_output=True, text=True)
    version = info.stdout.strip()
    if info.returncode == 0 and version and "error" not in version.lower():
        return version, ""
    reason = (info.stderr or info.stdout).strip().splitlines()
    return None, reason[-1] if reason else "docker info failed"


def require_docker() -> Builder:
    """A builder and a reachable engine, or one clear error."""
    builder = find_builder()
    version, reason = engine_version(builder)
    if version is None:
        raise UserError(f"no Docker engine is reachable ({reason})",
                        "start dockerd or set DOCKER_HOST; --dry-run prints the command without building")
    return builder


def image_lock(root: Path):
    """One writer per line: `image` rewrites the same dist/ and build/src as the build."""
    return line_lock(root, "`build.py image`")


def ensure_wheels(root: Path) -> list[Path]:
    """Run the main job (`python build.py`) so the wheels match the series the labels name.

    It prepares and checks the patched tree and rewrites dist/ only from cached, verified inputs,
    so calling it on every image build costs little and never ships a stale wheel.
    """
    from sglpatch.ship.build import build

    return [Path(path) for path, _ in build(root).wheels]


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
    files = "\n".join(f"  {name}  (from {image_plan.dist}/{name}, built by `{line_of(image_plan.root).command()}`)"
                      for name in image_plan.context_files)
    return (f"# build context: a fresh temporary directory ({CONTEXT_PLACEHOLDER}) holding exactly\n"
            f"{files}\n"
            f"# command, run from the repository root:\n"
            f"{format_command(image_plan.argv())}"
            + "".join(f"\n{shlex.join(argv)}" for argv in image_plan.push_argv()))


def stream(argv: list[str], *, cwd: Path, env: dict[str, str], keep: int = 400) -> tuple[int, list[str]]:
    """Run ``argv``, copying its output to stderr as it comes (progress for long builds); return
    the exit code and the last ``keep`` lines. Ctrl-C stops the client, which cancels the build."""
    tail: collections.deque[str] = collections.deque(maxlen=keep)
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1)
    try:
        for line in proc.stdout:
            sys.stderr.write(line)
            tail.append(line.rstrip("\n"))
        return proc.wait(), list(tail)
    except BaseException:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


_NO_SPACE = re.compile(r"no space left on device|disk quota exceeded", re.I)
_BASE_MISSING = re.compile(r"failed to resolve source metadata for|pull access denied|"
                           r"failed to create LLB definition|manifest unknown|"
                           r"repository does not exist|not found: manifest", re.I)
_ERROR_LINE = re.compile(r"(?i)\berror\b|failed to|did not complete")


def build_failure(tail: list[str], code: int, builder: Builder, image_plan: ImagePlan) -> UserError:
    """The one-line cause of a failed build, read from its last output lines and the engine."""
    text = "\n".join(tail)
    if _NO_SPACE.search(text):
        return UserError("the disk filled up during the image build (no space left on device)",
                         "free space where Docker keeps its data (docker system prune; "
                         "df -h /var/lib/docker), then rerun")
    if engine_version(builder)[0] is None:
        return UserError("the Docker engine stopped answering during the build",
                         "restart dockerd (it keeps finished layers), then rerun `python build.py image`")
    base = image_plan.build_args["BASE_IMAGE"]
    if any(_BASE_MISSING.search(line) and (base.split("@")[0].split(":")[0] in line
                                           or "LLB definition" in line) for line in tail):
        return UserError(f"the base image {base} is not in the Docker engine and could not be pulled",
                         "pull or load it first, or pass --base-image REF")
    errors = [line for line in tail if _ERROR_LINE.search(line)]
    detail = errors[-1].strip() if errors else (tail[-1].strip() if tail else "no output")
    return UserError(f"{builder.describe()} failed (exit {code}): {detail[:300]}", "see the build log above")


def run_build(image_plan: ImagePlan) -> tuple[Builder, dict]:
    """Build the image, record what is inside, and with ``push`` publish it; returns the builder
    and the report (image ID, SBOM and audit paths, and the push's digest and tags)."""
    with image_lock(image_plan.root):
        builder = require_docker()
        if image_plan.push:  # a registry that cannot be reached is found before a long build
            registry.preflight(builder.client, list(image_plan.tags), builder.env())
        wheels = ensure_wheels(image_plan.root)
        with tempfile.TemporaryDirectory(prefix="sglpatch-image-") as tmp:
            context = Path(tmp)
            assemble_context(image_plan, wheels, context)
            argv = builder.build_argv(image_plan, str(context))
            print(f"$ {shlex.join(argv)}", file=sys.stderr, flush=True)
            code, tail = stream(argv, cwd=image_plan.repo_root, env=builder.env())
        if code != 0:
            raise build_failure(tail, code, builder, image_plan)
        image_id = registry.local_image_id(builder.client, image_plan.image, builder.env())
        inside = sbom.record(image_plan.root, image_plan.repo_root, builder.client, image_plan.image, builder.env(),
                             image_id, image_plan.labels(), say=lambda m: print(m, file=sys.stderr, flush=True))
        if not image_plan.push:
            return builder, {"image_id": image_id, "inside": inside}
        report = registry.publish(builder.client, list(image_plan.tags), image_id, image_plan.series_tag,
                                  builder.env(), lambda argv, env: stream(argv, cwd=image_plan.repo_root, env=env))
    return builder, {**report, "inside": inside}


# ---------------------------------------------------------------- CLI

def handler(args) -> int:
    root = Path(getattr(args, "root", None) or Path.cwd())
    image_plan = plan(root, repo=args.repo, extra_tags=args.tag or (), push=args.push,
                      flashinfer_version=args.flashinfer_version, base=args.base_image,
                      build_arg_pairs=args.build_arg or ())
    if args.dry_run:
        if args.json:
            print(json.dumps({"dry_run": True, **image_plan.to_json()}, indent=2))
        else:
            print(dry_run_text(image_plan))
        return 0
    builder, report = run_build(image_plan)
    data = {"dry_run": False, **image_plan.to_json(), "builder": builder.describe(), **report}
    if args.json:
        print(json.dumps(data, indent=2))
    elif image_plan.push:
        for pushed in report["pushed"]:
            verb = "pushed" if pushed["status"] == "pushed" else "unchanged (already in the registry)"
            print(f"{verb} {pushed['tag']} ({pushed['kind']} tag)")
        print(f"digest {report['digest']}\npull {report['pull']}")
    else:
        print("\n".join(f"built {tag}" for tag in image_plan.tags))
    return 0


def register_cli(subparsers, common=None) -> None:
    help_text = "build the Blackwell CUDA 13 image (BuildKit: docker buildx, else a classic client) from the overlay wheel"
    parents = [common] if common is not None else []
    cmd = subparsers.add_parser("image", parents=parents, help=help_text, description=help_text)
    if common is None:
        cmd.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    cmd.add_argument("--tag", action="append", metavar="T",
                     help="an extra tag (TAG or REPOSITORY:TAG) besides the derived "
                          "<repo>:<upstream>-<series>-cu130; repeatable")
    cmd.add_argument("--repo", default=None,
                     help=f"image repository (default: ${REPO_ENV}, else '{DEFAULT_REPO}')")
    cmd.add_argument("--push", action="store_true",
                     help="after the build, push every tag and print the digest; a release tag that "
                          "names another image in the registry is refused (release tags never move)")
    cmd.add_argument("--dry-run", action="store_true",
                     help="print the build context and the exact command; run nothing")
    cmd.add_argument("--flashinfer-version", default=None, metavar="V",
                     help=f"override the Dockerfile's FLASHINFER_VERSION (>= {MIN_FLASHINFER})")
    cmd.add_argument("--base-image", default=None, metavar="REF",
                     help="build on REF instead of upstream's image for the pin "
                          "(e.g. a locally built stand-in; the base.name label follows)")
    cmd.add_argument("--build-arg", action="append", metavar="KEY=VALUE",
                     help="set a Dockerfile ARG the pin does not derive, e.g. FLASHINFER_PREBUILD_JIT=0 "
                          "or FLASHINFER_CUBIN_INDEX= ; repeatable")
    cmd.set_defaults(func=handler)

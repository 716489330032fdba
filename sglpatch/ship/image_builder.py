"""Running an image build: finding the docker client that runs BuildKit (buildx, else a classic
client that still speaks it), the engine check, the build streamed to stderr, the one-line cause
of a failed build, and the record and push that follow it.
"""

from __future__ import annotations

import collections
import os
import re
import shlex
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from sglpatch.errors import UserError
from sglpatch.lock import line_lock
from sglpatch.output import relay, say
from sglpatch.ship import registry, sbom
from sglpatch.ship.image_plan import ImagePlan, assemble_context


@dataclass(frozen=True)
class Builder:
    """How this machine runs BuildKit: `docker buildx build`, or (no buildx plugin) the classic
    `docker build` of a client older than 23, which still speaks BuildKit itself (Debian's docker.io
    20.10). Newer clients without buildx refuse BuildKit, so they cannot build this Dockerfile."""

    client: str
    buildx: bool

    def build_argv(self, image_plan: ImagePlan, context: str) -> list[str]:
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
    raise UserError(
        "the docker buildx plugin is missing and no docker client here runs BuildKit without it",
        "install docker-buildx-plugin (or Debian's docker.io, whose 20.10 client does), "
        "or use --dry-run to print the command",
    )


def engine_version(builder: Builder) -> tuple[str | None, str]:
    """The engine's version, or None and why it is not reachable."""
    info = subprocess.run([builder.client, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
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
        raise UserError(
            f"no Docker engine is reachable ({reason})",
            "start dockerd or set DOCKER_HOST; --dry-run prints the command without building",
        )
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


def stream(argv: list[str], *, cwd: Path, env: dict[str, str], keep: int = 400) -> tuple[int, list[str]]:
    """Run ``argv``, copying its output to stderr as it comes (progress for long builds); return
    the exit code and the last ``keep`` lines. Ctrl-C stops the client, which cancels the build."""
    tail: collections.deque[str] = collections.deque(maxlen=keep)
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    )
    assert proc.stdout is not None  # stdout=PIPE
    try:
        for line in proc.stdout:
            relay(line)
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
_BASE_MISSING = re.compile(
    r"failed to resolve source metadata for|pull access denied|"
    r"failed to create LLB definition|manifest unknown|"
    r"repository does not exist|not found: manifest",
    re.I,
)
_ERROR_LINE = re.compile(r"(?i)\berror\b|failed to|did not complete")


def build_failure(tail: list[str], code: int, builder: Builder, image_plan: ImagePlan) -> UserError:
    """The one-line cause of a failed build, read from its last output lines and the engine."""
    text = "\n".join(tail)
    if _NO_SPACE.search(text):
        return UserError(
            "the disk filled up during the image build (no space left on device)",
            "free space where Docker keeps its data (docker system prune; df -h /var/lib/docker), then rerun",
        )
    if engine_version(builder)[0] is None:
        return UserError(
            "the Docker engine stopped answering during the build",
            "restart dockerd (it keeps finished layers), then rerun `python build.py image`",
        )
    base = image_plan.build_args["BASE_IMAGE"]
    if any(
        _BASE_MISSING.search(line) and (base.split("@")[0].split(":")[0] in line or "LLB definition" in line)
        for line in tail
    ):
        return UserError(
            f"the base image {base} is not in the Docker engine and could not be pulled",
            "pull or load it first, or pass --base-image REF",
        )
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
            say(f"$ {shlex.join(argv)}")
            code, tail = stream(argv, cwd=image_plan.repo_root, env=builder.env())
        if code != 0:
            raise build_failure(tail, code, builder, image_plan)
        image_id = registry.local_image_id(builder.client, image_plan.image, builder.env())
        inside = sbom.record(
            image_plan.root,
            image_plan.repo_root,
            builder.client,
            image_plan.image,
            builder.env(),
            image_id,
            image_plan.labels(),
            say=say,
        )
        if not image_plan.push:
            return builder, {"image_id": image_id, "inside": inside}
        report = registry.publish(
            builder.client,
            list(image_plan.tags),
            image_id,
            image_plan.series_tag,
            builder.env(),
            lambda argv, env: stream(argv, cwd=image_plan.repo_root, env=env),
        )
    return builder, {**report, "inside": inside}

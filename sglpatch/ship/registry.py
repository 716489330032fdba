"""Pushing the image to a registry: every tag of a line, release tags immutable, the digest verified.

The registry is read and written through the docker client (`docker manifest inspect`, `docker
push`), so the credentials of `docker login` apply and nothing here speaks HTTP itself.

Two kinds of tag (docs/deploy.md, "Tags"):

- a **release tag** names one series release (it holds the series version, ``0.5.9-kimi.2``): it
  never moves. Pushing a different image under it is refused before anything is pushed; the same
  image again is a no-op.
- a **floating tag** (``latest``, ``0.5.9-cu130``) follows the newest push and may move.

"The same image" means the same image config (the image ID, which is the config's sha256): the
manifest digest of one image can differ between registries, its config cannot.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass

from sglpatch.errors import UserError

_LOOPBACK = re.compile(r"^(localhost|127(?:\.\d+){3}|\[::1\])(?::\d+)?$")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_MISSING = re.compile(r"no such manifest|manifest unknown|not found", re.I)
_UNREACHABLE = re.compile(
    r"connection refused|no such host|i/o timeout|network is unreachable|"
    r"server gave HTTP response to HTTPS client|error pinging|"
    r"connection reset|\bEOF\b",
    re.I,
)
# a status code counts only where docker names it as one: a port (127.0.0.1:35071) holds digits too
_DENIED = re.compile(
    r"unauthorized|denied|authentication required|no basic auth credentials|forbidden|"
    r"\bstatus(?: code)?:? ?40[13]\b",
    re.I,
)
_FULL = re.compile(
    r"no space left on device|disk quota exceeded|insufficient storage|\bstatus(?: code)?:? ?507\b", re.I
)
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"']*", re.I)
# docker reports a registry's storage failure (a full disk among them) only as its HTTP status
_SERVER_ERROR = re.compile(r"unexpected HTTP status: 5\d\d[^\n]*", re.I)


@dataclass(frozen=True)
class Remote:
    """What a registry holds under one tag: the manifest digest and the image config it names."""

    digest: str
    config: str


@dataclass(frozen=True)
class Pushed:
    tag: str
    kind: str  # "release" or "floating"
    status: str  # "pushed" or "unchanged"


def registry_host(ref: str) -> str:
    return ref.split("/", 1)[0]


def is_release_tag(ref: str, series: str) -> bool:
    """A tag naming the series release (``...:0.5.9-kimi.2-cu130``); others float."""
    return re.search(rf"(^|[^0-9A-Za-z]){re.escape(series)}($|[-_])", ref.rpartition(":")[2]) is not None


def _docker(client: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([client, *args], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)


def docker_words(ref: str, said: str) -> str:
    """What docker said less the names it quotes back: the ref, its repository and host, and any
    URL. A name is the user's choice, never docker's verdict (a repository called ``denied``, a
    port ending in 507). Each holds the host, so no word of docker's own is taken with it."""
    words = _URL.sub(" ", said)
    repository = (ref.rpartition(":")[0] if ":" in ref.rpartition("/")[2] else ref).partition("@")[0]
    for name in sorted({ref, repository, registry_host(ref)}, key=len, reverse=True):
        words = words.replace(name, " ")
    return words


def failure(ref: str, said: str, action: str) -> UserError:
    """One line for a registry that refused or could not be reached, by what docker said."""
    host = registry_host(ref)
    last = next((line.strip() for line in reversed(said.strip().splitlines()) if line.strip()), "no output")
    said = docker_words(ref, said)
    if _FULL.search(said):
        return UserError(
            f"the registry {host} is out of space ({action} {ref}: {last[:200]})",
            "free space on the registry's storage, then rerun; no release tag was written",
        )
    if _DENIED.search(said):
        return UserError(
            f"the registry {host} refused {action} {ref} ({last[:200]})",
            f"log in with `docker login {host}` as a user who may push there, then rerun",
        )
    server = _SERVER_ERROR.search(said)
    if server:
        return UserError(
            f"the registry {host} failed while {action} {ref} ({server.group(0).strip()})",
            "check its storage (a full disk answers so) and its log, then rerun; no release tag was written",
        )
    if _UNREACHABLE.search(said):
        return UserError(
            f"the registry {host} is not reachable ({last[:200]})",
            "check that it runs and the name is right, then rerun",
        )
    return UserError(f"{action} {ref} failed: {last[:300]}", "see docker's output above, then rerun")


def remote_image(client: str, ref: str, env: dict[str, str]) -> Remote | None:
    """The linux/amd64 image ``ref`` names in its registry, or None when the tag does not exist."""
    insecure = ["--insecure"] if _LOOPBACK.match(registry_host(ref)) else []
    out = _docker(client, "manifest", "inspect", *insecure, "--verbose", ref, env=env)
    said = out.stderr + out.stdout
    if out.returncode != 0:
        words = docker_words(ref, said)
        if _MISSING.search(words) and not _UNREACHABLE.search(words):
            return None
        raise failure(ref, said, "reading")
    found = json.loads(out.stdout)
    for entry in found if isinstance(found, list) else [found]:
        platform = entry.get("Descriptor", {}).get("platform") or {}
        if platform.get("os", "linux") != "linux" or platform.get("architecture", "amd64") != "amd64":
            continue
        manifest = entry.get("SchemaV2Manifest") or entry.get("OCIManifest") or {}
        config = manifest.get("config", {}).get("digest")
        if config:
            return Remote(entry["Descriptor"]["digest"], config)
    raise UserError(
        f"{ref} in the registry holds no linux/amd64 image",
        "push this image under a new release tag (bump [series] release in upstream.toml)",
    )


def local_image_id(client: str, ref: str, env: dict[str, str]) -> str:
    out = _docker(client, "image", "inspect", "--format", "{{.Id}}", ref, env=env)
    if out.returncode != 0 or not _DIGEST.fullmatch(out.stdout.strip()):
        raise UserError(f"the built image {ref} is not in the Docker engine", "rerun `python build.py image --push`")
    return out.stdout.strip()


def refuse_moving_release_tags(
    client: str, tags: list[str], image_id: str, series: str, env: dict[str, str]
) -> set[str]:
    """Release tags that already hold this image (nothing to push); refuses one that holds another."""
    unchanged = set()
    for tag in tags:
        if not is_release_tag(tag, series):
            continue
        remote = remote_image(client, tag, env)
        if remote is None:
            continue
        if remote.config != image_id:
            raise UserError(
                f"{tag} already names another image in the registry ({remote.digest}); release tags never move",
                "bump [series] release in upstream.toml for a new release, then rerun",
            )
        unchanged.add(tag)
    return unchanged


def preflight(client: str, tags: list[str], env: dict[str, str]) -> None:
    """Before a long build: the registry answers (a missing tag is fine)."""
    remote_image(client, tags[0], env)


def push_tag(client: str, tag: str, env: dict[str, str], stream: Callable) -> str:
    """`docker push` one tag, its output streamed as progress; returns the manifest digest."""
    code, tail = stream([client, "push", tag], env=env)
    said = "\n".join(tail)
    if code != 0:
        raise failure(tag, said, "pushing")
    digests = re.findall(r"digest: (sha256:[0-9a-f]{64})", said)
    if not digests:
        raise UserError(f"docker push {tag} printed no digest", "see docker's output above, then rerun")
    return digests[-1]


def publish(client: str, tags: list[str], image_id: str, series: str, env: dict[str, str], stream: Callable) -> dict:
    """Push every tag of the built image ``image_id``: release tags first, refused before anything
    is pushed if one would move; then check that the registry serves each tag as the pushed digest."""
    unchanged = refuse_moving_release_tags(client, tags, image_id, series, env)
    ordered = sorted(tags, key=lambda t: not is_release_tag(t, series))
    digest, results = None, []
    for tag in ordered:
        if tag in unchanged:
            results.append(Pushed(tag, "release", "unchanged"))
            continue
        pushed = push_tag(client, tag, env, stream)
        if digest is not None and pushed != digest:
            raise UserError(
                f"{tag} was pushed as {pushed}, the other tags as {digest}",
                "rerun; if it persists, the registry rewrites manifests",
            )
        digest = pushed
        results.append(Pushed(tag, "release" if is_release_tag(tag, series) else "floating", "pushed"))
    pushed_tags = {p.tag for p in results if p.status == "pushed"}
    for tag in ordered:
        remote = remote_image(client, tag, env)
        if remote is None or remote.config != image_id or (tag in pushed_tags and remote.digest != digest):
            raise UserError(
                f"the registry does not serve {tag} as the image just pushed "
                f"({remote.digest if remote else 'no such tag'})",
                "another push raced this one: rerun, and pull by digest",
            )
        digest = digest or remote.digest
    repo = tags[0].rpartition(":")[0]
    return {"digest": digest, "image_id": image_id, "pull": f"{repo}@{digest}", "pushed": [asdict(p) for p in results]}

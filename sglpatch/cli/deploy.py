"""``python build.py deploy``: render Docker Compose and Kubernetes files for N replicas
(:mod:`sglpatch.ship.deploy` renders and checks them)."""

from __future__ import annotations

from pathlib import Path

from sglpatch.cli.common import emit
from sglpatch.errors import UserError
from sglpatch.lock import line_lock
from sglpatch.ship import deploy, image, manifests


def handler(args) -> int:
    root, repo_root = Path(args.root), Path(args.repo_root)
    args.replicas = _replica_count(args.replicas)
    refs = deploy.image_refs(root, repo_root, args.repo, Path(args.image_json) if args.image_json else None)
    out = Path(args.out) if args.out else root / image.DIST / "deploy"
    with line_lock(root, "`build.py deploy`"):
        counts = deploy.render(root, repo_root, out, replicas=args.replicas, refs=refs)
    build_router = deploy.router_build_argv(repo_root, refs["sglang-router"])
    data = {
        "out": str(out),
        "replicas": args.replicas,
        "images": refs,
        "kubernetes_version": manifests.KUBERNETES_VERSION,
        "compose": str(out / "compose"),
        "kustomize": {o: str(out / "k8s" / "overlays" / o) for o in deploy.OVERLAYS},
        "manifests": counts,
        "router_build_argv": build_router,
    }
    emit(
        args,
        data,
        f"wrote {out}: {args.replicas} replicas of {refs['sglang-kimi']} behind {refs['sglang-router']}\n"
        f"  build the router image: {' '.join(build_router)}\n"
        f"  Compose:    cd {out / 'compose'} && docker-compose up -d\n"
        f"  Kubernetes: kubectl apply -k {out / 'k8s' / 'overlays' / 'single'}   (one replica spanning two "
        f"machines: {out / 'k8s' / 'overlays' / 'multinode'})\n"
        f"  checked: kustomize, Kubernetes {manifests.KUBERNETES_VERSION} schema, probes, GPUs, PDB, router RBAC",
    )
    return 0


def _replica_count(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= deploy.MAX_REPLICAS:
        raise UserError(f"--replicas {text} is not a number of replicas", f"give 1 to {deploy.MAX_REPLICAS}")
    return int(text)


def register_cli(sub, common) -> None:
    help_text = "render Docker Compose and Kubernetes (kustomize) files for N replicas behind SGLang's router"
    cmd = sub.add_parser("deploy", parents=[common], help=help_text, description=help_text)
    cmd.add_argument("--replicas", default="2", metavar="N", help="replicas (default: 2)")
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
    cmd.set_defaults(func=handler)

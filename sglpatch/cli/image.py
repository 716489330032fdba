"""``python build.py image``: build (and push) the Blackwell CUDA 13 image, or show what would run
(:mod:`sglpatch.ship.image` plans and builds it)."""

from __future__ import annotations

import shlex
from pathlib import Path

from sglpatch.cli.common import emit
from sglpatch.queue.line import line_of
from sglpatch.ship import image


def format_command(argv: list[str]) -> str:
    """One argument (or flag and value) per line, shell-quoted, so it can be pasted as is."""
    lines, i = [shlex.join(argv[:3])], 3
    while i < len(argv):
        if (
            argv[i].startswith("--")
            and i + 1 < len(argv)
            and not argv[i + 1].startswith("--")
            and argv[i] not in ("--push", "--load")
        ):
            lines.append(f"{shlex.quote(argv[i])} {shlex.quote(argv[i + 1])}")
            i += 2
        else:
            lines.append(argv[i] if argv[i] == image.CONTEXT_PLACEHOLDER else shlex.quote(argv[i]))
            i += 1
    return " \\\n  ".join(lines)


def dry_run_text(image_plan: image.ImagePlan) -> str:
    files = "\n".join(
        f"  {name}  (from {image_plan.dist}/{name}, built by `{line_of(image_plan.root).command()}`)"
        for name in image_plan.context_files
    )
    return (
        f"# build context: a fresh temporary directory ({image.CONTEXT_PLACEHOLDER}) holding exactly\n"
        f"{files}\n"
        f"# command, run from the repository root:\n"
        f"{format_command(image_plan.argv())}" + "".join(f"\n{shlex.join(argv)}" for argv in image_plan.push_argv())
    )


def handler(args) -> int:
    root = Path(getattr(args, "root", None) or Path.cwd())
    image_plan = image.plan(
        root,
        repo=args.repo,
        extra_tags=args.tag or (),
        push=args.push,
        flashinfer_version=args.flashinfer_version,
        base=args.base_image,
        build_arg_pairs=args.build_arg or (),
    )
    if args.dry_run:
        emit(args, {"dry_run": True, **image_plan.to_json()}, "" if args.json else dry_run_text(image_plan))
        return 0
    builder, report = image.run_build(image_plan)
    data = {"dry_run": False, **image_plan.to_json(), "builder": builder.describe(), **report}
    emit(args, data, "" if args.json else built_text(image_plan, report))
    return 0


def built_text(image_plan: image.ImagePlan, report: dict) -> str:
    """What a build said it did: the tags it built, or, with --push, each tag pushed and the digest."""
    if not image_plan.push:
        return "\n".join(f"built {tag}" for tag in image_plan.tags)
    pushed = [
        f"{'pushed' if p['status'] == 'pushed' else 'unchanged (already in the registry)'} {p['tag']} ({p['kind']} tag)"
        for p in report["pushed"]
    ]
    return "\n".join([*pushed, f"digest {report['digest']}\npull {report['pull']}"])


def register_cli(sub, common) -> None:
    help_text = (
        "build the Blackwell CUDA 13 image (BuildKit: docker buildx, else a classic client) from the overlay wheel"
    )
    cmd = sub.add_parser("image", parents=[common], help=help_text, description=help_text)
    cmd.add_argument(
        "--tag",
        action="append",
        metavar="T",
        help="an extra tag (TAG or REPOSITORY:TAG) besides the derived <repo>:<upstream>-<series>-cu130; repeatable",
    )
    cmd.add_argument(
        "--repo", default=None, help=f"image repository (default: ${image.REPO_ENV}, else '{image.DEFAULT_REPO}')"
    )
    cmd.add_argument(
        "--push",
        action="store_true",
        help="after the build, push every tag and print the digest; a release tag that "
        "names another image in the registry is refused (release tags never move)",
    )
    cmd.add_argument(
        "--dry-run", action="store_true", help="print the build context and the exact command; run nothing"
    )
    cmd.add_argument(
        "--flashinfer-version",
        default=None,
        metavar="V",
        help=f"override the Dockerfile's FLASHINFER_VERSION (>= {image.MIN_FLASHINFER})",
    )
    cmd.add_argument(
        "--base-image",
        default=None,
        metavar="REF",
        help="build on REF instead of upstream's image for the pin "
        "(e.g. a locally built stand-in; the base.name label follows)",
    )
    cmd.add_argument(
        "--build-arg",
        action="append",
        metavar="KEY=VALUE",
        help="set a Dockerfile ARG the pin does not derive, e.g. FLASHINFER_PREBUILD_JIT=0 "
        "or FLASHINFER_CUBIN_INDEX= ; repeatable",
    )
    cmd.set_defaults(func=handler)

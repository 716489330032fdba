"""The Blackwell CUDA 13 image: `python build.py image [--tag T] [--push] [--dry-run] [--json]`.

Everything that names a version comes from the pin (`upstream.toml`) and the series: the base
image (upstream's `<tag>-cu130`), the overlay wheel's file name, the image tag
(`<repo>:<upstream>-<series>-cu130`) and the labels. Only the FlashInfer pin lives in
`docker/Dockerfile` (build arg `FLASHINFER_VERSION`), because it is a property of the image.

The build context is a fresh temporary directory holding exactly the overlay wheels (one per
pinned upstream wheel: one py3-none-any wheel, or one per CPython for a platform-wheel release);
the Dockerfile lets pip pick the one for the base image's Python and takes nothing else. The
command runs as an argument list, never through a shell.

The work is done in ``image_plan`` (what to build: tags, build args, labels, context),
``dockerfile`` (reading docker/Dockerfile) and ``image_builder`` (the docker client, the build,
the push); this module is the `image` command and the door the rest of the tool goes through.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from sglpatch.queue.line import line_of
from sglpatch.ship.dockerfile import (
    dockerfile_arg_defaults,
    dockerfile_args,
    dockerfile_instructions,
    dockerfile_labels,
    substitute,
)
from sglpatch.ship.image_builder import (
    Builder,
    build_failure,
    engine_version,
    ensure_wheels,
    find_builder,
    image_lock,
    require_docker,
    run_build,
    stream,
)
from sglpatch.ship.image_plan import (
    CONTEXT_PLACEHOLDER,
    CUDA_FLAVOR,
    DEFAULT_REPO,
    DERIVED_ARGS,
    DIST,
    DOCKERFILE,
    MIN_FLASHINFER,
    PLATFORM,
    REPO_ENV,
    SOURCE_ENV,
    UPSTREAM_IMAGE,
    ImagePlan,
    _public_url,
    assemble_context,
    base_image,
    git_revision,
    image_tag,
    parse_build_args,
    plan,
    resolve_base_image,
    resolve_repo,
    resolve_tag,
    series_fingerprint,
    series_tag,
    source_url,
    wheel_name,
    wheel_names,
)

# The name the tests know the substitution by.
_substitute = substitute

__all__ = [
    "CONTEXT_PLACEHOLDER", "CUDA_FLAVOR", "DEFAULT_REPO", "DERIVED_ARGS", "DIST", "DOCKERFILE", "MIN_FLASHINFER",
    "PLATFORM", "REPO_ENV", "SOURCE_ENV", "UPSTREAM_IMAGE",
    "Builder", "ImagePlan", "assemble_context", "base_image", "build_failure", "dockerfile_arg_defaults",
    "dockerfile_args", "dockerfile_instructions", "dockerfile_labels", "dry_run_text", "engine_version",
    "ensure_wheels", "find_builder", "format_command", "git_revision", "handler", "image_lock", "image_tag",
    "parse_build_args", "plan", "register_cli", "require_docker", "resolve_base_image", "resolve_repo",
    "resolve_tag", "run_build", "series_fingerprint", "series_tag", "source_url", "stream", "substitute",
    "wheel_name", "wheel_names",
    # kept for the tests that reach them
    "_public_url", "_substitute",
]


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

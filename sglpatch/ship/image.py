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
the push); this module is the door the rest of the tool goes through. The `image` command (its
options, the dry run's text) is ``sglpatch.cli.image``.
"""

from __future__ import annotations

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
    "CONTEXT_PLACEHOLDER",
    "CUDA_FLAVOR",
    "DEFAULT_REPO",
    "DERIVED_ARGS",
    "DIST",
    "DOCKERFILE",
    "MIN_FLASHINFER",
    "PLATFORM",
    "REPO_ENV",
    "SOURCE_ENV",
    "UPSTREAM_IMAGE",
    "Builder",
    "ImagePlan",
    "assemble_context",
    "base_image",
    "build_failure",
    "dockerfile_arg_defaults",
    "dockerfile_args",
    "dockerfile_instructions",
    "dockerfile_labels",
    "engine_version",
    "ensure_wheels",
    "find_builder",
    "git_revision",
    "image_lock",
    "image_tag",
    "parse_build_args",
    "plan",
    "require_docker",
    "resolve_base_image",
    "resolve_repo",
    "resolve_tag",
    "run_build",
    "series_fingerprint",
    "series_tag",
    "source_url",
    "stream",
    "substitute",
    "wheel_name",
    "wheel_names",
    # kept for the tests that reach them
    "_public_url",
    "_substitute",
]

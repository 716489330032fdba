"""Getting a pristine SGLang release: from the submodule, or from its PyPI artifact.

Every release ends up as one commit in a local git mirror (outside the repository), laid out
like upstream's repository (``python/sglang/...``) so that patches use upstream's paths and old
and new releases share one object store for three-way merges.

This module is the one door the rest of the tool goes through; the work is done in
``artifacts`` (the package index, download, sha256), ``mirror`` (the import into the git mirror)
and ``trees`` (pristine checkouts). Settings a test changes (``INDEX_TIMEOUT``,
``DOWNLOAD_TIMEOUT``, ``SUBMODULE``) are not repeated here: change them where they are read.
"""

from __future__ import annotations

from sglpatch.upstream.artifacts import (
    _CACHED_LISTING,
    DEFAULT_INDEX,
    INDEX_SOURCE,
    PIN_SOURCE,
    PREFERRED_WHEEL_TAGS,
    PROJECT,
    RemoteFile,
    _choose,
    _download,
    file_sha256,
    index_artifacts,
    index_url,
    release_artifact,
    released_versions,
    verify,
    wheel_kinds,
)
from sglpatch.upstream.mirror import (
    WHEEL_FORMAT,
    _commit_problem,
    _git_reason,
    import_release,
    mirror_path,
    open_mirror,
    release_tag,
)
from sglpatch.upstream.trees import STAMP, prepare, pristine_tree

__all__ = [
    "DEFAULT_INDEX",
    "INDEX_SOURCE",
    "PIN_SOURCE",
    "PREFERRED_WHEEL_TAGS",
    "PROJECT",
    "STAMP",
    "WHEEL_FORMAT",
    "RemoteFile",
    "file_sha256",
    "import_release",
    "index_artifacts",
    "index_url",
    "mirror_path",
    "open_mirror",
    "prepare",
    "pristine_tree",
    "release_artifact",
    "release_tag",
    "released_versions",
    "verify",
    "wheel_kinds",
    # kept for the tests that reach them
    "_CACHED_LISTING",
    "_choose",
    "_commit_problem",
    "_download",
    "_git_reason",
]

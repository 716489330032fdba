"""Where downloads and generated state live: outside the repository, reused across runs."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$SGLPATCH_CACHE`` or ``~/.cache/sglpatch``."""
    root = os.environ.get("SGLPATCH_CACHE")
    path = Path(root).expanduser() if root else Path.home() / ".cache" / "sglpatch"
    path.mkdir(parents=True, exist_ok=True)
    return path

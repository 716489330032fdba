"""`rehearse`: what the next bump would meet, before doing it.

A dry-run `rebase --onto` of a line's series onto every release newer than its pin (or the ones
named), each from the pin, with a verdict table per line. A dry run's verdicts depend only on
the series, the pin, the release and this tool's code, so each is cached under that key
(``$SGLPATCH_CACHE/rehearsals/``): a warm rehearsal replays only what changed. Each bump's time
is printed (`cached` when it came from the cache).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from packaging.version import Version

from sglpatch.cache import code_version, load_entry, store_entry
from sglpatch.output import say
from sglpatch.queue.line import line_of
from sglpatch.queue.rebase import start
from sglpatch.queue.series import read_series
from sglpatch.upstream import source
from sglpatch.upstream.pin import PIN_FILE, read_pin, validate_version


def rehearse(root: Path, releases: list[str] | None = None, progress=say) -> dict:
    """Dry runs of the line at ``root`` onto every newer release (or the newer of ``releases``).
    Changes nothing."""
    pin = read_pin(root)
    for version in releases or ():
        validate_version(version)
    releases = [
        v
        for v in (releases if releases is not None else source.released_versions())
        if Version(v) > Version(pin.version)
    ]
    line = line_of(root)
    runs = []
    for onto in releases:
        began = time.monotonic()
        run, cached = dry_run(root, onto)
        seconds = round(time.monotonic() - began, 1)
        progress(f"{line.name}: dry run onto SGLang {onto}: {'cached' if cached else f'{seconds} s'}")
        runs.append({"onto": onto, "patches": run["patches"], "seconds": seconds, "cached": cached})
    return {"line": line.name, "from": pin.version, "patches": read_series(root).names, "releases": runs}


def dry_run(root: Path, onto: str) -> tuple[dict, bool]:
    """``rebase --onto ONTO --dry-run`` of the line at ``root``, from the cache when its inputs
    are unchanged (and the entry verifies); and whether it came from the cache."""
    key = _key(root, onto)
    cached = load_entry("rehearsals", key)
    if cached is not None:
        return cached["run"], True
    run = start(root, onto, dry_run=True)
    store_entry("rehearsals", key, {"run": run})
    return run, False


def _key(root: Path, onto: str) -> str:
    """What a dry run's verdicts depend on: the series' bytes, the pin, the release and the code."""
    digest = hashlib.sha256(b"rehearsal 2\0")
    digest.update(read_series(root).fingerprint().encode())
    digest.update((root / PIN_FILE).read_bytes())
    digest.update(str(Version(onto)).encode())
    digest.update(code_version().encode())
    return digest.hexdigest()

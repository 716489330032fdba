"""`rehearse`: what the next bump would meet, before doing it.

A dry-run `rebase --onto` of a line's series onto every release newer than its pin (or the ones
named), each from the pin, with a verdict table per line. A dry run's verdicts depend only on
the series, the pin, the release and this tool's code, so each is cached under that key
(``$SGLPATCH_CACHE/rehearsals/``): a warm rehearsal replays only what changed. Each bump's time
is printed (`cached` when it came from the cache).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from packaging.version import Version

from sglpatch.cache import cache_dir
from sglpatch.output import say
from sglpatch.queue.line import line_of
from sglpatch.queue.rebase import start
from sglpatch.queue.series import read_series
from sglpatch.queue.snapshot import write_file
from sglpatch.upstream import source
from sglpatch.upstream.pin import PIN_FILE, read_pin, validate_version

_PACKAGE = Path(__file__).resolve().parents[1]


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
    are unchanged; and whether it came from the cache."""
    path = cache_dir() / "rehearsals" / f"{_key(root, onto)}.json"
    try:
        return json.loads(path.read_text()), True
    except (FileNotFoundError, ValueError):
        pass
    run = start(root, onto, dry_run=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, json.dumps(run).encode())
    return run, False


def _key(root: Path, onto: str) -> str:
    """What a dry run's verdicts depend on: the series' bytes, the pin, the release and the code."""
    digest = hashlib.sha256()
    digest.update(read_series(root).fingerprint().encode())
    digest.update((root / PIN_FILE).read_bytes())
    digest.update(str(Version(onto)).encode())
    for module in sorted(_PACKAGE.rglob("*.py")):
        digest.update(module.relative_to(_PACKAGE).as_posix().encode() + b"\0" + module.read_bytes())
    return digest.hexdigest()

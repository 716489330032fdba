"""A line's work tree made anew: the pinned upstream imported, the whole series applied on it."""

from __future__ import annotations

from pathlib import Path

from sglpatch.errors import UserError
from sglpatch.output import say, warn
from sglpatch.queue.patch_queue import PatchQueue
from sglpatch.queue.series import Series, read_series, trailer_problems
from sglpatch.queue.transaction import transaction
from sglpatch.upstream import source
from sglpatch.upstream.pin import Pin, read_pin


def validate(series: Series) -> None:
    for patch in series.patches:
        problems = trailer_problems(patch)
        if problems:
            raise UserError(
                f"patch {patch.name}: {'; '.join(problems)}",
                "every patch says its Upstream-Status and when it can be dropped",
            )


def prepare_tree(
    root: Path, gate: bool = False, *, pin: Pin | None = None, series: Series | None = None
) -> tuple[Pin, Series, str, PatchQueue]:
    """Import the pinned upstream and apply the whole series into a fresh work tree. ``gate``:
    refuse patches whose trailers are missing or unset (the build); otherwise warn, so an
    imported patch can be applied and rebased before its trailers are known. ``pin``, ``series``:
    the line as the caller already read it (default: read here); read once, passed down."""
    if pin is None:
        pin = read_pin(root)
    if series is None:
        series = read_series(root)
    if gate:
        validate(series)
    else:
        for patch in series.patches:
            if problems := trailer_problems(patch):
                warn(f"patch {patch.name}: {'; '.join(problems)} (the build refuses it until then)")
    say(f"upstream: SGLang {pin.version} ({pin.commit or 'no commit pinned'})")
    base = source.prepare(pin, root)
    queue = PatchQueue(root)
    with transaction(root, "prepare", create=True) as tx:  # one step to undo: the fresh tree and every patch on it
        # Finishing an interrupted run on the way in may have rewritten the series: then the
        # queue reads it as it is now; otherwise it applies the series read above.
        listed = None if tx.recovered else series
        queue.reset_to(source.open_mirror(), base, names=None if listed is None else listed.names)
        for name in queue.push(all=True, series=listed):
            say(f"applied {name}")
    return pin, series, base, queue

"""The main job: pinned upstream + series -> checked patched tree -> overlay wheel in dist/."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sglpatch.contract import checks
from sglpatch.errors import UserError
from sglpatch.git.repo import head_tree
from sglpatch.output import say
from sglpatch.queue.line import JOURNAL, WORK_TREE
from sglpatch.queue.prepare import prepare_tree
from sglpatch.queue.series import Series
from sglpatch.ship import build_cache
from sglpatch.ship.wheel import build_overlay
from sglpatch.upstream import source
from sglpatch.upstream.pin import Pin, read_pin

DIST = "dist"


@dataclass(frozen=True)
class BuildResult:
    pin: Pin
    base: str
    applied: list[str]
    patched_tree: Path
    wheel: Path
    sha256: str
    fingerprint: str
    replaced: list[str] = field(default_factory=list)
    # every overlay wheel, (path, sha256), the primary one (``wheel``) first: one per pinned
    # upstream wheel, i.e. per CPython for a release that ships platform wheels
    wheels: list[tuple[Path, str]] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "upstream": {
                "version": self.pin.version,
                "tag": self.pin.tag,
                "commit": self.pin.commit,
                "base": self.base,
            },
            "version": self.pin.local_version,
            "patches": self.applied,
            "series_fingerprint": self.fingerprint,
            "patched_tree": str(self.patched_tree),
            "wheel": str(self.wheel),
            "sha256": self.sha256,
            "wheels": [{"path": str(path), "sha256": sha} for path, sha in self.wheels],
            "replaced": self.replaced,
        }


def check_tree(tree: Path, series: Series, pin: Pin, *, tree_id: str | None = None, reuse: bool = True) -> None:
    """The build gate: patched Python compiles; the pin's required checks and each check the
    series names pass. ``tree_id``: the git tree id of ``tree`` as it stands, under which a
    passing verdict is recorded and, with ``reuse``, taken instead of checking again."""
    names = list(dict.fromkeys([*pin.required_checks, *series.check_names()]))
    accepted = dict(pin.accepted)
    touched = series.touched_files()
    key = build_cache.gate_key(tree_id, names, accepted, touched) if tree_id else None
    said = build_cache.reused_verdict(key) if key and reuse else None
    if said is not None:
        for line in said:
            say(line)
        say(f"gate: the verdict on tree {tree_id[:12] if tree_id else ''} is reused (same tree, same checks)")
        return
    said = _gate(tree, touched, names, accepted)
    if key and tree_id:
        build_cache.record_verdict(key, tree_id, said)


def _gate(tree: Path, touched: list[str], names: list[str], accepted: dict[str, str]) -> list[str]:
    """Run the gate; what it said, when it passed."""
    for repo_path in touched:
        path = tree / repo_path
        if path.suffix == ".py" and path.exists():
            try:
                compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
            except SyntaxError as exc:
                raise UserError(
                    f"patched {repo_path} does not compile (line {exc.lineno}: {exc.msg})",
                    "fix the patch that touches it",
                ) from None
    seen: set[str] = set()
    said = []
    for result in checks.run_checks(tree, names):
        findings = [f for f in result.findings if f.subject not in accepted]
        known = {f.subject for f in result.findings if f.subject in accepted}
        seen |= known
        note = f" ({len(known)} accepted: {', '.join(sorted(known))})" if known else ""
        said.append(f"check {result.name}: {'FAILED' if findings else 'ok'}{note}")
        say(said[-1])
        if findings:
            more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
            raise UserError(
                f"check {result.name} failed on the patched tree: {findings[0]}{more}",
                "see `python build.py check` for the full report",
            )
    stale = sorted(set(accepted) - seen)
    if stale:  # like a strict xfail: an acceptance outlives its gap only by mistake
        raise UserError(
            f"{', '.join(stale)} is accepted in [series.accepted] but no check reports it",
            "the gap is gone: remove the entry from upstream.toml",
        )
    return said


def build(root: Path, *, rebuild: bool = False) -> BuildResult:
    """Prepare, gate and write the overlay wheels; or, unless ``rebuild``, hand back the last
    build of exactly these inputs when everything it made is as it left it (``build_cache``)."""
    key = build_cache.build_key(root)
    reused = None if rebuild else reused_build(root, key)
    if reused is not None:
        say(build_cache.REUSED_NOTE)
        return result_of(root, reused)
    pin, series, base, queue = prepare_tree(root, gate=True)
    check_tree(queue.path, series, pin, tree_id=head_tree(queue.repo), reuse=not rebuild)
    if not pin.wheels:
        raise UserError(
            f"upstream.toml pins no wheel of SGLang {pin.version}",
            "add [upstream.artifacts.wheel] (a rebase writes it)",
        )
    fingerprint = series.fingerprint()
    touched = series.touched_files()
    patches = [{"name": p.name, "subject": p.subject, "upstream_status": p.upstream_status} for p in series.patches]
    overlays = []
    for artifact in pin.wheels:
        upstream_wheel = source.release_artifact(pin.version, artifact.kind, pin)
        if upstream_wheel is None:
            raise UserError(f"the index has no {artifact.filename}", "check [upstream.artifacts] in upstream.toml")
        provenance = {
            "upstream": {"version": pin.version, "commit": pin.commit, "wheel": upstream_wheel.name},
            "series_fingerprint": fingerprint,
            "patches": patches,
        }
        overlays.append(build_overlay(upstream_wheel, queue.path, touched, pin.local_version, root / DIST, provenance))
    primary = overlays[0]
    result = BuildResult(
        pin,
        base,
        series.names,
        queue.path,
        primary.path,
        primary.sha256,
        fingerprint,
        list(primary.replaced),
        [(o.path, o.sha256) for o in overlays],
    )
    build_cache.record_build(key, result.to_json(), queue.path)
    return result


def reused_build(root: Path, key: str) -> dict | None:
    """The recorded result of the build of ``key`` when it can stand for a new one; None: build."""
    return build_cache.reused_build(key, root / JOURNAL, root / WORK_TREE)


def result_of(root: Path, data: dict) -> BuildResult:
    """A reused build's result, as the build that made it returned it."""
    return BuildResult(
        read_pin(root),
        data["upstream"]["base"],
        list(data["patches"]),
        Path(data["patched_tree"]),
        Path(data["wheel"]),
        data["sha256"],
        data["series_fingerprint"],
        list(data["replaced"]),
        [(Path(w["path"]), w["sha256"]) for w in data["wheels"]],
    )

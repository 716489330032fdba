"""The upstream pin file (`upstream.toml`): which SGLang release the series applies to."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import tomlkit
from packaging.version import InvalidVersion, Version

from .errors import UserError

PIN_FILE = "upstream.toml"


@dataclass(frozen=True)
class Artifact:
    """A PyPI release file of the pinned upstream, identified by name and sha256."""

    kind: str  # "sdist", "wheel" or "wheel-cpXY" (sglpatch.source)
    filename: str
    sha256: str


@dataclass(frozen=True)
class Pin:
    repo: str
    version: str
    tag: str
    commit: str | None
    artifacts: tuple[Artifact, ...] = field(default_factory=tuple)
    series_local: str = "kimi"
    series_release: int = 1
    required_checks: tuple[str, ...] = ()
    # Findings the build gate accepts on this line: subject -> why ([series.accepted]).
    accepted: tuple[tuple[str, str], ...] = ()
    # [image] flashinfer: the flashinfer-python the line's image installs; None: the Dockerfile's.
    image_flashinfer: str | None = None

    @property
    def local_version(self) -> str:
        """The PEP 440 version of the patched release, e.g. ``0.5.9+kimi.1``."""
        return f"{self.version}+{self.series_local}.{self.series_release}"

    def artifact(self, kind: str) -> Artifact | None:
        return next((a for a in self.artifacts if a.kind == kind), None)

    @property
    def wheels(self) -> tuple[Artifact, ...]:
        """Every pinned wheel, "wheel" first: an overlay wheel is built from each."""
        return tuple(sorted((a for a in self.artifacts if a.kind == "wheel" or a.kind.startswith("wheel-")),
                            key=lambda a: a.kind != "wheel"))

    def with_release(self, version: str, tag: str, commit: str | None,
                     artifacts: tuple[Artifact, ...]) -> Pin:
        """The pin moved to another upstream release: the series release starts again at 1."""
        return replace(self, version=version, tag=tag, commit=commit, artifacts=artifacts,
                       series_release=1)


def read_pin(root: Path) -> Pin:
    path = root / PIN_FILE
    try:
        doc = tomlkit.parse(path.read_text())
    except FileNotFoundError:
        raise UserError(f"no pin file at {path}", "run from the repository root") from None
    except tomlkit.exceptions.TOMLKitError as exc:
        raise UserError(f"{path} is not valid TOML ({exc})", "fix the pin file") from None
    try:
        up = doc["upstream"]
        artifacts = tuple(
            Artifact(kind, str(a["filename"]), str(a["sha256"]).lower())
            for kind, a in up.get("artifacts", {}).items()
        )
        series = doc.get("series", {})
        pin = Pin(
            repo=str(up["repo"]),
            version=str(up["version"]),
            tag=str(up["tag"]),
            commit=str(up["commit"]) if up.get("commit") else None,
            artifacts=artifacts,
            series_local=str(series.get("local", "kimi")),
            series_release=int(series.get("release", 1)),
            required_checks=tuple(str(c) for c in series.get("checks", [])),
            accepted=tuple((str(k), str(v)) for k, v in series.get("accepted", {}).items()),
            image_flashinfer=str(doc["image"]["flashinfer"]) if "flashinfer" in doc.get("image", {}) else None,
        )
    except KeyError as exc:
        raise UserError(f"{path} lacks the key {exc}", "restore it from git") from None
    validate_version(pin.version)
    return pin


def validate_version(version: str) -> Version:
    try:
        return Version(version)
    except InvalidVersion:
        raise UserError(f"'{version}' is not a PEP 440 version",
                        "name an SGLang release such as 0.5.9") from None


def write_pin(root: Path, pin: Pin) -> None:
    """Rewrite the pin file, keeping its comments and layout."""
    path = root / PIN_FILE
    doc = tomlkit.parse(path.read_text())
    up = doc["upstream"]
    up["version"] = pin.version
    up["tag"] = pin.tag
    up["commit"] = pin.commit or ""
    artifacts = tomlkit.table(is_super_table=True)
    for a in pin.artifacts:
        entry = tomlkit.table()
        entry["filename"] = a.filename
        entry["sha256"] = a.sha256
        artifacts[a.kind] = entry
    up["artifacts"] = artifacts
    series = doc.setdefault("series", tomlkit.table())
    series["local"] = pin.series_local
    series["release"] = pin.series_release
    path.write_text(tomlkit.dumps(doc))

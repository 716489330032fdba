"""The upstream pin file (`upstream.toml`): which SGLang release the series applies to.

The file is checked against SCHEMA before anything is read from it: every error is one line naming
the file, the line of the offending key (where tomlkit can tell it), the table and key, what is wrong
and what to do. Versions compare as PEP 440 (`0.5.9.0` is `0.5.9`): use ``same_version``.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import tomlkit
from packaging.version import InvalidVersion, Version

from sglpatch.errors import UserError

PIN_FILE = "upstream.toml"


# ---------------------------------------------------------------- versions


def validate_version(version: str) -> Version:
    try:
        return Version(version)
    except (InvalidVersion, TypeError):
        raise UserError(f"'{version}' is not a PEP 440 version", "name an SGLang release such as 0.5.9") from None


def same_version(a: str, b: str) -> bool:
    """Whether two version strings name the same release as PEP 440 sees it (0.5.9.0 is 0.5.9)."""
    return validate_version(a) == validate_version(b)


# ---------------------------------------------------------------- the pin


@dataclass(frozen=True)
class Artifact:
    """A PyPI release file of the pinned upstream, identified by name and sha256."""

    kind: str  # "sdist", "wheel" or "wheel-cpXY" (sglpatch.source)
    filename: str
    sha256: str


@dataclass(frozen=True)
class Pin:
    repo: str
    version: str = field(compare=False)  # compared as PEP 440, through _versions
    tag: str
    commit: str | None
    artifacts: tuple[Artifact, ...] = field(default_factory=tuple)
    series_local: str = "kimi"
    series_release: int = 1
    required_checks: tuple[str, ...] = ()
    # Findings the build gate accepts on this line: subject -> why ([series.accepted]).
    accepted: tuple[tuple[str, str], ...] = ()
    # [image] flashinfer: the flashinfer-python the line's image installs; None: the Dockerfile's.
    image_flashinfer: str | None = field(default=None, compare=False)
    # [series] changelog: whether this line's rebases add entries to the shared CHANGELOG.md
    changelog: bool = True
    # The versions as PEP 440 sees them: pins of 0.5.9 and 0.5.9.0 are equal (and hash alike).
    _versions: tuple[Version, Version | None] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        flashinfer = validate_version(self.image_flashinfer) if self.image_flashinfer else None
        object.__setattr__(self, "_versions", (validate_version(self.version), flashinfer))

    @property
    def local_version(self) -> str:
        """The PEP 440 version of the patched release, e.g. ``0.5.9+kimi.1``."""
        return f"{self.version}+{self.series_local}.{self.series_release}"

    def is_version(self, version: str) -> bool:
        """Whether the pin is on ``version`` (PEP 440: 0.5.9.0 is 0.5.9)."""
        return same_version(self.version, version)

    def artifact(self, kind: str) -> Artifact | None:
        return next((a for a in self.artifacts if a.kind == kind), None)

    @property
    def wheels(self) -> tuple[Artifact, ...]:
        """Every pinned wheel, "wheel" first: an overlay wheel is built from each."""
        return tuple(
            sorted(
                (a for a in self.artifacts if a.kind == "wheel" or a.kind.startswith("wheel-")),
                key=lambda a: a.kind != "wheel",
            )
        )

    def with_release(self, version: str, tag: str, commit: str | None, artifacts: tuple[Artifact, ...]) -> Pin:
        """The pin moved to another upstream release: the series release starts again at 1."""
        return replace(self, version=version, tag=tag, commit=commit, artifacts=artifacts, series_release=1)


# ---------------------------------------------------------------- the schema

Check = Callable[[object], "str | None"]  # what is wrong with a value, or None
Then = Callable[[Any], "str | None"]  # what is wrong with a value already of Typed's ``kind``, or None

_TYPE_NAMES = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a float"),
    (str, "a string"),
    (list, "an array"),
    (dict, "a table"),
)


def _type_name(value: object) -> str:
    return next((name for kind, name in _TYPE_NAMES if isinstance(value, kind)), f"a {type(value).__name__}")


@dataclass(frozen=True)
class Typed:
    """A value of type ``kind`` (an integer is never a boolean), then checked by ``then``.

    A class, not a closure: the schema is built at import, and the checking happens per call."""

    kind: type
    name: str
    then: Then | None = None

    def __call__(self, value: object) -> str | None:
        if not isinstance(value, self.kind) or (self.kind is int and isinstance(value, bool)):
            shown = "" if isinstance(value, (dict, list)) else f" ({json.dumps(value, default=str)})"
            return f"is {_type_name(value)}{shown}, not {self.name}"
        return self.then(value) if self.then else None


@dataclass(frozen=True)
class Matching:
    """A string matching ``pattern`` whole (``re`` caches the compiled pattern)."""

    pattern: str
    what: str
    flags: int = 0

    def __call__(self, value: object) -> str | None:
        return Typed(str, "a string", self._fullmatch)(value)

    def _fullmatch(self, value: str) -> str | None:
        return None if re.fullmatch(self.pattern, value, self.flags) else f"'{value}' is not {self.what}"


def _pep440(value: str) -> str | None:
    try:
        Version(value)
    except InvalidVersion:
        return f"'{value}' is not a PEP 440 version"
    return f"'{value}' has spaces around it" if value != value.strip() else None


def _release_version(value: str) -> str | None:
    """A PEP 440 version without a local label: the series appends its own (+kimi.1)."""
    return _pep440(value) or (f"'{value}' has a local label" if Version(value).local else None)


def _positive(value: int) -> str | None:
    return None if value > 0 else f"{value} is not a positive integer"


def _names(value: list) -> str | None:
    bad = [item for item in value if not isinstance(item, str) or not item.strip()]
    return f"holds {json.dumps(bad[0])}, which is not a check name" if bad else None


@dataclass(frozen=True)
class Rule:
    """How one key is checked: its value (``check``), whether it must be there, what to do if wrong."""

    check: Check
    hint: str
    required: bool = False


TABLE = Typed(dict, "a table")

# Table -> key -> rule. "*" stands for any key; "upstream.artifacts.*" is each artifact's table.
SCHEMA: dict[str, dict[str, Rule]] = {
    "": {
        "upstream": Rule(TABLE, "restore the [upstream] table from git", required=True),
        "series": Rule(TABLE, "write [series] as a table: local, release, checks"),
        "image": Rule(TABLE, "write [image] as a table: flashinfer"),
    },
    "upstream": {
        "repo": Rule(
            Matching(r"(https?|ssh|git|file)://\S+|[\w.-]+@[\w.-]+:\S+", "a repository URL"),
            'write the upstream repository, e.g. "https://github.com/sgl-project/sglang"',
            required=True,
        ),
        "version": Rule(
            Typed(str, "a string", _release_version), 'write the SGLang release, e.g. version = "0.5.9"', required=True
        ),
        "tag": Rule(
            Matching(r"[A-Za-z0-9][A-Za-z0-9._+-]*", "a git tag name"),
            'write the release tag, e.g. tag = "v0.5.9"',
            required=True,
        ),
        "commit": Rule(
            Matching(r"|[0-9a-fA-F]{40}", "empty or 40 hex digits"),
            'write the full hash of the tag\'s commit (40 hex digits), or commit = ""',
        ),
        "artifacts": Rule(TABLE, "write one [upstream.artifacts.KIND] table per PyPI file"),
    },
    "upstream.artifacts": {
        "*": Rule(TABLE, "write [upstream.artifacts.KIND] with filename and sha256"),
    },
    "upstream.artifacts.*": {
        "filename": Rule(
            Matching(r"[A-Za-z0-9_][A-Za-z0-9._+-]*", "a plain file name"),
            "write the PyPI file's name, e.g. sglang-0.5.9.tar.gz",
            required=True,
        ),
        "sha256": Rule(
            Matching(r"[0-9a-fA-F]{64}", "64 hex digits"),
            "copy the file's sha256 from PyPI (or `sha256sum FILE`)",
            required=True,
        ),
    },
    "series": {
        "local": Rule(
            Matching(r"[a-z0-9]+([-_.][a-z0-9]+)*", "a PEP 440 local version label", re.I),
            'write letters and digits, e.g. local = "kimi"',
        ),
        "release": Rule(
            Typed(int, "an integer", _positive), "write a positive integer without quotes, e.g. release = 1"
        ),
        "checks": Rule(
            Typed(list, "an array", _names), 'write an array of check names, e.g. checks = ["eagle3-capture-wiring"]'
        ),
        "accepted": Rule(TABLE, 'write [series.accepted] as a table: "SUBJECT" = "why"'),
        "changelog": Rule(
            Typed(bool, "a boolean"), "write changelog = true (rebases of this line add CHANGELOG.md entries) or false"
        ),
    },
    "series.accepted": {
        "*": Rule(Typed(str, "a string"), 'write why the finding is accepted: "SUBJECT" = "why"'),
    },
    "image": {
        "flashinfer": Rule(
            Typed(str, "a string", _pep440), 'write a flashinfer-python release, e.g. flashinfer = "0.7.2"'
        ),
    },
}


# Tables whose keys are names ("*" in SCHEMA): what a name must match, and what to do if not.
KEY_NAMES: dict[str, tuple[re.Pattern, str, str]] = {
    "upstream.artifacts": (
        re.compile(r"sdist|wheel|wheel-cp3\d+"),
        "is not an artifact kind",
        "name it sdist, wheel or wheel-cpXY (e.g. wheel-cp312)",
    ),
}


@dataclass(frozen=True)
class Problem:
    """What is wrong at ``key`` (a path of TOML keys); ``at`` is where to look, if not at the key."""

    key: tuple[str, ...]
    what: str
    hint: str
    at: tuple[str, ...] | None = None


def _problems(table: dict, path: tuple[str, ...] = (), schema: str = "") -> Iterator[Problem]:
    """Every way ``table`` (at key ``path``) breaks SCHEMA[schema]; missing keys last (a misspelt
    key is both unknown and missing: the unknown one says more)."""
    rules, names = SCHEMA[schema], KEY_NAMES.get(schema)
    for key, value in table.items():
        rule = rules.get(key) or rules.get("*")
        if rule is None:
            yield _unknown_key((*path, key), rules)
        elif names and not names[0].fullmatch(key):
            yield Problem((*path, key), names[1], names[2])
        elif problem := rule.check(value):
            yield Problem((*path, key), problem, rule.hint)
        else:
            child = ".".join(part for part in (schema, key if key in rules else "*") if part)
            if child in SCHEMA:
                yield from _problems(value, (*path, key), child)
    for key, rule in rules.items():
        if rule.required and key not in table:
            yield Problem((*path, key), "is missing", rule.hint, at=path)


def _unknown_key(key: tuple[str, ...], rules: dict[str, Rule]) -> Problem:
    guess = difflib.get_close_matches(key[-1], list(rules), n=1)
    typo = f"did you mean '{guess[0]}'? " if guess else ""
    return Problem(key, "is not a known key", f"{typo}remove it or use one of {', '.join(rules)}")


def _consistency(data: dict) -> Iterator[Problem]:
    """What the schema cannot see: keys that must agree with each other."""
    upstream = data["upstream"]
    version, tag = upstream["version"], upstream["tag"]
    if not _names_version(tag, version):
        yield Problem(
            ("upstream", "tag"),
            f"'{tag}' is not the tag of version {version}",
            f'write tag = "v{version}" (or fix version)',
        )
    for kind, artifact in upstream.get("artifacts", {}).items():
        suffix = ".tar.gz" if kind == "sdist" else ".whl"
        if not artifact["filename"].endswith(suffix):
            yield Problem(
                ("upstream", "artifacts", kind, "filename"),
                f"'{artifact['filename']}' is not a{'n' if kind == 'sdist' else ''} {kind} (no {suffix})",
                f"write the name of the release's {kind} on PyPI",
            )


def _names_version(tag: str, version: str) -> bool:
    try:
        return Version(tag) == Version(version)  # "v0.5.9" parses as 0.5.9
    except InvalidVersion:
        return False


# ---------------------------------------------------------------- reading


def decode_utf8(data: bytes, path: Path, hint: str) -> str:
    """``data`` read from ``path`` as text; invalid UTF-8 is one error naming the line and byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{path}:{line}: not valid UTF-8 (byte 0x{data[exc.start]:02x})", hint) from None


def _load(path: Path) -> tuple[str, tomlkit.TOMLDocument]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if (path.parent / "patches").is_dir():  # a line whose pin is gone, not the wrong directory
            raise UserError(
                f"no pin file at {path}: the line lists patches but not the release they apply to",
                f"restore it (`git -C {path.parent} checkout -- {path.name}`)",
            ) from None
        raise UserError(f"no pin file at {path}", "run from the repository root") from None
    text = decode_utf8(data, path, "save the pin file as UTF-8")
    try:
        return text, tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise UserError(f"{path}:{exc.line}: not valid TOML ({exc})", "fix the syntax there") from None
    except tomlkit.exceptions.TOMLKitError as exc:
        raise UserError(f"{path} is not valid TOML ({exc})", "fix the pin file") from None


def _validate(path: Path, text: str, data: dict) -> None:
    problem = next(_problems(data), None) or next(_consistency(data), None)
    if problem:
        line = _line_of(text, problem.key if problem.at is None else problem.at)
        raise UserError(f"{path}{f':{line}' if line else ''}: {_describe(problem.key)}: {problem.what}", problem.hint)


def _describe(key: tuple[str, ...]) -> str:
    """``[upstream.artifacts.sdist] sha256``: the table and key as the file writes them."""
    *table, name = [k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k) for k in key]
    return f"[{'.'.join(table)}] {name}" if table else name


_MARK = "sglpatch-line-marker"


def _line_of(text: str, key: tuple[str, ...]) -> int | None:
    """The line of ``key`` (a table's: its header) in ``text``, or None where tomlkit cannot tell:
    a comment marker is put on the key's item, and the rendered document searched for it."""
    doc = tomlkit.parse(text)
    item: Any = doc  # a container, a table (or its proxy) or a value: walked by duck typing below
    try:
        for part in key:  # .item(): the Item even of a boolean; a split table has only [] (no Item)
            item = item.item(part) if hasattr(item, "item") else item[part]
    except (KeyError, TypeError):
        return None
    if not isinstance(item, tomlkit.items.Item):
        return None
    item.comment(_MARK)  # a table without a header of its own (split over the file) renders no comment
    for number, line in enumerate(tomlkit.dumps(doc).split("\n"), 1):
        if _MARK in line:  # the marker ends the item: step back over a value spanning lines
            return number - (0 if isinstance(item, tomlkit.items.Table) else item.as_string().count("\n"))
    return None


def read_pin(root: Path) -> Pin:
    path = root / PIN_FILE
    text, doc = _load(path)
    data = doc.unwrap()
    _validate(path, text, data)
    return _pin_from(data)


def _pin_from(data: dict) -> Pin:
    up, series = data["upstream"], data.get("series", {})
    return Pin(
        repo=up["repo"],
        version=up["version"],
        tag=up["tag"],
        commit=up.get("commit", "").lower() or None,
        artifacts=tuple(
            Artifact(kind, a["filename"], a["sha256"].lower()) for kind, a in up.get("artifacts", {}).items()
        ),
        series_local=series.get("local", "kimi"),
        series_release=series.get("release", 1),
        required_checks=tuple(series.get("checks", ())),
        accepted=tuple(series.get("accepted", {}).items()),
        image_flashinfer=data.get("image", {}).get("flashinfer"),
        changelog=series.get("changelog", True),
    )


# ---------------------------------------------------------------- writing


def render_pin(root: Path, pin: Pin) -> str:
    """The pin file with ``pin``'s release, artifacts and series, keeping its comments and layout;
    refused (one line, as read_pin) unless it reads back."""
    path = root / PIN_FILE
    _, doc = _load(path)
    up = cast(MutableMapping[str, Any], doc["upstream"])  # the [upstream] table (or its proxy)
    up["version"] = pin.version
    up["tag"] = pin.tag
    up["commit"] = pin.commit or ""
    before = up.get("artifacts", {})
    artifacts = tomlkit.table(is_super_table=True)
    for a in pin.artifacts:
        entry = before[a.kind] if a.kind in before else tomlkit.table()  # keeps its layout
        entry["filename"] = a.filename
        entry["sha256"] = a.sha256
        artifacts[a.kind] = entry
    up["artifacts"] = artifacts
    series = doc.setdefault("series", tomlkit.table())
    series["local"] = pin.series_local
    series["release"] = pin.series_release
    text = tomlkit.dumps(doc)
    _validate(path, text, tomlkit.parse(text).unwrap())
    return text


def bare_pin_text(path: Path, repo: str, version: str, artifacts: tuple[Artifact, ...], local: str) -> str:
    """A new line's pin on ``version`` carrying nothing of another line: no checks, no accepted
    findings, its own local label, and no CHANGELOG entries unless the maintainer turns them on."""
    doc = tomlkit.document()
    doc.add(tomlkit.comment(f"A bare line's pin (`lines --add --bare`): SGLang {version} with a series of its own."))
    doc.add(tomlkit.comment("Moved by `rebase --onto VERSION`; verified against the sha256 below on every use."))
    up = tomlkit.table()
    up.update({"repo": repo, "version": version, "tag": f"v{version}", "commit": ""})
    tables = tomlkit.table(is_super_table=True)
    for a in artifacts:
        entry = tomlkit.table()
        entry.update({"filename": a.filename, "sha256": a.sha256})
        tables[a.kind] = entry
    up["artifacts"] = tables
    doc["upstream"] = up
    series = tomlkit.table()
    series.update({"local": local, "release": 1, "checks": []})
    series.add(tomlkit.comment("true: rebases of this line add entries to the repository's CHANGELOG.md"))
    series["changelog"] = False
    doc["series"] = series
    text = tomlkit.dumps(doc)
    _validate(path, text, tomlkit.parse(text).unwrap())
    return text


def write_pin(root: Path, pin: Pin) -> None:
    """Rewrite the pin file, keeping its comments and layout."""
    text = render_pin(root, pin)
    (root / PIN_FILE).write_text(text, encoding="utf-8")

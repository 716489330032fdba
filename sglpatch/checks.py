"""Named checks over an SGLang source tree.

A check reads a tree laid out like upstream's repository (``python/sglang/...``) and returns
findings; it never modifies anything. A patch's ``Drop-When: check:<name>`` names the
property the patch establishes: the build requires it to hold on the patched tree (the patch
works), the rebase tests it on the pristine new upstream (upstream has the fix: drop the patch).
Modules that define checks register them here with ``@register``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Finding:
    message: str
    location: str | None = None  # "python/sglang/srt/x.py:123"
    # What the finding is about, e.g. "KimiK25ForConditionalGeneration.pp_group": the key a
    # line's pin uses to accept a known gap ([series.accepted] in upstream.toml).
    subject: str | None = None

    def __str__(self) -> str:
        return f"{self.location}: {self.message}" if self.location else self.message


@dataclass(frozen=True)
class CheckResult:
    name: str
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return not self.findings


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    run: Callable[[Path], list[Finding]]


REGISTRY: dict[str, Check] = {}


def register(name: str, description: str):
    def decorate(func: Callable[[Path], list[Finding]]):
        REGISTRY[name] = Check(name, description, func)
        return func
    return decorate


def run_check(name: str, tree: Path) -> CheckResult:
    _load_check_modules()
    from .errors import UserError
    if name not in REGISTRY:
        known = ", ".join(sorted(REGISTRY)) or "none"
        raise UserError(f"unknown check '{name}'", f"known checks: {known}")
    return CheckResult(name, tuple(REGISTRY[name].run(tree)))


def run_checks(tree: Path, names: list[str]) -> list[CheckResult]:
    return [run_check(name, tree) for name in names]


def _load_check_modules() -> None:
    # Importing a module registers its checks; keep this list the one place that names them.
    from . import contract  # noqa: F401

"""Named checks over an SGLang source tree.

A check reads a tree laid out like upstream's repository (``python/sglang/...``) and returns
findings; it never modifies anything. The build runs them as a gate on the patched tree; the
rebase runs a patch's ``Drop-When: check:<name>`` condition on the pristine new upstream.
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
    gate: bool  # run by `python build.py` on the patched tree


REGISTRY: dict[str, Check] = {}


def register(name: str, description: str, *, gate: bool = True):
    def decorate(func: Callable[[Path], list[Finding]]):
        REGISTRY[name] = Check(name, description, func, gate)
        return func
    return decorate


def run_check(name: str, tree: Path) -> CheckResult:
    _load_check_modules()
    from .errors import UserError
    if name not in REGISTRY:
        known = ", ".join(sorted(REGISTRY)) or "none"
        raise UserError(f"unknown check '{name}'", f"known checks: {known}")
    return CheckResult(name, tuple(REGISTRY[name].run(tree)))


def run_gate(tree: Path) -> list[CheckResult]:
    _load_check_modules()
    return [CheckResult(c.name, tuple(c.run(tree))) for c in REGISTRY.values() if c.gate]


def _load_check_modules() -> None:
    # Importing a module registers its checks; keep this list the one place that names them.
    from . import contract  # noqa: F401

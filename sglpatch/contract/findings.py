"""Named checks: what one finds, and the registry the checking modules fill (``@register``).

A leaf module: the contract checker registers its checks here, and ``checks`` runs them, so
neither imports the other's package at load time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


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

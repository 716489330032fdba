"""The small types the suspect scan's modules share, at the bottom of the suspect package.

A finding (``Suspect``), a call an added line makes (``_Call``), the scope a statement sits in
(``_Scope``), and what the scan (``scan.py``, ``calls.py``) uses of a tree's view and of the run
(``View``, ``Run``; ``merge._View`` and ``merge._Run`` implement them). With these here the
imports only go one way: ``merge`` -> ``scan`` -> ``calls`` -> ``model``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sglpatch.contract.index.classes import ClassIndex, ClassRef
from sglpatch.contract.parse.tree import SourceTree


@dataclass(frozen=True)
class Suspect:
    path: str  # repo-relative path in the merged tree, e.g. "python/sglang/srt/x.py"
    line: int  # 1-based line in the merged file
    name: str  # the name that does not resolve, or the function whose new call is unpatched
    why: str  # one short sentence

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.name}: {self.why}"


@dataclass
class _Call:
    path: str
    line: int
    name: str
    identity: str | None  # qualified definition it resolves to, None when not resolved
    keywords: frozenset
    splat: bool  # passes **kwargs
    where: str


@dataclass
class _Scope:
    cls: ClassRef | None = None  # the class whose method this is (top-level classes only)
    self_name: str | None = None  # "self" (or "cls" in a classmethod)
    on_class: bool = False
    locals: frozenset = frozenset()  # names bound in enclosing functions
    where: str = "<module>"  # enclosing outlined definition: "Class.method" / "func"
    span: tuple[int, int] | None = None  # its lines (for the string-mention guard)
    class_body: bool = False  # directly in a class body (a def here is a method)
    self_class: ClassRef | None = None  # the class the self parameter is annotated with
    caught: frozenset = frozenset()  # exceptions an enclosing try in this function swallows


class View(Protocol):
    """One tree as the scan reads it (``merge._View``)."""

    tree: SourceTree
    classes: ClassIndex
    version: str

    def assigned_from_outside(self, name: str) -> bool:
        """``obj.name = ...`` (obj not ``self``) or ``setattr(obj, "name", ...)`` somewhere."""
        ...


class Run(Protocol):
    """One run of the scan as a file's scan sees it (``merge._Run``): where findings and the
    patched calls go, and the old release's view."""

    found: list[Suspect]
    patched: list[_Call]

    @property
    def old(self) -> View: ...

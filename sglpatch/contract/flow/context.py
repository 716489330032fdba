"""What the walk of one function asks of the driver that runs it.

``derive.Deriver`` drives the walk: it builds one ``walker._Walker`` per function and, at the end,
the ``None`` flow (``none_flow.py``, ``none_visit.py``). Those parts need only the members below
of the driver, so they name this protocol, not the driver, and the imports only go one way:
``derive`` -> ``none_flow`` -> ``none_visit`` -> ``walker`` -> ``context``.
"""

from __future__ import annotations

import ast
from typing import Protocol

from sglpatch.contract.flow.access import FuncInfo, KeyResult, Val
from sglpatch.contract.index.classes import ClassIndex, ClassRef
from sglpatch.contract.parse.tree import Module, SourceTree


class Driver(Protocol):
    """The driver of the walk as its parts see it (``walker.py``, ``guards.py``, ``calls.py``,
    ``none_flow.py``, ``none_visit.py``); ``derive.Deriver`` is the one implementation."""

    tree: SourceTree
    classes: ClassIndex
    funcs: dict[tuple, FuncInfo]  # key -> the function analysed under that key
    results: dict[tuple, KeyResult]  # key -> what its walk found
    runner_classes: set[ClassRef]  # ModelRunner and its bases (in the tree)
    runner_class: ClassRef | None

    def assigns(self, node: ast.AST) -> list:
        """Assignments anywhere in a function (for local aliases)."""
        ...

    def enqueue(self, key) -> None:
        """Walk the function under ``key`` (again)."""
        ...

    def key_for(self, mod: Module, cls: ClassRef | None, name: str, bindings: dict):
        """The key of function ``name`` (a method of ``cls`` if given) under ``bindings``, or None."""
        ...

    def method_node(self, cls: ClassRef, name: str, *, skip_first: bool = False):
        """(owner ClassRef, FunctionDef) for ``name`` looked up through ``cls``'s MRO."""
        ...

    def set_attr_root(self, cls: ClassRef, attr: str, val: Val) -> None:
        """``self.<attr>`` of ``cls`` holds the followed value ``val``."""
        ...

    def attr_root(self, cls: ClassRef | None, attr: str) -> Val | None:
        """The followed value ``self.<attr>`` holds in ``cls`` or a base, if any."""
        ...

    def negated(self, test: ast.expr) -> ast.expr:
        """``not (test)``, made once per test."""
        ...

    def unparse(self, node: ast.AST) -> str:
        """``ast.unparse(node)``, cached."""
        ...

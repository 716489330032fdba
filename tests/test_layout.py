"""The package's shape: no module of sglpatch/ imports another that (directly or not) imports it.

Circles were broken on purpose (checks <-> contract, line <-> transaction, core <-> eagle3); this
keeps them broken. Only imports that run when a module is imported count: those at module level,
not inside functions or under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO_ROOT


def module_imports(package: Path) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports at import time."""
    files = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom):
                base = here.split(".")[: len(here.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    found = f"{target}.{alias.name}" if f"{target}.{alias.name}" in files else target
                    if found in files and found != name:
                        graph[name].add(found)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in files and a.name != name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_sglpatch_has_no_import_circles():
    graph = module_imports(REPO_ROOT / "sglpatch")
    assert len(graph) > 50 and "sglpatch.contract.core" in graph["sglpatch.contract"]
    assert circles(graph) == []


def test_a_circle_through_a_package_is_found(tmp_path):
    """The twin: a.py -> b.py -> a.py, through a relative import, is reported."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\n\nfrom ..a import thing\n")
    (pkg / "c.py").write_text("def f():\n    from . import a\n")  # inside a function: not at import
    assert circles(module_imports(pkg)) == [["pkg.a", "pkg.sub.b"]]

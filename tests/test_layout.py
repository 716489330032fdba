"""The house's shape: imports only go down a declared layer order, with no circle, and no
module takes a private (``_name``) name from another package.

Every import counts: at module level, inside functions and under ``if TYPE_CHECKING:``. The
package, benchmarks/ and tools/ are read; tests are not (they may reach anywhere).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import REPO_ROOT

# Bottom first. A module belongs to the longest prefix that names it; it may import modules of
# its own layer or of a layer below, never above. Modules of one layer must not form a circle.
LAYERS = [
    ["sglpatch.errors", "sglpatch.output"],
    ["sglpatch.lock", "sglpatch.cache"],
    ["sglpatch.git"],
    ["sglpatch.upstream"],
    ["sglpatch.contract.findings"],
    ["sglpatch.contract.parse"],
    ["sglpatch.contract.interp"],
    ["sglpatch.contract.index"],
    ["sglpatch.contract.flow"],
    ["sglpatch.contract.rules"],
    ["sglpatch.contract.core"],
    ["sglpatch.contract.render", "sglpatch.contract.suspect", "sglpatch.contract.named"],
    ["sglpatch.contract.checks", "sglpatch.contract"],
    ["sglpatch.queue"],
    ["sglpatch.ship"],
    ["sglpatch.cli"],
    ["sglpatch"],
    ["benchmarks", "tools"],
]
SOURCES = ("sglpatch", "benchmarks", "tools")


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # a module of the house
    name: str | None  # the name taken from it (``from target import name``), if any
    line: int


def house_modules(root: Path, sources=SOURCES) -> dict[str, Path]:
    modules = {}
    for top in sources:
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imports_of(modules: dict[str, Path]) -> list[Import]:
    """Every import between modules of the house, wherever it stands in the file."""
    found = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    if f"{target}.{alias.name}" in modules:  # a module taken from its package
                        found.append(Import(name, f"{target}.{alias.name}", None, node.lineno))
                    elif target in modules:
                        found.append(Import(name, target, alias.name, node.lineno))
            elif isinstance(node, ast.Import):
                found += [Import(name, a.name, None, node.lineno) for a in node.names if a.name in modules]
    return [i for i in found if i.target != i.importer]


def layer_of(module: str, layers=LAYERS) -> int:
    best, depth = -1, -1
    for level, prefixes in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and prefix.count(".") > depth:
                best, depth = level, prefix.count(".")
    return best


def upward_imports(found: list[Import], layers=LAYERS) -> list[str]:
    return [
        f"{i.importer}:{i.line} imports {i.target}, a higher layer"
        for i in found
        if layer_of(i.target, layers) > layer_of(i.importer, layers)
    ]


def unlayered(modules, layers=LAYERS) -> list[str]:
    return [m for m in modules if layer_of(m, layers) < 0]


def package_of(module: str, modules: dict[str, Path]) -> str:
    return module if modules[module].name == "__init__.py" else module.rpartition(".")[0]


def private_crossings(found: list[Import], modules: dict[str, Path]) -> list[str]:
    """A ``_name`` taken from a module of another package: a private name is its package's own."""
    return [
        f"{i.importer}:{i.line} takes {i.name} from {i.target}"
        for i in found
        if i.name
        and i.name.startswith("_")
        and not i.name.startswith("__")
        and package_of(i.importer, modules) != package_of(i.target, modules)
    ]


def circles(found: list[Import]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for i in found:
        graph.setdefault(i.importer, set()).add(i.target)
        graph.setdefault(i.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[list[str]] = []

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
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


@pytest.fixture(scope="module")
def house():
    modules = house_modules(REPO_ROOT)
    return modules, imports_of(modules)


def test_every_module_of_the_house_has_a_layer(house):
    modules, _ = house
    assert len(modules) > 80 and unlayered(modules) == []


def test_imports_only_go_down_the_layers(house):
    _, found = house
    assert len(found) > 200
    assert upward_imports(found) == []


def test_the_house_has_no_import_circle(house):
    _, found = house
    assert circles(found) == []


def test_no_private_name_crosses_a_package(house):
    modules, found = house
    assert private_crossings(found, modules) == []


def test_the_top_package_holds_few_modules_and_none_is_long():
    top = [p.name for p in (REPO_ROOT / "sglpatch").glob("*.py")]
    assert len(top) <= 8, top
    long = {
        str(p.relative_to(REPO_ROOT)): n
        for p in (REPO_ROOT / "sglpatch").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 500
    }
    assert long == {}


# ---------------------------------------------------------------- twins: each rule fires


def _toy(tmp_path: Path, files: dict[str, str]) -> tuple[dict[str, Path], list[Import]]:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    modules = house_modules(tmp_path, ("pkg",))
    return modules, imports_of(modules)


TOY_LAYERS = [["pkg.low"], ["pkg.high"], ["pkg"]]


def test_an_import_up_the_layers_is_found_even_inside_a_function(tmp_path):
    modules, found = _toy(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "",
            "pkg/high/__init__.py": "",
            "pkg/high/a.py": "from pkg.low import b\n",  # down: fine
            "pkg/low/b.py": "def f():\n    from ..high import a\n",  # up, at call time
        },
    )
    assert upward_imports(found, TOY_LAYERS) == ["pkg.low.b:2 imports pkg.high.a, a higher layer"]


def test_a_circle_under_type_checking_is_found(tmp_path):
    modules, found = _toy(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "",
            "pkg/low/a.py": "from .b import thing\n",
            "pkg/low/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import other\n",
        },
    )
    assert circles(found) == [["pkg.low.a", "pkg.low.b"]]


def test_a_private_name_from_another_package_is_found_and_one_from_its_own_is_not(tmp_path):
    modules, found = _toy(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low/__init__.py": "",
            "pkg/high/__init__.py": "",
            "pkg/low/a.py": "_secret = 1\n",
            "pkg/low/b.py": "from .a import _secret\n",  # same package: its own
            "pkg/high/c.py": "from pkg.low.a import _secret, __doc__\n",
        },
    )
    assert private_crossings(found, modules) == ["pkg.high.c:1 takes _secret from pkg.low.a"]


def test_a_module_outside_every_layer_is_found(tmp_path):
    modules, _ = _toy(tmp_path, {"pkg/__init__.py": "", "pkg/low/a.py": "", "pkg/stray.py": ""})
    assert unlayered(modules, [["pkg.low"]]) == ["pkg", "pkg.stray"]


# ---------------------------------------------------------------- tests you can find by name

# Modules whose tests live in files named for something else (a command, a behaviour across
# modules): each one should get a test file of its own name; the list may only shrink.
TESTED_UNDER_OTHER_NAMES = {
    "sglpatch/cli/common.py",
    "sglpatch/cli/importing.py",
    "sglpatch/cli/queue_commands.py",
    "sglpatch/lock.py",
    "sglpatch/git/repo.py",
    "sglpatch/git/run.py",
    "sglpatch/queue/prepare.py",
    "sglpatch/queue/snapshot.py",
}


def modules_without_a_test_of_their_name(root: Path) -> set[str]:
    """A module sglpatch/PKG/[STAGE/]NAME.py is found by a test file under tests/ named after its
    name, the first word of its name (rebase_state.py: test_rebase*), its stage or, in the
    contract checker, the package (tests/contract/test_contract*.py run each stage on real trees)."""
    tests = [p.stem for p in (root / "tests").rglob("test_*.py")]
    missing = set()
    for path in (root / "sglpatch").rglob("*.py"):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        parts = path.relative_to(root).parts
        names = {path.stem, path.stem.split("_")[0], *parts[2:-1]}
        if parts[1] == "contract":
            names.add("contract")
        if not any(t.startswith(f"test_{n}") for t in tests for n in names):
            missing.add("/".join(parts))
    return missing


def test_every_module_has_tests_named_after_it_or_is_listed():
    assert modules_without_a_test_of_their_name(REPO_ROOT) == TESTED_UNDER_OTHER_NAMES


def test_a_module_without_a_test_of_its_name_is_found(tmp_path):
    for rel in ("sglpatch/queue/rebase_state.py", "sglpatch/queue/orphan.py", "tests/queue/test_rebase.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert modules_without_a_test_of_their_name(tmp_path) == {"sglpatch/queue/orphan.py"}

"""What the model loader gives every model: attributes it sets on the instance it constructs.

0.5.23's ``_initialize_model`` builds the model and then sets ``model.shared_experts_config``
before returning it, so every model has that attribute although no class defines it. Only
assignments at the top level of a loader function (or inside a top-level ``with``) on the name it
returns, after binding that name to a constructor call of the model class, count: a conditional
assignment or one in a special loader (``model.load_weights = proxy`` for RL reloads) does not
reach every model.
"""

from __future__ import annotations

import ast

from sglpatch.contract.parse.tree import SRT, SourceTree

LOADER_PACKAGE = f"{SRT}.model_loader"


def loader_set_attributes(tree: SourceTree) -> dict[str, str]:
    """{attribute: "path:line" where the loader sets it} for every model the loader builds."""
    found: dict[str, str] = {}
    for mod in tree.package_modules(LOADER_PACKAGE):
        if "model_class(" not in mod.source:  # cheap: only loaders that construct the model class
            continue
        for fn in (n for n in mod.ast.body if isinstance(n, ast.FunctionDef)):
            for attr, line in _sets_on_the_built_model(fn):
                found.setdefault(attr, f"{mod.relpath}:{line}")
    return found


def _top_level(body: list[ast.stmt]):
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.With):
            yield from _top_level(stmt.body)


def _sets_on_the_built_model(fn: ast.FunctionDef) -> list[tuple[str, int]]:
    stmts = list(_top_level(fn.body))
    built = {
        t.id
        for s in stmts
        if isinstance(s, ast.Assign) and _constructs_model_class(s.value)
        for t in s.targets
        if isinstance(t, ast.Name)
    }
    returned = {s.value.id for s in stmts if isinstance(s, ast.Return) and isinstance(s.value, ast.Name)}
    names = built & returned
    return [
        (t.attr, s.lineno)
        for s in stmts
        if isinstance(s, ast.Assign)
        for t in s.targets
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in names
    ]


def _constructs_model_class(value: ast.expr) -> bool:
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "model_class"

"""Where the target's EAGLE-3 capture layers come from, checked statically.

SGLang 0.5.9 (``ModelRunner.__init__``) and 0.5.23 (``_resolve_eagle_aux_hidden_state`` in
``model_executor/model_runner_components/spec_aux_hidden_state.py``) read the draft's
``eagle_aux_hidden_state_layer_ids`` only as ``eagle_config["..."]``, inside a ``try`` whose
handler sets the ids to None: a draft with the ids at the top level of its config, an
``eagle_config`` object or no ``eagle_config`` at all gets the default layers without a word.

The check finds the *resolution*: every function under ``srt/model_executor`` that stores the
attribute ``eagle_aux_hidden_state_layer_ids`` and, with the tree functions it calls (to depth 3,
followed when they mention the key or ``eagle_config``), reads the key from a config. It passes
when that resolution reads

- ``eagle_config`` as a dict (``[key]`` / ``.get(key)``) and as an object (``getattr``), directly
  or through a helper that does both (``isinstance(x, dict)`` then ``.get`` else ``getattr``);
- the config's top-level key (any access on an expression that is not ``eagle_config``);
- an operator override (``os.environ`` / ``os.getenv`` / ``envs.``, or a server option named
  ``*aux_hidden_state_layer_ids`` other than the resolved attribute itself);

never reads the key inside a ``try`` whose handler swallows the error, and a module of the
resolution logs a warning that mentions the default. A tree where no resolution is found is a
finding (the layout changed).
"""

from __future__ import annotations

import ast
import re

from sglpatch.contract.parse.outline import dotted, top_statements
from sglpatch.contract.parse.tree import Module, SourceTree

KEY = "eagle_aux_hidden_state_layer_ids"
RUNNER_PACKAGE = "sglang.srt.model_executor"
_SWALLOWING = {None, "Exception", "BaseException", "KeyError", "AttributeError", "TypeError", "LookupError"}
_OVERRIDE = re.compile(
    r"\bos\.environ\b|\bos\.getenv\b|\benvs\.|"
    r"\b(?!eagle_)\w*aux_hidden_state_layer_ids\b"
)
_MAX_DEPTH = 3


def check_aux_layer_resolution(tree: SourceTree) -> list[tuple[str, str | None]]:
    anchors = _anchors(tree)
    if not anchors:
        return [
            (
                f"no EAGLE-3 capture-layer resolution found: no function under srt/model_executor "
                f"stores {KEY} after reading it from a draft config; the layout changed, update "
                "sglpatch/contract/aux_layers.py",
                None,
            )
        ]
    findings = []
    for mod, fn in anchors:
        findings += _judge(tree, mod, fn)
    return findings


# ---------------------------------------------------------------- finding the resolution


def _functions(mod: Module):
    """Every function and method of a module, with its class (or None)."""
    for stmt in top_statements(mod.ast.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield None, stmt
        elif isinstance(stmt, ast.ClassDef):
            for sub in stmt.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield stmt, sub


def _stores_key(fn) -> bool:
    for node in ast.walk(fn):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and sub.attr == KEY and isinstance(sub.ctx, ast.Store):
                    return True
    return False


def _anchors(tree: SourceTree) -> list[tuple[Module, ast.AST]]:
    out = []
    for mod in tree.package_modules(RUNNER_PACKAGE):
        if KEY not in mod.source:
            continue
        for _, fn in _functions(mod):
            if _stores_key(fn) and any(_reads(tree, m, f) for m, f in _closure(tree, mod, fn)):
                out.append((mod, fn))
    return out


def _closure(tree: SourceTree, mod: Module, fn) -> list[tuple[Module, ast.AST]]:
    """``fn`` and the tree functions it calls that deal with the key, to depth 3."""
    seen: dict[tuple[str, str, int], tuple[Module, ast.AST]] = {}
    todo = [(mod, fn, 0)]
    while todo:
        m, f, depth = todo.pop()
        key = (m.name, f.name, f.lineno)
        if key in seen:
            continue
        seen[key] = (m, f)
        if depth >= _MAX_DEPTH:
            continue
        for node in ast.walk(f):
            if not isinstance(node, ast.Call):
                continue
            target = _callee(tree, m, node.func)
            if target is None:
                continue
            tm, tf = target
            text = ast.unparse(tf)
            if KEY in text or "eagle_config" in text or _aliases(tree, tm) & _names_in(tf):
                todo.append((tm, tf, depth + 1))
    return list(seen.values())


def _callee(tree: SourceTree, mod: Module, func) -> tuple[Module, ast.FunctionDef | ast.AsyncFunctionDef] | None:
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        for _, f in _functions(mod):  # a method of a class in the same module
            if f.name == func.attr:
                return mod, f
        return None
    d = dotted(func)
    if not d:
        return None
    try:
        sym = tree.resolve_dotted(mod.name, d)
    except Exception:
        return None
    if sym.kind != "function":
        return None
    target = tree.module(sym.module)
    if target is None:
        return None
    for cls, f in _functions(target):
        if cls is None and f.name == sym.name:
            return target, f
    return None


def _names_in(fn) -> set[str]:
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}


def _aliases(tree: SourceTree, mod: Module) -> set[str]:
    """Names that stand for the key in ``mod``: its constants and constants it imports."""
    cache = getattr(mod, "_sglpatch_key_aliases", None)
    if cache is not None:
        return cache
    names = set()
    for stmt in top_statements(mod.ast.body):
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and stmt.value.value == KEY:
            names |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        elif isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if "KEY" in alias.name.upper() or "LAYER_IDS" in alias.name.upper():
                    names.add(alias.asname or alias.name)
    mod._sglpatch_key_aliases = names  # type: ignore[attr-defined]  # a cache on the module, read by getattr above
    return names


# ---------------------------------------------------------------- reading the key


def _is_key(tree: SourceTree, mod: Module, node, params=()) -> bool:
    if isinstance(node, ast.Constant) and node.value == KEY:
        return True
    return isinstance(node, ast.Name) and (node.id in _aliases(tree, mod) or node.id in params)


def _reads(tree: SourceTree, mod: Module, fn, key_params=()) -> list[tuple[ast.AST, str, ast.AST]]:
    """(container expression, "dict" | "attr" | "both", site) for each read of the key in ``fn``."""
    out: list[tuple[ast.AST, str, ast.AST]] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Subscript) and _is_key(tree, mod, node.slice, key_params):
            out.append((node.value, "dict", node))
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "get" and _is_key(tree, mod, node.args[0], key_params):
                out.append((f.value, "dict", node))
            elif (
                isinstance(f, ast.Name)
                and f.id == "getattr"
                and len(node.args) >= 2
                and _is_key(tree, mod, node.args[1], key_params)
            ):
                out.append((node.args[0], "attr", node))
            elif len(node.args) >= 2 and _is_key(tree, mod, node.args[1], key_params):
                kind = _helper_kind(tree, mod, f)
                if kind:
                    out.append((node.args[0], kind, node))
    return out


def _helper_kind(tree: SourceTree, mod: Module, func) -> str | None:
    """How a helper ``h(container, key)`` reads: "dict", "attr" or "both"."""
    target = _callee(tree, mod, func)
    if target is None:
        return None
    tm, tf = target
    params = [a.arg for a in tf.args.args]
    if len(params) < 2:
        return None
    kinds = {
        k for c, k, _ in _reads(tree, tm, tf, key_params=(params[1],)) if isinstance(c, ast.Name) and c.id == params[0]
    }
    if not kinds:
        return None
    return "both" if len(kinds) > 1 or "both" in kinds else kinds.pop()


def _under_swallowing_try(fn, site) -> ast.Try | None:
    for node in ast.walk(fn):
        if not isinstance(node, ast.Try):
            continue
        if not any(site is sub for stmt in node.body for sub in ast.walk(stmt)):
            continue
        for h in node.handlers:
            names = (
                {None}
                if h.type is None
                else {dotted(t) for t in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type])}
            )
            reraises = any(isinstance(s, ast.Raise) for s in ast.walk(h))
            if names & _SWALLOWING and not reraises:
                return node
    return None


def _warns_default(mod: Module) -> bool:
    for node in ast.walk(mod.ast):
        if isinstance(node, ast.Call):
            name = dotted(node.func) or ""
            if not re.search(r"(^|\.)warn(ing)?(_once)?$", name):
                continue
            text = " ".join(
                str(c.value)
                for arg in node.args
                for c in ast.walk(arg)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            )
            if re.search(r"default", text, re.I):
                return True
    return False


# ---------------------------------------------------------------- verdict


def _judge(tree: SourceTree, mod: Module, fn) -> list[tuple[str, str | None]]:
    closure = _closure(tree, mod, fn)
    eagle_kinds, top = set(), False
    swallowed = []
    for m, f in closure:
        for container, kind, site in _reads(tree, m, f):
            if "eagle_config" in ast.unparse(container):
                eagle_kinds |= {"dict", "attr"} if kind == "both" else {kind}
            else:
                top = True
            t = _under_swallowing_try(f, site)
            if t is not None:
                swallowed.append(m.loc(t))
    override = any(_OVERRIDE.search(ast.unparse(f)) for _, f in closure)
    warns = any(_warns_default(m) for m in {m.name: m for m, _ in closure}.values())
    missing = []
    if "dict" not in eagle_kinds:
        missing.append("eagle_config as a dict")
    if "attr" not in eagle_kinds:
        missing.append("eagle_config as an object")
    if not top:
        missing.append(f"the config's top-level {KEY}")
    if not override:
        missing.append("an operator override")
    where = mod.loc(fn)
    out: list[tuple[str, str | None]] = []
    if missing:
        out.append(
            (
                f"{fn.name} resolves the EAGLE-3 capture layers without reading "
                f"{', '.join(missing)}: such drafts silently get the default layers",
                where,
            )
        )
    for loc in swallowed:
        out.append(
            (
                f"{fn.name} reads {KEY} inside a try whose handler swallows the error: a draft "
                "config it cannot read silently falls back to the default layers",
                loc,
            )
        )
    if not warns:
        out.append(
            (
                f"{fn.name}: no warning when the target falls back to its default capture "
                "layers (a logger.warning mentioning the default)",
                where,
            )
        )
    return out

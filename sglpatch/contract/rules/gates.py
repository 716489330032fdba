"""Blackwell SM12x (RTX PRO 6000, sm_120) gates in SGLang, checked statically.

The FlashInfer allreduce-fusion gate (``layers/communicator.py``
``apply_flashinfer_allreduce_fusion`` and the helpers/flags it uses) must admit SM12x: it
references ``is_sm120_supported`` (or another ``sm12x`` probe) or compares a compute-capability
major with 12. Up to at least 0.5.23 it admits only SM90/SM100. (The torch symmetric-memory
check on SM12 is :mod:`.symm_mem`.)
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from sglpatch.contract.parse.outline import dotted, top_statements
from sglpatch.contract.parse.tree import Module, SourceTree

GATE_MODULE = "sglang.srt.layers.communicator"
GATE_FUNCTION = "apply_flashinfer_allreduce_fusion"
# Where the gate moved in later layouts (0.5.21: layer_boundary/residual/add_norm.py
# flashinfer_ar_fusion_applies); searched when the primary location is gone.
GATE_NAMES = re.compile(r"^(apply_)?flashinfer_(allreduce|ar)_fusion(_applies|_enabled|_allowed)?$")
SM12_NAME = re.compile(r"sm_?12\d?x?(?![0-9])|sm12x|blackwell_consumer|rtx_?pro", re.I)
CAPABILITY_TEXT = re.compile(r"capab|major|\bcc\b|cc_|sm_version|compute_cap|\barch\b|_arch", re.I)


@dataclass
class GateResult:
    findings: list[tuple[str, str | None]]
    location: str | None = None
    evidence: str | None = None


# ---------------------------------------------------------------- allreduce fusion gate


def find_gate(tree: SourceTree) -> tuple[Module, ast.FunctionDef | ast.AsyncFunctionDef] | None:
    mod = tree.module(GATE_MODULE)
    if mod is not None:
        fn = _function(mod, GATE_FUNCTION)
        if fn is not None:
            return mod, fn
    for mod in tree.package_modules("sglang.srt.layers"):
        src = mod.source
        if "flashinfer" not in src or "fusion" not in src:
            continue
        for stmt in top_statements(mod.ast.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and GATE_NAMES.match(stmt.name):
                return mod, stmt
    return None


def _function(mod: Module, name: str):
    for stmt in top_statements(mod.ast.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return stmt
    return None


def _module_values(mod: Module) -> dict[str, list[ast.AST]]:
    out: dict[str, list[ast.AST]] = {}
    for stmt in top_statements(mod.ast.body):
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, []).append(stmt.value)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
            out.setdefault(stmt.target.id, []).append(stmt.value)
    return out


def check_allreduce_gate(tree: SourceTree) -> GateResult:
    found = find_gate(tree)
    if found is None:
        return GateResult(
            [
                (
                    f"the FlashInfer allreduce-fusion gate was not found (looked for "
                    f"{GATE_FUNCTION} in layers/communicator.py and functions named like "
                    "flashinfer_ar_fusion_applies under srt/layers/): the layout changed, "
                    "update sglpatch/contract/gates.py",
                    None,
                )
            ]
        )
    mod, fn = found
    where = mod.loc(fn)
    evidence = _sm12_evidence(tree, mod, fn)
    if evidence:
        return GateResult([], where, evidence)
    return GateResult(
        [
            (
                f"{fn.name} admits only {_admitted(mod, fn)}: neither it nor the flags and "
                "helpers it uses probe SM12x (is_sm120_supported, capability major 12), so "
                "--enable-flashinfer-allreduce-fusion is silently off on sm_120",
                where,
            )
        ],
        where,
    )


def _admitted(mod: Module, fn) -> str:
    archs = sorted({int(m.group(1)) for m in re.finditer(r"sm_?(\d{2,3})", ast.unparse(fn), re.I)})
    return "/".join(f"SM{a}" for a in archs) if archs else "some architectures"


def _sm12_evidence(tree: SourceTree, mod: Module, fn, depth: int = 0, seen=None) -> str | None:
    """Text of the first positive SM12x probe reachable from ``fn`` (flags, helpers), or None."""
    seen = seen if seen is not None else set()
    values = _module_values(mod)
    todo: list[tuple[Module, ast.AST]] = [(mod, fn)]
    while todo:
        m, node = todo.pop()
        key = (m.name, id(node))
        if key in seen:
            continue
        seen.add(key)
        hit = _positive_sm12(node)
        if hit:
            return f"{m.relpath}:{getattr(hit, 'lineno', '?')}: {ast.unparse(hit)[:100]}"
        if depth > 3:
            continue
        vals = values if m is mod else _module_values(m)
        for n in _positive_nodes(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                for v in vals.get(n.id, []):  # module-level flags: _is_sm120 = is_sm120_supported()
                    todo.append((m, v))
            if isinstance(n, ast.Call):
                target = _resolve_function(tree, m, n.func)
                if target is not None:
                    todo.append(target)
        depth += 1
    return None


def _resolve_function(tree: SourceTree, mod: Module, func) -> tuple[Module, ast.AST] | None:
    d = dotted(func)
    if not d:
        return None
    sym = tree.resolve_dotted(mod.name, d)
    if sym.kind != "function":
        return None
    target = tree.module(sym.module)
    if target is None:
        return None
    assert sym.name is not None  # a function symbol is always named
    fn = _function(target, sym.name)
    return (target, fn) if fn is not None else None


def _positive_nodes(node):
    """Walk ``node`` skipping operands of ``not`` (a negated probe excludes, not admits)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        for child in ast.iter_child_nodes(n):
            if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
                continue
            stack.append(child)


def _positive_sm12(node) -> ast.AST | None:
    for n in _positive_nodes(node):
        name = n.id if isinstance(n, ast.Name) else (n.attr if isinstance(n, ast.Attribute) else None)
        if name and SM12_NAME.search(name):
            return n
        if isinstance(n, ast.Compare):
            sides = [n.left] + list(n.comparators)
            consts = [c for s in sides for c in _int_consts(s)]
            if any(c in (12, 120, 121) for c in consts) and CAPABILITY_TEXT.search(ast.unparse(n)):
                return n
    return None


def _int_consts(e) -> list[int]:
    if isinstance(e, ast.Constant) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return [e.value]
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
        return [c for x in e.elts for c in _int_consts(x)]
    return []

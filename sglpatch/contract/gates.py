"""Blackwell SM12x (RTX PRO 6000, sm_120) gates in SGLang, checked statically.

- The FlashInfer allreduce-fusion gate (``layers/communicator.py``
  ``apply_flashinfer_allreduce_fusion`` and the helpers/flags it uses) must admit SM12x: it
  references ``is_sm120_supported`` (or another ``sm12x`` probe) or compares a compute-capability
  major with 12. Up to at least 0.5.23 it admits only SM90/SM100.
- ``distributed/device_communicators/torch_symm_mem.py`` must not index a compute-capability
  keyed table (``TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[cap]``, ``_WORLD_SIZES_MULTIMEM[cap]``) without
  a membership test, ``.get`` or ``except KeyError`` (0.5.9 raises ``KeyError: 12`` on SM12).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from .tree import Module, SourceTree, _top_statements, dotted

GATE_MODULE = "sglang.srt.layers.communicator"
GATE_FUNCTION = "apply_flashinfer_allreduce_fusion"
# Where the gate moved in later layouts (0.5.21: layer_boundary/residual/add_norm.py
# flashinfer_ar_fusion_applies); searched when the primary location is gone.
GATE_NAMES = re.compile(r"^(apply_)?flashinfer_(allreduce|ar)_fusion(_applies|_enabled|_allowed)?$")
SM12_NAME = re.compile(r"sm_?12\d?x?(?![0-9])|sm12x|blackwell_consumer|rtx_?pro", re.I)
CAPABILITY_TEXT = re.compile(r"capab|major|\bcc\b|cc_|sm_version|compute_cap|\barch\b|_arch", re.I)

SYMM_MODULE = "sglang.srt.distributed.device_communicators.torch_symm_mem"
_KEY_GUARD_EXC = {"KeyError", "LookupError", "Exception", "BaseException"}


@dataclass
class GateResult:
    findings: list[tuple[str, str | None]]
    location: str | None = None
    evidence: str | None = None


# ---------------------------------------------------------------- allreduce fusion gate

def find_gate(tree: SourceTree) -> tuple[Module, ast.FunctionDef] | None:
    mod = tree.module(GATE_MODULE)
    if mod is not None:
        fn = _function(mod, GATE_FUNCTION)
        if fn is not None:
            return mod, fn
    for mod in tree.package_modules("sglang.srt.layers"):
        src = mod.source
        if "flashinfer" not in src or "fusion" not in src:
            continue
        for stmt in _top_statements(mod.ast.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and GATE_NAMES.match(stmt.name):
                return mod, stmt
    return None


def _function(mod: Module, name: str):
    for stmt in _top_statements(mod.ast.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return stmt
    return None


def _module_values(mod: Module) -> dict[str, list[ast.AST]]:
    out: dict[str, list[ast.AST]] = {}
    for stmt in _top_statements(mod.ast.body):
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
        return GateResult([(f"the FlashInfer allreduce-fusion gate was not found (looked for "
                            f"{GATE_FUNCTION} in layers/communicator.py and functions named like "
                            "flashinfer_ar_fusion_applies under srt/layers/): the layout changed, "
                            "update sglpatch/contract/gates.py", None)])
    mod, fn = found
    where = mod.loc(fn)
    evidence = _sm12_evidence(tree, mod, fn)
    if evidence:
        return GateResult([], where, evidence)
    return GateResult([(f"{fn.name} admits only {_admitted(mod, fn)}: neither it nor the flags and "
                        "helpers it uses probe SM12x (is_sm120_supported, capability major 12), so "
                        "--enable-flashinfer-allreduce-fusion is silently off on sm_120", where)], where)


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


# ---------------------------------------------------------------- torch symmetric memory

def check_symm_mem(tree: SourceTree) -> GateResult:
    mod = tree.module(SYMM_MODULE)
    if mod is None:
        for m in tree.package_modules("sglang.srt.distributed"):
            if "class TorchSymmMemCommunicator" in m.source:
                mod = m
                break
    if mod is None:
        return GateResult([("torch_symm_mem.py (TorchSymmMemCommunicator) was not found: the layout "
                            "changed, update sglpatch/contract/gates.py", None)])
    walker = _CapIndexWalker(mod)
    walker.run()
    if not walker.lookups:
        return GateResult([(f"{mod.relpath} has no compute-capability keyed lookup any more: the "
                            "layout changed, re-check SM12 behaviour by hand and update "
                            "sglpatch/contract/gates.py", mod.relpath)])
    findings = [(f"{text} indexes a compute-capability keyed table without a membership test, .get "
                 "or except KeyError: SM12 (capability 12) raises KeyError", loc)
                for loc, text in walker.unguarded]
    return GateResult(findings, mod.relpath, None if findings else f"{len(walker.lookups)} guarded lookups")


class _CapIndexWalker:
    """Find ``TABLE[<capability>]`` subscripts and whether each is guarded."""

    def __init__(self, mod: Module):
        self.mod = mod
        self.lookups: list[str] = []
        self.unguarded: list[tuple[str, str]] = []

    def run(self) -> None:
        for stmt in _top_statements(self.mod.ast.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.block(stmt.body, set(), 0)
            elif isinstance(stmt, ast.ClassDef):
                for s in stmt.body:
                    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.block(s.body, set(), 0)

    @staticmethod
    def _key(e) -> str:
        return ast.unparse(e)

    def _facts(self, test) -> tuple[set, set]:
        """Keys proven present in some table when ``test`` is true / false."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            p, n = self._facts(test.operand)
            return n, p
        if isinstance(test, ast.BoolOp):
            parts = [self._facts(v) for v in test.values]
            if isinstance(test.op, ast.And):
                return set().union(*(p for p, _ in parts)), set()
            return set(), set().union(*(n for _, n in parts))
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            k = self._key(test.left)
            if isinstance(test.ops[0], ast.In):
                return {k}, set()
            if isinstance(test.ops[0], ast.NotIn):
                return set(), {k}
        return set(), set()

    def block(self, stmts, known: set, guarded: int) -> None:
        known = set(known)
        for s in stmts:
            if isinstance(s, ast.If):
                pos, neg = self._facts(s.test)
                self.expr(s.test, known, guarded)
                self.block(s.body, known | pos, guarded)
                self.block(s.orelse, known | neg, guarded)
                if s.body and isinstance(s.body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break)):
                    known |= neg
            elif isinstance(s, ast.Try):
                g = any(_catches(h) for h in s.handlers)
                self.block(s.body, known, guarded + g)
                for h in s.handlers:
                    self.block(h.body, known, guarded)
                self.block(s.orelse, known, guarded)
                self.block(s.finalbody, known, guarded)
            elif isinstance(s, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
                for child in ast.iter_child_nodes(s):
                    if isinstance(child, ast.expr):
                        self.expr(child, known, guarded)
                self.block(s.body, known, guarded)
                self.block(getattr(s, "orelse", []), known, guarded)
            elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.block(s.body, known, guarded)
            elif isinstance(s, ast.ClassDef):
                continue
            else:
                for child in ast.iter_child_nodes(s):
                    if isinstance(child, ast.expr):
                        self.expr(child, known, guarded)

    def expr(self, e, known: set, guarded: int) -> None:
        for n in ast.walk(e):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" \
                    and n.args and CAPABILITY_TEXT.search(self._key(n.args[0])):
                self.lookups.append(self.mod.loc(n))
            if isinstance(n, ast.IfExp):
                pos, _ = self._facts(n.test)
                known = known | pos
            if not isinstance(n, ast.Subscript) or not isinstance(n.ctx, ast.Load):
                continue
            key = self._key(n.slice)
            if not CAPABILITY_TEXT.search(key) or isinstance(n.value, ast.Subscript):
                continue
            self.lookups.append(self.mod.loc(n))
            if guarded or key in known:
                continue
            self.unguarded.append((self.mod.loc(n), ast.unparse(n)))


def _catches(h: ast.ExceptHandler) -> bool:
    if h.type is None:
        return True
    elts = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
    return any((dotted(x) or "").rpartition(".")[2] in _KEY_GUARD_EXC for x in elts)

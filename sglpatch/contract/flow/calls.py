"""The call graph: which function a call reaches, and the parameters a model value binds there.

``CallGraph`` is the part of the walk (``walker._Walker``) that follows calls into the tree:
functions, methods on ``self`` and on followed objects, constructors, lookup tables of classes.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from sglpatch.contract.flow.access import _EVENT_NAMES, FuncInfo, Val, _call_name, _same_as_pattern
from sglpatch.contract.flow.context import Driver
from sglpatch.contract.index.classes import ClassRef
from sglpatch.contract.parse.outline import dotted
from sglpatch.contract.parse.tree import Module


class CallGraph:
    """Mixin of ``_Walker``: edges to callees, enqueued under their parameter bindings."""

    # What the mixin reads of ``_Walker`` (declared for the type checker; set in its __init__).
    d: Driver
    info: FuncInfo
    mod: Module
    cls: ClassRef | None
    self_name: str | None
    is_runner: bool
    events: list[tuple]
    edge_features: dict[tuple, set]
    guarded_edges: set
    call_facts: list
    known: dict[str, str]
    try_guard: int
    ev: Callable[[ast.AST], Val | None]
    features: Callable[[], set[str]]

    def edge(self, c: ast.Call) -> None:
        f = c.func
        own = isinstance(f, ast.Attribute) and (
            (isinstance(f.value, ast.Name) and self.self_name is not None and f.value.id == self.self_name)
            or (isinstance(f.value, ast.Call) and _call_name(f.value) == "super")
        )
        passes = any(self.ev(a) is not None for a in c.args if not isinstance(a, ast.Starred)) or any(
            self.ev(k.value) is not None for k in c.keywords
        )
        if own and not passes and not self.is_runner:
            return  # other classes' internal calls matter only when they pass a model along
        if not (own or passes or (isinstance(f, ast.Attribute) and self.ev(f.value) is not None)):
            return
        if isinstance(f, ast.Subscript) and passes:
            for target in self.table_callees(f):  # runners[self.device](self)
                self.edge_to(c, target, passes)
            return
        target = self.callee(c)
        if target is not None:
            self.edge_to(c, target, passes)

    def table_callees(self, f: ast.Subscript) -> list:
        """Classes a local lookup table holds: ``runners = {"cpu": CPURunner, ...}; runners[k](..)``."""
        if not isinstance(f.value, ast.Name):
            return []
        out = []
        for targets, value in self.d.assigns(self.info.node):
            if not any(isinstance(t, ast.Name) and t.id == f.value.id for t in targets):
                continue
            for n in ast.walk(value):
                if isinstance(n, ast.Name):
                    sym = self.d.tree.resolve(self.mod.name, n.id)
                    if sym.kind == "class":
                        target = self._from_symbol(sym)
                        if target is not None and target not in out:
                            out.append(target)
                            if _EVENT_NAMES.search(n.id):
                                self.events.append(("named", n.id, f.lineno, self.mod.relpath))
        return out

    def edge_to(self, c: ast.Call, target, passes: bool) -> None:
        mod, cls, name, skip_self, receiver_root = target
        key0 = self.d.key_for(mod, cls, name, {})
        if key0 is None:
            return
        fnode = self.d.funcs[key0].node
        params = [a.arg for a in fnode.args.posonlyargs + fnode.args.args]
        kwonly = [a.arg for a in fnode.args.kwonlyargs]
        is_static = any((dotted(dec) or "").endswith("staticmethod") for dec in fnode.decorator_list)
        if skip_self and params and not is_static:
            params = params[1:]
        bindings = {}
        for p, a in zip(params, c.args):
            if isinstance(a, ast.Starred):
                break
            v = self.ev(a)
            if v is not None and not _same_as_pattern(p, v):
                bindings[p] = v
        for kw in c.keywords:
            if kw.arg and (kw.arg in params or kw.arg in kwonly):
                v = self.ev(kw.value)
                if v is not None and not _same_as_pattern(kw.arg, v):
                    bindings[kw.arg] = v
        if not bindings and not receiver_root and not passes:
            return
        key = self.d.key_for(mod, cls, name, bindings) if bindings else key0
        if key is None:
            return
        self.events.append(("edge", key, c.lineno))
        fs = self.features()
        self.edge_features.setdefault(key, set()).update(fs - {"core"})
        if self.try_guard:
            self.guarded_edges.add(key)
        self.call_facts.append((key, dict(self.known)))
        if key not in self.d.results:
            self.d.enqueue(key)

    def callee(self, c: ast.Call):
        """(module, class or None, function name, skip_self, receiver is a followed object) or None."""
        f = c.func
        if isinstance(f, ast.Name):
            sym = self.d.tree.resolve(self.mod.name, f.id)
            return self._from_symbol(sym)
        if not isinstance(f, ast.Attribute):
            return None
        recv = f.value
        if isinstance(recv, ast.Call) and _call_name(recv) == "super" and self.cls is not None:
            owner, node = self.d.method_node(self.cls, f.attr, skip_first=True)
            if node is not None:
                return self.d.tree.module(owner.module), owner, f.attr, True, True
            return None
        if isinstance(recv, ast.Name) and self.self_name and recv.id == self.self_name and self.cls:
            owner, node = self.d.method_node(self.cls, f.attr)
            if node is not None:
                return self.d.tree.module(owner.module), owner, f.attr, True, True
            return None
        base = self.ev(recv)
        if base is not None and base.kind == "runner" and self.d.runner_class is not None:
            owner, node = self.d.method_node(self.d.runner_class, f.attr)
            if node is not None:
                return self.d.tree.module(owner.module), owner, f.attr, True, True
            return None
        d = dotted(recv)
        if d is not None and base is None:
            sym = self.d.tree.resolve_dotted(self.mod.name, d)
            if sym.kind == "module":
                return self._from_symbol(self.d.tree.resolve(sym.module, f.attr))
            if sym.kind == "class":  # Class.method(...) / Class.classmethod(...)
                assert sym.name is not None  # a class symbol is always named
                ref = ClassRef(sym.module, sym.name)
                owner, node = self.d.method_node(ref, f.attr)
                if node is not None:
                    return self.d.tree.module(owner.module), owner, f.attr, True, False
        return None

    def _from_symbol(self, sym):
        target = self.d.classes.callable_def(sym)
        if target is None:
            return None
        mod, owner, name, _ = target
        return mod, owner, name, owner is not None, False

"""One function's pass of the ``None`` flow (``none_flow.py``): which names may hold a probe's
``None`` on each path, where they hand it on (returns, globals, a process-wide object's
attributes, call arguments) and what consumes it (an ``assert``, a ``raise`` under ``is None``, a
read of the value). A test that proves the value is not ``None`` ends it on that path.
"""

from __future__ import annotations

import ast
from typing import Protocol, cast

from sglpatch.contract.flow.access import Access, _call_name, _features_of
from sglpatch.contract.flow.context import Driver
from sglpatch.contract.flow.guards import _exits
from sglpatch.contract.flow.walker import _getattr_none_default, _Walker
from sglpatch.contract.parse.outline import dotted

# One source of a possibly-None value: the probe access and the hops its None took so far.
Taint = tuple[tuple[Access, tuple[str, ...]], ...]


def _union(a: Taint, b: Taint) -> Taint:
    seen = {id(acc) for acc, _ in a}
    return a + tuple(t for t in b if id(t[0]) not in seen)


def _hop(t: Taint, where: str) -> Taint:
    return tuple((acc, hops if hops[-1:] == (where,) else hops + (where,)) for acc, hops in t)


def _is_none(e) -> bool:
    return e is None or (isinstance(e, ast.Constant) and e.value is None)


class Flow(Protocol):
    """The fixpoint as one visit sees it: what earlier visits learnt, and where a visit reports
    what it learns (``none_flow.NoneFlow`` is the one implementation)."""

    d: Driver
    probes: dict[tuple, dict[tuple[int, int], Access]]  # function -> (line, col) -> probe
    returns: dict[tuple, Taint]
    params: dict[tuple, dict[str, Taint]]
    globals: dict[tuple[str, str], Taint]
    words: set[str]

    def returned(self, key, taint: Taint) -> None: ...

    def passed(self, key, param: str, taint: Taint) -> None: ...

    def stored(self, slot: tuple[str, str], taint: Taint) -> None: ...

    def consumed(self, taint: Taint, node, visit: Visit) -> None: ...

    def gives_values(self, fn) -> bool: ...


class Visit:
    """One pass over one function: which names may hold a probe's None, and where they go."""

    def __init__(self, flow: Flow, key):
        self.flow = flow
        self.key = key
        self.info = flow.d.funcs[key]
        self.mod = self.info.module
        self.calls = _Walker(flow.d, key, self.info)  # only its call resolution is used
        self.probes = flow.probes.get(key, {})
        self.names: dict[str, Taint] = dict(flow.params.get(key, {}))
        self.accessors: dict[str, str] = {}  # r = get_resources(): r names a process-wide object
        self.declared_global: set[str] = set()  # a `global` statement comes before the names' use
        self.absent: Taint = ()  # on this path the tested value is None (or the probed member missing)
        self.derived = False  # ... and it was a followed value, not the probe itself (the walk saw that)
        self.tests: list[ast.AST] = []

    def run(self) -> None:
        self.block(self.info.node.body)

    def features(self) -> set[str]:
        return _features_of(
            f"{self.mod.relpath} {self.info.qualname} " + " ".join(self.flow.d.unparse(t) for t in self.tests)
        )

    def where(self, node) -> str:
        return f"{self.mod.relpath}:{node.lineno}"

    # ------------------------------------------------------------ values

    def name_taint(self, name: str) -> Taint:
        """A local name's, else the module global's of that name."""
        if name in self.names:
            return self.names[name]
        return self.flow.globals.get((self.mod.name, name), ())

    def taint(self, e) -> Taint:
        if isinstance(e, ast.Name):
            return self.name_taint(e.id)
        if isinstance(e, ast.Attribute):
            slot = self.slot(e)
            return self.flow.globals.get(slot, ()) if slot else ()
        if isinstance(e, ast.Call):
            probe = self.probes.get((e.lineno, e.col_offset))
            if probe is not None and probe.kind.endswith("getattr") and _getattr_none_default(e):
                return ((probe, ()),)
            target = self.calls.callee(e)
            if target is not None:
                mod, cls, name = target[:3]
                key = self.flow.d.key_for(mod, cls, name, {})
                return _hop(self.flow.returns.get(key, ()), self.where(e))
            return ()
        if isinstance(e, ast.IfExp):
            body = () if isinstance(e.body, ast.Name) and e.body.id in _not_none(e.test, True) else self.taint(e.body)
            orelse = (
                ()
                if isinstance(e.orelse, ast.Name) and e.orelse.id in _not_none(e.test, False)
                else self.taint(e.orelse)
            )
            return _union(body, orelse)
        if isinstance(e, ast.NamedExpr):
            return self.taint(e.value)
        return ()

    def slot(self, e: ast.Attribute) -> tuple[str, str] | None:
        """``get_resources().x`` or ``r.x`` after ``r = get_resources()``: an attribute of the object
        a call without arguments hands out (a process-wide singleton), keyed by that call's name."""
        base = e.value
        accessor = self.accessors.get(base.id) if isinstance(base, ast.Name) else _accessor(base)
        return (accessor + "()", e.attr) if accessor else None

    def none_when(self, test) -> tuple[Taint, Taint, bool]:
        """(may be None where the test holds, where it fails, a followed value?): ``x is None``,
        ``not x``, ``hasattr(m, "probed")``, their negations and ``and``/``or`` of them."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            yes, no, derived = self.none_when(test.operand)
            return no, yes, derived
        if isinstance(test, ast.BoolOp):
            yes = ()
            no = ()
            derived = False
            for v in test.values:
                y, n, d = self.none_when(v)
                yes, no, derived = _union(yes, y), _union(no, n), derived or (d and bool(y or n))
            return yes, no, derived
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and _is_none(test.comparators[0])
        ):
            t = self.taint(test.left)
            return (t, (), bool(t)) if isinstance(test.ops[0], ast.Is) else ((), t, bool(t))
        if isinstance(test, ast.Name):
            t = self.taint(test)
            return (), t, bool(t)
        if isinstance(test, ast.Call) and _call_name(test) == "hasattr":
            probe = self.probes.get((test.lineno, test.col_offset))
            return ((), ((probe, ()),), False) if probe is not None else ((), (), False)
        return (), (), False

    # ------------------------------------------------------------ statements

    def block(self, stmts) -> None:
        for s in stmts:
            self.stmt(s)

    def quiet(self, s) -> bool:
        """Nothing may be None on this path yet and nothing in ``s`` can make it so: skip it."""
        if self.names or self.absent or any(s.lineno <= line <= s.end_lineno for line, _ in self.probes):
            return False
        text = self.mod.text(s.lineno, s.end_lineno)
        return not any(w in text for w in self.flow.words)

    def stmt(self, s) -> None:
        if self.quiet(s):
            return
        if isinstance(s, ast.If):
            self.if_(s)
        elif isinstance(s, ast.Return):
            self.expr(s.value)
            t = (
                self.taint(s.value)
                if not _is_none(s.value)
                else (self.absent if self.absent and self.flow.gives_values(self.info.node) else ())
            )
            if t:
                self.flow.returned(self.key, _hop(t, self.where(s)))
        elif isinstance(s, ast.Raise):
            if self.derived and self.absent:  # if x is None: raise ...
                self.flow.consumed(self.absent, s, self)
        elif isinstance(s, ast.Assert):
            t = ()
            for name in sorted(_not_none(s.test, True)):
                t = _union(t, self.name_taint(name))
            if t:
                self.flow.consumed(t, s, self)
            self.expr(s.test)
            for name in _not_none(s.test, True):  # asserted: not None from here on
                self.names.pop(name, None)
        elif isinstance(s, (ast.Assign, ast.AnnAssign)) and s.value is not None:
            self.expr(s.value)
            t = self.taint(s.value)
            for target in s.targets if isinstance(s, ast.Assign) else [s.target]:
                self.assign(target, t)
                if isinstance(target, ast.Name):
                    accessor = _accessor(s.value)
                    if accessor:
                        self.accessors[target.id] = accessor
                    else:
                        self.accessors.pop(target.id, None)
        elif isinstance(s, ast.Global):
            self.declared_global.update(s.names)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        else:
            for child in ast.iter_child_nodes(s):
                if isinstance(child, ast.stmt):
                    self.stmt(child)
                elif isinstance(child, ast.expr):
                    self.expr(child)
            for h in getattr(s, "handlers", ()) or ():
                self.block(h.body)

    def assign(self, target, t: Taint) -> None:
        if isinstance(target, ast.Attribute):
            slot = self.slot(target)
            if slot and t:
                self.flow.stored(slot, _hop(t, self.where(target)))
            return
        if not isinstance(target, ast.Name):
            return
        if target.id in self.declared_global:
            if t:
                self.flow.stored((self.mod.name, target.id), _hop(t, self.where(target)))
        elif t:
            self.names[target.id] = t
        else:
            self.names.pop(target.id, None)

    def if_(self, s: ast.If) -> None:
        self.expr(s.test)
        yes, no, derived = self.none_when(s.test)
        if_true, if_false = _not_none(s.test, True), _not_none(s.test, False)
        before = (dict(self.names), self.absent, self.derived)
        self.branch(s.body, yes, derived, if_true, s.test)
        after_body = dict(self.names)
        self.names, self.absent, self.derived = dict(before[0]), before[1], before[2]
        self.branch(s.orelse, no, derived, if_false, self.flow.d.negated(s.test))
        after_else = dict(self.names)
        self.names, self.absent, self.derived = before
        body_exit, else_exit = _exits(s.body), _exits(s.orelse)
        if body_exit and not else_exit:  # if x is None: return ...   -> x is not None below
            self.names = after_else
            if no:
                self.absent, self.derived = _union(self.absent, no), derived
        elif else_exit and not body_exit:
            self.names = after_body
            if yes:
                self.absent, self.derived = _union(self.absent, yes), derived
        else:
            self.names = {**after_else, **after_body}

    def branch(self, stmts, none: Taint, derived: bool, handled: set[str], test) -> None:
        if none:
            self.absent, self.derived = _union(self.absent, none), derived
        for n in handled:
            self.names.pop(n, None)
        self.tests.append(test)
        try:
            self.block(stmts)
        finally:
            self.tests.pop()

    # ------------------------------------------------------------ expressions

    def expr(self, e, handled: frozenset | set = frozenset()) -> None:
        if e is None:
            return
        if isinstance(e, ast.BoolOp):  # a later operand runs only where the earlier ones held (and) / failed (or)
            seen = set(handled)
            for v in e.values:
                self.expr(v, seen)
                seen |= _not_none(v, isinstance(e.op, ast.And))
            return
        if isinstance(e, ast.IfExp):
            self.expr(e.test, handled)
            self.expr(e.body, set(handled) | _not_none(e.test, True))
            self.expr(e.orelse, set(handled) | _not_none(e.test, False))
            return
        if (
            isinstance(e, (ast.Attribute, ast.Subscript))
            and isinstance(e.value, ast.Name)
            and isinstance(e.ctx, ast.Load)
            and e.value.id not in handled
        ):
            t = self.taint(e.value)
            if t:
                self.flow.consumed(t, e, self)
        if isinstance(e, ast.Call):
            self.call(e)
        if isinstance(e, (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            return  # run later or elsewhere: not a step of this path
        for child in ast.iter_child_nodes(e):
            if isinstance(child, ast.expr):
                self.expr(child, handled)
            elif isinstance(child, ast.keyword):
                self.expr(child.value, handled)

    def call(self, c: ast.Call) -> None:
        tainted = [(i, a) for i, a in enumerate(c.args) if not isinstance(a, ast.Starred) and self.taint(a)]
        kw = [k for k in c.keywords if k.arg and self.taint(k.value)]
        if not (tainted or kw):
            return
        target = self.calls.callee(c)
        if target is None:
            return
        mod, cls, name, skip_self = target[:4]
        key = self.flow.d.key_for(mod, cls, name, {})
        if key is None:
            return
        fnode = self.flow.d.funcs[key].node
        params = [a.arg for a in fnode.args.posonlyargs + fnode.args.args]
        static = any((dotted(dec) or "").endswith("staticmethod") for dec in fnode.decorator_list)
        if skip_self and params and not static:
            params = params[1:]
        for i, a in tainted:
            if i < len(params):
                self.flow.passed(key, params[i], _hop(self.taint(a), self.where(c)))
        for k in kw:  # kw: named keywords only
            self.flow.passed(key, cast(str, k.arg), _hop(self.taint(k.value), self.where(c)))


def _accessor(e) -> str:
    """The name of a call without arguments (``get_resources()``), the accessor of a process-wide
    object; "" for anything else."""
    if isinstance(e, ast.Call) and not e.args and not e.keywords:
        return (dotted(e.func) or "").rpartition(".")[2]
    return ""


def _not_none(test, holds: bool) -> set[str]:
    """Names a test proves are not None where it holds (``holds``) or where it fails."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _not_none(test.operand, not holds)
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.And) == holds:  # all of them hold / all of them fail
            return set().union(*(_not_none(v, holds) for v in test.values))
        return set()
    if isinstance(test, ast.Name):
        return {test.id} if holds else set()
    if (
        isinstance(test, ast.Call)
        and _call_name(test) in ("isinstance", "hasattr", "callable")
        and test.args
        and isinstance(test.args[0], ast.Name)
    ):  # None is no instance, has no such member, is no callable
        return {test.args[0].id} if holds else set()
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], (ast.Is, ast.IsNot))
        and _is_none(test.comparators[0])
        and isinstance(test.left, ast.Name)
    ):
        return {test.left.id} if isinstance(test.ops[0], ast.IsNot) == holds else set()
    return set()


def _own_nodes(fn):
    """The nodes of a function's body, without those of nested functions and classes."""
    stack = list(fn.body)
    while stack:
        n = stack.pop()
        yield n
        stack.extend(
            c
            for c in ast.iter_child_nodes(n)
            if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
        )

"""A small path-sensitive evaluator of one Python function, over what is statically known.

Checks use it to judge what code *does* rather than how it is spelled (the torch symmetric-memory
fix, a wrapper's ``__getattr__``). A value is a Python constant (numbers, strings, None, tuples,
lists and dicts of them) or ``UNKNOWN``. A condition that evaluates to UNKNOWN forks the path; a
constant one takes only its branch, so the body of ``if False and ...`` never runs and
``if x is None or True`` always does. Each path ends returning, raising, or falling off the end.
Errors the evaluator can prove end a path as raised: a missing dict key, using None (``None[k]``,
``k in None``, ``None.x``), an explicit ``raise``, ``assert False``; an enclosing ``try`` whose
handler matches catches them. The caller supplies the parameters, the ``self`` attributes, the
global names and a hook for calls; anything else is UNKNOWN. Loops run zero times or once.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import cast

from sglpatch.contract.interp.expressions import Expressions
from sglpatch.contract.interp.values import (
    UNKNOWN,
    End,
    PathRaises,
    Raised,
    State,
    _binop,
    _same,
    exc_matches,
    is_none,
    merged_attrs,
    none_use,
    truth,
)
from sglpatch.contract.parse.outline import bound_names, dotted, top_statements
from sglpatch.contract.parse.tree import Module, SourceTree

CallHook = Callable[["Evaluator", ast.Call, str, list, dict, State], object]
# The paths a block leaves: each state with how it left (None: it falls through), e.g. ("return", v, line).
Paths = list[tuple[State, "tuple | None"]]


class Evaluator(Expressions):
    """Run functions path by path. ``globals(name)`` gives a global's value (UNKNOWN if unknown),
    ``class_attr(name)`` a class attribute read through ``self``, ``call`` a value for a call (or
    NotImplemented to fall back to UNKNOWN)."""

    def __init__(
        self,
        *,
        globals: Callable[[str], object] | None = None,
        class_attr: Callable[[str], object] | None = None,
        call: CallHook | None = None,
        max_paths: int = 512,
        depth: int = 0,
    ):
        self.globals = globals or (lambda name: UNKNOWN)
        self.class_attr = class_attr or (lambda name: UNKNOWN)
        self.call_hook = call
        self.max_paths = max_paths
        self.depth = depth
        self.truncated = False
        self.self_name: str | None = None

    # ------------------------------------------------------------ functions

    def run(self, fn, args: dict | None = None, attrs: dict | None = None, *, method: bool = True) -> list[End]:
        """Every path through ``fn`` with ``args`` bound (missing parameters are UNKNOWN)."""
        a = fn.args
        params = [p.arg for p in a.posonlyargs + a.args]
        self.self_name = params[0] if method and params else None
        env = {p: UNKNOWN for p in params + [p.arg for p in a.kwonlyargs]}
        for p in (a.vararg, a.kwarg):
            if p is not None:
                env[p.arg] = UNKNOWN
        env.update(args or {})
        ends = []
        for st, out in self.block(fn.body, State(env, dict(attrs or {}))):
            if out is None or out[0] in ("break", "continue"):
                ends.append(End("fall", None, None, st, fn.end_lineno or 0))
            elif out[0] == "return":
                ends.append(End("return", out[1], None, st, out[2]))
            else:
                ends.append(End("raise", None, out[1], st, out[1].line))
        return ends

    def inline(self, fn, args: dict, st: State, *, method: bool = True):
        """The value of calling ``fn`` from state ``st`` (paths merged); raises when a path does.
        ``self`` attributes the callee sets are merged back into ``st``."""
        if self.depth >= 3:
            return UNKNOWN
        sub = Evaluator(
            globals=self.globals,
            class_attr=self.class_attr,
            call=self.call_hook,
            max_paths=self.max_paths,
            depth=self.depth + 1,
        )
        ends = sub.run(fn, args, st.attrs if method else {}, method=method)
        self.truncated |= sub.truncated
        for e in ends:
            if e.kind == "raise":
                raise PathRaises(cast(Raised, e.error))  # a raising path carries its error
        st.calls.extend(c for e in ends for c in e.state.calls)
        if method and ends:
            st.attrs.update(merged_attrs(ends))
        values = [e.value for e in ends]
        return values[0] if values and all(_same(v, values[0]) for v in values) else UNKNOWN

    # ------------------------------------------------------------ statements

    def block(self, stmts, st: State) -> Paths:
        states: Paths = [(st, None)]
        for s in stmts:
            nxt: Paths = []
            for cur, out in states:
                nxt.extend([(cur, out)] if out is not None else self.stmt(s, cur))
            if len(nxt) > self.max_paths:
                self.truncated = True
                nxt = nxt[: self.max_paths]
            states = nxt
        return states

    def stmt(self, s, st: State) -> Paths:
        try:
            return self._stmt(s, st)
        except PathRaises as r:
            return [(st, ("raise", r.raised))]

    def _stmt(self, s, st: State):
        if isinstance(s, ast.Expr):
            self.ev(s.value, st)
        elif isinstance(s, (ast.Assign, ast.AnnAssign)):
            if s.value is not None:
                v = self.ev(s.value, st)
                for t in s.targets if isinstance(s, ast.Assign) else [s.target]:
                    self.assign(t, v, st)
        elif isinstance(s, ast.AugAssign):
            cur: object
            t, cur = s.target, UNKNOWN
            if isinstance(t, ast.Name):
                cur = st.env[t.id] if t.id in st.env else self.globals(t.id)
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == self.self_name:
                cur = st.attrs[t.attr] if t.attr in st.attrs else self.class_attr(t.attr)
            self.assign(t, _binop(type(s.op), cur, self.ev(s.value, st)), st)
        elif isinstance(s, ast.If):
            out: Paths = []
            for t, st2, _ in self.branches(s.test, st):
                if isinstance(t, Raised):
                    out.append((st2, ("raise", t)))
                    continue
                st2.branches.append((s.lineno, t, len(st2.calls)))
                out.extend(self.block(s.body if t else s.orelse, st2))
            return out
        elif isinstance(s, ast.Return):
            return [(st, ("return", self.ev(s.value, st) if s.value is not None else None, s.lineno))]
        elif isinstance(s, ast.Raise):
            return [(st, ("raise", self.raised(s, st)))]
        elif isinstance(s, ast.Assert):
            out = []
            for t, st2, certain in self.branches(s.test, st):
                if isinstance(t, Raised) or (t is False and certain):
                    out.append(
                        (
                            st2,
                            (
                                "raise",
                                t if isinstance(t, Raised) else Raised("AssertionError", ast.unparse(s.test), s.lineno),
                            ),
                        )
                    )
                elif t:
                    out.append((st2, None))
            return out  # an assertion that may fail is assumed to hold
        elif isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
            return self.try_(s, st)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            return self.for_(s, st)
        elif isinstance(s, ast.While):
            out = []
            for t, st2, _ in self.branches(s.test, st):
                if isinstance(t, Raised):
                    out.append((st2, ("raise", t)))
                elif t:
                    out.extend(
                        (x, o if o and o[0] in ("return", "raise") else None) for x, o in self.block(s.body, st2)
                    )
                else:
                    out.extend(self.block(s.orelse, st2))
            return out
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self.ev(item.context_expr, st)
                if item.optional_vars is not None:
                    self.assign(item.optional_vars, UNKNOWN, st)
            return self.block(s.body, st)
        elif isinstance(s, ast.Match):
            self.ev(s.subject, st)
            out = [(st.fork(), None)]
            for case in s.cases:
                out.extend(self.block(case.body, st.fork()))
            return out
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            st.env[s.name] = UNKNOWN
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            for a in s.names:
                st.env[(a.asname or a.name).split(".")[0]] = UNKNOWN
        elif isinstance(s, ast.Break):
            return [(st, ("break",))]
        elif isinstance(s, ast.Continue):
            return [(st, ("continue",))]
        return [(st, None)]

    def raised(self, s: ast.Raise, st: State) -> Raised:
        if s.exc is None:
            return st.handling or Raised("RuntimeError", "bare raise outside except", s.lineno)
        exc = s.exc.func if isinstance(s.exc, ast.Call) else s.exc
        if isinstance(s.exc, ast.Call):
            for a in s.exc.args:
                self.ev(a, st)
        return Raised((dotted(exc) or "Exception").rpartition(".")[2], ast.unparse(s.exc)[:160], s.lineno)

    def try_(self, s, st: State):
        out: Paths = []
        for st2, o in self.block(s.body, st):
            if o and o[0] == "raise":
                h = next((h for h in s.handlers if exc_matches(o[1].exc, h.type)), None)
                if h is None:
                    out.append((st2, o))
                    continue
                st3 = st2.fork()
                prev, st3.handling = st3.handling, o[1]
                if h.name:
                    st3.env[h.name] = UNKNOWN
                for st4, o4 in self.block(h.body, st3):
                    st4.handling = prev
                    out.append((st4, o4))
            elif o is None:
                out.extend(self.block(s.orelse, st2))
            else:
                out.append((st2, o))
        if not s.finalbody:
            return out
        final: Paths = []
        for st2, o in out:
            final.extend((st3, o3 if o3 is not None else o) for st3, o3 in self.block(s.finalbody, st2))
        return final

    def for_(self, s, st: State):
        it = self.ev(s.iter, st)
        if isinstance(it, (tuple, list)) and len(it) <= 16:  # a literal sequence: run it for real
            states: Paths = [(st, None)]
            for item in it:
                nxt: Paths = []
                for cur, o in states:
                    if o is not None:
                        nxt.append((cur, o))
                        continue
                    self.assign(s.target, item, cur)
                    nxt.extend(self.block(s.body, cur))
                states = [(c, None if o and o[0] == "continue" else o) for c, o in nxt]
            out: Paths = []
            for cur, o in states:
                if o and o[0] == "break":
                    out.append((cur, None))
                elif o is None:
                    out.extend(self.block(s.orelse, cur))
                else:
                    out.append((cur, o))
            return out
        out = self.block(s.orelse, st.fork())  # no iteration
        once = st.fork()
        self.assign(s.target, UNKNOWN, once)
        for cur, o in self.block(s.body, once):
            if o and o[0] == "break":
                out.append((cur, None))
            elif o is None or o[0] == "continue":
                out.extend(self.block(s.orelse, cur))
            else:
                out.append((cur, o))
        return out

    def assign(self, target, v, st: State) -> None:
        if isinstance(target, ast.Name):
            st.env[target.id] = v
        elif isinstance(target, ast.Attribute):
            if isinstance(target.value, ast.Name) and target.value.id == self.self_name:
                st.attrs[target.attr] = v
            else:
                self.ev(target.value, st)
        elif isinstance(target, (ast.Tuple, ast.List)):
            elts = target.elts
            same = (
                isinstance(v, (tuple, list))
                and len(v) == len(elts)
                and not any(isinstance(e, ast.Starred) for e in elts)
            )
            for i, e in enumerate(elts):
                self.assign(e.value if isinstance(e, ast.Starred) else e, v[i] if same else UNKNOWN, st)
        elif isinstance(target, ast.Subscript):
            base = self.ev(target.value, st)
            if is_none(base):
                raise none_use(base, "'NoneType' object does not support item assignment", target.lineno)

    # ------------------------------------------------------------ conditions

    def branches(self, test, st: State) -> list[tuple]:
        """[(True | False | Raised, state, certain)]: the ways ``test`` can come out."""
        if isinstance(test, ast.BoolOp):
            stop = isinstance(test.op, ast.Or)  # the truth value that decides the whole test
            results, pending = [], [(st, True)]
            for v in test.values:
                nxt = []
                for s0, c0 in pending:
                    for t, s1, c in self.branches(v, s0):
                        if isinstance(t, Raised) or t is stop:
                            results.append((t, s1, c and c0))
                        else:
                            nxt.append((s1, c and c0))
                pending = nxt
            return results + [(not stop, s, c) for s, c in pending]
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return [(t if isinstance(t, Raised) else not t, s, c) for t, s, c in self.branches(test.operand, st)]
        try:
            t = truth(self.ev(test, st))
        except PathRaises as r:
            return [(r.raised, st, True)]
        if t is UNKNOWN:
            return [(True, st.fork(), False), (False, st.fork(), False)]
        return [(t, st, True)]


# ---------------------------------------------------------------- module constants


class ModuleGlobals:
    """Values of a module's top-level names: a literal assigned once, unconditionally (numbers,
    strings, dicts and tuples of them, arithmetic on other such names), or imported from a module
    of the tree that defines one. Everything else is UNKNOWN."""

    def __init__(self, tree: SourceTree):
        self.tree = tree
        self._cache: dict[tuple, object] = {}

    def for_module(self, mod: Module) -> Callable[[str], object]:
        return lambda name: self.value(mod.name, name)

    def value(self, module: str, name: str, depth: int = 0):
        key = (module, name)
        if key in self._cache:
            return self._cache[key]
        self._cache[key] = UNKNOWN  # recursion guard
        v = self._value(module, name, depth)
        self._cache[key] = v
        return v

    def _value(self, module: str, name: str, depth: int):
        mod = self.tree.module(module)
        if mod is None or depth > 4:
            return UNKNOWN
        if name in mod.outline.imports:
            target, attr = mod.outline.imports[name]
            return self.value(target, attr, depth + 1) if attr and self.tree.module(target) else UNKNOWN
        top = [s for s in top_statements(mod.ast.body) if name in bound_names(s)]
        if len(top) != 1 or top[0] not in mod.ast.body or not isinstance(top[0], (ast.Assign, ast.AnnAssign)):
            return UNKNOWN
        node = top[0]
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if len(targets) != 1 or not isinstance(targets[0], ast.Name) or node.value is None:
            return UNKNOWN
        ev = Evaluator(globals=lambda n: self.value(module, n, depth + 1))
        try:
            return ev.ev(node.value, State({}, {}))
        except PathRaises:
            return UNKNOWN

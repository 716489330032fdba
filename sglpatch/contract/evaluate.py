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
import operator
from dataclasses import dataclass, field
from typing import Callable

from .outline import _top_statements, bound_names, dotted
from .tree import Module, SourceTree


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()


@dataclass(frozen=True)
class Missing:
    """The None that ``table.get(key)`` returns for a key the table lacks: None, remembering why."""
    key: object
    line: int
    text: str


@dataclass(frozen=True)
class Raised:
    exc: str  # exception class name
    message: str
    line: int
    key: object = None  # the missing key, the key whose .get() gave the None that was used, or
    # the value used as a container


@dataclass
class State:
    env: dict  # local names
    attrs: dict  # self.<name>
    calls: list = field(default_factory=list)  # (dotted callee, line), in order
    branches: list = field(default_factory=list)  # (line, taken, len(calls)) of each `if` decided
    handling: Raised | None = None  # the exception an `except` block is handling

    def fork(self) -> "State":
        return State(dict(self.env), dict(self.attrs), list(self.calls), list(self.branches),
                     self.handling)


@dataclass
class End:
    kind: str  # return | raise | fall
    value: object
    error: Raised | None
    state: State
    line: int = 0  # where the path left the function


class PathRaises(Exception):
    """Raised inside the evaluator (and by call hooks) to end the current path with ``raised``."""

    def __init__(self, raised: Raised):
        super().__init__(raised.message)
        self.raised = raised


def none_use(v, what: str, line: int) -> "PathRaises":
    """The error for using None (or a Missing) as ``what``, naming the lookup that gave it."""
    why = f" ({v.text} at line {v.line} returned None)" if isinstance(v, Missing) else ""
    exc = "AttributeError" if what.startswith("'NoneType' object has no attribute") else "TypeError"
    return PathRaises(Raised(exc, what + why, line, v.key if isinstance(v, Missing) else None))


# exception class -> its bases, for matching `except` clauses (builtins only)
_EXC_BASES = {"KeyError": ("LookupError",), "IndexError": ("LookupError",),
              "LookupError": ("Exception",), "TypeError": ("Exception",),
              "AttributeError": ("Exception",), "AssertionError": ("Exception",),
              "ValueError": ("Exception",), "RuntimeError": ("Exception",),
              "NotImplementedError": ("RuntimeError",), "Exception": ("BaseException",)}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}
_BINOP = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
          ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.LShift: operator.lshift,
          ast.RShift: operator.rshift, ast.BitOr: operator.or_, ast.BitAnd: operator.and_,
          ast.Pow: operator.pow, ast.Div: operator.truediv}
_CONCRETE = (int, float, str, bytes, bool, type(None), tuple, list, dict, frozenset)


def is_none(v) -> bool:
    return v is None or isinstance(v, Missing)


def truth(v):
    """True, False or UNKNOWN."""
    if is_none(v):
        return False
    if v is UNKNOWN or not isinstance(v, _CONCRETE):
        return UNKNOWN
    return bool(v)


def exc_matches(raised: str, handler_type) -> bool:
    """Does ``except <handler_type>`` catch ``raised``? (None: a bare except.)"""
    if handler_type is None:
        return True
    names = handler_type.elts if isinstance(handler_type, ast.Tuple) else [handler_type]
    wanted = {(dotted(n) or "").rpartition(".")[2] for n in names}
    cur, seen = [raised], set()
    while cur:
        name = cur.pop()
        if name in wanted:
            return True
        if name not in seen:
            seen.add(name)
            cur.extend(_EXC_BASES.get(name, ("Exception",) if name != "BaseException" else ()))
    return False


CallHook = Callable[["Evaluator", ast.Call, str, list, dict, State], object]


class Evaluator:
    """Run functions path by path. ``globals(name)`` gives a global's value (UNKNOWN if unknown),
    ``class_attr(name)`` a class attribute read through ``self``, ``call`` a value for a call (or
    NotImplemented to fall back to UNKNOWN)."""

    def __init__(self, *, globals: Callable[[str], object] | None = None,
                 class_attr: Callable[[str], object] | None = None, call: CallHook | None = None,
                 max_paths: int = 512, depth: int = 0):
        self.globals = globals or (lambda name: UNKNOWN)
        self.class_attr = class_attr or (lambda name: UNKNOWN)
        self.call_hook = call
        self.max_paths = max_paths
        self.depth = depth
        self.truncated = False
        self.self_name: str | None = None

    # ------------------------------------------------------------ functions

    def run(self, fn, args: dict | None = None, attrs: dict | None = None, *,
            method: bool = True) -> list[End]:
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
        sub = Evaluator(globals=self.globals, class_attr=self.class_attr, call=self.call_hook,
                        max_paths=self.max_paths, depth=self.depth + 1)
        ends = sub.run(fn, args, st.attrs if method else {}, method=method)
        self.truncated |= sub.truncated
        for e in ends:
            if e.kind == "raise":
                raise PathRaises(e.error)
        st.calls.extend(c for e in ends for c in e.state.calls)
        if method and ends:
            st.attrs.update(merged_attrs(ends))
        values = [e.value for e in ends]
        return values[0] if values and all(_same(v, values[0]) for v in values) else UNKNOWN

    # ------------------------------------------------------------ statements

    def block(self, stmts, st: State) -> list[tuple[State, tuple | None]]:
        states = [(st, None)]
        for s in stmts:
            nxt = []
            for cur, out in states:
                nxt.extend([(cur, out)] if out is not None else self.stmt(s, cur))
            if len(nxt) > self.max_paths:
                self.truncated = True
                nxt = nxt[: self.max_paths]
            states = nxt
        return states

    def stmt(self, s, st: State) -> list[tuple[State, tuple | None]]:
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
                for t in (s.targets if isinstance(s, ast.Assign) else [s.target]):
                    self.assign(t, v, st)
        elif isinstance(s, ast.AugAssign):
            t, cur = s.target, UNKNOWN
            if isinstance(t, ast.Name):
                cur = st.env[t.id] if t.id in st.env else self.globals(t.id)
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == self.self_name:
                cur = st.attrs[t.attr] if t.attr in st.attrs else self.class_attr(t.attr)
            self.assign(t, _binop(type(s.op), cur, self.ev(s.value, st)), st)
        elif isinstance(s, ast.If):
            out = []
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
                    out.append((st2, ("raise", t if isinstance(t, Raised) else Raised(
                        "AssertionError", ast.unparse(s.test), s.lineno))))
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
                    out.extend((x, o if o and o[0] in ("return", "raise") else None)
                               for x, o in self.block(s.body, st2))
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
        return Raised((dotted(exc) or "Exception").rpartition(".")[2], ast.unparse(s.exc)[:160],
                      s.lineno)

    def try_(self, s, st: State):
        out = []
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
        final = []
        for st2, o in out:
            final.extend((st3, o3 if o3 is not None else o) for st3, o3 in self.block(s.finalbody, st2))
        return final

    def for_(self, s, st: State):
        it = self.ev(s.iter, st)
        if isinstance(it, (tuple, list)) and len(it) <= 16:  # a literal sequence: run it for real
            states = [(st, None)]
            for item in it:
                nxt = []
                for cur, o in states:
                    if o is not None:
                        nxt.append((cur, o))
                        continue
                    self.assign(s.target, item, cur)
                    nxt.extend(self.block(s.body, cur))
                states = [(c, None if o and o[0] == "continue" else o) for c, o in nxt]
            out = []
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
            same = isinstance(v, (tuple, list)) and len(v) == len(elts) and not any(
                isinstance(e, ast.Starred) for e in elts)
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
            return [(t if isinstance(t, Raised) else not t, s, c)
                    for t, s, c in self.branches(test.operand, st)]
        try:
            t = truth(self.ev(test, st))
        except PathRaises as r:
            return [(r.raised, st, True)]
        if t is UNKNOWN:
            return [(True, st.fork(), False), (False, st.fork(), False)]
        return [(t, st, True)]

    # ------------------------------------------------------------ expressions

    def ev(self, e, st: State):
        if e is None:
            return None
        if isinstance(e, ast.Constant):
            return e.value
        if isinstance(e, ast.Name):
            return st.env[e.id] if e.id in st.env else self.globals(e.id)
        if isinstance(e, ast.Attribute):
            if isinstance(e.value, ast.Name) and self.self_name is not None and e.value.id == self.self_name:
                return st.attrs[e.attr] if e.attr in st.attrs else self.class_attr(e.attr)
            base = self.ev(e.value, st)
            if is_none(base):
                raise none_use(base, f"'NoneType' object has no attribute '{e.attr}'", e.lineno)
            return UNKNOWN
        if isinstance(e, ast.Subscript):
            return self.subscript(e, st)
        if isinstance(e, ast.Compare):
            return self.compare(e, st)
        if isinstance(e, ast.BoolOp):
            stop = isinstance(e.op, ast.Or)
            v = None
            for x in e.values:
                v = self.ev(x, st)
                t = truth(v)
                if t is UNKNOWN:
                    return UNKNOWN
                if t is stop:
                    return v
            return v
        if isinstance(e, ast.UnaryOp):
            v = self.ev(e.operand, st)
            if isinstance(e.op, ast.Not):
                t = truth(v)
                return UNKNOWN if t is UNKNOWN else not t
            if isinstance(v, (int, float)) and not isinstance(e.op, ast.Not):
                return {ast.USub: operator.neg, ast.UAdd: operator.pos,
                        ast.Invert: operator.invert}[type(e.op)](v)
            return UNKNOWN
        if isinstance(e, ast.BinOp):
            return _binop(type(e.op), self.ev(e.left, st), self.ev(e.right, st))
        if isinstance(e, ast.IfExp):
            t = truth(self.ev(e.test, st))
            if t is not UNKNOWN:
                return self.ev(e.body if t else e.orelse, st)
            a, b = self.ev(e.body, st), self.ev(e.orelse, st)
            return a if _same(a, b) else UNKNOWN
        if isinstance(e, ast.Call):
            return self.call(e, st)
        if isinstance(e, (ast.Tuple, ast.List)):
            if any(isinstance(x, ast.Starred) for x in e.elts):
                return UNKNOWN
            vals = [self.ev(x, st) for x in e.elts]
            return tuple(vals) if isinstance(e, ast.Tuple) else vals
        if isinstance(e, ast.Set):
            vals = [self.ev(x, st) for x in e.elts if not isinstance(x, ast.Starred)]
            return UNKNOWN if any(v is UNKNOWN for v in vals) or len(vals) != len(e.elts) else \
                frozenset(_hashable(v) for v in vals)
        if isinstance(e, ast.Dict):
            keys = [self.ev(k, st) if k is not None else UNKNOWN for k in e.keys]
            vals = [self.ev(v, st) for v in e.values]
            if any(k is UNKNOWN or not _is_hashable(k) for k in keys):
                return UNKNOWN
            return dict(zip(keys, vals))
        if isinstance(e, ast.NamedExpr):
            v = self.ev(e.value, st)
            self.assign(e.target, v, st)
            return v
        if isinstance(e, ast.JoinedStr):
            for x in e.values:
                if isinstance(x, ast.FormattedValue):
                    self.ev(x.value, st)
            return UNKNOWN
        return UNKNOWN

    def subscript(self, e: ast.Subscript, st: State):
        base = self.ev(e.value, st)
        if isinstance(e.slice, ast.Slice):
            for part in (e.slice.lower, e.slice.upper, e.slice.step):
                self.ev(part, st)
            key = UNKNOWN
        else:
            key = self.ev(e.slice, st)
        if is_none(base):
            raise none_use(base, "'NoneType' object is not subscriptable", e.lineno)
        if key is UNKNOWN or not _is_hashable(key):
            return UNKNOWN
        if isinstance(base, dict):
            if key in base:
                return base[key]
            raise PathRaises(Raised("KeyError", f"{key!r} ({ast.unparse(e)[:120]})", e.lineno, key))
        if isinstance(base, (tuple, list)) and isinstance(key, int):
            if -len(base) <= key < len(base):
                return base[key]
            raise PathRaises(Raised("IndexError", f"{ast.unparse(e)[:120]}", e.lineno, key))
        return UNKNOWN

    def compare(self, e: ast.Compare, st: State):
        left, result = self.ev(e.left, st), True
        for op, right_node in zip(e.ops, e.comparators):
            right = self.ev(right_node, st)
            r = self.compare_one(op, left, right, e)
            if r is False:
                return False
            if r is UNKNOWN:
                result = UNKNOWN
            left = right
        return result

    def compare_one(self, op, a, b, node):
        if isinstance(op, (ast.In, ast.NotIn)):
            if is_none(b):
                raise none_use(b, "argument of type 'NoneType' is not iterable", node.lineno)
            if isinstance(b, (int, float, bool)):  # as Python does: this path raises
                raise PathRaises(Raised("TypeError", f"argument of type '{type(b).__name__}' is not "
                                        "iterable", node.lineno, b))
            r = _contains(b, a)
            return r if r is UNKNOWN or isinstance(op, ast.In) else not r
        a = None if isinstance(a, Missing) else a
        b = None if isinstance(b, Missing) else b
        if a is UNKNOWN or b is UNKNOWN or not isinstance(a, _CONCRETE) or not isinstance(b, _CONCRETE):
            return UNKNOWN
        if isinstance(op, (ast.Is, ast.IsNot)):
            same = a is b if a is None or b is None or isinstance(a, bool) else (
                type(a) is type(b) and a == b)
            return same if isinstance(op, ast.Is) else not same
        try:
            return _COMPARE[type(op)](a, b)
        except TypeError as exc:
            raise PathRaises(Raised("TypeError", str(exc), node.lineno)) from None
        except KeyError:
            return UNKNOWN

    def call(self, e: ast.Call, st: State):
        args = [UNKNOWN if isinstance(a, ast.Starred) else self.ev(a, st) for a in e.args]
        kwargs = {k.arg: self.ev(k.value, st) for k in e.keywords if k.arg is not None}
        name = dotted(e.func) or ""
        st.calls.append((name, e.lineno))
        if isinstance(e.func, ast.Attribute):
            is_self = isinstance(e.func.value, ast.Name) and e.func.value.id == self.self_name
            recv = UNKNOWN if is_self else self.ev(e.func.value, st)
            if is_none(recv):
                raise none_use(recv, f"'NoneType' object has no attribute '{e.func.attr}'", e.lineno)
            if isinstance(recv, dict) and e.func.attr == "get" and args:
                key = args[0]
                if key is UNKNOWN or not _is_hashable(key):
                    return UNKNOWN
                if key in recv:
                    return recv[key]
                default = args[1] if len(args) > 1 else kwargs.get("default", Missing(
                    key, e.lineno, ast.unparse(e)[:120]))
                return default
        if self.call_hook is not None:
            r = self.call_hook(self, e, name, args, kwargs, st)
            if r is not NotImplemented:
                return r
        if name == "len" and len(args) == 1 and isinstance(args[0], (tuple, list, dict, str, frozenset)):
            return len(args[0])
        return UNKNOWN


def merged_attrs(ends: list[End]) -> dict:
    """The ``self`` attributes every one of ``ends`` agrees on (the others UNKNOWN)."""
    out = {}
    for name in {n for e in ends for n in e.state.attrs}:
        vals = [e.state.attrs.get(name, UNKNOWN) for e in ends]
        out[name] = vals[0] if all(_same(v, vals[0]) for v in vals) else UNKNOWN
    return out


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
        top = [s for s in _top_statements(mod.ast.body) if name in bound_names(s)]
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


# ---------------------------------------------------------------- helpers

def _binop(op, a, b):
    if a is UNKNOWN or b is UNKNOWN or op not in _BINOP or not isinstance(a, _CONCRETE) \
            or not isinstance(b, _CONCRETE) or isinstance(a, Missing) or isinstance(b, Missing):
        return UNKNOWN
    big = [isinstance(x, int) and abs(x) > 4096 for x in (a, b)]
    if (op in (ast.Pow, ast.LShift) and big[1]) or (op is ast.Mult and any(big) and any(
            isinstance(x, (str, bytes, tuple, list)) for x in (a, b))):
        return UNKNOWN  # would take long or much memory to compute
    try:
        return _BINOP[op](a, b)
    except Exception:
        return UNKNOWN


def _contains(container, item):
    if container is UNKNOWN or not isinstance(container, _CONCRETE):
        return UNKNOWN
    items = list(container.keys()) if isinstance(container, dict) else container
    if isinstance(items, str):
        return item in items if isinstance(item, str) else UNKNOWN
    if item is UNKNOWN:
        return UNKNOWN if len(items) else False
    if any(_same(x, item) for x in items):
        return True
    return UNKNOWN if any(x is UNKNOWN for x in items) else False


def _same(a, b) -> bool:
    if a is UNKNOWN or b is UNKNOWN:
        return False
    if is_none(a) or is_none(b):
        return is_none(a) and is_none(b)
    try:
        return type(a) is type(b) and a == b
    except Exception:
        return False


def _is_hashable(v) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return v is not UNKNOWN


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v

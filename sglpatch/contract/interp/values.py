"""The values the path-sensitive evaluator (:mod:`.evaluate`) computes with: Python constants,
``UNKNOWN``, the None a missing key gave (``Missing``), a raised error, one path's state and its
end, and the operations on them that never guess (a comparison with UNKNOWN is UNKNOWN)."""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field

from sglpatch.contract.parse.outline import dotted


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

    def fork(self) -> State:
        return State(dict(self.env), dict(self.attrs), list(self.calls), list(self.branches), self.handling)


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


def none_use(v, what: str, line: int) -> PathRaises:
    """The error for using None (or a Missing) as ``what``, naming the lookup that gave it."""
    why = f" ({v.text} at line {v.line} returned None)" if isinstance(v, Missing) else ""
    exc = "AttributeError" if what.startswith("'NoneType' object has no attribute") else "TypeError"
    return PathRaises(Raised(exc, what + why, line, v.key if isinstance(v, Missing) else None))


# exception class -> its bases, for matching `except` clauses (builtins only)
_EXC_BASES = {
    "KeyError": ("LookupError",),
    "IndexError": ("LookupError",),
    "LookupError": ("Exception",),
    "TypeError": ("Exception",),
    "AttributeError": ("Exception",),
    "AssertionError": ("Exception",),
    "ValueError": ("Exception",),
    "RuntimeError": ("Exception",),
    "NotImplementedError": ("RuntimeError",),
    "Exception": ("BaseException",),
}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_BINOP = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_,
    ast.Pow: operator.pow,
    ast.Div: operator.truediv,
}
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


def merged_attrs(ends: list[End]) -> dict:
    """The ``self`` attributes every one of ``ends`` agrees on (the others UNKNOWN)."""
    out = {}
    for name in {n for e in ends for n in e.state.attrs}:
        vals = [e.state.attrs.get(name, UNKNOWN) for e in ends]
        out[name] = vals[0] if all(_same(v, vals[0]) for v in vals) else UNKNOWN
    return out


def _binop(op, a, b):
    if (
        a is UNKNOWN
        or b is UNKNOWN
        or op not in _BINOP
        or not isinstance(a, _CONCRETE)
        or not isinstance(b, _CONCRETE)
        or isinstance(a, Missing)
        or isinstance(b, Missing)
    ):
        return UNKNOWN
    big = [isinstance(x, int) and abs(x) > 4096 for x in (a, b)]
    if (op in (ast.Pow, ast.LShift) and big[1]) or (
        op is ast.Mult and any(big) and any(isinstance(x, (str, bytes, tuple, list)) for x in (a, b))
    ):
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

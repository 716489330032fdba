"""How the evaluator (:mod:`.evaluate`) computes an expression's value on one path: names,
``self`` attributes, containers, subscripts, comparisons, boolean and arithmetic operators, and
calls (through the caller's hook, else UNKNOWN). Using None where a value is needed ends the path
as raised (``PathRaises``)."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any, cast

from sglpatch.contract.interp.values import (
    _COMPARE,
    _CONCRETE,
    UNKNOWN,
    Missing,
    PathRaises,
    Raised,
    State,
    _binop,
    _contains,
    _hashable,
    _is_hashable,
    _same,
    is_none,
    none_use,
    truth,
)
from sglpatch.contract.parse.outline import dotted


class Expressions:
    """The expression half of :class:`.evaluate.Evaluator` (which supplies ``globals``,
    ``class_attr``, ``call_hook``, ``self_name``, ``depth`` and ``run``)."""

    # What the mixin reads of ``Evaluator`` (declared for the type checker; set in its __init__).
    globals: Callable[[str], object]
    class_attr: Callable[[str], object]
    call_hook: Callable[..., object] | None  # evaluate.CallHook, called with the Evaluator
    self_name: str | None
    assign: Callable[[ast.expr, object, State], None]

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
                return cast(
                    dict[type, Callable[[Any], Any]],
                    {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert},
                )[type(e.op)](v)
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
            return (
                UNKNOWN
                if any(v is UNKNOWN for v in vals) or len(vals) != len(e.elts)
                else frozenset(_hashable(v) for v in vals)
            )
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
                raise PathRaises(
                    Raised("TypeError", f"argument of type '{type(b).__name__}' is not iterable", node.lineno, b)
                )
            r = _contains(b, a)
            return r if r is UNKNOWN or isinstance(op, ast.In) else not r
        a = None if isinstance(a, Missing) else a
        b = None if isinstance(b, Missing) else b
        if a is UNKNOWN or b is UNKNOWN or not isinstance(a, _CONCRETE) or not isinstance(b, _CONCRETE):
            return UNKNOWN
        if isinstance(op, (ast.Is, ast.IsNot)):
            same = a is b if a is None or b is None or isinstance(a, bool) else (type(a) is type(b) and a == b)
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
                default = (
                    args[1] if len(args) > 1 else kwargs.get("default", Missing(key, e.lineno, ast.unparse(e)[:120]))
                )
                return default
        if self.call_hook is not None:
            r = self.call_hook(self, e, name, args, kwargs, st)
            if r is not NotImplemented:
                return r
        if name == "len" and len(args) == 1 and isinstance(args[0], (tuple, list, dict, str, frozenset)):
            return len(args[0])
        return UNKNOWN

"""What a class's ``__getattr__`` does when asked for a name, path by path (:mod:`.evaluate`):
forward to ``self.a.b``, raise, return None, or something else. The class index
(``ClassIndex.lookup``) uses it to decide whether a member is forwarded."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import cast

from sglpatch.contract.interp.evaluate import Evaluator
from sglpatch.contract.interp.values import UNKNOWN, PathRaises, Raised, is_none
from sglpatch.contract.parse.outline import Member, dotted
from sglpatch.contract.parse.refs import ClassRef
from sglpatch.contract.parse.tree import Module, SourceTree

_NO_ATTR = ("__getattr__", "__getattribute__")


def getattr_paths(tree: SourceTree, cls: ClassRef, m: Member, member: str) -> list[tuple]:
    """What ``cls.__getattr__`` does when asked for ``member``, per path: ("forward", chain) for
    ``return getattr(self.a.b, name)``, ("raise", ()) when it raises (``super().__getattr__`` of
    an nn.Module raises for anything but a registered parameter, buffer or submodule), ("none", ())
    when it returns None, or ("returns another value", ()) / ("is not analysable", ())."""
    node = cast(Module, tree.module(cls.module)).segment(m.start, m.end) if m.start else None
    params = [a.arg for a in node.args.args] if node is not None else []
    if len(params) < 2:
        return [("is not analysable", ())]

    def hook(ev, call, name, args, kwargs, st):
        f = call.func
        if (
            isinstance(f, ast.Attribute)
            and f.attr in _NO_ATTR
            and (
                isinstance(f.value, ast.Call)
                and dotted(f.value.func) == "super"
                or (dotted(f.value) or "").rpartition(".")[2] in ("Module", "object")
            )
        ):
            raise PathRaises(Raised("AttributeError", member, call.lineno))
        if (
            name == "getattr"
            and len(call.args) >= 2
            and isinstance(call.args[1], ast.Name)
            and call.args[1].id == params[1]
        ):
            chain = self_chain(call.args[0], params[0])
            return _Forward(chain) if chain else UNKNOWN
        return NotImplemented

    out: list[tuple[str, tuple[str, ...]]] = []
    for end in Evaluator(call=hook).run(node, {params[1]: member}):
        if end.kind == "raise":
            out.append(("raise", ()))
        elif end.kind == "fall" or is_none(end.value):
            out.append(("none", ()))
        elif isinstance(end.value, _Forward):
            out.append(("forward", end.value.chain))
        else:
            out.append(("returns another value", ()))
    return out


@dataclass(frozen=True)
class _Forward:
    chain: tuple[str, ...]


def self_chain(node, me: str) -> tuple[str, ...] | None:
    """``self.a.b`` -> ("a", "b"); anything else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == me and parts:
        return tuple(reversed(parts))
    return None

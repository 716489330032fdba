"""A wrapper's explicit forwards: each member that hands itself to the inner model names itself
and passes its own arguments through.

The interface check proves a member *exists* on the wrapper. A wrapper such as KimiK25 provides
most of its members by forwarding them to its language model, by name or by attribute::

    def set_embed_and_head(self, embed, head):
        self._get_language_model_attr("set_embed_and_head")(embed, head)

    @property
    def start_layer(self):
        return self.language_model.start_layer

A forward that names another member (``"start_layer"`` in ``set_embed_and_head``) or passes the
arguments in another order exists, compiles and passes the interface check, and is wrong. A
forward is recognised by what it reaches, in any spelling:

- a *by-name helper*: a method of the class with a parameter ``p`` that does ``getattr(..., p)``;
  ``self.helper("name")`` forwards ``name``;
- ``getattr(<inner>, "name")`` and ``<inner>.name``, where ``<inner>`` is ``self.<attr>`` holding
  an inner model (or a chain through it), or the inner model's class (for classmethods).

A member whose body is one statement forwarding one name (a member that computes is left alone)
must not forward the name of *another member the wrapper provides* (the copied forward left with
its sibling's name; forwarding to a name the wrapper does not have, such as ``lm_head`` returning
the inner ``embed_tokens`` for tied embeddings, is a wrapper's choice); when it calls what it
forwards, every parameter of an instance method must be used, and a call made of the bare
parameters keeps their order. A forward through a method the class lacks (the by-name helper
gone) is reported too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import cast

from sglpatch.contract.index.classes import ClassIndex, ClassRef
from sglpatch.contract.index.getattr_forward import self_chain
from sglpatch.contract.parse.tree import SourceTree


@dataclass(frozen=True)
class Forward:
    name: str  # the member reached on the inner model
    node: ast.expr  # the expression that reaches it
    call: ast.Call | None  # the call made on it, if any


def forward_problems(tree: SourceTree, classes: ClassIndex, ref: ClassRef) -> list[tuple[str, str, str]]:
    """(member, what is wrong, location) for every forward of ``ref`` that is not faithful."""
    cls = _class_node(tree, ref)
    if cls is None:
        return []
    inners = classes.inner_models(ref)
    inner_attrs = {inner.attr for inner in inners}
    inner_classes = {c.name for inner in inners for c in inner.lm}
    helpers = _by_name_helpers(cls)
    members = list(_members(cls))
    own = {name for name, _, _ in members}
    problems = []
    for member, node, params in members:
        if member in helpers:
            continue
        lost = _missing_self_calls(classes, ref, node)
        if lost:
            problems.append(
                (
                    member,
                    f"{ref.name}.{member} calls self.{cast(ast.Attribute, lost[0].func).attr}, which {ref.name} lacks",
                    classes.location(ref, lost[0].lineno),
                )
            )
            continue
        forwards = _forwards(node, helpers, inner_attrs, inner_classes)
        names = {f.name for f in forwards}
        if len(names) != 1:
            continue
        forward = forwards[0]
        where = classes.location(ref, forward.node.lineno)
        if forward.name != member:
            if forward.name in own:  # a copied forward left with its sibling's name
                problems.append(
                    (
                        member,
                        f"{ref.name}.{member} forwards to {forward.name} of its inner model "
                        f"(which {ref.name} provides as a member of its own), not to {member}",
                        where,
                    )
                )
            continue
        if forward.call is not None and (wrong := _argument_problem(forward.call, params, node)):
            problems.append((member, f"{ref.name}.{member} forwards to {member} of its inner model {wrong}", where))
    return problems


def _missing_self_calls(classes: ClassIndex, ref: ClassRef, node: ast.AST) -> list[ast.Call]:
    """Calls ``self.m(...)`` in a forward where the class (MRO and all) has no ``m``."""
    return [
        c
        for c in ast.walk(node)
        if isinstance(c, ast.Call)
        and isinstance(c.func, ast.Attribute)
        and isinstance(c.func.value, ast.Name)
        and c.func.value.id == "self"
        and classes.lookup(ref, c.func.attr).status == "missing"
    ]


def _class_node(tree: SourceTree, ref: ClassRef) -> ast.ClassDef | None:
    mod = tree.module(ref.module)
    if mod is None:
        return None
    return next((n for n in mod.ast.body if isinstance(n, ast.ClassDef) and n.name == ref.name), None)


def _by_name_helpers(cls: ast.ClassDef) -> dict[str, int]:
    """Methods that look a member up by a name they are given: name -> that parameter's index."""
    helpers = {}
    for fn in cls.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        params = [a.arg for a in fn.args.args[1:]]
        for call in ast.walk(fn):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id == "getattr"
                and len(call.args) > 1
                and isinstance(call.args[1], ast.Name)
                and call.args[1].id in params
            ):
                helpers[fn.name] = params.index(call.args[1].id)
    return helpers


def _members(cls: ast.ClassDef):
    """(member name, the code that provides it, its parameters) for methods and ``self.x = ...``."""
    for fn in cls.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if fn.name.startswith("__") and fn.name.endswith("__"):
            for stmt in ast.walk(fn):  # attributes set in __init__ and friends
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                    chain = self_chain(stmt.targets[0], fn.args.args[0].arg if fn.args.args else "self")
                    if chain and len(chain) == 1:
                        yield chain[0], stmt.value, []
            continue
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) != 1:  # a member that computes something is not a forward
            continue
        args = fn.args
        static = any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod") for d in fn.decorator_list)
        # a static or class method may ignore an argument on purpose (a config the inner class
        # does not take); an instance method that forwards itself has no reason to
        params = (
            [] if static else [a.arg for a in [*args.posonlyargs, *args.args][1:]] + [a.arg for a in args.kwonlyargs]
        )
        yield fn.name, fn, params


def _forwards(node: ast.AST, helpers: dict[str, int], inner_attrs: set[str], inner_classes: set[str]) -> list[Forward]:
    """The forwards that *are* what the member gives: returned, called as a statement, or assigned;
    ``self.inner.model.embed_tokens`` reaches ``model`` only on the way to something else."""
    found = []
    for value in _results(node):
        call = value if isinstance(value, ast.Call) else None
        for target, made in ((value, None), (call.func if call else None, call)):
            if target is None:
                continue
            name = None
            if isinstance(target, ast.Call):
                name = _named_lookup(target, helpers, inner_attrs, inner_classes)
            elif isinstance(target, ast.Attribute) and _is_inner(target.value, inner_attrs, inner_classes):
                name = target.attr
            if name is not None:
                found.append(Forward(name, target, made))
    return found


def _results(node: ast.AST) -> list[ast.expr]:
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [cast(ast.expr, node)]  # the value of ``self.x = ...``
    return [s.value for s in ast.walk(node) if isinstance(s, (ast.Return, ast.Expr)) and s.value is not None]


def _named_lookup(call: ast.Call, helpers, inner_attrs, inner_classes) -> str | None:
    func = call.func
    position = None
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "self"
        and func.attr in helpers
    ):
        position = helpers[func.attr]
    elif (
        isinstance(func, ast.Name)
        and func.id == "getattr"
        and call.args
        and _is_inner(call.args[0], inner_attrs, inner_classes)
    ):
        position = 1
    arg = call.args[position] if position is not None and len(call.args) > position else None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    return None


def _is_inner(node: ast.expr, inner_attrs: set[str], inner_classes: set[str]) -> bool:
    """``self.<inner>``, or the inner model's class by name (a classmethod's forward)."""
    if isinstance(node, ast.Name):
        return node.id in inner_classes
    chain = self_chain(node, "self")
    return chain is not None and len(chain) == 1 and chain[0] in inner_attrs


def _argument_problem(call: ast.Call, params: list[str], member: ast.AST) -> str | None:
    """A parameter the member never uses, in the forward's call or anywhere else (a wrapper may
    hand on a value it made from it), or bare parameters passed in another order."""
    used = {n.id for n in ast.walk(member) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    dropped = [p for p in params if p not in used]
    if dropped:
        return f"without its parameter{'s' if len(dropped) > 1 else ''} {', '.join(dropped)}"
    bare = [a.id for a in call.args if isinstance(a, ast.Name) and a.id in params]
    if len(bare) == len(call.args) and bare != [p for p in params if p in bare]:
        return f"with its parameters in another order ({', '.join(bare)}; it takes {', '.join(params)})"
    return None


def inner_reads(tree: SourceTree, classes: ClassIndex, ref: ClassRef, member: str) -> list[tuple[str, str, int]]:
    """(inner attribute, name, line) for each ``self.<inner>.<name>`` the wrapper's own method
    ``member`` reads on an inner model (only its own body: cheap, one function parsed)."""
    co = classes.outline(ref)
    m = co.members.get(member) if co else None
    mod = tree.module(ref.module)
    if m is None or not m.start or mod is None:
        return []
    inner_attrs = {inner.attr for inner in classes.inner_models(ref) if inner.lm}
    if not inner_attrs or not any(f"self.{a}." in mod.text(m.start, m.end) for a in inner_attrs):
        return []
    node = mod.segment(m.start, m.end)
    reads = []
    for n in ast.walk(node) if node is not None else ():
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) and _is_inner(n.value, inner_attrs, set()):
            reads.append((cast(ast.Attribute, n.value).attr, n.attr, n.lineno))  # _is_inner: self.<inner>
    return reads

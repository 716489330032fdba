"""Outlines: what a module defines (classes, their members and inner models, functions, imports),
extracted once per file from its AST and cached by content hash (``tree.SourceTree``).

No knowledge of the tree around the module: ``tree.py`` resolves the names an outline records.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import cast


def parameter_names(args: ast.arguments) -> list[str]:
    """Every name a def binds from its arguments, ``*args`` and ``**kwargs`` included."""
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    return names + [a.arg for a in (args.vararg, args.kwarg) if a is not None]


def self_parameter(fn) -> tuple[str | None, bool]:
    """(the name a method binds its instance or class to, whether it is the class): the first
    positional parameter, unless the method is a staticmethod."""
    decorators = {
        (dotted(d.func if isinstance(d, ast.Call) else d) or "").rpartition(".")[2] for d in fn.decorator_list
    }
    positional = fn.args.posonlyargs + fn.args.args
    if "staticmethod" in decorators or not positional:
        return None, False
    return positional[0].arg, "classmethod" in decorators


def dotted(node: ast.AST | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None (calls, subscripts, ...)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    if isinstance(node, ast.Subscript):  # Generic[T] -> Generic
        return dotted(node.value)
    return None


# ---------------------------------------------------------------- outlines (cached per file)


@dataclass
class Member:
    """One way a class provides a name."""

    kind: str  # method | property | classmethod | staticmethod | class-attr | self-attr | annotation | class
    line: int
    where: str = ""  # for self-attr: the method that assigns it
    conditional: bool = False  # assigned only under an if/try
    params: tuple[str, ...] = ()  # methods: parameter names (without self/cls)
    varkw: bool = False  # methods: accepts **kwargs
    start: int = 0  # functions: first line (decorators included) and last line
    end: int = 0


@dataclass
class ClassOutline:
    name: str
    line: int
    bases: list[str | None]  # dotted base expressions; None for something unresolvable
    members: dict[str, Member] = field(default_factory=dict)
    # self.<attr> = <ctor>(...) in any method: attr -> candidate constructor expressions
    # ("?" marks one we could not resolve statically, e.g. a class picked at runtime).
    holds: dict[str, list[str]] = field(default_factory=dict)
    holds_line: dict[str, int] = field(default_factory=dict)
    getattr_forward: str | None = None  # __getattr__ forwards to self.<attr> ("?" = unknown)
    sets_logits_processor: bool = False
    end: int = 0  # last line of the class body
    decorators: list[str] = field(default_factory=list)  # dotted class decorators ("?" = a call etc.)
    # attributes set under a computed name: setattr(self, name, ...), self.__dict__ / vars(self) edits
    dynamic_attrs: bool = False


@dataclass
class ModuleOutline:
    name: str
    path: str  # relative to the tree root, e.g. python/sglang/srt/models/kimi_k25.py
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # local -> (module, attr)
    aliases: dict[str, str] = field(default_factory=dict)  # Foo = a.b.Bar (dotted right-hand side)
    classes: dict[str, ClassOutline] = field(default_factory=dict)
    functions: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (start, end)
    entry: list[str] = field(default_factory=list)  # EntryClass names (dotted)
    star_imports: list[str] = field(default_factory=list)
    names: set[str] = field(default_factory=set)  # every name bound at the top level
    dynamic: bool = False  # module __getattr__ or globals() writes: any name may exist


# ---------------------------------------------------------------- outline extraction


def absolute_module(package: str, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".")
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    base = ".".join(parts)
    return f"{base}.{module}" if module else base


def top_statements(body):
    """Top-level statements, descending into if/try/with blocks (conditional definitions)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            yield from top_statements(stmt.body)
            yield from top_statements(stmt.orelse)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            yield from top_statements(stmt.body)
            for h in stmt.handlers:
                yield from top_statements(h.body)
            yield from top_statements(stmt.orelse)
            yield from top_statements(stmt.finalbody)
        elif isinstance(stmt, (ast.With,)):
            yield from top_statements(stmt.body)
        else:
            yield stmt


def build_outline(mod) -> ModuleOutline:
    out = ModuleOutline(mod.name, mod.relpath)
    package = mod.package
    scan_globals = "global " in mod.source
    for stmt in top_statements(mod.ast.body):
        _bind_names(out, stmt)
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                if a.asname:
                    out.imports[a.asname] = (a.name, None)
                else:
                    head = a.name.split(".")[0]
                    out.imports.setdefault(head, (head, None))
        elif isinstance(stmt, ast.ImportFrom):
            target = absolute_module(package, stmt.level, stmt.module)
            for a in stmt.names:
                if a.name == "*":
                    out.star_imports.append(target)
                else:
                    out.imports[a.asname or a.name] = (target, a.name)
        elif isinstance(stmt, ast.ClassDef):
            out.classes.setdefault(stmt.name, outline_class(stmt, package))
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.functions.setdefault(stmt.name, (_start(stmt), cast(int, stmt.end_lineno)))  # parsed: set
            if scan_globals:
                out.names.update(_global_names(stmt))
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            value = stmt.value
            for t in targets:
                if not isinstance(t, ast.Name):
                    continue
                if t.id == "EntryClass" and value is not None:
                    elts = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
                    out.entry = [d for d in (dotted(e) for e in elts) if d]
                    continue
                d = dotted(value) if value is not None else None
                if d and t.id not in out.classes and t.id not in out.functions:
                    out.aliases[t.id] = d
    return out


_METHOD_KINDS = {
    "property": "property",
    "cached_property": "property",
    "classmethod": "classmethod",
    "staticmethod": "staticmethod",
}


def outline_class(node: ast.ClassDef, package: str = "") -> ClassOutline:
    co = ClassOutline(
        node.name,
        node.lineno,
        [dotted(b) for b in node.bases],
        end=node.end_lineno or 0,
        decorators=[dotted(d.func if isinstance(d, ast.Call) else d) or "?" for d in node.decorator_list],
    )
    for stmt in top_statements(node.body):  # also members defined under if/try in the class body
        if isinstance(stmt, ast.ClassDef):  # a nested class: self.Inner / cls.Inner
            co.members.setdefault(stmt.name, Member("class", stmt.lineno))
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            kind: str | None = "method"
            for dec in stmt.decorator_list:
                name = (dotted(dec) or "").rpartition(".")[2]
                if name in _METHOD_KINDS:
                    kind = _METHOD_KINDS[name]
                elif name in ("setter", "deleter"):
                    kind = None  # the getter already registered the property
            if kind is None:
                continue
            args = stmt.args
            params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
            if kind != "staticmethod" and params:
                params = params[1:]
            co.members.setdefault(
                stmt.name,
                Member(
                    kind,
                    stmt.lineno,
                    params=tuple(params),
                    varkw=args.kwarg is not None,
                    start=_start(stmt),
                    end=cast(int, stmt.end_lineno),
                ),
            )
            if stmt.name == "__getattr__":
                co.getattr_forward = _getattr_target(stmt)
            _scan_method(co, stmt, package)
        elif isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                for n in _names(t):
                    co.members.setdefault(n, Member("class-attr", stmt.lineno))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            kind = "class-attr" if stmt.value is not None else "annotation"
            co.members.setdefault(stmt.target.id, Member(kind, stmt.lineno))
    return co


def bound_names(stmt) -> set[str]:
    """The module-level names a top-level statement binds."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"}
    names = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Global):
            names.update(node.names)
    return names


def _bind_names(out: ModuleOutline, stmt) -> None:
    """Record the names a top-level statement binds (and whether names are made dynamically)."""
    out.names |= bound_names(stmt)
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "__getattr__":
        out.dynamic = True  # PEP 562 module __getattr__
    elif not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
        out.dynamic |= any(
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("globals", "vars")
            for node in ast.walk(stmt)
        )


def _global_names(fn) -> set[str]:
    """Names a function declares ``global`` (so its assignments bind module attributes)."""
    return {n for node in ast.walk(fn) if isinstance(node, ast.Global) for n in node.names}


def _start(fn) -> int:
    return min([fn.lineno] + [d.lineno for d in fn.decorator_list])


def _names(target):
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for e in target.elts:
            yield from _names(e)


def _getattr_target(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """``return getattr(self.inner, name)`` -> ``inner``; anything else -> ``?``."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
            if (
                node.args
                and isinstance(node.args[0], ast.Attribute)
                and isinstance(node.args[0].value, ast.Name)
                and node.args[0].value.id == "self"
            ):
                return node.args[0].attr
    return "?"


def _scan_method(co: ClassOutline, fn: ast.FunctionDef | ast.AsyncFunctionDef, package: str = "") -> None:
    """Record ``self.x = ...`` (and setattr(self, "x", ...)) with the constructors they call."""
    if not fn.args.args:
        return
    me = fn.args.args[0].arg
    local: dict[str, list[ast.AST]] = {}
    defaults = _param_defaults(fn)

    def visit(stmts, conditional):
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, ast.ImportFrom):  # lazy import inside the method
                target = absolute_module(package, stmt.level, stmt.module)
                for a in stmt.names:
                    local.setdefault(a.asname or a.name, []).append(ast.parse(f"{target}.{a.name}", mode="eval").body)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    for elt in _flatten_targets(t):
                        if isinstance(elt, ast.Name) and stmt.value is not None:
                            local.setdefault(elt.id, []).append(stmt.value)
                        elif isinstance(elt, ast.Attribute) and isinstance(elt.value, ast.Name) and elt.value.id == me:
                            if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
                                continue
                            _add_self_attr(co, elt.attr, stmt, fn.name, conditional)
                            if t is elt and stmt.value is not None:
                                _add_holds(co, elt.attr, stmt.value, local, defaults, stmt.lineno)
                            if elt.attr == "logits_processor":
                                co.sets_logits_processor = True
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                call = stmt.value
                if (
                    isinstance(call.func, ast.Name)
                    and call.func.id == "setattr"
                    and len(call.args) >= 2
                    and isinstance(call.args[0], ast.Name)
                    and call.args[0].id == me
                ):
                    if isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str):
                        _add_self_attr(co, call.args[1].value, stmt, fn.name, conditional)
                    else:
                        co.dynamic_attrs = True
            if not co.dynamic_attrs and _edits_dict(stmt, me):
                co.dynamic_attrs = True
            if isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While)):
                visit(stmt.body, True)
                visit(stmt.orelse, True)
            elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
                visit(stmt.body, conditional)
                for h in stmt.handlers:
                    visit(h.body, True)
                visit(stmt.orelse, True)
                visit(stmt.finalbody, conditional)
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                visit(stmt.body, conditional)
            elif isinstance(stmt, ast.Match):
                for case in stmt.cases:
                    visit(case.body, True)

    visit(fn.body, False)


def _edits_dict(stmt, me: str) -> bool:
    """``self.__dict__.update(...)`` / ``self.__dict__[k] = v`` / ``vars(self).update(...)``."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        node: ast.expr | None = stmt.value.func
        node = node.value if isinstance(node, ast.Attribute) else None
    elif isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Subscript):
        node = stmt.targets[0].value
    else:
        return False
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        return isinstance(node.value, ast.Name) and node.value.id == me
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "vars"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == me
    )


def _flatten_targets(t):
    if isinstance(t, (ast.Tuple, ast.List)):
        for e in t.elts:
            yield from _flatten_targets(e)
    elif isinstance(t, ast.Starred):
        yield from _flatten_targets(t.value)
    else:
        yield t


def _param_defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, ast.expr]:
    args = fn.args
    out: dict[str, ast.expr] = {}
    d: ast.expr | None  # a keyword-only parameter's default may be missing (None)
    pos = args.posonlyargs + args.args
    for a, d in zip(pos[len(pos) - len(args.defaults) :], args.defaults):
        out[a.arg] = d
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        if d is not None:
            out[a.arg] = d
    return out


def _add_self_attr(co, attr, stmt, where, conditional):
    current = co.members.get(attr)
    if current is None or (current.kind == "self-attr" and current.conditional and not conditional):
        co.members[attr] = Member("self-attr", stmt.lineno, where=where, conditional=conditional)


def _add_holds(co, attr, value, local, defaults, line):
    cands = _ctor_candidates(value, local, defaults, depth=0)
    if cands is None:
        return
    bucket = co.holds.setdefault(attr, [])
    for c in cands:
        if c not in bucket:
            bucket.append(c)
    co.holds_line.setdefault(attr, line)


def _ctor_candidates(value, local, defaults, depth) -> list[str] | None:
    """Which classes ``value`` (an assigned expression) constructs; None when it is no call."""
    if depth > 4:
        return ["?"]
    if isinstance(value, ast.IfExp):
        a = _ctor_candidates(value.body, local, defaults, depth + 1) or []
        b = _ctor_candidates(value.orelse, local, defaults, depth + 1) or []
        return (a + b) or None
    if not isinstance(value, ast.Call):
        return None
    return _class_candidates(value.func, local, defaults, depth)


def _class_candidates(func, local, defaults, depth) -> list[str]:
    d = dotted(func)
    if isinstance(func, ast.Name):
        if func.id in local:
            out = []
            for v in local[func.id]:
                out.extend(_class_values(v, local, defaults, depth + 1))
            return out or ["?"]
        if func.id in defaults:
            return _class_values(defaults[func.id], local, defaults, depth + 1)
        return [func.id]
    if d is not None and not d.startswith("self."):
        return [d]
    return ["?"]


def _class_values(v, local, defaults, depth) -> list[str]:
    """Classes a local variable may hold: a name, either side of a conditional, a dict's values."""
    if depth > 4:
        return ["?"]
    if isinstance(v, (ast.Name, ast.Attribute)):
        if isinstance(v, ast.Name) and v.id in local and depth < 4 and v.id not in ("self", "cls"):
            out = []
            for w in local[v.id]:
                out.extend(_class_values(w, local, defaults, depth + 1))
            return out or ["?"]
        d = dotted(v)
        return [d] if d and not d.startswith("self.") else ["?"]
    if isinstance(v, ast.IfExp):
        return _class_values(v.body, local, defaults, depth + 1) + _class_values(v.orelse, local, defaults, depth + 1)
    if isinstance(v, ast.Subscript) and isinstance(v.value, ast.Dict):
        out = []
        for val in v.value.values:
            out.extend(_class_values(val, local, defaults, depth + 1))
        return out or ["?"]
    if isinstance(v, ast.Constant) and v.value is None:
        return []
    return ["?"]

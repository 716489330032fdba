"""One file of a merged tree, read for the suspect scan (:mod:`.merge`): the statements that
hold added lines, with the scope each sits in (its class and ``self``, enclosing locals, the
exceptions an enclosing ``try`` swallows), and rules 1 and 2 on them: ``self.X`` and module
attributes and imports that must resolve in the new release. Calls go to :mod:`.calls`."""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import replace
from typing import cast

from sglpatch.contract.flow.guards import caught as guard_caught
from sglpatch.contract.index.classes import ClassRef
from sglpatch.contract.parse.outline import ClassOutline, absolute_module, dotted, parameter_names, self_parameter
from sglpatch.contract.parse.tree import PACKAGE, Module
from sglpatch.contract.suspect.calls import CallChecks
from sglpatch.contract.suspect.model import Run, Suspect, View, _Call, _Scope


class Scan(CallChecks):
    """Visits one module, only the statements that hold added lines (``lines``), or all of it
    when collecting the calls of one name (``collect``)."""

    def __init__(self, run: Run, view: View, mod: Module, lines: list[int] | None, collect: str | None = None):
        self.run_ = run
        self.view = view
        self.mod = mod
        self.lines = sorted(lines) if lines is not None else None
        self.collect = collect
        self.calls: list[_Call] = []

    def run(self) -> None:
        for stmt in self.mod.ast.body:
            self.visit(stmt, _Scope())

    # ------------------------------------------------------------ traversal

    def touches(self, node) -> bool:
        if self.lines is None:
            return True
        start = getattr(node, "lineno", None)
        if start is None:
            return True
        end = getattr(node, "end_lineno", None) or start
        i = bisect.bisect_left(self.lines, start)
        return i < len(self.lines) and self.lines[i] <= end

    def added(self, line: int) -> bool:
        if self.lines is None:
            return True
        i = bisect.bisect_left(self.lines, line)
        return i < len(self.lines) and self.lines[i] == line

    def visit(self, node, scope: _Scope) -> None:
        if not self.touches(node):
            return
        if isinstance(node, ast.ClassDef):
            top = scope.where == "<module>" and not scope.class_body
            cls = ClassRef(self.mod.name, node.name) if top and node.name in self.mod.outline.classes else None
            inner = _Scope(cls=cls, locals=scope.locals, where=node.name if top else scope.where, class_body=True)
            for d in node.decorator_list + node.bases + [k.value for k in node.keywords]:
                self.visit(d, scope)
            for stmt in node.body:
                self.visit(stmt, inner)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            self.function(node, scope)
            return
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            caught = set()
            for h in node.handlers:
                caught.update(guard_caught(h.type))
            guarded = replace(scope, caught=scope.caught | frozenset(caught))
            for stmt in node.body:
                self.visit(stmt, guarded)
            for part in node.handlers + node.orelse + node.finalbody:
                self.visit(part, scope)
            return
        self.check(node, scope)
        for child in ast.iter_child_nodes(node):
            self.visit(child, scope)

    def function(self, node, scope: _Scope) -> None:
        args = node.args
        params = parameter_names(args)
        if not isinstance(node, ast.Lambda):
            for d in node.decorator_list:
                self.visit(d, scope)
        for d in args.defaults + [d for d in args.kw_defaults if d is not None]:
            self.visit(d, scope)
        inner = _Scope(
            scope.cls,
            scope.self_name,
            scope.on_class,
            scope.locals,
            scope.where,
            scope.span,
            self_class=scope.self_class,
        )  # a try around a def does not guard its body
        if scope.class_body and not isinstance(node, ast.Lambda):
            inner.self_name, inner.on_class, inner.self_class = None, False, None
            if scope.cls is not None:  # a method of a top-level class
                member = cast(ClassOutline, self.view.classes.outline(scope.cls)).members.get(node.name)
                inner.where = f"{scope.cls.name}.{node.name}"
                inner.span = (member.start, member.end) if member is not None and member.start else None
                inner.self_name, inner.on_class = self_parameter(node)
                if inner.self_name is not None:
                    first = (args.posonlyargs + args.args)[0]
                    note = _annotation_name(first.annotation)
                    ref = self.view.classes.resolve(self.mod.name, note) if note else None
                    inner.self_class = ref if isinstance(ref, ClassRef) else None
        elif scope.where == "<module>" and not scope.class_body and not isinstance(node, ast.Lambda):
            inner.where = node.name
            inner.span = self.mod.outline.functions.get(node.name)
        elif inner.self_name in params:
            inner.self_name = None  # a nested function or lambda rebinding the name
        bound = set(params) if inner.self_name is None else set(params) - {inner.self_name}
        body = node.body if isinstance(node.body, list) else [node.body]
        for stmt in body:
            for n in ast.walk(stmt):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    bound.add(n.id)
                elif isinstance(n, (ast.Import, ast.ImportFrom)):
                    bound.update((a.asname or a.name).split(".")[0] for a in n.names)
                elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    bound.add(n.name)
        inner.locals = scope.locals | frozenset(bound)
        for stmt in body:
            self.visit(stmt, inner)

    # ------------------------------------------------------------ checks on added nodes

    def check(self, node, scope: _Scope) -> None:
        if isinstance(node, ast.Call):
            self.call(node, scope)
        if self.collect is not None:
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)) and scope.caught & {"ImportError", "*"}:
            return  # an optional import
        if isinstance(node, ast.Attribute) and scope.caught & {"AttributeError", "*"}:
            return
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and self.added(cast(int, node.end_lineno))
        ):
            if isinstance(node.value, ast.Name) and scope.cls is not None and node.value.id == scope.self_name:
                self.self_attr(node, scope)
            else:
                self.module_attr(node, scope)
        elif isinstance(node, ast.ImportFrom) and self.added(node.lineno):
            self.import_from(node)
        elif isinstance(node, ast.Import) and self.added(node.lineno):
            for a in node.names:
                if (
                    a.name.split(".")[0] == PACKAGE
                    and self.view.tree.module(a.name) is None
                    and not self.is_dir(a.name)
                ):
                    self.report(
                        node.lineno, a.name, f"no module {a.name} in {self.view.version}" + self.old_module_note(a.name)
                    )

    def report(self, line: int, name: str, why: str) -> None:
        self.run_.found.append(Suspect(self.mod.relpath, line, name, why))

    def is_dir(self, module: str) -> bool:
        return self.view.tree.pyroot.joinpath(*module.split(".")).is_dir()

    def old_module_note(self, module: str) -> str:
        return (
            f" (removed upstream; {self.run_.old.version} has it)"
            if self.run_.old.tree.module(module) is not None
            else ""
        )

    # rule 1 --------------------------------------------------------------

    def initialises(self, ref: ClassRef) -> bool:
        """Whether a class in ``ref``'s MRO (in the tree) builds instances: ``__init__``,
        ``__new__``, ``__post_init__`` or a decorator (``@dataclass``)."""
        for c in self.view.classes.mro(ref):
            co = self.view.classes.outline(c) if isinstance(c, ClassRef) else None
            if co is not None and (co.decorators or {"__init__", "__new__", "__post_init__"} & set(co.members)):
                return True
        return False

    def self_attr(self, node: ast.Attribute, scope: _Scope) -> None:
        assert scope.cls is not None  # visit calls it only in a method of a class
        name = node.attr
        ci = self.view.classes
        if ci.resolves(scope.cls, name, on_class=scope.on_class).status != "missing":
            return
        if scope.span and re.search(r"[\"']" + re.escape(name) + r"[\"']", self.mod.text(*scope.span)):
            return  # hasattr(self, "X") / getattr(self, "X", None) guards it
        if (
            scope.self_class is not None
            and scope.self_class != scope.cls
            and ci.resolves(scope.self_class, name, on_class=scope.on_class).status != "missing"
        ):
            return  # def f(self: Scheduler): a mixin method written for its host class
        subs = ci.subclasses(scope.cls)
        if any(ci.resolves(sub, name, on_class=scope.on_class).status != "missing" for sub in subs):
            return  # a mixin or base using what its subclasses provide
        if not subs and not self.initialises(scope.cls):
            return  # never initialised by itself (a mixin or template): its users are not in view
        if self.view.assigned_from_outside(name):
            return
        called = isinstance(getattr(node, "_parent_call", None), ast.Call)
        what = "method" if called else "attribute"
        why = f"{scope.cls.name} has no {what} '{name}' in {self.view.version}"
        old = self.run_.old
        if (
            old.tree.module(scope.cls.module) is not None
            and scope.cls.name in cast(Module, old.tree.module(scope.cls.module)).outline.classes
        ):
            found = old.classes.resolves(scope.cls, name, on_class=scope.on_class)
            if found.status == "present":
                why += f" (removed upstream; {old.version} has it at {found.location or found.owner})"
            else:
                why += f" (nor in {old.version})"
        self.report(node.lineno, name, why)

    # rule 2 --------------------------------------------------------------

    def module_of(self, expr, scope: _Scope) -> str | None:
        """The sglang module an expression names (``m``, ``pkg.m``), from module-level imports."""
        d = dotted(expr)
        if d is None or d.split(".")[0] in scope.locals:
            return None
        sym = self.view.tree.resolve_dotted(self.mod.name, d)
        if sym.kind == "module" and (sym.module == PACKAGE or sym.module.startswith(PACKAGE + ".")):
            return sym.module
        return None

    def module_attr(self, node: ast.Attribute, scope: _Scope) -> None:
        module = self.module_of(node.value, scope)
        if module is None:
            return
        if self.view.tree.defines(module, node.attr) is False:
            self.report(
                node.lineno,
                f"{module}.{node.attr}",
                f"module {module} has no '{node.attr}' in {self.view.version}" + self.old_name_note(module, node.attr),
            )

    def import_from(self, node: ast.ImportFrom) -> None:
        target = absolute_module(self.mod.package, node.level, node.module)
        if not (target == PACKAGE or target.startswith(PACKAGE + ".")):
            return
        if self.view.tree.module(target) is None:
            if not self.is_dir(target):
                self.report(
                    node.lineno, target, f"no module {target} in {self.view.version}" + self.old_module_note(target)
                )
            return
        for a in node.names:
            if a.name != "*" and self.view.tree.defines(target, a.name) is False:
                self.report(
                    node.lineno,
                    a.name,
                    f"{target} has no '{a.name}' in {self.view.version}" + self.old_name_note(target, a.name),
                )

    def old_name_note(self, module: str, name: str) -> str:
        old = self.run_.old.tree
        return f" (removed upstream; {self.run_.old.version} has it)" if old.defines(module, name) else ""


def _annotation_name(node) -> str | None:
    """``Scheduler`` / ``"Scheduler"`` / ``a.Scheduler`` from an annotation."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    return dotted(node)

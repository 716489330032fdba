"""Suspect merges: a patch that merged without a conflict marker but uses what the new release lost.

After a patch is merged onto a new release, the lines it added are checked statically on the
merged tree (never imported), with the contract checker's tree index and class index
(:mod:`.tree`, :mod:`.classes`), and the same lookup of what a call runs
(``ClassIndex.method_def`` and ``callable_def``, which the contract walk's call graph uses too),
and the contract walker's reading of a def's parameters, its ``self`` and what an ``except``
catches (``outline.parameter_names``/``self_parameter``, ``guards.caught``):

1. ``self.X`` reads and ``self.X(...)`` calls (``cls.X`` in classmethods) where ``X`` resolves
   nowhere: not in the class's MRO (methods, properties, class attributes, annotations,
   ``self.X = ...``/``setattr(self, "X", ...)`` in any method), not in a subclass (mixins use
   what the concrete class sets), and not assigned from outside (``obj.X = ...``,
   ``setattr(obj, "X", ...)`` anywhere in the package). An external base (torch.nn.Module too),
   ``__getattr__``, a computed ``setattr`` or an unknown class decorator makes the answer
   *unknown*: no finding. A method that mentions ``"X"`` as a string (``hasattr(self, "X")``,
   ``getattr(self, "X", None)``) is guarded: no finding.
2. ``m.X`` where ``m`` is an sglang module (imported at module level), ``from sglang.m import X``
   and ``import sglang.m`` on added lines, where the module or ``X`` does not exist.
3. Keywords in added calls of functions, constructors and methods that resolve in the tree
   (``f(...)``, ``mod.f(...)``, ``Class(...)``, ``Class.m(...)``, ``self.m(...)``) that the callee
   does not accept (no such parameter, no ``**kwargs``). Callees with decorators other than a few
   signature-preserving ones are skipped, and so is ``self.m(k=...)`` when an override in a
   subclass accepts ``k``.
4. Call coverage. For a function ``F`` that added calls use with a keyword ``K`` (every added call
   of ``F`` passes ``K``): if ``F``'s calls in the old release all lack ``K`` and each of them is
   matched by an added call in the same enclosing function (so the patch changed every call it
   saw), every call of ``F`` in the merged tree that still lacks ``K`` is reported (upstream added
   it; the patch never saw it). Calls with ``**kwargs`` may carry ``K`` and are not reported. A
   call is one of ``F`` when it resolves to ``F``'s definition, or, for ``obj.F(...)`` whose
   receiver is not resolved, when the tree defines a function or method named ``F`` only once.

Added lines are the lines of the merged file that are not in the new release's file
(:mod:`difflib`); only Python files under ``python/sglang`` are analysed.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from .classes import ClassIndex, ClassRef
from .core import Analysis
from .guards import caught as guard_caught
from .outline import absolute_module, dotted, parameter_names, self_parameter
from .tree import PACKAGE, Module, SourceTree


@dataclass(frozen=True)
class Suspect:
    path: str      # repo-relative path in the merged tree, e.g. "python/sglang/srt/x.py"
    line: int      # 1-based line in the merged file
    name: str      # the name that does not resolve, or the function whose new call is unpatched
    why: str       # one short sentence

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.name}: {self.why}"


# Decorators that keep a function's signature as written.
SIGNATURE_DECORATORS = frozenset((
    "staticmethod", "classmethod", "abstractmethod", "lru_cache", "cache", "no_grad",
    "inference_mode", "contextmanager", "asynccontextmanager", "override", "final",
    "cached_property", "property"))


def added_lines(new_file: Path | None, merged_file: Path) -> list[int]:
    """1-based numbers of the merged file's lines that the new release's file lacks."""
    merged = merged_file.read_bytes().decode("utf-8", errors="replace").splitlines()
    base = [] if new_file is None or not new_file.is_file() else \
        new_file.read_bytes().decode("utf-8", errors="replace").splitlines()
    out = []
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, base, merged, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            out.extend(range(j1 + 1, j2 + 1))
    return out


def find_suspects(old_tree: Path, new_tree: Path, merged_tree: Path, files: list[str]) -> list[Suspect]:
    """old_tree: pristine old release; new_tree: pristine new release; merged_tree: the new release
    with the patch merged; files: repo-relative paths the patch touches. Trees are upstream-shaped
    (python/sglang/...)."""
    run = _Run(Path(old_tree), Path(new_tree), Path(merged_tree))
    for rel in files:
        if not rel.endswith(".py") or not (run.merged.path / rel).is_file():
            continue
        mod = run.merged.tree.module_for_relpath(rel)
        if mod is None:
            continue
        lines = added_lines(run.new.path / rel, run.merged.path / rel)
        if lines:
            _Scan(run, run.merged, mod, lines).run()
    run.coverage()
    seen, out = set(), []
    for s in sorted(run.found, key=lambda s: (s.path, s.line, s.name, s.why)):
        if (s.path, s.line, s.name) not in seen:
            seen.add((s.path, s.line, s.name))
            out.append(s)
    return out


# ---------------------------------------------------------------- per-tree views

class _View:
    """One tree: the contract checker's module and class index, plus what this analysis caches."""

    def __init__(self, path: Path):
        self.an = Analysis(path, cache=False)
        self.path = self.an.path
        self.tree: SourceTree = self.an.tree
        self.classes: ClassIndex = self.an.classes
        self.version = self.an.version() or self.path.name
        self._defs: dict[str, int] = {}
        self._assigned: dict[str, bool] = {}
        self._calls: dict[str, list] = {}

    def calls_named(self, run: "_Run", name: str) -> list["_Call"]:
        """Every call of something named ``name`` in the package (parsing only the files whose
        text has ``name(``, visiting only the statements on those lines)."""
        if name not in self._calls:
            pat = re.compile(r"\b" + re.escape(name) + r"\s*\(")
            out = []
            for mod in self.tree.grep(pat, literal=name):
                src = mod.source
                lines = sorted({src.count("\n", 0, m.start()) + 1 for m in pat.finditer(src)})
                scan = _Scan(run, self, mod, lines, collect=name)
                scan.run()
                out.extend(scan.calls)
            self._calls[name] = out
        return self._calls[name]

    def def_count(self, name: str) -> int:
        """How many ``def name(`` the package holds (functions and methods)."""
        if name not in self._defs:
            pat = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+" + re.escape(name) + r"[ \t]*\(", re.M)
            self._defs[name] = sum(len(pat.findall(m.source)) for m in self.tree.grep(pat, literal=name))
        return self._defs[name]

    def assigned_from_outside(self, name: str) -> bool:
        """``obj.name = ...`` (obj not ``self``) or ``setattr(obj, "name", ...)`` somewhere."""
        if name not in self._assigned:
            pat = re.compile(r"(?<!\bself)\." + re.escape(name) + r"[ \t]*(?::[^=\n]+)?=(?!=)"
                             r"|setattr\([^,\n]+,[ \t]*[\"']" + re.escape(name) + r"[\"']")
            self._assigned[name] = bool(self.tree.grep(pat, literal=name))
        return self._assigned[name]


@dataclass
class _Scope:
    cls: ClassRef | None = None      # the class whose method this is (top-level classes only)
    self_name: str | None = None     # "self" (or "cls" in a classmethod)
    on_class: bool = False
    locals: frozenset = frozenset()  # names bound in enclosing functions
    where: str = "<module>"          # enclosing outlined definition: "Class.method" / "func"
    span: tuple[int, int] | None = None  # its lines (for the string-mention guard)
    class_body: bool = False         # directly in a class body (a def here is a method)
    self_class: ClassRef | None = None  # the class the self parameter is annotated with
    caught: frozenset = frozenset()  # exceptions an enclosing try in this function swallows


@dataclass
class _Call:
    path: str
    line: int
    name: str
    identity: str | None  # qualified definition it resolves to, None when not resolved
    keywords: frozenset
    splat: bool           # passes **kwargs
    where: str


class _Run:
    def __init__(self, old: Path, new: Path, merged: Path):
        self.old_path = old
        self._old: _View | None = None
        self.new = _View(new)
        self.merged = _View(merged)
        self.found: list[Suspect] = []
        self.patched: list[_Call] = []

    @property
    def old(self) -> _View:
        if self._old is None:
            self._old = _View(self.old_path)
        return self._old

    # ------------------------------------------------------------ rule 4: call coverage

    def coverage(self) -> None:
        by_name: dict[str, list[_Call]] = {}
        for c in self.patched:
            by_name.setdefault(c.name, []).append(c)
        for name, calls in sorted(by_name.items()):
            keys = frozenset.intersection(*(c.keywords for c in calls))
            if not keys:
                continue
            ids = {c.identity for c in calls if c.identity}
            if "<external>" in ids:
                continue
            if len(ids) > 1:
                continue
            identity = next(iter(ids)) if ids else None
            if identity is None and self.merged.def_count(name) != 1:
                continue  # obj.F(...) with an unresolved receiver and F not unique: cannot tell
            old_calls = self.calls_of(self.old, name, identity)
            if not old_calls:
                continue
            for k in sorted(keys):
                if any(k in c.keywords for c in old_calls):
                    continue  # not this patch's change
                need = Counter(c.where for c in old_calls)
                have = Counter(c.where for c in calls if k in c.keywords)
                if any(have[w] < n for w, n in need.items()):
                    continue  # the patch left some old calls as they were: not "every call"
                patched_lines = {(c.path, c.line) for c in calls}
                for c in self.calls_of(self.merged, name, identity):
                    if k in c.keywords or c.splat or (c.path, c.line) in patched_lines:
                        continue
                    self.found.append(Suspect(
                        c.path, c.line, name,
                        f"call of {name} without {k}=: the patch adds {k}= to all {len(old_calls)} "
                        f"call(s) of {name} in {self.old.version}; this one (in {c.where}) is not one of them"))

    def calls_of(self, view: _View, name: str, identity: str | None) -> list[_Call]:
        """Calls of ``name`` in ``view``'s package that are calls of the definition ``identity``."""
        unique = view.def_count(name) == 1
        out = []
        for c in view.calls_named(self, name):
            if identity is not None:
                same = c.identity == identity or (c.identity is None and unique)
            else:  # the patched calls did not resolve: F is known only as the one def of its name
                same = unique and c.identity != "<external>"
            if same:
                out.append(c)
        return out


# ---------------------------------------------------------------- one file

class _Scan:
    """Visits one module, only the statements that hold added lines (``lines``), or all of it
    when collecting the calls of one name (``collect``)."""

    def __init__(self, run: _Run, view: _View, mod: Module, lines: list[int] | None,
                 collect: str | None = None):
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
            inner = _Scope(cls=cls, locals=scope.locals, where=node.name if top else scope.where,
                           class_body=True)
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
        inner = _Scope(scope.cls, scope.self_name, scope.on_class, scope.locals, scope.where, scope.span,
                       self_class=scope.self_class)  # a try around a def does not guard its body
        if scope.class_body and not isinstance(node, ast.Lambda):
            inner.self_name, inner.on_class, inner.self_class = None, False, None
            if scope.cls is not None:  # a method of a top-level class
                member = self.view.classes.outline(scope.cls).members.get(node.name)
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
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and self.added(node.end_lineno):
            if isinstance(node.value, ast.Name) and scope.cls is not None and node.value.id == scope.self_name:
                self.self_attr(node, scope)
            else:
                self.module_attr(node, scope)
        elif isinstance(node, ast.ImportFrom) and self.added(node.lineno):
            self.import_from(node)
        elif isinstance(node, ast.Import) and self.added(node.lineno):
            for a in node.names:
                if a.name.split(".")[0] == PACKAGE and self.view.tree.module(a.name) is None \
                        and not self.is_dir(a.name):
                    self.report(node.lineno, a.name, f"no module {a.name} in {self.view.version}"
                                + self.old_module_note(a.name))

    def report(self, line: int, name: str, why: str) -> None:
        self.run_.found.append(Suspect(self.mod.relpath, line, name, why))

    def is_dir(self, module: str) -> bool:
        return self.view.tree.pyroot.joinpath(*module.split(".")).is_dir()

    def old_module_note(self, module: str) -> str:
        return (f" (removed upstream; {self.run_.old.version} has it)"
                if self.run_.old.tree.module(module) is not None else "")

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
        name = node.attr
        ci = self.view.classes
        if ci.resolves(scope.cls, name, on_class=scope.on_class).status != "missing":
            return
        if scope.span and re.search(r"[\"']" + re.escape(name) + r"[\"']", self.mod.text(*scope.span)):
            return  # hasattr(self, "X") / getattr(self, "X", None) guards it
        if scope.self_class is not None and scope.self_class != scope.cls and ci.resolves(
                scope.self_class, name, on_class=scope.on_class).status != "missing":
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
        if old.tree.module(scope.cls.module) is not None and scope.cls.name in old.tree.module(
                scope.cls.module).outline.classes:
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
            self.report(node.lineno, f"{module}.{node.attr}",
                        f"module {module} has no '{node.attr}' in {self.view.version}"
                        + self.old_name_note(module, node.attr))

    def import_from(self, node: ast.ImportFrom) -> None:
        target = absolute_module(self.mod.package, node.level, node.module)
        if not (target == PACKAGE or target.startswith(PACKAGE + ".")):
            return
        if self.view.tree.module(target) is None:
            if not self.is_dir(target):
                self.report(node.lineno, target, f"no module {target} in {self.view.version}"
                            + self.old_module_note(target))
            return
        for a in node.names:
            if a.name != "*" and self.view.tree.defines(target, a.name) is False:
                self.report(node.lineno, a.name, f"{target} has no '{a.name}' in {self.view.version}"
                            + self.old_name_note(target, a.name))

    def old_name_note(self, module: str, name: str) -> str:
        old = self.run_.old.tree
        return f" (removed upstream; {self.run_.old.version} has it)" if old.defines(module, name) else ""

    # rules 3 and 4 -------------------------------------------------------

    def call(self, node: ast.Call, scope: _Scope) -> None:
        if isinstance(node.func, ast.Attribute):
            node.func._parent_call = node
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name is None or (self.collect is not None and name != self.collect):
            return
        target = self.callee(node, scope)
        identity = target[0] if target else None
        if target is None and isinstance(node.func, ast.Name) and node.func.id not in scope.locals \
                and self.view.tree.resolve(self.mod.name, node.func.id).kind == "external":
            identity = "<external>"  # a library function that happens to share the name
        keywords = frozenset(k.arg for k in node.keywords if k.arg)
        splat = any(k.arg is None for k in node.keywords)
        call = _Call(self.mod.relpath, node.lineno, name, identity, keywords, splat, scope.where)
        if self.collect is not None:
            self.calls.append(call)
            return
        added_kw = [k for k in node.keywords if k.arg and self.added(k.lineno)]
        if self.added(node.lineno) or added_kw:
            self.run_.patched.append(call)
        if target is None or not added_kw:
            return
        qual, fn, override_check = target
        accepts = _accepts(fn)
        if accepts is None:
            return
        for k in added_kw:
            if k.arg in accepts:
                continue
            if override_check is not None and override_check(k.arg):
                continue
            why = f"{_short(qual)}() has no parameter '{k.arg}' (and no **kwargs) in {self.view.version}"
            old_target = self.old_callee(qual)
            old_accepts = _accepts(old_target) if old_target is not None else set()
            if old_accepts is None or k.arg in old_accepts:
                why += f" (removed upstream; {self.run_.old.version} accepts it)"
            self.report(k.lineno, k.arg, why)

    def callee(self, node: ast.Call, scope: _Scope):
        """(qualified name, FunctionDef, override check or None) of a call that resolves in the tree."""
        f = node.func
        tree, ci = self.view.tree, self.view.classes
        if isinstance(f, ast.Name):
            if f.id in scope.locals:
                return None
            return self.from_symbol(tree.resolve(self.mod.name, f.id))
        if not isinstance(f, ast.Attribute):
            return None
        recv = f.value
        if isinstance(recv, ast.Name) and scope.cls is not None and recv.id == scope.self_name:
            found = self.method(scope.cls, f.attr)
            if found is None:
                return None
            subs = ci.subclasses(scope.cls)

            def override_accepts(kw, cls=scope.cls, attr=f.attr):
                for sub in subs:
                    m = self.method(sub, attr)
                    if m is not None and m[1] is not found[1]:
                        acc = _accepts(m[1])
                        if acc is None or kw in acc:
                            return True
                return False
            return found[0], found[1], override_accepts
        d = dotted(recv)
        if d is None or d.split(".")[0] in scope.locals or d.split(".")[0] in ("self", "cls"):
            return None
        sym = tree.resolve_dotted(self.mod.name, d)
        if sym.kind == "module":
            return self.from_symbol(tree.resolve(sym.module, f.attr))
        if sym.kind == "class":
            found = self.method(ClassRef(sym.module, sym.name), f.attr)
            if found is not None:
                return found[0], found[1], None
        return None

    def from_symbol(self, sym):
        target = self.view.classes.callable_def(sym, past_external=False)
        if target is None:
            return None
        _, owner, name, fn = target
        if owner is None:
            return sym.qualname, fn, None
        ref = ClassRef(sym.module, sym.name)
        if self.generated_init(ref, f"{owner.qualname}.{name}"):
            return None
        return f"{sym.module}.{sym.name}", fn, None

    def generated_init(self, ref: ClassRef, init: str) -> bool:
        """A decorated class (``@dataclass``...) or ``__new__`` between ``ref`` and the ``__init__``
        found: the constructor's real signature is not the one written."""
        for c in self.view.classes.mro(ref):
            if not isinstance(c, ClassRef):
                return True
            co = self.view.classes.outline(c)
            if co is None or co.decorators or "__new__" in co.members:
                return True
            if init.startswith(c.qualname + "."):
                return False
        return True

    def method(self, ref: ClassRef, name: str):
        """(qualified owner.method, FunctionDef) of the first definition of ``name`` in the MRO, or
        None when it is not a function (an attribute or a property shadows it) or an external base
        may define it."""
        owner, fn, member = self.view.classes.method_def(ref, name, past_external=False)
        if fn is None or member.kind == "property":
            return None
        return f"{owner.qualname}.{name}", fn

    def old_callee(self, qual: str):
        """The same definition in the old tree (by qualified name), for the 'removed upstream' note."""
        old = self.run_.old
        parts = qual.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            modname = ".".join(parts[:cut])
            mod = old.tree.module(modname)
            if mod is None:
                continue
            rest = parts[cut:]
            if len(rest) == 1:
                if rest[0] in mod.outline.functions:
                    return mod.function(rest[0])
                if rest[0] in mod.outline.classes:
                    m = mod.outline.classes[rest[0]].members.get("__init__")
                    return mod.segment(m.start, m.end) if m and m.start else None
            elif len(rest) == 2 and rest[0] in mod.outline.classes:
                m = mod.outline.classes[rest[0]].members.get(rest[1])
                return mod.segment(m.start, m.end) if m and m.start else None
            return None
        return None


def _accepts(fn) -> set[str] | None:
    """Keyword names a def accepts; None when it takes **kwargs or a decorator may change that."""
    if fn is None or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    for d in fn.decorator_list:
        name = (dotted(d.func if isinstance(d, ast.Call) else d) or "?").rpartition(".")[2]
        if name not in SIGNATURE_DECORATORS and not name.endswith(("setter", "deleter")):
            return None
    args = fn.args
    if args.kwarg is not None:
        return None
    return {a.arg for a in args.args + args.kwonlyargs}


def _annotation_name(node) -> str | None:
    """``Scheduler`` / ``"Scheduler"`` / ``a.Scheduler`` from an annotation."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    return dotted(node)


def _short(qual: str) -> str:
    parts = qual.split(".")
    return ".".join(parts[-2:]) if len(parts) >= 2 and parts[-2][:1].isupper() else parts[-1]

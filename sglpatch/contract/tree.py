"""A read-only view of an upstream-shaped SGLang tree (``python/sglang/...``) for static analysis.

Modules are found by dotted name, parsed lazily with :mod:`ast` (never imported), and names are
resolved across modules through imports, re-exports and aliases. Nothing here knows about
models or the EAGLE-3 contract; :mod:`.classes` and :mod:`.derive` build on it.
"""

from __future__ import annotations

import ast
import hashlib
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError

PACKAGE = "sglang"
SRT = "sglang.srt"
MODELS = "sglang.srt.models"

# Bump when the outline format or its extraction changes: old cache files are then ignored.
OUTLINE_VERSION = 10


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
    where: str = ""          # for self-attr: the method that assigns it
    conditional: bool = False  # assigned only under an if/try
    params: tuple[str, ...] = ()  # methods: parameter names (without self/cls)
    varkw: bool = False      # methods: accepts **kwargs
    start: int = 0           # functions: first line (decorators included) and last line
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


class Module:
    """A parsed module: its source, AST (lazily) and outline."""

    def __init__(self, tree: "SourceTree", name: str, path: Path, is_package: bool):
        self.tree = tree
        self.name = name
        self.path = path
        self.is_package = is_package
        self.relpath = os.path.relpath(str(path), str(tree.root)).replace(os.sep, "/")
        self._ast: ast.Module | None = None
        self._outline: ModuleOutline | None = None
        self._source: str | None = None
        self._lines: list[str] | None = None
        self._segments: dict[tuple[int, int], ast.AST | None] = {}

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]

    @property
    def source(self) -> str:
        if self._source is None:
            self._source = self.path.read_bytes().decode("utf-8", errors="replace")
        return self._source

    @property
    def ast(self) -> ast.Module:
        if self._ast is None:
            try:
                self._ast = ast.parse(self.source, filename=str(self.path))
            except SyntaxError as exc:
                self.tree.syntax_errors.append(f"{self.relpath}:{exc.lineno}: {exc.msg}")
                self._ast = ast.Module(body=[], type_ignores=[])
        return self._ast

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            self._lines = self.source.splitlines(keepends=True)
        return self._lines

    def text(self, start: int, end: int) -> str:
        return "".join(self.lines[start - 1: end])

    def segment(self, start: int, end: int):
        """Parse only lines start..end (one def with its decorators), keeping real line numbers.

        Far cheaper than parsing the module when one function out of a large file is needed.
        """
        key = (start, end)
        if key not in self._segments:
            text = self.text(start, end)
            first = text.lstrip("\n")
            indent = len(first) - len(first.lstrip(" \t"))
            try:
                # Blank lines in front keep the real line numbers (no renumbering walk needed);
                # "if 1:" accepts the indented body of a method as it stands.
                if indent and start >= 2:
                    node = ast.parse("\n" * (start - 2) + "if 1:\n" + text).body[0].body[0]
                elif indent:
                    node = ast.parse("if 1:\n" + text).body[0].body[0]
                    ast.increment_lineno(node, start - 2)
                else:
                    node = ast.parse("\n" * (start - 1) + text).body[0]
            except (SyntaxError, IndexError, AttributeError):
                node = None
            self._segments[key] = node
        return self._segments[key]

    def function(self, name: str):
        span = self.outline.functions.get(name)
        return self.segment(*span) if span else None

    @property
    def outline(self) -> ModuleOutline:
        if self._outline is None:
            self._outline = self.tree._outline_for(self)
        return self._outline

    def loc(self, node: ast.AST | int) -> str:
        line = node if isinstance(node, int) else getattr(node, "lineno", 0)
        return f"{self.relpath}:{line}"


class SourceTree:
    """Index of the ``sglang`` package inside an upstream-shaped tree."""

    def __init__(self, root: Path, *, cache: Path | None = None):
        root = Path(root).resolve()
        if not (root / "python" / "sglang" / "srt").is_dir():
            if (root / "sglang" / "srt").is_dir():  # given the python/ dir itself
                raise UserError(f"{root} is upstream's python/ directory, not the repository root",
                                f"pass {root.parent} (the tree must contain python/sglang/srt)")
            raise UserError(f"{root} is not an SGLang source tree (no python/sglang/srt)",
                            "pass a checkout laid out like upstream's repository")
        self.root = root
        self.pyroot = root / "python"
        self._modules: dict[str, Module | None] = {}
        self._listings: dict[tuple, list[Module]] = {}
        self.syntax_errors: list[str] = []
        self._cache_path = cache
        self._outline_cache: dict[str, ModuleOutline] | None = None
        self._outline_cache_dirty = False
        self._current: dict[str, str] = {}  # module -> cache key seen this run

    # ------------------------------------------------------------ modules

    def module(self, name: str) -> Module | None:
        if name in self._modules:
            return self._modules[name]
        mod = None
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            base = self.pyroot.joinpath(*name.split("."))
            if (base / "__init__.py").is_file():
                mod = Module(self, name, base / "__init__.py", True)
            elif base.with_suffix(".py").is_file():
                mod = Module(self, name, base.with_suffix(".py"), False)
        self._modules[name] = mod
        return mod

    def module_for_path(self, path: Path) -> Module | None:
        rel = path.resolve().relative_to(self.pyroot).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        return self.module(".".join(parts))

    def package_modules(self, package: str, *, recursive: bool = True) -> list[Module]:
        """Every module file below a package, sorted by name."""
        key = (package, recursive)
        if key in self._listings:
            return self._listings[key]
        base = os.path.join(str(self.pyroot), *package.split("."))
        mods = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
            rel = os.path.relpath(dirpath, str(self.pyroot))
            prefix = rel.replace(os.sep, ".")
            for f in sorted(filenames):
                if not f.endswith(".py"):
                    continue
                name = prefix if f == "__init__.py" else f"{prefix}.{f[:-3]}"
                if name in self._modules:
                    m = self._modules[name]
                else:
                    m = Module(self, name, Path(dirpath, f), f == "__init__.py")
                    self._modules[name] = m
                if m is not None:
                    mods.append(m)
            if not recursive:
                break
        mods.sort(key=lambda m: m.name)
        self._listings[key] = mods
        return mods

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def module_for_relpath(self, rel: str) -> Module | None:
        """The module at a repo-relative path (``python/sglang/...py``), or None outside the package."""
        path = self.root / rel
        if not rel.endswith(".py") or not path.is_file():
            return None
        try:
            return self.module_for_path(path)
        except ValueError:  # not under python/
            return None

    def grep(self, pattern, package: str = PACKAGE, literal: str | None = None) -> list[Module]:
        """Modules below ``package`` whose source matches a compiled regex (a text prefilter: read
        once per tree, never parsed here). ``literal``: a substring every match contains (a fast
        first pass)."""
        return [m for m in self.package_modules(package)
                if (literal is None or literal in m.source) and pattern.search(m.source)]

    def defines(self, module: str, name: str, _seen: set | None = None) -> bool | None:
        """Whether ``module`` (in the tree) has a top-level ``name``: a definition, assignment,
        import, re-export through a star import, or submodule. None when it cannot be told
        statically (module ``__getattr__``, ``globals()`` writes, a star import from outside)."""
        seen = _seen if _seen is not None else set()
        mod = self.module(module)
        if mod is None or module in seen:
            return None
        seen.add(module)
        out = mod.outline
        if name in out.names or name in out.imports or name in out.classes or name in out.functions:
            return True
        if mod.is_package and self.module(f"{module}.{name}") is not None:
            return True
        if mod.is_package and (mod.path.parent / name).is_dir():  # namespace sub-package
            return True
        for star in out.star_imports:
            if self.module(star) is None:
                return None
            found = self.defines(star, name, seen)
            if found is not False:
                return found
        return None if out.dynamic else False

    # ------------------------------------------------------------ name resolution

    def resolve(self, module: str, name: str, _seen: set | None = None) -> "Symbol":
        """What ``name`` means at the top level of ``module`` (following imports and aliases)."""
        seen = _seen if _seen is not None else set()
        key = (module, name)
        if key in seen:
            return Symbol("unknown", module, name)
        seen.add(key)
        mod = self.module(module)
        if mod is None:
            return Symbol("external", module, name)
        out = mod.outline
        if name in out.classes:
            return Symbol("class", module, name)
        if name in out.functions:
            return Symbol("function", module, name)
        if name in out.aliases:
            return self.resolve_dotted(module, out.aliases[name], seen)
        if name in out.imports:
            target, attr = out.imports[name]
            if attr is None:  # import a.b as name
                return Symbol("module", target, None) if self.module(target) else Symbol(
                    "external", target, None)
            if self.module(target) is None:
                if self.module(f"{target}.{attr}") is not None:  # from <namespace package> import mod
                    return Symbol("module", f"{target}.{attr}", None)
                return Symbol("external", target, attr)
            sub = f"{target}.{attr}"
            if self.module(sub) is not None and attr not in self.module(target).outline.classes:
                # ``from pkg import submodule`` unless the package defines that name itself
                inner = self.resolve(target, attr, seen)
                if inner.kind in ("class", "function"):
                    return inner
                return Symbol("module", sub, None)
            return self.resolve(target, attr, seen)
        for star in out.star_imports:
            if self.module(star) is not None:
                found = self.resolve(star, name, seen)
                if found.kind not in ("unknown", "external"):
                    return found
        if self.module(f"{module}.{name}") is not None and mod.is_package:
            return Symbol("module", f"{module}.{name}", None)
        if name in BUILTIN_NAMES:
            return Symbol("external", "builtins", name)
        return Symbol("unknown", module, name)

    def resolve_dotted(self, module: str, expr: str, _seen: set | None = None) -> "Symbol":
        """Resolve ``a.b.C`` as written in ``module`` (or an absolute ``sglang.x.y.C``)."""
        seen = _seen if _seen is not None else set()
        head, *rest = expr.split(".")
        sym = self.resolve(module, head, seen)
        if sym.kind in ("unknown", "external") and head == PACKAGE and rest:
            parts = expr.split(".")
            for cut in range(len(parts) - 1, 0, -1):
                modname = ".".join(parts[:cut])
                if self.module(modname) is not None:
                    sym = Symbol("module", modname, None)
                    rest = parts[cut:]
                    break
        for part in rest:
            if sym.kind == "module":
                sym = self.resolve(sym.module, part, seen)
            elif sym.kind == "external":
                base = sym.module if sym.name is None else f"{sym.module}.{sym.name}"
                sym = Symbol("external", base, part)
            else:
                return Symbol("unknown", module, expr)
        return sym

    # ------------------------------------------------------------ outline cache

    def _outline_for(self, mod: Module) -> ModuleOutline:
        cache = self._load_outline_cache()
        data = mod.path.read_bytes()
        digest = hashlib.sha1(data).hexdigest()
        key = f"{mod.name}:{digest}"
        self._current[mod.name] = key
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            return hit
        outline = build_outline(mod)
        if cache is not None:
            cache[key] = outline
            self._outline_cache_dirty = True
        return outline

    def _load_outline_cache(self) -> dict | None:
        if self._cache_path is None:
            return None
        if self._outline_cache is None:
            self._outline_cache = {}
            try:
                with self._cache_path.open("rb") as fh:
                    version, data = pickle.load(fh)
                if version == OUTLINE_VERSION:
                    self._outline_cache = data
            except Exception:  # missing or stale cache: rebuild silently
                pass
        return self._outline_cache

    def save_cache(self) -> None:
        if self._cache_path is None or not self._outline_cache_dirty:
            return
        # drop outlines of earlier versions of the files seen in this run (edited work trees)
        for key in [k for k in self._outline_cache
                    if k.partition(":")[0] in self._current and k != self._current[k.partition(":")[0]]]:
            del self._outline_cache[key]
        try:
            self._cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._cache_path.with_name(self._cache_path.name + f".{os.getpid()}.tmp")
            with tmp.open("wb") as fh:
                pickle.dump((OUTLINE_VERSION, self._outline_cache), fh, protocol=pickle.HIGHEST_PROTOCOL)
            tmp.replace(self._cache_path)
            self._outline_cache_dirty = False
        except OSError:
            pass  # a cache is an optimisation only

    def preload_outlines(self, modules: list[Module], workers: int = 1) -> None:
        """Outline many modules at once, in parallel processes when that pays off."""
        cache = self._load_outline_cache()
        todo = []
        for m in modules:
            if m._outline is not None:
                continue
            data = m.path.read_bytes()
            key = f"{m.name}:{hashlib.sha1(data).hexdigest()}"
            self._current[m.name] = key
            if cache is not None and key in cache:
                m._outline = cache[key]
            else:
                todo.append((m, key))
        if not todo:
            return
        if workers > 1 and len(todo) > 16:
            import concurrent.futures as cf
            import multiprocessing as mp
            jobs = [(str(m.path), m.name, m.relpath, m.is_package) for m, _ in todo]
            chunks = [jobs[i::workers * 4] for i in range(workers * 4)]
            ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
            with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
                results = {}
                for part in pool.map(_outline_job, chunks):
                    results.update(part)
            for m, key in todo:
                m._outline = results[m.name]
                if cache is not None:
                    cache[key] = m._outline
        else:
            for m, key in todo:
                m._outline = build_outline(m)
                if cache is not None:
                    cache[key] = m._outline
        if cache is not None:
            self._outline_cache_dirty = True


def _outline_job(jobs) -> dict[str, ModuleOutline]:
    out = {}
    for path, name, relpath, is_package in jobs:
        class _Stub:  # just enough of Module for build_outline
            pass
        stub = _Stub()
        stub.name, stub.relpath, stub.is_package = name, relpath, is_package
        stub.package = name if is_package else name.rpartition(".")[0]
        data = Path(path).read_bytes()
        stub.source = data.decode("utf-8", errors="replace")
        try:
            stub.ast = ast.parse(data, filename=path)
        except SyntaxError:
            stub.ast = ast.Module(body=[], type_ignores=[])
        out[name] = build_outline(stub)
    return out


@dataclass(frozen=True)
class Symbol:
    kind: str  # class | function | module | external | unknown
    module: str
    name: str | None

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}" if self.name else self.module


BUILTIN_NAMES = frozenset(("object", "type", "Exception", "int", "str", "dict", "list", "tuple",
                           "property", "staticmethod", "classmethod", "super", "getattr"))


# ---------------------------------------------------------------- outline extraction

def absolute_module(package: str, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".")
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    base = ".".join(parts)
    return f"{base}.{module}" if module else base


def _top_statements(body):
    """Top-level statements, descending into if/try/with blocks (conditional definitions)."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            yield from _top_statements(stmt.body)
            yield from _top_statements(stmt.orelse)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            yield from _top_statements(stmt.body)
            for h in stmt.handlers:
                yield from _top_statements(h.body)
            yield from _top_statements(stmt.orelse)
            yield from _top_statements(stmt.finalbody)
        elif isinstance(stmt, (ast.With,)):
            yield from _top_statements(stmt.body)
        else:
            yield stmt


def build_outline(mod) -> ModuleOutline:
    out = ModuleOutline(mod.name, mod.relpath)
    package = mod.package
    scan_globals = "global " in mod.source
    for stmt in _top_statements(mod.ast.body):
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
            out.functions.setdefault(stmt.name, (_start(stmt), stmt.end_lineno))
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


_METHOD_KINDS = {"property": "property", "cached_property": "property", "classmethod": "classmethod",
                 "staticmethod": "staticmethod"}


def outline_class(node: ast.ClassDef, package: str = "") -> ClassOutline:
    co = ClassOutline(node.name, node.lineno, [dotted(b) for b in node.bases], end=node.end_lineno or 0,
                      decorators=[dotted(d.func if isinstance(d, ast.Call) else d) or "?"
                                  for d in node.decorator_list])
    for stmt in _top_statements(node.body):  # also members defined under if/try in the class body
        if isinstance(stmt, ast.ClassDef):  # a nested class: self.Inner / cls.Inner
            co.members.setdefault(stmt.name, Member("class", stmt.lineno))
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            kind = "method"
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
            co.members.setdefault(stmt.name, Member(kind, stmt.lineno, params=tuple(params),
                                                    varkw=args.kwarg is not None,
                                                    start=_start(stmt), end=stmt.end_lineno))
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
        out.dynamic |= any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                           and node.func.id in ("globals", "vars") for node in ast.walk(stmt))


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


def _getattr_target(fn: ast.FunctionDef) -> str:
    """``return getattr(self.inner, name)`` -> ``inner``; anything else -> ``?``."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
            if node.args and isinstance(node.args[0], ast.Attribute) and isinstance(
                    node.args[0].value, ast.Name) and node.args[0].value.id == "self":
                return node.args[0].attr
    return "?"


def _scan_method(co: ClassOutline, fn: ast.FunctionDef, package: str = "") -> None:
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
                    local.setdefault(a.asname or a.name, []).append(
                        ast.parse(f"{target}.{a.name}", mode="eval").body)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    for elt in _flatten_targets(t):
                        if isinstance(elt, ast.Name) and stmt.value is not None:
                            local.setdefault(elt.id, []).append(stmt.value)
                        elif (isinstance(elt, ast.Attribute) and isinstance(elt.value, ast.Name)
                              and elt.value.id == me):
                            if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
                                continue
                            _add_self_attr(co, elt.attr, stmt, fn.name, conditional)
                            if t is elt and stmt.value is not None:
                                _add_holds(co, elt.attr, stmt.value, local, defaults, stmt.lineno)
                            if elt.attr == "logits_processor":
                                co.sets_logits_processor = True
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                call = stmt.value
                if (isinstance(call.func, ast.Name) and call.func.id == "setattr" and len(call.args) >= 2
                        and isinstance(call.args[0], ast.Name) and call.args[0].id == me):
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
        node = stmt.value.func
        node = node.value if isinstance(node, ast.Attribute) else None
    elif isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Subscript):
        node = stmt.targets[0].value
    else:
        return False
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        return isinstance(node.value, ast.Name) and node.value.id == me
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars"
            and len(node.args) == 1 and isinstance(node.args[0], ast.Name) and node.args[0].id == me)


def _flatten_targets(t):
    if isinstance(t, (ast.Tuple, ast.List)):
        for e in t.elts:
            yield from _flatten_targets(e)
    elif isinstance(t, ast.Starred):
        yield from _flatten_targets(t.value)
    else:
        yield t


def _param_defaults(fn: ast.FunctionDef) -> dict[str, ast.AST]:
    args = fn.args
    out = {}
    pos = args.posonlyargs + args.args
    for a, d in zip(pos[len(pos) - len(args.defaults):], args.defaults):
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
        return _class_values(v.body, local, defaults, depth + 1) + _class_values(
            v.orelse, local, defaults, depth + 1)
    if isinstance(v, ast.Subscript) and isinstance(v.value, ast.Dict):
        out = []
        for val in v.value.values:
            out.extend(_class_values(val, local, defaults, depth + 1))
        return out or ["?"]
    if isinstance(v, ast.Constant) and v.value is None:
        return []
    return ["?"]

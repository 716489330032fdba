"""A read-only view of an upstream-shaped SGLang tree (``python/sglang/...``) for static analysis.

Modules are found by dotted name, parsed lazily with :mod:`ast` (never imported), and names are
resolved across modules through imports, re-exports and aliases. Nothing here knows about
models or the EAGLE-3 contract; :mod:`.classes` and :mod:`.derive` build on it. What one module
defines (its outline) is extracted in :mod:`.outline`.
"""

from __future__ import annotations

import ast
import hashlib
import os
import pickle
from ast import AST as _AST
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from sglpatch.contract.parse.outline import ModuleOutline, build_outline
from sglpatch.errors import UserError

PACKAGE = "sglang"
SRT = "sglang.srt"
MODELS = "sglang.srt.models"

# Bump when the outline format or its extraction changes: old cache files are then ignored.
OUTLINE_VERSION = 11


class Module:
    """A parsed module: its source, AST (lazily) and outline."""

    def __init__(self, tree: SourceTree, name: str, path: Path | str, is_package: bool):
        self.tree = tree
        self.name = name
        self._path = path  # a str from a directory listing: a Path only when asked (thousands are listed)
        self.is_package = is_package
        self._relpath: str | None = None
        self._ast: ast.Module | None = None
        self._outline: ModuleOutline | None = None
        self._source: str | None = None
        self._lines: list[str] | None = None
        self._segments: dict[tuple[int, int], ast.AST | None] = {}

    @property
    def path(self) -> Path:
        if not isinstance(self._path, Path):
            self._path = Path(self._path)
        return self._path

    @property
    def relpath(self) -> str:
        if self._relpath is None:
            self._relpath = os.path.relpath(str(self._path), str(self.tree.root)).replace(os.sep, "/")
        return self._relpath

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]

    @property
    def source(self) -> str:
        if self._source is None:
            self._source = self.read_bytes().decode("utf-8", errors="replace")
        return self._source

    def read_bytes(self) -> bytes:
        with open(self._path, "rb") as fh:
            return fh.read()

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
        return "".join(self.lines[start - 1 : end])

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
                    node = cast(ast.If, ast.parse("\n" * (start - 2) + "if 1:\n" + text).body[0]).body[0]
                elif indent:
                    node = cast(ast.If, ast.parse("if 1:\n" + text).body[0]).body[0]
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

    def loc(self, node: _AST | int) -> str:  # _AST: ``ast`` here is the property above
        line = node if isinstance(node, int) else getattr(node, "lineno", 0)
        return f"{self.relpath}:{line}"


class SourceTree:
    """Index of the ``sglang`` package inside an upstream-shaped tree."""

    def __init__(self, root: Path, *, cache: Path | None = None):
        root = Path(root).resolve()
        if not (root / "python" / "sglang" / "srt").is_dir():
            if (root / "sglang" / "srt").is_dir():  # given the python/ dir itself
                raise UserError(
                    f"{root} is upstream's python/ directory, not the repository root",
                    f"pass {root.parent} (the tree must contain python/sglang/srt)",
                )
            raise UserError(
                f"{root} is not an SGLang source tree (no python/sglang/srt)",
                "pass a checkout laid out like upstream's repository",
            )
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
                    m = Module(self, name, os.path.join(dirpath, f), f == "__init__.py")
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
        return [
            m
            for m in self.package_modules(package)
            if (literal is None or literal in m.source) and pattern.search(m.source)
        ]

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

    def resolve(self, module: str, name: str, _seen: set | None = None) -> Symbol:
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
                return Symbol("module", target, None) if self.module(target) else Symbol("external", target, None)
            if self.module(target) is None:
                if self.module(f"{target}.{attr}") is not None:  # from <namespace package> import mod
                    return Symbol("module", f"{target}.{attr}", None)
                return Symbol("external", target, attr)
            sub = f"{target}.{attr}"
            if self.module(sub) is not None and attr not in cast(Module, self.module(target)).outline.classes:
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

    def resolve_dotted(self, module: str, expr: str, _seen: set | None = None) -> Symbol:
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
        return self.memo("", mod, build_outline)

    def memo(self, kind: str, mod: Module, compute):
        """``compute(mod)``, kept in the outline cache under the module's content (``kind``
        names what is kept; "" is the outline)."""
        cache = self._load_outline_cache()
        key = f"{mod.name}:{hashlib.sha1(mod.read_bytes()).hexdigest()}"
        self._current[mod.name] = key
        hit = cache.get(kind + key) if cache is not None else None
        if hit is not None:
            return hit
        value = compute(mod)
        if cache is not None:
            cache[kind + key] = value
            self._outline_cache_dirty = True
        return value

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
        assert self._outline_cache is not None  # dirty only after the cache was loaded
        for key in [k for k in self._outline_cache if _stale(k, self._current)]:
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
            data = m.read_bytes()
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
            chunks = [jobs[i :: workers * 4] for i in range(workers * 4)]
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


def _stale(key: str, current: dict[str, str]) -> bool:
    """A cache entry (``[kind/]module:digest``) for an earlier content of a module seen this run."""
    name_key = key.rpartition("/")[2]
    name = name_key.partition(":")[0]
    return name in current and name_key != current[name]


def _outline_job(jobs) -> dict[str, ModuleOutline]:
    out = {}
    for path, name, relpath, is_package in jobs:

        class _Stub:  # just enough of Module for build_outline
            pass

        stub: Any = _Stub()  # attributes set one by one below
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


BUILTIN_NAMES = frozenset(
    (
        "object",
        "type",
        "Exception",
        "int",
        "str",
        "dict",
        "list",
        "tuple",
        "property",
        "staticmethod",
        "classmethod",
        "super",
        "getattr",
    )
)

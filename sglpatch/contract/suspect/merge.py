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
(:mod:`difflib`); only Python files under ``python/sglang`` are analysed. This module holds the
entry point, the per-tree views and rule 4; :mod:`.scan` reads one file (rules 1 and 2),
:mod:`.calls` its calls (rule 3); the small types they share are in :mod:`.model`.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from pathlib import Path

from sglpatch.contract.core import Analysis
from sglpatch.contract.index.classes import ClassIndex
from sglpatch.contract.parse.tree import SourceTree
from sglpatch.contract.suspect.model import Suspect, _Call
from sglpatch.contract.suspect.scan import Scan

__all__ = ["Suspect", "added_lines", "find_suspects"]


def added_lines(new_file: Path | None, merged_file: Path) -> list[int]:
    """1-based numbers of the merged file's lines that the new release's file lacks."""
    merged = merged_file.read_bytes().decode("utf-8", errors="replace").splitlines()
    base = (
        []
        if new_file is None or not new_file.is_file()
        else new_file.read_bytes().decode("utf-8", errors="replace").splitlines()
    )
    out: list[int] = []
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
            Scan(run, run.merged, mod, lines).run()
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

    def calls_named(self, run: _Run, name: str) -> list[_Call]:
        """Every call of something named ``name`` in the package (parsing only the files whose
        text has ``name(``, visiting only the statements on those lines)."""
        if name not in self._calls:
            pat = re.compile(r"\b" + re.escape(name) + r"\s*\(")
            out = []
            for mod in self.tree.grep(pat, literal=name):
                src = mod.source
                lines = sorted({src.count("\n", 0, m.start()) + 1 for m in pat.finditer(src)})
                scan = Scan(run, self, mod, lines, collect=name)
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
            pat = re.compile(
                r"(?<!\bself)\." + re.escape(name) + r"[ \t]*(?::[^=\n]+)?=(?!=)"
                r"|setattr\([^,\n]+,[ \t]*[\"']" + re.escape(name) + r"[\"']"
            )
            self._assigned[name] = bool(self.tree.grep(pat, literal=name))
        return self._assigned[name]


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
                    self.found.append(
                        Suspect(
                            c.path,
                            c.line,
                            name,
                            f"call of {name} without {k}=: the patch adds {k}= to all {len(old_calls)} "
                            f"call(s) of {name} in {self.old.version}; this one (in {c.where}) is not one of them",
                        )
                    )

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

"""Derive the model interface SGLang's runtime relies on, from the tree itself.

The runtime code (everything under ``srt/`` except ``srt/models/``) is read with :mod:`ast`.
A small set of *root patterns* (``PATTERNS``) says which expressions denote the target model,
the draft model or the model class; values then flow through local aliases, ``self.x = ...``
attributes and call arguments (interprocedurally, within the tree). Every attribute read,
method call, ``getattr``/``hasattr`` probe and ``inspect.signature`` probe on such a value is an
*access*, recorded with its site, whether it is guarded, and the feature path that reaches it.

The same walk records, per function, the ordered calls the capture-wiring check needs.

This module drives the walk over the tree and merges its results; the vocabulary is in
``access.py``, the walk of one function in ``walker.py``, its guards in ``guards.py`` and its
call graph in ``calls.py``; what those parts ask of this driver is the protocol in ``context.py``.
"""

from __future__ import annotations

import ast
import re
from typing import cast

from sglpatch.contract.flow.access import FEATURES, PATTERNS, PROPAGATION, Access, FuncInfo, KeyResult, Val
from sglpatch.contract.flow.guards import _required_first
from sglpatch.contract.flow.none_flow import NoneFlow
from sglpatch.contract.flow.walker import _Walker
from sglpatch.contract.index.classes import ClassIndex, ClassRef
from sglpatch.contract.parse.tree import MODELS, SRT, Module, SourceTree

# The vocabulary lives in access.py; these are the names the rest of the package takes from here.
__all__ = ["FEATURES", "PATTERNS", "PROPAGATION", "Access", "Deriver", "Val"]

# A runtime file (and, inside it, a function) is analysed from the start only if its text shows one
# of the root patterns; other code is reached when a model or runner value is passed into it.
_PREFILTER = re.compile(
    r"(model_runner|draft_runner|get_model_runner\(\))\.model\b|get_model_architecture|"
    r"=\s*[\w.]*\b(model_runner|draft_runner|draft_model_runner|target_worker|_target_worker|tp_worker|"
    r"draft_worker)\s*$|\bclass ModelRunner\b",
    re.M,
)
_PREFILTER_WORDS = (
    "model_runner",
    "draft_runner",
    "get_model_architecture",
    "target_worker",
    "tp_worker",
    "draft_worker",
    "class ModelRunner",
)


_MODEL_WORD = re.compile(r"\.model\b|get_model_architecture|class ModelRunner\b")


def _mentions(text: str) -> bool:
    """Text that can reach a model through a root pattern (a cheap test before parsing)."""
    return any(w in text for w in _PREFILTER_WORDS) and bool(_MODEL_WORD.search(text)) and bool(_PREFILTER.search(text))


class Deriver:
    def __init__(self, tree: SourceTree, classes: ClassIndex, *, workers: int = 2):
        self.tree = tree
        self.workers = workers
        self.classes = classes
        self.results: dict[tuple, KeyResult] = {}
        self.funcs: dict[tuple, FuncInfo] = {}
        self.attr_roots: dict[ClassRef, dict[str, Val]] = {}
        self._class_keys: dict[ClassRef, set] = {}
        self._unparsed: dict[int, str] = {}
        self._negated: dict[int, tuple] = {}
        self.runner_classes: set[ClassRef] = set()
        self.runner_mro: list[ClassRef] = []
        self.runner_class: ClassRef | None = None
        self.entry_modules: list[Module] = []
        self._queue: list[tuple] = []
        self._queued: set = set()
        self._assigns: dict[int, list] = {}

    # ------------------------------------------------------------ driver

    def find_runner(self) -> None:
        preferred = ClassRef(f"{SRT}.model_executor.model_runner", "ModelRunner")
        runners = (
            [preferred]
            if self.classes.outline(preferred)
            else [
                r
                for r in self.classes.by_name("ModelRunner")
                if r.module.startswith(SRT + ".") and not r.module.startswith(MODELS + ".")
            ]
        )
        if runners:
            self.runner_class = runners[0]
            self.runner_mro = [c for c in self.classes.mro(runners[0]) if isinstance(c, ClassRef)]
            self.runner_classes = set(self.runner_mro)

    def run(self) -> None:
        self.find_runner()
        mods = []
        for mod in self.tree.package_modules(SRT):
            if mod.name.startswith(MODELS + ".") or mod.name == MODELS:
                continue
            if _mentions(mod.source):
                mods.append(mod)
        for c in self.runner_mro:
            m = self.tree.module(c.module)
            if m is not None and m not in mods:
                mods.append(m)
        self.entry_modules = mods
        self.tree.preload_outlines(mods, workers=self.workers)
        for mod in mods:
            out = mod.outline
            for name, (start, end) in out.functions.items():
                if _mentions(mod.text(start, end)):
                    self.enqueue(self.key_for(mod, None, name, {}))
            for cname, co in out.classes.items():
                ref = ClassRef(mod.name, cname)
                for name, member in co.members.items():
                    if member.start and (ref in self.runner_classes or _mentions(mod.text(member.start, member.end))):
                        self.enqueue(self.key_for(mod, ref, name, {}))
        steps = 0
        while self._queue and steps < 200000:
            key = self._queue.pop()
            self._queued.discard(key)
            self.analyse(key)
            steps += 1

    def assigns(self, node) -> list:
        """Assignments anywhere in a function (for local aliases), cached per function."""
        k = id(node)
        if k not in self._assigns:
            out = []
            stack = list(node.body)
            while stack:  # statements only: expressions never hold an assignment statement
                n = stack.pop()
                if isinstance(n, ast.Assign):
                    out.append((n.targets, n.value))
                elif isinstance(n, ast.AnnAssign) and n.value is not None:
                    out.append(([n.target], n.value))
                elif isinstance(n, (ast.With, ast.AsyncWith)):
                    for item in n.items:
                        if item.optional_vars is not None:
                            out.append(([item.optional_vars], item.context_expr))
                elif isinstance(n, (ast.If, ast.While)) and isinstance(n.test, ast.NamedExpr):
                    out.append(([n.test.target], n.test.value))
                for name in ("body", "orelse", "finalbody"):
                    sub = getattr(n, name, None)
                    if sub:
                        stack.extend(sub)
                for h in getattr(n, "handlers", ()) or ():
                    stack.extend(h.body)
                for case in getattr(n, "cases", ()) or ():
                    stack.extend(case.body)
            out.reverse()
            self._assigns[k] = out
        return self._assigns[k]

    def enqueue(self, key):
        if key is not None and key not in self._queued:
            self._queued.add(key)
            self._queue.append(key)

    def methods(self, cls: ClassRef) -> list[str]:
        """Names of the functions defined in the body of ``cls`` (not inherited)."""
        co = self.classes.outline(cls)
        return [n for n, m in co.members.items() if m.start] if co else []

    def method_node(self, cls: ClassRef, name: str, *, skip_first: bool = False):
        """(owner ClassRef, FunctionDef) for ``name`` looked up through ``cls``'s MRO (in the tree)."""
        owner, node, _ = self.classes.method_def(cls, name, skip_first=skip_first)
        return owner, node

    def key_for(self, mod: Module, cls: ClassRef | None, name: str, bindings: dict):
        if cls is not None:
            owner, node = self.method_node(cls, name)
            if node is None:
                return None
            mod = cast(Module, self.tree.module(owner.module))  # owner: a class of the tree
            qual = f"{owner.name}.{name}"
            cls = owner
        else:
            node = mod.function(name)
            if node is None:
                return None
            qual = name
        key = (mod.name, qual, frozenset(bindings.items()))
        if key not in self.funcs:
            self.funcs[key] = FuncInfo(mod, node, cls, qual)
            if cls is not None:
                self._class_keys.setdefault(cls, set()).add(key)
        return key

    def analyse(self, key) -> None:
        info = self.funcs[key]
        walker = _Walker(self, key, info)
        walker.run()
        self.results[key] = KeyResult(
            walker.accesses, walker.events, walker.edge_features, walker.guarded_edges, walker.call_facts
        )

    def set_attr_root(self, cls: ClassRef, attr: str, val: Val) -> None:
        roots = self.attr_roots.setdefault(cls, {})
        old = roots.get(attr)
        if old == val:
            return
        if old is not None:
            if old.kind != val.kind:
                return
            val = Val(val.kind, "any", old.pattern)
            if old == val:
                return
        roots[attr] = val
        # every method of the class (and of subclasses analysed so far) may read self.<attr>
        mod = cast(Module, self.tree.module(cls.module))  # cls: a class of the tree
        for name in self.methods(cls):
            self.enqueue(self.key_for(mod, cls, name, {}))
        for k in list(self.results):
            info = self.funcs[k]
            if info.cls is not None and info.cls != cls and cls in self.classes.mro(info.cls):
                self.enqueue(k)

    def attr_root(self, cls: ClassRef | None, attr: str) -> Val | None:
        if cls is None:
            return None
        for c in self.classes.mro(cls):
            if isinstance(c, ClassRef):
                v = self.attr_roots.get(c, {}).get(attr)
                if v is not None:
                    return v
        return None

    def negated(self, test):
        """``not (test)``, made once per test (kept alive: ``unparse`` caches by id)."""
        k = id(test)
        if k not in self._negated:
            self._negated[k] = (test, ast.UnaryOp(ast.Not(), test))
        return self._negated[k][1]

    def unparse(self, node) -> str:
        k = id(node)
        if k not in self._unparsed:
            try:
                self._unparsed[k] = ast.unparse(node)
            except Exception:
                self._unparsed[k] = ""
        return self._unparsed[k]

    # ------------------------------------------------------------ results

    def inherited(self) -> tuple[dict, dict]:
        """Per key: features inherited from callers' contexts; the call chain that first reaches it."""
        callers: dict[tuple, list[tuple]] = {}
        for k, r in self.results.items():
            for ev in r.events:
                if ev[0] == "edge":
                    callers.setdefault(ev[1], []).append((k, ev[2]))
        feats: dict[tuple, set] = {k: set() for k in self.results}
        changed = True
        rounds = 0
        while changed and rounds < 20:
            changed = False
            rounds += 1
            for k, r in self.results.items():
                for callee, fs in r.local_features.items():
                    if callee not in feats or not callee[2]:
                        continue  # only helpers that receive the model inherit their callers' paths
                    new = (feats[k] | fs) - feats[callee]
                    if new:
                        feats[callee] |= new
                        changed = True
        via: dict[tuple, tuple] = {}
        for k in self.results:
            if not k[2]:
                continue  # an entry (no bound parameters) needs no chain
            chain: list[str]
            chain, cur, seen = [], k, set()
            while cur in callers and cur not in seen and len(chain) < 6:
                seen.add(cur)
                caller, line = callers[cur][0]
                chain.append(f"{self.funcs[caller].module.relpath}:{line}")
                if not caller[2]:
                    break
                cur = caller
            via[k] = tuple(chain)
        return feats, via

    def guarded_helpers(self) -> set:
        """Helpers receiving the model whose every call site sits in a guarding try/except."""
        sites: dict[tuple, list[bool]] = {}
        for r in self.results.values():
            for ev in r.events:
                if ev[0] == "edge" and ev[1][2]:
                    sites.setdefault(ev[1], []).append(ev[1] in r.guarded_calls)
        return {k for k, flags in sites.items() if flags and all(flags)}

    def caller_guards(self) -> dict[tuple, dict[str, str]]:
        """Per helper receiving the model: the members every call site has already probed (under
        ``if hasattr(model, "x")`` or after ``if not hasattr(model, "x"): return``), with the guard
        that holds there, carried down chains of helpers. Entries (no bound parameters) may have
        callers the walk never sees, so they inherit nothing."""
        calls: dict[tuple, list[tuple]] = {}
        for k, r in self.results.items():
            for callee, facts in r.call_facts:
                if callee[2]:
                    calls.setdefault(callee, []).append((k, facts))
        inherited: dict[tuple, dict[str, str]] = {}
        for _ in range(10):  # each round carries the facts one helper further down a chain
            changed = False
            for callee, sites in calls.items():
                merged = None
                for caller, facts in sites:
                    here = {**inherited.get(caller, {}), **facts}
                    merged = (
                        here
                        if merged is None
                        else {m: _required_first(g, here[m]) for m, g in merged.items() if m in here}
                    )
                if merged != inherited.get(callee, {}):
                    inherited[callee] = cast(dict[str, str], merged)  # sites: never empty
                    changed = True
            if not changed:
                break
        return inherited

    def accesses(self) -> list[Access]:
        feats, via = self.inherited()
        guarded = self.guarded_helpers()
        by_callers = self.caller_guards()
        merged: dict[tuple, Access] = {}
        for k, r in self.results.items():
            for a in r.accesses:
                if k in guarded and a.guard is None:
                    a = Access(**{**a.__dict__, "guard": "try-except"})
                inherited = by_callers.get(k, {}).get(a.member)
                if a.guard is None and inherited is not None and a.kind in ("attr", "call"):
                    a = Access(**{**a.__dict__, "guard": "fallback" if inherited == "absent" else inherited})
                fs = set(a.features) | feats.get(k, set())
                fs.discard("core")
                sk = a.site_key()
                cur = merged.get(sk)
                if cur is None:
                    a = Access(**{**a.__dict__, "features": fs or {"core"}, "via": via.get(k, ())})
                    merged[sk] = a
                else:
                    cur.features |= fs
                    if cur.role != a.role:
                        cur.role = "any" if "any" in (cur.role, a.role) or cur.role != a.role else cur.role
                    if len(cur.features) > 1:
                        cur.features.discard("core")
        for a in NoneFlow(self).run():  # probes whose None an assert or a later step consumes
            merged.setdefault(a.site_key(), a)
        return sorted(merged.values(), key=lambda a: (a.path, a.line, a.col, a.member))

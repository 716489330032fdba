"""Derive the model interface SGLang's runtime relies on, from the tree itself.

The runtime code (everything under ``srt/`` except ``srt/models/``) is read with :mod:`ast`.
A small set of *root patterns* (``PATTERNS``) says which expressions denote the target model,
the draft model or the model class; values then flow through local aliases, ``self.x = ...``
attributes and call arguments (interprocedurally, within the tree). Every attribute read,
method call, ``getattr``/``hasattr`` probe and ``inspect.signature`` probe on such a value is an
*access*, recorded with its site, whether it is guarded, and the feature path that reaches it.

The same walk records, per function, the ordered calls the capture-wiring check needs.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from .classes import ClassIndex, ClassRef
from .tree import MODELS, SRT, Module, SourceTree, dotted

# ---------------------------------------------------------------- the recognised access patterns
# Each pattern names one way SGLang's runtime reaches a model. The derived contract records which
# pattern found each access; tests assert the key ones still match on every release, so a layout
# change shows up as a failing pattern instead of a silently empty contract.
PATTERNS = {
    "runner-self": "`self.model` inside ModelRunner and its mixin bases (target or draft model)",
    "runner-attr": "`<x>.model_runner.model` / `<x>._model_runner.model` (graph runners, EPLB, workers)",
    "runner-name": "`model_runner.model` for a name or parameter called model_runner, or annotated "
                   "ModelRunner (0.5.2x helper functions)",
    "spec-self": "`self.model_runner.model` inside speculative/ (the worker's own, i.e. draft, runner)",
    "draft-runner": "`<x>.draft_model_runner.model`, `<x>.draft_runner.model`, "
                    "`<x>.draft_runner_list[i].model`, `<x>.mtp_model_runner(i).model`, "
                    "`<x>.draft_worker.model_runner.model` (draft model)",
    "target-worker": "`<x>.target_worker.model_runner.model` (also `_target_worker`, `tp_worker`, "
                     "`.get_model_runner()`) (target model)",
    "model-arch": "`model_class, _ = get_model_architecture(...)` (the target model class, e.g. "
                  "classmethod get_model_config_for_expert_location)",
}
PROPAGATION = ("local alias (`m = self.model_runner.model; m.x`)",
               "instance attribute (`self.m = <model>` in one method, `self.m.x` in another)",
               "call argument (`helper(model=self.model)` -> `model.x` inside helper, across modules)",
               "stored getter (`Manager(get_model=lambda: self.model)` -> `self._get_model().x`)",
               "`type(<model>)` -> the model class")

# Feature paths, by keywords found in the access's file, enclosing function and enclosing
# conditions (and those of the call sites that lead to it). "core" when none matches.
FEATURES = ("eagle3", "cuda-graph", "piecewise-graph", "eplb", "pipeline", "context-parallel", "lora",
            "weight-update", "pdmux", "dllm")
_FEATURE_RULES = (
    ("eagle3", re.compile(r"eagle|speculative|spec_info|spec_algorithm|is_draft|draft_|aux_hidden|"
                          r"hot_token|\bmtp\b|nextn", re.I)),
    ("piecewise-graph", re.compile(r"piecewise", re.I)),
    ("cuda-graph", re.compile(r"cuda_graph|graph_runner|device_graphs?\b|cuda_graphs|capture_bs|"
                              r"graph_capture|init_\w*graphs?\b|decode_graph", re.I)),
    ("eplb", re.compile(r"eplb|expert_location|expert_distribution|routed_experts|elastic_ep", re.I)),
    ("pipeline", re.compile(r"\bpp_|_pp_|pp_proxy|pipeline|pp_group|is_last_rank|pp_rank|pp_size", re.I)),
    ("context-parallel", re.compile(r"_cp\b|\bcp_|context_parallel|attn_cp|_cp_", re.I)),
    ("lora", re.compile(r"lora", re.I)),
    ("weight-update", re.compile(r"update_weights?|weights_from|checkpoint_engine|weight_checker|"
                                 r"named_tensors|weight_sync|refit", re.I)),
    ("pdmux", re.compile(r"split_prefill|pdmux", re.I)),
    ("dllm", re.compile(r"dllm", re.I)),
)

# A runtime file (and, inside it, a function) is analysed from the start only if its text shows one
# of the root patterns; other code is reached when a model or runner value is passed into it.
_PREFILTER = re.compile(
    r"(model_runner|draft_runner|get_model_runner\(\))\.model\b|get_model_architecture|"
    r"=\s*[\w.]*\b(model_runner|draft_runner|draft_model_runner|target_worker|_target_worker|tp_worker|"
    r"draft_worker)\s*$|\bclass ModelRunner\b", re.M)
_PREFILTER_WORDS = ("model_runner", "draft_runner", "get_model_architecture", "target_worker",
                    "tp_worker", "draft_worker", "class ModelRunner")


_MODEL_WORD = re.compile(r"\.model\b|get_model_architecture|class ModelRunner\b")


def _mentions(text: str) -> bool:
    """Text that can reach a model through a root pattern (a cheap test before parsing)."""
    return (any(w in text for w in _PREFILTER_WORDS) and bool(_MODEL_WORD.search(text))
            and bool(_PREFILTER.search(text)))


# Call names recorded as ordered events for the wiring check.
_EVENT_NAMES = re.compile(r"warmup|graph|capture|dummy_run|autotune", re.I)
_GUARD_EXC = {"AttributeError", "Exception", "BaseException"}

_NAME_ROOTS = {
    "model_runner": ("runner", "any", "runner-name"),
    "_model_runner": ("runner", "any", "runner-name"),
    "draft_model_runner": ("runner", "draft", "draft-runner"),
    "draft_runner": ("runner", "draft", "draft-runner"),
    "target_worker": ("worker", "target", "target-worker"),
    "_target_worker": ("worker", "target", "target-worker"),
    "tp_worker": ("worker", "target", "target-worker"),
    "draft_worker": ("worker", "draft", "draft-runner"),
}
# The same roots reached as attributes (`self.model_runner.model`): only the runner pattern differs.
_ATTR_ROOTS = {name: (kind, role, "runner-attr" if pattern == "runner-name" else pattern)
               for name, (kind, role, pattern) in _NAME_ROOTS.items()}


# Any other name like draft_*runner*, mtp_*runner* (lists, getters) is a draft runner too.
_DRAFT_RUNNER_NAME = re.compile(r"^_?(draft|mtp)_\w*runner\w*$")


@dataclass(frozen=True)
class Val:
    kind: str  # runner | worker | model | class | archtuple | getter:<one of those> (a stored lambda)
    role: str  # target | draft | any
    pattern: str = field(default="", compare=False, hash=False)


# Values followed into instance attributes and through stored getters.
_FOLLOWED = ("runner", "worker", "model", "class")
GETTER = "getter:"


@dataclass
class Access:
    member: str
    role: str
    kind: str  # attr | call | getattr | hasattr | signature
    # None (unguarded) | hasattr | getattr-default | try-except | class-check | fallback |
    # signature-probe | checked / asserted (probed only to fail with a clearer error: still required)
    guard: str | None
    path: str
    line: int
    col: int
    function: str
    pattern: str
    features: set[str] = field(default_factory=set)
    nargs: int | None = None
    none_arg: bool = False
    detail: str = ""  # nested use (model.layers) or the probed parameter of a signature probe
    via: tuple[str, ...] = ()
    conditions: tuple[str, ...] = ()  # the enclosing tests, outermost first (the configuration)

    @property
    def required(self) -> bool:
        """Absence breaks the path: unguarded, or checked only to raise a clearer error."""
        return self.guard in (None, "checked", "asserted")

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}"

    def site_key(self):
        return (self.path, self.line, self.col, self.member, self.kind, self.detail)


@dataclass
class FuncInfo:
    module: Module
    node: ast.FunctionDef
    cls: ClassRef | None
    qualname: str


@dataclass
class KeyResult:
    accesses: list[Access]
    events: list[tuple]  # ("edge", key, line) | ("member_call", member, nargs, none_arg, line, role, path)
    #                      | ("named", name, line, path)
    local_features: dict  # callee key -> features at the call site
    guarded_calls: set  # callee keys whose call site was guarded
    call_facts: list = field(default_factory=list)  # (callee key, {member: guard} known at the call)


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
        self._methods: dict[tuple, tuple] = {}
        self._assigns: dict[int, list] = {}

    # ------------------------------------------------------------ driver

    def find_runner(self) -> None:
        preferred = ClassRef(f"{SRT}.model_executor.model_runner", "ModelRunner")
        runners = [preferred] if self.classes.outline(preferred) else [
            r for r in self.classes.by_name("ModelRunner")
            if r.module.startswith(SRT + ".") and not r.module.startswith(MODELS + ".")]
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
                for name, m in co.members.items():
                    if m.start and (ref in self.runner_classes or _mentions(mod.text(m.start, m.end))):
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
        ck = (cls, name, skip_first)
        if ck not in self._methods:
            self._methods[ck] = self._method_node(cls, name, skip_first)
        return self._methods[ck]

    def _method_node(self, cls: ClassRef, name: str, skip_first: bool):
        mro = [c for c in self.classes.mro(cls) if isinstance(c, ClassRef)]
        if skip_first:
            mro = mro[1:]
        for c in mro:
            co = self.classes.outline(c)
            m = co.members.get(name) if co else None
            if m is None or m.kind in ("annotation",):
                continue
            if not m.start:
                return None, None  # shadowed by a non-function attribute
            node = self.tree.module(c.module).segment(m.start, m.end)
            return (c, node) if node is not None else (None, None)
        return None, None

    def key_for(self, mod: Module, cls: ClassRef | None, name: str, bindings: dict):
        if cls is not None:
            owner, node = self.method_node(cls, name)
            if node is None:
                return None
            mod = self.tree.module(owner.module)
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
        self.results[key] = KeyResult(walker.accesses, walker.events, walker.edge_features,
                                      walker.guarded_edges, walker.call_facts)

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
        mod = self.tree.module(cls.module)
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
                    merged = here if merged is None else {
                        m: _required_first(g, here[m]) for m, g in merged.items() if m in here}
                if merged != inherited.get(callee, {}):
                    inherited[callee] = merged
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
        return sorted(merged.values(), key=lambda a: (a.path, a.line, a.col, a.member))


class _Walker:
    """Walk one function under one set of parameter bindings."""

    def __init__(self, d: Deriver, key, info: FuncInfo):
        self.d = d
        self.key = key
        self.info = info
        self.mod = info.module
        self.cls = info.cls
        self.bindings = dict(key[2])
        self.env: dict[str, Val] = {}
        self.accesses: list[Access] = []
        self.events: list[tuple] = []
        self.edge_features: dict[tuple, set] = {}
        self.guarded_edges: set = set()
        self.call_facts: list = []
        self.known: dict[str, str] = {}
        self.try_guard = 0
        self.tests: list[ast.AST] = []
        self.in_assert = False
        self.class_checked = 0
        self.checked_probe: set[int] = set()
        # A probe's result kept in a name (``self.support_pp = "x" in signature(m.forward)...``):
        # the name -> the probe accesses its value holds, upgraded when an assert enforces it.
        self.probe_results: dict[str, list[Access]] = {}
        self.handled: set[int] = set()
        self.parents: dict[int, ast.AST] = {}
        args = info.node.args
        self.params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
        if args.vararg:
            self.params.append(args.vararg.arg)
        if args.kwarg:
            self.params.append(args.kwarg.arg)
        self.self_name = self.params[0] if (self.cls is not None and self.params and not any(
            (dotted(dec) or "").endswith("staticmethod") for dec in info.node.decorator_list)) else None
        self.is_runner = self.cls in d.runner_classes
        self.in_spec = "/speculative/" in self.mod.relpath
        self.context = f"{self.mod.relpath} {info.qualname}"
        for a in args.posonlyargs + args.args + args.kwonlyargs:
            ann = dotted(a.annotation) if a.annotation is not None else None
            if isinstance(a.annotation, ast.Constant) and isinstance(a.annotation.value, str):
                ann = a.annotation.value
            if ann and ann.rpartition(".")[2] in ("ModelRunner", "Optional[ModelRunner]"):
                self.env[a.arg] = Val("runner", "any", "runner-name")
        self.env.update(self.bindings)

    # ------------------------------------------------------------ evaluation of expressions

    def ev(self, e) -> Val | None:
        if isinstance(e, ast.Name):
            if e.id in self.env:
                return self.env[e.id]
            if self.self_name and e.id == self.self_name and self.is_runner:
                return Val("runner", "any", "runner-self")
            r = _NAME_ROOTS.get(e.id)
            if r is not None and e.id != self.self_name:
                return Val(*r)
            if _DRAFT_RUNNER_NAME.match(e.id):
                return Val("runner", "draft", "draft-runner")
            return None
        if isinstance(e, ast.Attribute):
            base = self.ev(e.value)
            if base is not None:
                if base.kind == "model" and e.attr == "__class__":
                    return Val("class", base.role, base.pattern)
                if base.kind == "class" and e.attr == "__name__":
                    return Val("classname", base.role, base.pattern)
                if base.kind == "runner" and e.attr == "model":
                    return Val("model", base.role, base.pattern)
                if base.kind == "worker" and e.attr in ("model_runner", "_model_runner"):
                    return Val("runner", base.role, base.pattern)
                if base.kind == "worker" and e.attr == "worker":
                    return base
                if base.kind == "runner" and e.attr in ("draft_model_runner", "draft_runner"):
                    return Val("runner", "draft", "draft-runner")
                return None
            is_self = isinstance(e.value, ast.Name) and self.self_name and e.value.id == self.self_name
            if is_self:
                v = self.d.attr_root(self.cls, e.attr)
                if v is not None:
                    return v
            r = _ATTR_ROOTS.get(e.attr)
            if r is not None:
                if r[2] == "runner-attr" and is_self and self.in_spec:
                    return Val("runner", "draft", "spec-self")
                return Val(*r)
            if _DRAFT_RUNNER_NAME.match(e.attr):
                return Val("runner", "draft", "draft-runner")
            return None
        if isinstance(e, ast.Lambda):  # get_model=lambda: self.model: a stored getter
            inner = self.ev(e.body) if not (e.args.args or e.args.posonlyargs) else None
            return Val(GETTER + inner.kind, inner.role, inner.pattern) if inner and inner.kind in _FOLLOWED else None
        if isinstance(e, ast.Call):
            getter = self.ev(e.func)
            if getter is not None and getter.kind.startswith(GETTER):  # self._get_model()
                return Val(getter.kind[len(GETTER):], getter.role, getter.pattern)
            name = dotted(e.func) or ""
            last = name.rpartition(".")[2]
            if last == "get_model_architecture":
                return Val("archtuple", "target", "model-arch")
            if last == "ModelRunner":
                return Val("runner", "any", "runner-name")
            if isinstance(e.func, ast.Attribute) and _DRAFT_RUNNER_NAME.match(e.func.attr):
                return Val("runner", "draft", "draft-runner")  # self.mtp_model_runner(i)
            if isinstance(e.func, ast.Attribute) and e.func.attr == "get_model_runner":
                base = self.ev(e.func.value)
                if base is not None and base.kind == "worker":
                    return Val("runner", base.role, base.pattern)
            if name == "type" and len(e.args) == 1:
                base = self.ev(e.args[0])
                if base is not None and base.kind == "model":
                    return Val("class", base.role, base.pattern)
            return None
        if isinstance(e, ast.Subscript):
            base = self.ev(e.value)
            if base is not None and base.kind == "archtuple" and isinstance(e.slice, ast.Constant) \
                    and e.slice.value == 0:
                return Val("class", base.role, base.pattern)
            if base is not None and base.kind == "runner":  # draft_runner_list[i]
                return base
            return None
        if isinstance(e, ast.IfExp):
            return self.ev(e.body) or self.ev(e.orelse)
        if isinstance(e, ast.NamedExpr):
            return self.ev(e.value)
        if isinstance(e, ast.BoolOp) and isinstance(e.op, ast.Or):
            for v in e.values:
                r = self.ev(v)
                if r is not None:
                    return r
        return None

    def _collect_env(self) -> None:
        assigns = self.d.assigns(self.info.node)
        for _ in range(3):
            before = dict(self.env)
            for targets, value in assigns:
                v = self.ev(value)
                for t in targets:
                    if isinstance(t, ast.Name):
                        if v is not None and t.id not in self.bindings:
                            self.env[t.id] = v
                    elif isinstance(t, ast.Tuple) and v is not None and v.kind == "archtuple" and t.elts:
                        first = t.elts[0]
                        if isinstance(first, ast.Name):
                            self.env[first.id] = Val("class", v.role, v.pattern)
                    elif (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                          and self.self_name and t.value.id == self.self_name and self.cls is not None
                          and v is not None and (v.kind in _FOLLOWED or v.kind.startswith(GETTER))
                          and not self.is_runner):
                        self.d.set_attr_root(self.cls, t.attr, v)
            if self.env == before:
                break

    # ------------------------------------------------------------ walking

    def run(self) -> None:
        self._collect_env()
        self.block(self.info.node.body)

    def block(self, stmts) -> None:
        saved = dict(self.known)
        for stmt in stmts:
            self.stmt(stmt)
        self.known = saved

    def stmt(self, s) -> None:
        if isinstance(s, ast.If):
            pos, neg = self.facts(s.test)
            body_exit = _exits(s.body)
            else_exit = _exits(s.orelse) if s.orelse else None
            if body_exit == "raise":
                self._mark_checked(s.test, negated=False)
                self._enforce_probe_results(s.test, negated=True)
            self.with_test(s.test, lambda: self.expr(s.test))
            specific = self.is_class_check(s.test)
            self.class_checked += specific
            self.with_test(s.test, lambda: self.block_with(s.body, pos))
            self.class_checked -= specific
            if s.orelse:
                self.with_test(self.d.negated(s.test), lambda: self.block_with(s.orelse, neg))
            if body_exit:
                self.known.update({m: _after_exit(g, body_exit) for m, g in neg.items()})
            if else_exit:
                self.known.update({m: _after_exit(g, else_exit) for m, g in pos.items()})
        elif isinstance(s, ast.While):
            pos, _ = self.facts(s.test)
            self.with_test(s.test, lambda: self.expr(s.test))
            self.with_test(s.test, lambda: self.block_with(s.body, pos))
            self.block(s.orelse)
        elif isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
            guards = any(_handler_guards(h) for h in s.handlers)
            if guards:
                self.try_guard += 1
            self.block(s.body)
            if guards:
                self.try_guard -= 1
            for h in s.handlers:
                self.block(h.body)
            self.block(s.orelse)
            self.block(s.finalbody)
        elif isinstance(s, ast.Assign) and len(s.targets) == 1:
            first = len(self.accesses)
            self.expr(s.value)
            self.expr(s.targets[0])
            probes = [a for a in self.accesses[first:] if a.guard in ("signature-probe", "hasattr")]
            name = self._result_name(s.targets[0])
            if name is not None:
                if probes:
                    self.probe_results[name] = probes
                else:
                    self.probe_results.pop(name, None)
        elif isinstance(s, ast.Assert):
            self._enforce_probe_results(s.test, negated=False)
            pos, _ = self.facts(s.test)
            self.in_assert = True
            self.expr(s.test)
            self.in_assert = False
            if s.msg is not None:
                self.expr(s.msg)
            self.known.update({m: "asserted" for m in pos})
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            self.expr(s.iter)
            self.block(s.body)
            self.block(s.orelse)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self.expr(item.context_expr)
            self.block(s.body)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in s.decorator_list:
                self.expr(dec)
            self.block(s.body)
        elif isinstance(s, ast.ClassDef):
            return
        elif isinstance(s, ast.Match):
            self.expr(s.subject)
            for case in s.cases:
                self.block(case.body)
        else:
            for child in ast.iter_child_nodes(s):
                if isinstance(child, ast.expr):
                    self.expr(child)
                elif isinstance(child, ast.stmt):
                    self.stmt(child)

    def block_with(self, stmts, facts: dict) -> None:
        saved = dict(self.known)
        self.known.update(facts)
        self.block(stmts)
        self.known = saved

    def with_test(self, test, fn) -> None:
        self.tests.append(test)
        try:
            fn()
        finally:
            self.tests.pop()

    def is_class_check(self, test) -> bool:
        """``isinstance(model, X)`` / ``type(model).__name__ == "X"``: a branch for one class only."""
        for n in ast.walk(test):
            if isinstance(n, ast.Compare):
                for side in [n.left] + n.comparators:
                    v = self.ev(side)
                    if v is not None and v.kind == "classname":
                        return True
            elif isinstance(n, ast.Call) and _call_name(n) in ("isinstance", "issubclass") and n.args:
                v = self.ev(n.args[0])
                if v is not None and v.kind in ("model", "class"):
                    return True
        return False

    def _result_name(self, e) -> str | None:
        """``name`` or ``self.name``: where a function keeps a value it tests later."""
        if isinstance(e, ast.Name):
            return e.id
        if (isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and self.self_name is not None
                and e.value.id == self.self_name):
            return f"{self.self_name}.{e.attr}"
        return None

    def _enforce_probe_results(self, test, negated: bool) -> None:
        """``assert supported`` / ``if not supported: raise``, where ``supported`` holds a probe's
        result: the probed member is required on the path that enforces it (the probe only turns
        a missing member into a clearer error)."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self._enforce_probe_results(test.operand, not negated)
            return
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and not negated:
            for v in test.values:
                self._enforce_probe_results(v, negated)
            return
        name = None if negated else self._result_name(test)
        for access in self.probe_results.get(name, []) if name else []:
            access.guard = "asserted"
            access.conditions += tuple(self.d.unparse(t) for t in self.tests)
            access.features = (access.features | self.features()) - {"core"} or {"core"}

    def _mark_checked(self, test, negated: bool) -> None:
        """``if not hasattr(model, "x"): raise ...``: the probe enforces presence."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self._mark_checked(test.operand, not negated)
        elif isinstance(test, ast.BoolOp):
            for v in test.values:
                self._mark_checked(v, negated)
        elif negated and isinstance(test, ast.Call) and _call_name(test) in ("hasattr", "callable"):
            self.checked_probe.add(id(test))
            if test.args and isinstance(test.args[0], ast.Call):
                self.checked_probe.add(id(test.args[0]))

    # ------------------------------------------------------------ facts from conditions

    def probe(self, e) -> str | None:
        """The member a presence probe checks: hasattr(m, "x"), callable(getattr(m, "x", None)), ..."""
        if isinstance(e, ast.Call):
            name = _call_name(e)
            if name in ("hasattr", "getattr") and len(e.args) >= 2 and _const_str(e.args[1]):
                base = self.ev(e.args[0])
                if base is not None and base.kind in ("model", "class"):
                    return e.args[1].value
            if name == "callable" and len(e.args) == 1:
                return self.probe(e.args[0])
        return None

    def facts(self, test) -> tuple[dict, dict]:
        pos, neg = {}, {}
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            p, n = self.facts(test.operand)
            return n, p
        if isinstance(test, ast.BoolOp):
            parts = [self.facts(v) for v in test.values]
            if isinstance(test.op, ast.And):
                for p, _ in parts:
                    pos.update(p)
            else:
                for _, n in parts:
                    neg.update(n)
            return pos, neg
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(
                test.comparators[0], ast.Constant) and test.comparators[0].value is None:
            m = self.probe(test.left)
            if m:
                if isinstance(test.ops[0], ast.IsNot):
                    pos[m] = "hasattr"
                elif isinstance(test.ops[0], ast.Is):
                    neg[m] = "hasattr"
            return pos, neg
        m = self.probe(test)
        if m:
            pos[m] = "hasattr"
            if isinstance(test, ast.Call) and _call_name(test) == "hasattr":
                neg[m] = "absent"  # the else side (or code after `if hasattr(..): return`)
        # isinstance(model, P) for a Protocol P probes each of P's members (the else side only
        # knows that one of them is missing, so it learns nothing)
        pos.update(dict.fromkeys(self.protocol_members(test), "hasattr"))
        return pos, neg

    def protocol_members(self, test) -> list[str]:
        if not (isinstance(test, ast.Call) and _call_name(test) == "isinstance" and len(test.args) == 2
                and isinstance(test.args[1], (ast.Name, ast.Attribute))):
            return []
        base = self.ev(test.args[0])
        if base is None or base.kind != "model":
            return []
        ref = self.d.classes.resolve(self.mod.name, dotted(test.args[1]))
        co = self.d.classes.outline(ref) if isinstance(ref, ClassRef) else None
        if co is None or not any(b and b.rpartition(".")[2] == "Protocol" for b in co.bases):
            return []
        return [name for name in co.members if not name.startswith("__")]

    # ------------------------------------------------------------ expressions

    def expr(self, e) -> None:
        if e is None or isinstance(e, _LEAVES):
            return
        if isinstance(e, ast.BoolOp):
            saved = dict(self.known)
            for i, v in enumerate(e.values):
                self.expr(v)
                p, n = self.facts(v)
                self.known.update(p if isinstance(e.op, ast.And) else n)
                self.tests.append(v)
            del self.tests[len(self.tests) - len(e.values):]
            self.known = saved
            return
        if isinstance(e, ast.IfExp):
            pos, neg = self.facts(e.test)
            self.expr(e.test)
            self.tests.append(e.test)
            self.block_expr(e.body, pos)
            self.block_expr(e.orelse, neg)
            self.tests.pop()
            return
        if isinstance(e, ast.Lambda):
            self.expr(e.body)
            return
        if isinstance(e, ast.Call):
            self.call(e)
        elif isinstance(e, ast.Attribute):
            if isinstance(e.value, ast.Attribute):
                self.parents[id(e.value)] = e
            if id(e) not in self.handled:
                self.attribute(e)
        elif isinstance(e, ast.Compare):
            self.signature_probe(e)
        for child in ast.iter_child_nodes(e):
            if isinstance(child, _LEAVES):
                continue
            if isinstance(child, ast.expr):
                self.expr(child)
            elif isinstance(child, ast.keyword):  # f(x=model.member): not an ast.expr
                self.expr(child.value)
            elif isinstance(child, ast.comprehension):
                self.expr(child.iter)
                for cond in child.ifs:
                    self.expr(cond)
                self.expr(child.target)

    def block_expr(self, e, facts) -> None:
        saved = dict(self.known)
        self.known.update(facts)
        self.expr(e)
        self.known = saved

    def attribute(self, e: ast.Attribute) -> None:
        if not isinstance(e.ctx, ast.Load):
            return
        base = self.ev(e.value)
        if base is None or base.kind not in ("model", "class"):
            return
        parent = self.parents.get(id(e))
        detail = ""
        if isinstance(parent, ast.Attribute) and parent.value is e:
            detail = f"{e.attr}.{parent.attr}"
        self.record(e.attr, base, "attr", e, detail=detail)

    def call(self, c: ast.Call) -> None:
        name = _call_name(c)
        if name in ("getattr", "hasattr") and len(c.args) >= 2 and _const_str(c.args[1]):
            base = self.ev(c.args[0])
            if base is not None and base.kind in ("model", "class"):
                member = c.args[1].value
                if name == "getattr":
                    guarded = len(c.args) >= 3 or any(k.arg == "default" for k in c.keywords)
                    self.record(member, base, "getattr", c, guard="getattr-default" if guarded else None)
                else:
                    guard = "asserted" if self.in_assert else (
                        "checked" if id(c) in self.checked_probe else "hasattr")
                    self.record(member, base, "hasattr", c, guard=guard)
        if isinstance(c.func, ast.Attribute):
            base = self.ev(c.func.value)
            if base is not None and base.kind in ("model", "class"):
                none_arg = bool(c.args) and all(isinstance(a, ast.Constant) and a.value is None
                                                for a in c.args) and not c.keywords
                self.record(c.func.attr, base, "call", c.func, nargs=len(c.args) + len(c.keywords),
                            none_arg=none_arg)
                self.handled.add(id(c.func))
                self.events.append(("member_call", c.func.attr, len(c.args) + len(c.keywords), none_arg,
                                    c.lineno, base.role, self.mod.relpath))
        simple = name.rpartition(".")[2] if name else ""
        if simple and _EVENT_NAMES.search(simple):
            self.events.append(("named", simple, c.lineno, self.mod.relpath))
        self.edge(c)

    def signature_probe(self, e: ast.Compare) -> None:
        # "pp_proxy_tensors" in inspect.signature(model.forward).parameters
        if len(e.ops) != 1 or not isinstance(e.ops[0], (ast.In, ast.NotIn)) or not _const_str(e.left):
            return
        right = e.comparators[0]
        if not (isinstance(right, ast.Attribute) and right.attr == "parameters"
                and isinstance(right.value, ast.Call) and _call_name(right.value).endswith("signature")
                and right.value.args and isinstance(right.value.args[0], ast.Attribute)):
            return
        target = right.value.args[0]
        base = self.ev(target.value)
        if base is None or base.kind not in ("model", "class"):
            return
        self.record(target.attr, base, "signature", e, guard="signature-probe", detail=e.left.value)

    def record(self, member, base: Val, kind, node, *, guard=None, nargs=None, none_arg=False, detail=""):
        if member.startswith("__") and member.endswith("__"):
            return
        if guard is None and kind in ("attr", "call"):
            if member in self.known:
                guard = self.known[member]
                if guard == "absent":
                    guard = "fallback"  # reached only when the member is missing: an error path
            elif self.try_guard:
                guard = "try-except"
        elif guard is None and self.try_guard:
            guard = "try-except"
        if guard is None and self.class_checked:
            guard = "class-check"
        role = base.role
        if base.kind == "class":
            kind = "class-" + kind if not kind.startswith("class") else kind
        features = self.features()
        if kind.endswith("signature"):  # the probed parameter names the path (pp_proxy_tensors)
            features = (features | _features_of(detail)) - {"core"} or {"core"}
        self.accesses.append(Access(
            member=member, role=role, kind=kind, guard=guard, path=self.mod.relpath,
            line=node.lineno, col=node.col_offset, function=self.info.qualname,
            pattern=base.pattern, features=features, nargs=nargs, none_arg=none_arg,
            detail=detail, conditions=tuple(self.d.unparse(t) for t in self.tests)))

    def features(self) -> set[str]:
        text = self.context + " " + " ".join(self.d.unparse(t) for t in self.tests)
        return _features_of(text)

    # ------------------------------------------------------------ calls into the tree

    def edge(self, c: ast.Call) -> None:
        f = c.func
        own = isinstance(f, ast.Attribute) and (
            (isinstance(f.value, ast.Name) and self.self_name is not None and f.value.id == self.self_name)
            or (isinstance(f.value, ast.Call) and _call_name(f.value) == "super"))
        passes = any(self.ev(a) is not None for a in c.args if not isinstance(a, ast.Starred)) or any(
            self.ev(k.value) is not None for k in c.keywords)
        if own and not passes and not self.is_runner:
            return  # other classes' internal calls matter only when they pass a model along
        if not (own or passes or (isinstance(f, ast.Attribute) and self.ev(f.value) is not None)):
            return
        if isinstance(f, ast.Subscript) and passes:
            for target in self.table_callees(f):  # runners[self.device](self)
                self.edge_to(c, target, passes)
            return
        target = self.callee(c)
        if target is not None:
            self.edge_to(c, target, passes)

    def table_callees(self, f: ast.Subscript) -> list:
        """Classes a local lookup table holds: ``runners = {"cpu": CPURunner, ...}; runners[k](..)``."""
        if not isinstance(f.value, ast.Name):
            return []
        out = []
        for targets, value in self.d.assigns(self.info.node):
            if not any(isinstance(t, ast.Name) and t.id == f.value.id for t in targets):
                continue
            for n in ast.walk(value):
                if isinstance(n, ast.Name):
                    sym = self.d.tree.resolve(self.mod.name, n.id)
                    if sym.kind == "class":
                        target = self._from_symbol(sym)
                        if target is not None and target not in out:
                            out.append(target)
                            if _EVENT_NAMES.search(n.id):
                                self.events.append(("named", n.id, f.lineno, self.mod.relpath))
        return out

    def edge_to(self, c: ast.Call, target, passes: bool) -> None:
        mod, cls, name, skip_self, receiver_root = target
        key0 = self.d.key_for(mod, cls, name, {})
        if key0 is None:
            return
        fnode = self.d.funcs[key0].node
        params = [a.arg for a in fnode.args.posonlyargs + fnode.args.args]
        kwonly = [a.arg for a in fnode.args.kwonlyargs]
        is_static = any((dotted(dec) or "").endswith("staticmethod") for dec in fnode.decorator_list)
        if skip_self and params and not is_static:
            params = params[1:]
        bindings = {}
        for p, a in zip(params, c.args):
            if isinstance(a, ast.Starred):
                break
            v = self.ev(a)
            if v is not None and not _same_as_pattern(p, v):
                bindings[p] = v
        for kw in c.keywords:
            if kw.arg and (kw.arg in params or kw.arg in kwonly):
                v = self.ev(kw.value)
                if v is not None and not _same_as_pattern(kw.arg, v):
                    bindings[kw.arg] = v
        if not bindings and not receiver_root and not passes:
            return
        key = self.d.key_for(mod, cls, name, bindings) if bindings else key0
        if key is None:
            return
        self.events.append(("edge", key, c.lineno))
        fs = self.features()
        self.edge_features.setdefault(key, set()).update(fs - {"core"})
        if self.try_guard:
            self.guarded_edges.add(key)
        self.call_facts.append((key, dict(self.known)))
        if key not in self.d.results:
            self.d.enqueue(key)

    def callee(self, c: ast.Call):
        """(module, class or None, function name, skip_self, receiver is a followed object) or None."""
        f = c.func
        if isinstance(f, ast.Name):
            sym = self.d.tree.resolve(self.mod.name, f.id)
            return self._from_symbol(sym)
        if not isinstance(f, ast.Attribute):
            return None
        recv = f.value
        if isinstance(recv, ast.Call) and _call_name(recv) == "super" and self.cls is not None:
            owner, node = self.d.method_node(self.cls, f.attr, skip_first=True)
            if node is not None:
                return self.d.tree.module(owner.module), owner, f.attr, True, True
            return None
        if isinstance(recv, ast.Name) and self.self_name and recv.id == self.self_name and self.cls:
            owner, node = self.d.method_node(self.cls, f.attr)
            if node is not None:
                return self.d.tree.module(owner.module), owner, f.attr, True, True
            return None
        base = self.ev(recv)
        if base is not None and base.kind == "runner" and self.d.runner_class is not None:
            owner, node = self.d.method_node(self.d.runner_class, f.attr)
            if node is not None:
                return self.d.tree.module(owner.module), owner, f.attr, True, True
            return None
        d = dotted(recv)
        if d is not None and base is None:
            sym = self.d.tree.resolve_dotted(self.mod.name, d)
            if sym.kind == "module":
                return self._from_symbol(self.d.tree.resolve(sym.module, f.attr))
            if sym.kind == "class":  # Class.method(...) / Class.classmethod(...)
                ref = ClassRef(sym.module, sym.name)
                owner, node = self.d.method_node(ref, f.attr)
                if node is not None:
                    return self.d.tree.module(owner.module), owner, f.attr, True, False
        return None

    def _from_symbol(self, sym):
        if sym.kind == "function":
            mod = self.d.tree.module(sym.module)
            return (mod, None, sym.name, False, False) if mod else None
        if sym.kind == "class":
            ref = ClassRef(sym.module, sym.name)
            owner, node = self.d.method_node(ref, "__init__")
            if node is not None:
                return self.d.tree.module(owner.module), owner, "__init__", True, False
        return None


def _required_first(a: str, b: str) -> str:
    """The guard two call sites agree on: one that still requires the member wins."""
    return a if a in ("checked", "asserted") or b not in ("checked", "asserted") else b


_LEAVES = (ast.Name, ast.Constant, ast.operator, ast.cmpop, ast.boolop, ast.unaryop, ast.expr_context)


def _after_exit(guard: str, how: str) -> str:
    """The fact that holds after ``if <test>: raise/return`` for the code that follows."""
    return "checked" if how == "raise" and guard == "hasattr" else guard


def _same_as_pattern(param: str, v: Val) -> bool:
    r = _NAME_ROOTS.get(param)
    return r is not None and (r[0], r[1]) == (v.kind, v.role)


def _features_of(text: str) -> set[str]:
    out = set()
    for name, rx in _FEATURE_RULES:
        t = text
        if name == "cuda-graph":
            t = re.sub(r"piecewise_cuda_graphs?|piecewise_cuda_graph_runner", "", t, flags=re.I)
        if rx.search(t):
            out.add(name)
    return out or {"core"}


def _call_name(c: ast.Call) -> str:
    return dotted(c.func) or ""


def _const_str(e) -> bool:
    return isinstance(e, ast.Constant) and isinstance(e.value, str)


def _exits(stmts) -> str | None:
    """How a block always leaves: "raise", "return" (or continue/break), or None."""
    if not stmts:
        return None
    last = stmts[-1]
    if isinstance(last, ast.Raise):
        return "raise"
    if isinstance(last, (ast.Return, ast.Continue, ast.Break)):
        return "return"
    if isinstance(last, ast.If) and last.orelse:
        a, b = _exits(last.body), _exits(last.orelse)
        if a and b:
            return "raise" if "raise" in (a, b) else "return"
    return None


def _handler_guards(h: ast.ExceptHandler) -> bool:
    """An except clause that swallows AttributeError (does not re-raise)."""
    names = []
    if h.type is None:
        names = ["BaseException"]
    elif isinstance(h.type, ast.Tuple):
        names = [(dotted(e) or "").rpartition(".")[2] for e in h.type.elts]
    else:
        names = [(dotted(h.type) or "").rpartition(".")[2]]
    if not any(n in _GUARD_EXC for n in names):
        return False
    return not any(isinstance(n, ast.Raise) for s in h.body for n in ast.walk(s))

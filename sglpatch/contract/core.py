"""The contract, per-model verdicts and the report: ``check_tree(tree, models=None) -> Report``."""

from __future__ import annotations

import hashlib
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from . import eagle3
from .classes import ClassIndex, ClassRef, Lookup
from .derive import FEATURES, PATTERNS, Access, Deriver
from .forwards import inner_reads
from .production import Launch
from .tree import SourceTree
from .wiring import WiringResult, check_wiring

# The models our series targets: checked by default and by the named check.
DEFAULT_MODELS = ("KimiK25ForConditionalGeneration",)

# Sanity limits for the derived contract: fewer target members, or no access through one of
# these anchor patterns, means the tree's layout is no longer recognised.
MIN_TARGET_MEMBERS = 8
ANCHOR_PATTERNS = ("runner-self", "target-worker")


@dataclass
class ContractItem:
    member: str
    param: str | None  # set for a signature probe: forward(pp_proxy_tensors)
    on_class: bool  # only ever accessed on the model class (classmethod), not an instance
    sites: list[Access] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.member}({self.param})" if self.param else self.member

    @property
    def required(self) -> bool:
        return any(s.required for s in self.sites)

    @property
    def required_sites(self) -> list[Access]:
        return [s for s in self.sites if s.required]

    @property
    def features(self) -> list[str]:
        sites = self.required_sites or self.sites
        fs = set().union(*(s.features for s in sites)) if sites else set()
        return [f for f in FEATURES + ("core",) if f in fs]

    @property
    def guards(self) -> list[str]:
        return sorted({s.guard for s in self.sites if s.guard})

    def to_json(self) -> dict:
        return {"member": self.member, "param": self.param, "on_class": self.on_class,
                "required": self.required, "features": self.features,
                "sites": [{"location": s.location, "guard": s.guard, "kind": s.kind,
                           "function": s.function, "pattern": s.pattern, "role": s.role,
                           "features": sorted(s.features), "detail": s.detail or None,
                           "via": list(s.via) or None, "conditions": list(s.conditions) or None}
                          for s in self.sites]}


@dataclass
class Contract:
    target: dict[str, ContractItem]
    draft: dict[str, ContractItem]
    patterns: dict[str, int]
    problems: list[str]

    def to_json(self) -> dict:
        return {"target": [i.to_json() for i in self.target.values()],
                "draft": [i.to_json() for i in self.draft.values()],
                "patterns": self.patterns, "problems": self.problems}


def build_contract(accesses: list[Access], *, min_members: int = MIN_TARGET_MEMBERS,
                   anchors=ANCHOR_PATTERNS) -> Contract:
    target: dict[str, ContractItem] = {}
    draft: dict[str, ContractItem] = {}
    patterns = Counter({p: 0 for p in PATTERNS})
    for a in accesses:
        patterns[a.pattern] += 1
        param = a.detail if a.kind == "signature" else None
        on_class = a.kind.startswith("class-")
        for role, book in (("target", target), ("draft", draft)):
            if a.role not in (role, "any"):
                continue
            label = f"{a.member}({param})" if param else a.member
            item = book.get(label)
            if item is None:
                item = book[label] = ContractItem(a.member, param, on_class)
            item.on_class = item.on_class and on_class
            item.sites.append(a)
    problems = []
    if len(target) < min_members:
        problems.append(f"the derived target contract has only {len(target)} members (expected at "
                        f"least {min_members}): the tree's layout is not recognised")
    for p in anchors:
        if not patterns.get(p):
            problems.append(f"access pattern '{p}' ({PATTERNS[p]}) matched nothing: "
                            "the runtime layout changed; update PATTERNS in sglpatch/contract/access.py")
    order = sorted(target.values(), key=lambda i: (not i.required, i.label))
    return Contract({i.label: i for i in order},
                    {i.label: i for i in sorted(draft.values(), key=lambda i: (not i.required, i.label))},
                    dict(patterns), problems)


# ---------------------------------------------------------------- per-model verdicts

@dataclass
class MemberStatus:
    item: ContractItem
    verdict: str  # ok | gap | optional | unsupported | unverified | unknown
    lookup: Lookup
    inner: list[tuple[str, Lookup]] = field(default_factory=list)  # (inner class, its lookup)

    @property
    def inner_has(self) -> bool | None:
        if not self.inner:
            return None
        return any(lk.ok for _, lk in self.inner)

    def to_json(self) -> dict:
        return {"member": self.item.label, "verdict": self.verdict, "required": self.item.required,
                "features": self.item.features,
                "provided_by": self.lookup.owner, "kind": self.lookup.kind,
                "location": self.lookup.location, "note": self.lookup.note or None,
                "inner_has": self.inner_has,
                "inner": [{"class": c, "status": lk.status, "location": lk.location} for c, lk in self.inner],
                "sites": [s.location for s in (self.item.required_sites or self.item.sites)]}


@dataclass
class ModelReport:
    name: str
    qualname: str
    location: str
    wrapper: bool
    inners: list[dict]  # attr, classes, location
    statuses: list[MemberStatus]
    draft_statuses: list[MemberStatus]
    draft_present: set[str] = field(default_factory=set)  # draft-only members the class has
    eagle3: list = field(default_factory=list)  # eagle3.Status per EAGLE-3 interface member

    @property
    def gaps(self) -> list[MemberStatus]:
        """Members the runtime requires that fail here: missing (``gap``), or present but reading
        on the inner model what it lacks (``broken``)."""
        return [s for s in self.statuses if s.verdict in ("gap", "broken")]

    def by(self, verdict: str) -> list[MemberStatus]:
        return [s for s in self.statuses if s.verdict == verdict]

    @property
    def eagle3_failures(self) -> list:
        return [s for s in self.eagle3 if s.failed]

    def to_json(self, in_production=lambda status: True) -> dict:
        gaps = self.gaps
        return {"name": self.name, "class": self.qualname, "location": self.location,
                "wrapper": self.wrapper, "inner": self.inners, "gaps": len(gaps),
                "members": [s.to_json() | ({"production": in_production(s)} if s in gaps else {})
                            for s in self.statuses if s.verdict != "ok"],
                "ok": [s.item.label for s in self.statuses if s.verdict == "ok"],
                "draft_role_missing": [s.to_json() for s in self.draft_statuses],
                "eagle3_interface": [s.to_json() for s in self.eagle3],
                "eagle3_failures": len(self.eagle3_failures)}


def _lookup(ci: ClassIndex, ref: ClassRef, item: ContractItem) -> Lookup:
    if item.param is None:
        return ci.lookup(ref, item.member, on_class=item.on_class)
    m, where = ci.method_params(ref, item.member)
    if m is None:
        base = ci.lookup(ref, item.member)
        if base.status == "present" and base.owner == "torch.nn.Module":
            return Lookup("missing", None, None, None, f"{item.member} is torch's default")
        return Lookup(base.status if base.status != "present" else "unknown", base.owner, base.kind,
                      base.location, base.note)
    if item.param in m.params or m.varkw:
        return Lookup("present", None, "parameter" if item.param in m.params else "**kwargs", where)
    return Lookup("missing", None, None, where, f"{item.member}() has no parameter {item.param}")


def _broken_read(ci: ClassIndex, ref: ClassRef, item: ContractItem, lk: Lookup) -> MemberStatus | None:
    """The wrapper's own method reads ``self.<inner>.<name>`` and an inner class lacks ``name``:
    present, and still an AttributeError on the path (0.5.9's DotsOCR ``get_embed_and_head``)."""
    if lk.owner != ref.qualname or item.param is not None:
        return None
    inners = {inner.attr: inner.lm for inner in ci.inner_models(ref)}
    for attr, name, line in inner_reads(ci.tree, ci, ref, item.member):
        looks = [(c.name, ci.lookup(c, name)) for c in inners.get(attr, [])]
        lacking = [c for c, x in looks if not x.ok]
        if lacking:
            note = f"it reads self.{attr}.{name}, which {', '.join(lacking)} lacks"
            return MemberStatus(item, "broken", Lookup(lk.status, lk.owner, lk.kind, ci.location(ref, line), note),
                                looks)
    return None


def check_model(ci: ClassIndex, ref: ClassRef, contract: Contract,
                runtime_candidates=lambda: []) -> ModelReport:
    """``runtime_candidates()``: the classes an inner model chosen at run time may be (every
    language model SGLang loads), asked only for such a wrapper."""
    wrapper = ci.is_wrapper(ref)
    inners = ci.inner_models(ref) if wrapper else []
    inner_refs: list[ClassRef] = []
    inner_json = []
    for inn in inners:
        names = [c.name if isinstance(c, ClassRef) else ("<runtime choice>" if c == "?" else c.dotted)
                 for c in inn.candidates]
        inner_json.append({"attr": inn.attr, "classes": names,
                           "location": ci.location(ref, inn.line) if inn.line else None})
        for c in inn.lm:
            if c not in inner_refs:
                inner_refs.append(c)
    dynamic = wrapper and not inner_refs
    if dynamic:  # self.language_model = lm_cls(...): any language model SGLang loads may be it
        inner_refs = list(runtime_candidates())
        for j in inner_json:
            j["candidates"] = len(inner_refs)

    draft_present: set[str] = set()

    def status(item: ContractItem, draft: bool) -> MemberStatus | None:
        lk = _lookup(ci, ref, item)
        if lk.ok:
            if draft:
                draft_present.add(item.label)
                return None
            broken = _broken_read(ci, ref, item, lk) if item.required and not dynamic else None
            return broken or MemberStatus(item, "ok", lk)
        inner = [(c.name, _lookup(ci, c, item)) for c in inner_refs]
        inner_has = any(x.ok for _, x in inner)
        if dynamic:  # only the candidates that have it matter to the verdict and the fix
            inner = [(c, x) for c, x in inner if x.ok][:3]
        if lk.status == "unknown":
            verdict = "unknown"
        elif draft:
            return MemberStatus(item, "draft-role", lk, inner) if inner_has else None
        elif item.required:
            verdict = "gap" if inner_has else ("unverified" if dynamic and not inner_refs else "unsupported")
            if not wrapper:
                verdict = "unsupported"
        else:
            if not inner_has:
                return None
            verdict = "optional"
        return MemberStatus(item, verdict, lk, inner)

    statuses = [s for s in (status(i, False) for i in contract.target.values()) if s]
    target_labels = set(contract.target)
    draft_statuses = [s for s in (status(i, True) for i in contract.draft.values()
                                  if i.label not in target_labels and i.required) if s]
    if not wrapper:  # a language model itself: no inner model has anything to offer
        draft_statuses = []
    order = {"gap": 0, "broken": 0, "unverified": 1, "unknown": 2, "optional": 3, "unsupported": 4, "ok": 5}
    statuses.sort(key=lambda s: (order.get(s.verdict, 9), s.item.label))
    return ModelReport(ref.name, ref.qualname, ci.location(ref), wrapper, inner_json, statuses,
                       draft_statuses, draft_present)


# ---------------------------------------------------------------- the report

@dataclass
class Report:
    tree: str
    version: str | None
    contract: Contract
    models: list[ModelReport]
    wiring: WiringResult
    wrappers: list[str]  # every wrapper model found in the tree
    seconds: float = 0.0
    syntax_errors: list[str] = field(default_factory=list)
    launch: Launch | None = None  # the production launch; None: every gap counts as on its path

    @property
    def problems(self) -> list[str]:
        return self.contract.problems

    @property
    def gaps(self) -> int:
        return sum(len(m.gaps) for m in self.models)

    def in_production(self, status: MemberStatus) -> bool:
        return self.launch is None or self.launch.takes(status.item)

    @property
    def production_gaps(self) -> int:
        return sum(self.in_production(g) for m in self.models for g in m.gaps)

    @property
    def exit_code(self) -> int:
        """0 clean; 1 what can stop the production launch (a gap on its path, a failing EAGLE-3
        interface member, an underived contract); 3 gaps only on paths it does not take."""
        if self.problems or self.production_gaps or self.eagle3_failures:
            return 1
        return 3 if self.gaps else 0

    @property
    def eagle3_failures(self) -> int:
        return sum(len(m.eagle3_failures) for m in self.models)

    @property
    def passed(self) -> bool:
        return not self.problems and not self.gaps and not self.eagle3_failures

    def model(self, name: str) -> ModelReport | None:
        return next((m for m in self.models if m.name == name or m.qualname == name), None)

    def to_json(self) -> dict:
        return {"tree": self.tree, "version": self.version, "passed": self.passed, "gaps": self.gaps,
                "production_gaps": self.production_gaps, "other_gaps": self.gaps - self.production_gaps,
                "production": self.launch.to_json() if self.launch else None,
                "eagle3_failures": self.eagle3_failures,
                "problems": self.problems, "models": [m.to_json(self.in_production) for m in self.models],
                "wiring": self.wiring.to_json(), "wrappers": self.wrappers,
                "contract": self.contract.to_json(), "seconds": round(self.seconds, 3),
                "syntax_errors": self.syntax_errors}


class Analysis:
    """Everything derived from one tree, computed once and shared by the API and named checks."""

    def __init__(self, tree: Path, *, cache: bool = True):
        self.path = Path(tree)
        cache_file = _cache_file(self.path) if cache else None
        self.tree = SourceTree(self.path, cache=cache_file)
        self.classes = ClassIndex(self.tree)
        self._deriver: Deriver | None = None
        self._contract: Contract | None = None
        self._wiring: WiringResult | None = None
        self._rewrites: tuple | None = None
        self._language_models: list[ClassRef] | None = None

    @property
    def deriver(self) -> Deriver:
        if self._deriver is None:
            self._deriver = Deriver(self.tree, self.classes)
            self._deriver.run()
        return self._deriver

    @property
    def contract(self) -> Contract:
        if self._contract is None:
            self._contract = build_contract(self.deriver.accesses())
        return self._contract

    @property
    def wiring(self) -> WiringResult:
        if self._wiring is None:
            self._wiring = check_wiring(self.deriver)
        return self._wiring

    def eagle3_requirements(self, model: str | None = None) -> list:
        """The EAGLE-3 interface (:mod:`.eagle3`) of this tree, for ``model`` (draft side included
        unless the tree rewrites that architecture for drafts)."""
        if self._rewrites is None:
            self._rewrites = (eagle3.draft_rewrites(self.tree),)
        return eagle3.requirements(self.contract, model, self._rewrites[0])

    def version(self) -> str | None:
        """The release a tree holds, from sdist metadata or the wheel's generated _version.py."""
        pkg_info = self.path / "python" / "PKG-INFO"
        if pkg_info.is_file():
            m = re.search(r"^Version:\s*(\S+)", pkg_info.read_text(errors="replace"), re.M)
            if m:
                return m.group(1)
        p = self.path / "python" / "sglang" / "_version.py"
        if p.is_file():
            m = re.search(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""",
                          p.read_text(errors="replace"), re.M)
            if m:
                return m.group(1)
        return None

    def resolve_model(self, name: str) -> ClassRef:
        refs = self.classes.by_name(name)
        models = [r for r in refs if r.module.startswith("sglang.srt.models.")]
        if not (models or refs):
            raise UserError(f"no model class '{name}' in {self.path}",
                            "name a class defined under python/sglang/srt/models/ "
                            "(see `check --all-models`)")
        return (models or refs)[0]

    def wrappers(self, workers: int = 2, *, prefilter: bool = True) -> list[ClassRef]:
        """Wrapper models SGLang can load (named in an ``EntryClass``; all, if none is).

        ``prefilter``: parse only model files whose text can define a wrapper (see
        ``wrapper_candidates``); the release sweep checks it finds the same set as a full parse.
        """
        mods = self.tree.package_modules("sglang.srt.models")
        entry = entry_class_names(mods)
        if prefilter:
            mods = wrapper_candidates(mods)
        # the model modules they import (inner models, bases) are needed too: outline all at once
        deps = []
        for m in mods:
            for name in _MODEL_IMPORT.findall(m.source):
                dep = self.tree.module(name)
                if dep is not None and dep not in mods and dep not in deps:
                    deps.append(dep)
        return [r for r in self._model_classes(mods, entry, workers, also=deps) if self.classes.is_wrapper(r)]

    def language_models(self, workers: int = 2) -> list[ClassRef]:
        """Every language model SGLang can load (named in an ``EntryClass``, not a wrapper)."""
        if self._language_models is None:
            mods = [m for m in self.tree.package_modules("sglang.srt.models") if "EntryClass" in m.source]
            refs = self._model_classes(mods, entry_class_names(mods), workers)
            self._language_models = [r for r in refs if self.classes.is_causal_lm(r) and not self.classes.is_wrapper(r)]
        return self._language_models

    def _model_classes(self, mods, entry: set[str], workers: int, also=()) -> list[ClassRef]:
        """The classes of ``mods`` that an ``EntryClass`` names (every class, if none is named),
        with the outlines of ``mods`` and ``also`` loaded at once."""
        self.tree.preload_outlines(list(mods) + list(also), workers=workers)
        return [ClassRef(m.name, n) for m in mods for n in m.outline.classes if not entry or n in entry]

    def save(self) -> None:
        self.tree.save_cache()


_CLASS_LINE = re.compile(r"^class\s+(\w+)\s*(?:\(([^)]*)\))?\s*:", re.M)
_SETS_LOGITS = re.compile(r"self\.logits_processor\s*=")
_CTOR_CALL = re.compile(r"\b([A-Z]\w*)\s*\(")
_DYNAMIC_INNER = re.compile(r"self\.(language_model|llm)\s*=")
_MODEL_IMPORT = re.compile(r"^\s*from\s+(sglang\.srt\.models\.[\w.]+)\s+import", re.M)
_ENTRY = re.compile(r"^EntryClass\s*(?::[^=]*)?=\s*(\[[^\]]*\]|\([^)]*\)|[\w.]+)", re.M)


def entry_class_names(mods) -> set[str]:
    """Class names listed in any module's ``EntryClass`` (read from the text, no parsing)."""
    names: set[str] = set()
    for m in mods:
        if "EntryClass" in m.source:
            for block in _ENTRY.findall(m.source):
                names.update(x.rpartition(".")[2] for x in re.findall(r"[\w.]+", block))
    return names


def wrapper_candidates(mods) -> list:
    """Model modules that can define a wrapper, judged from their text (a cheap superset).

    Per class: a language model assigns ``self.logits_processor`` (or inherits from one); a class
    is wrapper-like when its body constructs a language model or a wrapper-like class, assigns a
    runtime-chosen ``self.language_model``/``self.llm``, defines ``__getattr__``, or inherits from
    a wrapper-like class. Other modules are parsed only when a candidate needs them (bases, inner
    classes). The release sweep checks this finds the same wrappers as a full parse.
    """
    info = []  # (module, class, bases, sets_logits, constructed names, dynamic)
    for m in mods:
        t = m.source
        found = list(_CLASS_LINE.finditer(t))
        for cur, nxt in zip(found, found[1:] + [None]):
            body = t[cur.end(): nxt.start() if nxt else len(t)]
            bases = {b.strip().rpartition(".")[2].split("[")[0] for b in (cur.group(2) or "").split(",")}
            info.append((m, cur.group(1), bases - {""}, bool(_SETS_LOGITS.search(body)),
                         set(_CTOR_CALL.findall(body)),
                         bool(_DYNAMIC_INNER.search(body)) or "def __getattr__" in body))
    lm = {c for _, c, _, sets, _, _ in info if sets}
    wrap = {c for _, c, _, _, _, dyn in info if dyn}
    changed = True
    while changed:
        changed = False
        for _, c, bases, _, ctors, _ in info:
            if c not in lm and bases & lm:
                lm.add(c)
                changed = True
            if c not in wrap and (ctors & (lm | wrap) or bases & wrap):
                wrap.add(c)
                changed = True
    out = []
    for m, c, *_ in info:
        if c in wrap and m not in out:
            out.append(m)
    return out


def _cache_file(tree: Path) -> Path | None:
    try:
        from ..cache import cache_dir
        digest = hashlib.sha1(str(tree.resolve()).encode()).hexdigest()[:16]
        return cache_dir() / "contract" / f"outlines-{digest}.pickle"
    except Exception:
        return None


def check_tree(tree: Path, models=None, *, all_models: bool = False, cache: bool = True,
               analysis: Analysis | None = None, launch: Launch | None = None) -> Report:
    """Check ``tree`` (an upstream-shaped checkout) against the contract derived from it.

    ``models``: class names to check (default: ``DEFAULT_MODELS``); ``all_models``: every wrapper
    model in the tree instead (plus any named); ``launch``: the production launch, to tell the
    gaps on its path from the rest (``production.production_launch``).
    """
    started = time.perf_counter()
    an = analysis or Analysis(tree, cache=cache)
    contract = an.contract
    names = list(models) if models else ([] if all_models else list(DEFAULT_MODELS))
    refs = [an.resolve_model(n) for n in names]
    wrapper_refs = an.wrappers() if all_models else []
    for r in wrapper_refs:
        if r not in refs:
            refs.append(r)
    reports = [check_model(an.classes, r, contract, an.language_models) for r in refs]
    for m in reports[:len(names)]:  # the models asked for (the default one included)
        m.eagle3 = eagle3.interface(m, an.eagle3_requirements(m.name))
    wrappers = sorted(r.name for r in wrapper_refs) if all_models else []
    report = Report(str(an.path), an.version(), contract, reports, an.wiring, wrappers,
                    syntax_errors=list(an.tree.syntax_errors), launch=launch)
    an.save()
    report.seconds = time.perf_counter() - started
    return report

"""The report over a tree: ``check_tree(tree, models=None) -> Report``, and the ``Analysis`` it
runs on (the tree, its class index, the walk, the contract, the wrappers SGLang can load).
The contract itself is :mod:`.terms`, the per-model verdicts :mod:`.verdicts`."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from sglpatch.contract.flow.derive import Deriver
from sglpatch.contract.index.classes import ClassIndex, ClassRef
from sglpatch.contract.parse.tree import SourceTree
from sglpatch.contract.rules import eagle3
from sglpatch.contract.rules.production import Launch
from sglpatch.contract.rules.terms import Contract, build_contract
from sglpatch.contract.rules.verdicts import MemberStatus, ModelReport, check_model
from sglpatch.contract.rules.wiring import WiringResult, check_wiring
from sglpatch.errors import UserError

# The models our series targets: checked by default and by the named check.
DEFAULT_MODELS = ("KimiK25ForConditionalGeneration",)


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
        return {
            "tree": self.tree,
            "version": self.version,
            "passed": self.passed,
            "gaps": self.gaps,
            "production_gaps": self.production_gaps,
            "other_gaps": self.gaps - self.production_gaps,
            "production": self.launch.to_json() if self.launch else None,
            "eagle3_failures": self.eagle3_failures,
            "problems": self.problems,
            "models": [m.to_json(self.in_production) for m in self.models],
            "wiring": self.wiring.to_json(),
            "wrappers": self.wrappers,
            "contract": self.contract.to_json(),
            "seconds": round(self.seconds, 3),
            "syntax_errors": self.syntax_errors,
        }


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
            m = re.search(
                r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", p.read_text(errors="replace"), re.M
            )
            if m:
                return m.group(1)
        return None

    def resolve_model(self, name: str) -> ClassRef:
        refs = self.classes.by_name(name)
        models = [r for r in refs if r.module.startswith("sglang.srt.models.")]
        if not (models or refs):
            raise UserError(
                f"no model class '{name}' in {self.path}",
                "name a class defined under python/sglang/srt/models/ (see `check --all-models`)",
            )
        return (models or refs)[0]

    def wrappers(self, workers: int = 2, *, prefilter: bool = True) -> list[ClassRef]:
        """Wrapper models SGLang can load (named in an ``EntryClass``; all, if none is).

        ``prefilter``: parse only model files whose text can define a wrapper (see
        ``wrapper_candidates``); the release sweep checks it finds the same set as a full parse.
        """
        mods = self.tree.package_modules("sglang.srt.models")
        entry = entry_class_names(mods)
        if prefilter:
            mods = wrapper_candidates(mods, lambda m: self.tree.memo("classes/", m, class_facts))
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


def wrapper_candidates(mods, facts=None) -> list:
    """Model modules that can define a wrapper, judged from their text (a cheap superset).

    Per class: a language model assigns ``self.logits_processor`` (or inherits from one); a class
    is wrapper-like when its body constructs a language model or a wrapper-like class, assigns a
    runtime-chosen ``self.language_model``/``self.llm``, defines ``__getattr__``, or inherits from
    a wrapper-like class. Other modules are parsed only when a candidate needs them (bases, inner
    classes). The release sweep checks this finds the same wrappers as a full parse. ``facts``:
    how to get a module's :func:`class_facts` (the tree's cache, or from its text each time).
    """
    facts = facts or class_facts
    info = [(m, *fact) for m in mods for fact in facts(m)]
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


def class_facts(mod) -> list[tuple[str, frozenset, bool, frozenset, bool]]:
    """(class, base names, sets the logits processor, names it calls capitalised, holds a
    runtime-chosen inner model or forwards with ``__getattr__``) for each class of ``mod``'s text."""
    t = mod.source
    found = list(_CLASS_LINE.finditer(t))
    out = []
    for cur, nxt in zip(found, found[1:] + [None]):
        start, end = cur.end(), nxt.start() if nxt else len(t)
        bases = {b.strip().rpartition(".")[2].split("[")[0] for b in (cur.group(2) or "").split(",")}
        out.append(
            (
                cur.group(1),
                frozenset(bases - {""}),
                bool(_SETS_LOGITS.search(t, start, end)),
                frozenset(_CTOR_CALL.findall(t, start, end)),
                bool(_DYNAMIC_INNER.search(t, start, end)) or t.find("def __getattr__", start, end) >= 0,
            )
        )
    return out


def _cache_file(tree: Path) -> Path | None:
    try:
        from sglpatch.cache import cache_dir

        digest = hashlib.sha1(str(tree.resolve()).encode()).hexdigest()[:16]
        return cache_dir() / "contract" / f"outlines-{digest}.pickle"
    except Exception:
        return None


def check_tree(
    tree: Path,
    models=None,
    *,
    all_models: bool = False,
    cache: bool = True,
    analysis: Analysis | None = None,
    launch: Launch | None = None,
) -> Report:
    """Check ``tree`` (an upstream-shaped checkout) against the contract derived from it.

    ``models``: class names to check (default: ``DEFAULT_MODELS``); ``all_models``: every wrapper
    model in the tree instead (plus any named); ``launch``: the production launch, to tell the
    gaps on its path from the rest (``production.production_launch``).
    """
    with _no_cycle_collection():
        return _check_tree(tree, models, all_models, cache, analysis, launch)


@contextlib.contextmanager
def _no_cycle_collection():
    """The check builds a large graph of ASTs and outlines; the cycle collector, run every few
    hundred allocations, would walk it over and over (at 0.5.23: warm 2.0 -> 1.7 s, cold 7.8 ->
    4.4 s, the same peak memory)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check_tree(tree, models, all_models, cache, analysis, launch) -> Report:
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
    for m in reports[: len(names)]:  # the models asked for (the default one included)
        m.eagle3 = eagle3.interface(m, an.eagle3_requirements(m.name))
    wrappers = sorted(r.name for r in wrapper_refs) if all_models else []
    report = Report(
        str(an.path),
        an.version(),
        contract,
        reports,
        an.wiring,
        wrappers,
        syntax_errors=list(an.tree.syntax_errors),
        launch=launch,
    )
    an.save()
    report.seconds = time.perf_counter() - started
    return report

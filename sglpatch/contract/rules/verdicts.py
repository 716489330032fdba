"""Per-model verdicts: what each contract member is on one model class (``ok``, ``gap``,
``broken``, ``optional``, ``unsupported``, ``unverified``, ``unknown``), from the class index's
lookup on the class and on its inner models (``check_model``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sglpatch.contract.index.classes import ClassIndex, ClassRef, Lookup
from sglpatch.contract.index.forwards import inner_reads
from sglpatch.contract.rules.terms import Contract, ContractItem


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
        return {
            "member": self.item.label,
            "verdict": self.verdict,
            "required": self.item.required,
            "features": self.item.features,
            "provided_by": self.lookup.owner,
            "kind": self.lookup.kind,
            "location": self.lookup.location,
            "note": self.lookup.note or None,
            "inner_has": self.inner_has,
            "inner": [{"class": c, "status": lk.status, "location": lk.location} for c, lk in self.inner],
            "sites": [s.location for s in (self.item.required_sites or self.item.sites)],
        }


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
        return {
            "name": self.name,
            "class": self.qualname,
            "location": self.location,
            "wrapper": self.wrapper,
            "inner": self.inners,
            "gaps": len(gaps),
            "members": [
                s.to_json() | ({"production": in_production(s)} if s in gaps else {})
                for s in self.statuses
                if s.verdict != "ok"
            ],
            "ok": [s.item.label for s in self.statuses if s.verdict == "ok"],
            "draft_role_missing": [s.to_json() for s in self.draft_statuses],
            "eagle3_interface": [s.to_json() for s in self.eagle3],
            "eagle3_failures": len(self.eagle3_failures),
        }


def _lookup(ci: ClassIndex, ref: ClassRef, item: ContractItem) -> Lookup:
    if item.param is None:
        return ci.lookup(ref, item.member, on_class=item.on_class)
    m, where = ci.method_params(ref, item.member)
    if m is None:
        base = ci.lookup(ref, item.member)
        if base.status == "present" and base.owner == "torch.nn.Module":
            return Lookup("missing", None, None, None, f"{item.member} is torch's default")
        return Lookup(
            base.status if base.status != "present" else "unknown", base.owner, base.kind, base.location, base.note
        )
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
            return MemberStatus(
                item, "broken", Lookup(lk.status, lk.owner, lk.kind, ci.location(ref, line), note), looks
            )
    return None


def check_model(ci: ClassIndex, ref: ClassRef, contract: Contract, runtime_candidates=lambda: []) -> ModelReport:
    """``runtime_candidates()``: the classes an inner model chosen at run time may be (every
    language model SGLang loads), asked only for such a wrapper."""
    wrapper = ci.is_wrapper(ref)
    inners = ci.inner_models(ref) if wrapper else []
    inner_refs: list[ClassRef] = []
    inner_json: list[dict[str, object]] = []
    for inn in inners:
        names = [
            c.name if isinstance(c, ClassRef) else ("<runtime choice>" if c == "?" else c.dotted)
            for c in inn.candidates
        ]
        inner_json.append({"attr": inn.attr, "classes": names, "location": inn.location})
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
    draft_statuses = [
        s
        for s in (status(i, True) for i in contract.draft.values() if i.label not in target_labels and i.required)
        if s
    ]
    if not wrapper:  # a language model itself: no inner model has anything to offer
        draft_statuses = []
    order = {"gap": 0, "broken": 0, "unverified": 1, "unknown": 2, "optional": 3, "unsupported": 4, "ok": 5}
    statuses.sort(key=lambda s: (order.get(s.verdict, 9), s.item.label))
    return ModelReport(
        ref.name, ref.qualname, ci.location(ref), wrapper, inner_json, statuses, draft_statuses, draft_present
    )

"""The contract: every member the runtime reads or calls on the target and draft models, one
``ContractItem`` per member (or probed parameter) with the access sites the walk found
(:mod:`.derive`), and the sanity limits that tell a recognised tree layout from an unknown one."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sglpatch.contract.flow.derive import FEATURES, PATTERNS, Access

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
        return {
            "member": self.member,
            "param": self.param,
            "on_class": self.on_class,
            "required": self.required,
            "features": self.features,
            "sites": [
                {
                    "location": s.location,
                    "guard": s.guard,
                    "kind": s.kind,
                    "function": s.function,
                    "pattern": s.pattern,
                    "role": s.role,
                    "features": sorted(s.features),
                    "detail": s.detail or None,
                    "via": list(s.via) or None,
                    "conditions": list(s.conditions) or None,
                }
                for s in self.sites
            ],
        }


@dataclass
class Contract:
    target: dict[str, ContractItem]
    draft: dict[str, ContractItem]
    patterns: dict[str, int]
    problems: list[str]

    def to_json(self) -> dict:
        return {
            "target": [i.to_json() for i in self.target.values()],
            "draft": [i.to_json() for i in self.draft.values()],
            "patterns": self.patterns,
            "problems": self.problems,
        }


def build_contract(
    accesses: list[Access], *, min_members: int = MIN_TARGET_MEMBERS, anchors=ANCHOR_PATTERNS
) -> Contract:
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
        problems.append(
            f"the derived target contract has only {len(target)} members (expected at "
            f"least {min_members}): the tree's layout is not recognised"
        )
    for p in anchors:
        if not patterns.get(p):
            problems.append(
                f"access pattern '{p}' ({PATTERNS[p]}) matched nothing: "
                "the runtime layout changed; update PATTERNS in sglpatch/contract/access.py"
            )
    order = sorted(target.values(), key=lambda i: (not i.required, i.label))
    return Contract(
        {i.label: i for i in order},
        {i.label: i for i in sorted(draft.values(), key=lambda i: (not i.required, i.label))},
        dict(patterns),
        problems,
    )

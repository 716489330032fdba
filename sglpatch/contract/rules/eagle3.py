"""The EAGLE-3 worker's model interface: every member SGLang's speculative workers and the model
runner's EAGLE-3 paths use on a model, derived from the tree, each with the reason it is needed.

It is the part of the derived contract (:mod:`.derive`) on the ``eagle3`` feature path, on two
sides:

- **target**: every access on the served model there, guarded or not. Unguarded ones crash
  without the member (``get_embed_and_head`` in every EAGLE worker, ``set_eagle3_layers_to_capture``
  when the runner configures the capture layers); a guarded one (``hasattr``, ``getattr`` with a
  default) silently turns the path off when a wrapper hides a member its inner model has.
- **draft**: what the workers call unguarded on the draft model (``set_embed_and_head`` to share the
  target's embedding and LM head, ``set_embed``, ``hot_token_id``). A model class is loaded as the
  draft whenever a draft checkpoint names its architecture, unless ``configs/model_config.py``
  rewrites that architecture for drafts (``_config_draft_model``: DeepseekV3ForCausalLM ->
  DeepseekV3ForCausalLMNextN); so a wrapper whose inner model has such a member must expose it.

``requirements(contract, model, rewrites)`` lists the members with their reasons;
``interface(report, requirements)`` gives each one's verdict for a checked model (the verdicts of
:func:`.verdicts.check_model`), and ``failures`` the ones that fail it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from sglpatch.contract.flow.derive import Access
from sglpatch.contract.parse.outline import top_statements
from sglpatch.contract.parse.tree import SRT, SourceTree
from sglpatch.contract.rules.terms import Contract, ContractItem
from sglpatch.contract.rules.verdicts import MemberStatus, ModelReport

PATH = "eagle3"
MODEL_CONFIG = f"{SRT}.configs.model_config"
DRAFT_REWRITE = "_config_draft_model"
# Verdicts that fail the interface: the wrapper hides a member its inner model has (gap on an
# unguarded access, optional on a guarded one), its own body reads what the inner model lacks
# (broken), or presence cannot be shown statically.
FAILING = ("gap", "broken", "optional", "unverified", "unknown", "draft-role")
PREFIX = "python/sglang/"


@dataclass
class Requirement:
    item: ContractItem
    role: str  # target | draft
    reason: str
    site: Access  # the access the reason cites

    @property
    def label(self) -> str:
        return self.item.label


def on_path(item: ContractItem) -> list[Access]:
    return [s for s in item.sites if PATH in s.features]


def requirements(contract: Contract, model: str | None = None, rewrites: set[str] | None = None) -> list[Requirement]:
    """The EAGLE-3 interface in ``contract``; the draft side unless ``rewrites`` (the architectures
    the tree rewrites for drafts, None when unknown) holds ``model``."""
    out = [Requirement(i, "target", *reason(i, "target")) for i in contract.target.values() if on_path(i)]
    if model is not None and rewrites is not None and model in rewrites:
        return out
    why = (
        f"{model or 'a model class'} is the draft when a draft checkpoint names its architecture ("
        + (
            "configs/model_config.py does not rewrite it for drafts"
            if rewrites is not None
            else "no draft-architecture rewrite found in configs/model_config.py"
        )
        + ")"
    )
    for i in contract.draft.values():
        sites = [s for s in on_path(i) if s.required and s.role == "draft"]
        if i.label not in contract.target and sites:
            text, site = reason(i, "draft", sites)
            out.append(Requirement(i, "draft", f"{text}; {why}", site))
    return out


def reason(item: ContractItem, role: str, sites: list[Access] | None = None) -> tuple[str, Access]:
    """Why the worker needs ``item``, from its most telling site on the EAGLE-3 path (unguarded,
    least nested first): who uses it, where, inside which condition, what happens without it; plus
    an unguarded use elsewhere when the EAGLE-3 one is guarded."""
    sites = sites or item.sites
    ranked = sorted(sites, key=lambda s: (PATH not in s.features, not s.required, len(s.conditions), s.path, s.line))
    first = ranked[0]
    text = f"{_use(first)} on the {role} model by {_where(first)}"
    if first.guard is None:
        text += ", unguarded: missing, it raises AttributeError"
    elif first.required:
        text += ", probed only to fail with a clearer error: missing, it still fails"
    else:
        text += f", guarded ({first.guard}): missing, that path is silently off"
        hard = next((s for s in ranked if s.required), None)
        if hard is not None:
            text += f"; and {_use(hard)} unguarded by {_where(hard)} [{', '.join(sorted(hard.features))}]"
    others = len({s.location for s in sites}) - 1
    return text + (f" (+{others} more sites)" if others > 0 else ""), first


def _use(a: Access) -> str:
    return {
        "call": "called",
        "attr": "read",
        "getattr": "read with getattr()",
        "hasattr": "probed with hasattr()",
        "signature": "probed in forward()'s signature",
    }.get(a.kind.replace("class-", ""), a.kind)


def _where(a: Access) -> str:
    """``function (file:line)`` and the innermost condition around the access (the configuration
    that reaches it), skipping a test that is itself the access (``if model.x is not None``)."""
    text = f"{a.function} ({_short(a.location)})"
    cond = next((c for c in reversed(a.conditions) if a.member not in c), None)
    if cond:
        text += f" inside `if {cond if len(cond) <= 70 else cond[:67] + '...'}`"
    return text


@dataclass
class Status:
    requirement: Requirement
    verdict: str  # ok | gap | broken | optional | unverified | unknown | draft-role | unsupported | absent
    status: MemberStatus | None

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING

    def to_json(self) -> dict:
        r = self.requirement
        return {
            "member": r.label,
            "role": r.role,
            "verdict": self.verdict,
            "reason": r.reason,
            "location": r.site.location,
            "note": (self.status.lookup.note or None) if self.status else None,
        }


def interface(report: ModelReport, reqs: list[Requirement]) -> list[Status]:
    """Each requirement's verdict for the checked model. ``absent``: neither the model nor its
    inner model has it (that model does not support the path, or cannot serve as such a draft)."""
    target = {s.item.label: s for s in report.statuses}
    draft = {s.item.label: s for s in report.draft_statuses}
    out = []
    for r in reqs:
        s = (target if r.role == "target" else draft).get(r.label)
        if s is not None:
            out.append(Status(r, s.verdict, s))
        else:
            out.append(Status(r, "ok" if r.label in report.draft_present else "absent", None))
    return out


def failures(report: ModelReport, reqs: list[Requirement]) -> list[Status]:
    return [s for s in interface(report, reqs) if s.failed]


def draft_rewrites(tree: SourceTree) -> set[str] | None:
    """Architectures ``ModelConfig._config_draft_model`` replaces for draft models (they are never
    loaded as a draft under their own class), or None when that function is not found."""
    mod = tree.module(MODEL_CONFIG)
    if mod is None or DRAFT_REWRITE not in mod.source:
        return None
    fn = next(
        (
            n
            for s in top_statements(mod.ast.body)
            if isinstance(s, ast.ClassDef)
            for n in s.body
            if isinstance(n, ast.FunctionDef) and n.name == DRAFT_REWRITE
        ),
        None,
    )
    if fn is None:
        return None
    names: set[str] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Compare) and "architectures" in ast.unparse(n.left):
            for comp in n.comparators:
                elts = comp.elts if isinstance(comp, (ast.List, ast.Tuple, ast.Set)) else [comp]
                names.update(e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return names


def _short(loc: str) -> str:
    return loc[len(PREFIX) :] if loc.startswith(PREFIX) else loc

"""What the contract walk records: the recognised access patterns, values, accesses, feature paths.

The vocabulary shared by the walk (``walker.py``, ``guards.py``, ``calls.py``), its driver
(``derive.py``) and the verdicts (``core.py``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import TypeGuard

from sglpatch.contract.index.classes import ClassRef
from sglpatch.contract.parse.outline import dotted
from sglpatch.contract.parse.tree import Module

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
PROPAGATION = (
    "local alias (`m = self.model_runner.model; m.x`)",
    "instance attribute (`self.m = <model>` in one method, `self.m.x` in another)",
    "call argument (`helper(model=self.model)` -> `model.x` inside helper, across modules)",
    "stored getter (`Manager(get_model=lambda: self.model)` -> `self._get_model().x`)",
    "`type(<model>)` -> the model class",
)

# Feature paths, by keywords found in the access's file, enclosing function and enclosing
# conditions (and those of the call sites that lead to it). "core" when none matches.
FEATURES = (
    "eagle3",
    "cuda-graph",
    "piecewise-graph",
    "eplb",
    "pipeline",
    "context-parallel",
    "lora",
    "weight-update",
    "pdmux",
    "dllm",
)
_FEATURE_RULES = (
    (
        "eagle3",
        re.compile(
            r"eagle|speculative|spec_info|spec_algorithm|is_draft|draft_|aux_hidden|"
            r"hot_token|\bmtp\b|nextn",
            re.I,
        ),
    ),
    ("piecewise-graph", re.compile(r"piecewise", re.I)),
    (
        "cuda-graph",
        re.compile(
            r"cuda_graph|graph_runner|device_graphs?\b|cuda_graphs|capture_bs|"
            r"graph_capture|init_\w*graphs?\b|decode_graph",
            re.I,
        ),
    ),
    ("eplb", re.compile(r"eplb|expert_location|expert_distribution|routed_experts|elastic_ep", re.I)),
    ("pipeline", re.compile(r"\bpp_|_pp_|pp_proxy|pipeline|pp_group|is_last_rank|pp_rank|pp_size", re.I)),
    ("context-parallel", re.compile(r"_cp\b|\bcp_|context_parallel|attn_cp|_cp_", re.I)),
    ("lora", re.compile(r"lora", re.I)),
    (
        "weight-update",
        re.compile(
            r"update_weights?|weights_from|checkpoint_engine|weight_checker|"
            r"named_tensors|weight_sync|refit",
            re.I,
        ),
    ),
    ("pdmux", re.compile(r"split_prefill|pdmux", re.I)),
    ("dllm", re.compile(r"dllm", re.I)),
)


# Call names recorded as ordered events for the wiring check.
_EVENT_NAMES = re.compile(r"warmup|graph|capture|dummy_run|autotune", re.I)

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
_ATTR_ROOTS = {
    name: (kind, role, "runner-attr" if pattern == "runner-name" else pattern)
    for name, (kind, role, pattern) in _NAME_ROOTS.items()
}


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


def _const_str(e: object) -> TypeGuard[ast.Constant]:
    return isinstance(e, ast.Constant) and isinstance(e.value, str)

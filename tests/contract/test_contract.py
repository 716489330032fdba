"""`python build.py check`: the EAGLE-3 target-interface contract, derived statically from a tree.

Synthetic trees (a "mini SGLang" in tests/fixtures/contract/mini, copied to tmp_path and edited
per test) pin down each resolution and guard rule; real PyPI releases pin down the verdicts that
matter: pristine 0.5.9 (every KimiK25 gap in one run, wiring broken), 0.5.10 (KimiK25 fixed,
wiring still broken), 0.5.12 (both fixed), our patched 0.5.9, and a sweep over every release.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from helpers import REPO_ROOT, load_module, make_project
from mini_tree import PLAIN_WRAPPER, SRT, make_tree, mini  # noqa: F401  (mini is a fixture)

from sglpatch.contract import CHECK_NAMES, PATTERNS, check_tree, checks
from sglpatch.contract.core import Analysis
from sglpatch.contract.parse.refs import ClassRef
from sglpatch.contract.rules.gates import check_allreduce_gate
from sglpatch.contract.rules.symm_mem import check_symm_mem
from sglpatch.errors import UserError
from sglpatch.upstream import source
from sglpatch.upstream.pin import read_pin

KIMI = "KimiK25ForConditionalGeneration"
PIN = read_pin(REPO_ROOT)

# The mini runtime's contract: what tests/fixtures/contract/mini accesses on the target model.
MINI_REQUIRED = {
    "forward",
    "get_embed_and_head",
    "load_weights",
    "model",
    "register_forward_hook",
    "routed_experts_weights_of_layer",
    "set_eagle3_layers_to_capture",
}


def statuses(report, model):
    m = report.model(model)
    assert m is not None, [x.name for x in report.models]
    return {s.item.label: s for s in m.statuses}


def test_contract_is_derived_with_sites_guards_paths_and_roles(mini):
    report = check_tree(mini, ["PlainVLM"], cache=False)
    c = report.contract
    assert report.problems == []
    assert {label for label, item in c.target.items() if item.required} == MINI_REQUIRED
    guards = {label: item.guards for label, item in c.target.items() if not item.required}
    assert guards == {
        "start_layer": ["getattr-default"],
        "get_attention_sliding_window_size": ["hasattr"],
        "load_kv_cache_scales": ["try-except"],
        "get_model_config_for_expert_location": ["hasattr"],
        "forward(pp_proxy_tensors)": ["signature-probe"],
    }
    capture = c.target["set_eagle3_layers_to_capture"]
    assert [s.location for s in capture.sites] == [f"{SRT}/model_executor/model_runner.py:39"]
    assert capture.features == ["eagle3"]
    assert c.target["model"].features == ["piecewise-graph"]  # self.model in a ModelRunner mixin
    assert c.target["routed_experts_weights_of_layer"].features == ["eplb"]
    assert c.target["forward(pp_proxy_tensors)"].features == ["pipeline"]
    assert c.target["get_model_config_for_expert_location"].on_class  # classmethod on model_class
    # model passed to a helper: found inside it, with the call that leads there
    hook = c.target["register_forward_hook"].sites[0]
    assert hook.location == f"{SRT}/model_executor/model_runner.py:9"
    assert hook.via == (f"{SRT}/model_executor/model_runner.py:35",)
    # the draft model's contract is separate
    assert {"set_embed_and_head", "hot_token_id"} <= set(c.draft)
    assert "set_embed_and_head" not in c.target
    assert all(c.patterns[p] for p in ("runner-self", "runner-name", "target-worker", "draft-runner", "model-arch"))


ASSERTED_PROBE = (
    '        self.support_pp = "pp_proxy_tensors" in inspect.signature(self.model.forward).parameters\n',
    '        self.support_pp = "pp_proxy_tensors" in inspect.signature(self.model.forward).parameters\n'
    "        if self.pp_size > 1:\n"
    "            assert self.support_pp, 'Pipeline Parallel is not compatible with this model.'\n",
)


@pytest.mark.parametrize(
    "enforce",
    [
        "            assert self.support_pp, 'Pipeline Parallel is not compatible with this model.'\n",
        "            if not self.support_pp:\n                raise ValueError('no pipeline parallel')\n",
        "            assert self.pp_size and self.support_pp\n",
    ],
)
def test_a_probe_whose_result_an_assert_enforces_is_required_on_that_path(tmp_path, enforce):
    """``self.support_pp = "pp_proxy_tensors" in signature(model.forward)...`` then ``assert
    self.support_pp`` under ``pp_size > 1``: the probe only makes the error clearer."""
    old, _ = ASSERTED_PROBE
    tree = make_tree(
        tmp_path,
        {"models/plain_wrapper.py": PLAIN_WRAPPER},
        {"model_executor/model_runner.py": [(old, old + "        if self.pp_size > 1:\n" + enforce)]},
    )
    m = check_tree(tree, ["PlainVLM"], cache=False).model("PlainVLM")
    gap = {s.item.label: s for s in m.gaps}.get("forward(pp_proxy_tensors)")
    assert gap is not None, [s.item.label for s in m.gaps]
    (site,) = gap.item.required_sites
    assert site.guard == "asserted" and site.conditions == ("self.pp_size > 1",)
    assert gap.item.features == ["pipeline"]


@pytest.mark.parametrize(
    "use, required",
    [
        ("        assert embed is not None, 'no get_input_embeddings'\n", True),
        ("        if embed is None:\n            raise ValueError('no get_input_embeddings')\n", True),
        # the twin: a None result the code copes with
        ("        if embed is not None:\n            embed()\n", False),
    ],
)
def test_a_getattr_none_result_that_an_assert_refuses_is_required(tmp_path, use, required):
    """``embed = getattr(model, "x", None)`` then ``assert embed is not None`` (0.5.23's prefill CUDA
    graph runner and ``get_input_embeddings``): start-up dies without the member."""
    tree = make_tree(
        tmp_path,
        {},
        {
            "model_executor/model_runner.py": [
                (
                    "    def kernel_warmup(self):\n        pass\n",
                    "    def kernel_warmup(self):\n        embed = getattr(self.model, 'embeddings_probe', None)\n"
                    + use,
                )
            ]
        },
    )
    item = check_tree(tree, ["LlamaForCausalLM"], cache=False).contract.target["embeddings_probe"]
    assert item.required is required
    assert [a.guard for a in item.sites] == (["asserted"] if required else ["getattr-default"])


def test_a_probe_whose_result_is_only_branched_on_stays_optional(tmp_path):
    """The twin: ``if self.support_pp: ...`` (a feature switched off) is not an assert."""
    old, _ = ASSERTED_PROBE
    tree = make_tree(
        tmp_path,
        {"models/plain_wrapper.py": PLAIN_WRAPPER},
        {
            "model_executor/model_runner.py": [
                (
                    old,
                    old + "        if self.support_pp:\n            self.pp_ready = True\n"
                    "        self.support_pp = False\n        assert not self.support_pp\n",
                )
            ]
        },
    )
    m = check_tree(tree, ["PlainVLM"], cache=False).model("PlainVLM")
    assert "forward(pp_proxy_tensors)" in {s.item.label for s in m.by("optional")}
    assert "forward(pp_proxy_tensors)" not in {s.item.label for s in m.gaps}


@pytest.mark.parametrize(
    "otherwise, required",
    [
        ("            raise ValueError('DFLASH needs set_dflash_probe')\n", True),
        ("            self.dflash = None\n", False),  # the twin: a path switched off, not an error
    ],
)
def test_an_elif_chain_that_ends_in_raise_requires_its_last_probe(tmp_path, otherwise, required):
    """0.5.19's ``if is_dspark and hasattr(model, "set_dspark_..."): ... elif hasattr(model,
    "set_dflash_layers_to_capture"): ... else: raise``: the last probe is enforced, the first is
    not (a DSPARK model falls back to the DFLASH method)."""
    tree = make_tree(
        tmp_path,
        {},
        {
            "model_executor/model_runner.py": [
                (
                    "    def kernel_warmup(self):\n        pass\n",
                    "    def kernel_warmup(self):\n"
                    "        if self.dspark and hasattr(self.model, 'set_dspark_probe'):\n"
                    "            self.model.set_dspark_probe(1)\n"
                    "        elif hasattr(self.model, 'set_dflash_probe'):\n"
                    "            self.model.set_dflash_probe(1)\n"
                    "        else:\n" + otherwise,
                )
            ]
        },
    )
    target = check_tree(tree, ["LlamaForCausalLM"], cache=False).contract.target
    assert target["set_dflash_probe"].required is required
    assert not target["set_dspark_probe"].required
    if required:
        assert {a.guard for a in target["set_dflash_probe"].required_sites} == {"checked"}


EXPERT_METADATA = """
from sglang.srt.eplb.expert_location import model_config_for_expert_location

_metadata = None


class _Resources:
    metadata = None
    other = None


_resources = _Resources()


def get_resources():
    return _resources


def compute_metadata(model_config):
    config = model_config_for_expert_location(model_config)
    if config is None:
        return None
    return {"layers": config.num_layers}


def set_metadata(value):
    global _metadata
    _metadata = value


def get_metadata():
    return _metadata


def set_shared(value):
    get_resources().metadata = value


def get_shared():
    resources = get_resources()
    return resources.metadata


def warm(model_config):
    config = model_config_for_expert_location(model_config)
    if config is None:
        return
    print(config.num_layers)


class Recorder:
    @staticmethod
    def init_new(server_args, metadata):
        if server_args.recorder_mode is not None:
USE
        return Recorder()
"""
NONE_FLOW_CALL = (
    "    def kernel_warmup(self):\n        pass\n",
    "    def kernel_warmup(self):\n"
    "        set_metadata(compute_metadata(self.model_config))\n"
    "        set_shared(compute_metadata(self.model_config))\n"
    "        self.recorder = Recorder.init_new(self.server_args, SOURCE)\n",
)
PROBED = "get_model_config_for_expert_location"


@pytest.mark.parametrize(
    "source_, use, required",
    [
        ("get_metadata()", "            assert metadata is not None, 'no expert location'", True),
        ("get_metadata()", "            return metadata['layers']", True),
        (
            "get_metadata()",
            "            if metadata is None or not metadata['layers']:\n                raise ValueError('none')",
            True,
        ),
        ("get_shared()", "            assert metadata is not None", True),  # a process-wide object's attribute
        # the twins: a None the code copes with, another attribute, a procedure's bare return
        ("get_metadata()", "            if metadata is not None:\n                return metadata['layers']", False),
        (
            "get_metadata()",
            "            if not isinstance(metadata, dict):\n                return None\n"
            "            return metadata['layers']",
            False,
        ),
        ("get_resources().other", "            assert metadata is not None", False),
        ("warm(self.model_config)", "            assert metadata is not None", False),
    ],
)
def test_a_probe_none_followed_through_returns_globals_and_arguments_to_its_assert(tmp_path, source_, use, required):
    """0.5.9's EPLB: ``from_model_config`` returns None without ``get_model_config_for_expert_location``,
    two helpers pass it on, a module global keeps it (0.5.16 on: an attribute of ``get_resources()``),
    and ``ExpertDistributionRecorder.init_new`` asserts it when a recorder mode is set."""
    tree = make_tree(
        tmp_path,
        {"eplb/recorder.py": EXPERT_METADATA.replace("USE", use)},
        {
            "model_executor/model_runner.py": [
                (NONE_FLOW_CALL[0], NONE_FLOW_CALL[1].replace("SOURCE", source_)),
                ("import inspect\n", "import inspect\n\nfrom sglang.srt.eplb.recorder import *\n"),
            ]
        },
    )
    item = check_tree(tree, ["LlamaForCausalLM"], cache=False).contract.target[PROBED]
    assert item.required is required
    if required:
        (site,) = item.required_sites
        assert site.function == "Recorder.init_new" and site.guard == "asserted"
        assert site.conditions[0] == "server_args.recorder_mode is not None" and site.features == {"eplb"}
        assert site.via[0] == f"{SRT}/eplb/expert_location.py:8" and site.detail.startswith("None of")
        assert any("model_runner.py" in hop for hop in site.via)


STORED_GETTERS = """
class Manager:
    def __init__(self, get_model, get_runner, not_a_getter):
        self._get_model = get_model
        self._get_runner = get_runner
        self._plain = not_a_getter

    def rebalance(self):
        return self._get_model().through_a_stored_getter

    def reload(self):
        return self._get_runner().model.through_a_runner_getter

    def elsewhere(self):
        return self._plain().not_the_model
"""
GETTER_CALL = (
    "        self.load_model()\n",
    "        self.load_model()\n"
    "        self.manager = Manager(get_model=lambda: self.model, get_runner=lambda: self,\n"
    "                               not_a_getter=lambda: self.loader)\n"
    "        self.log(width=self.model.read_in_a_keyword, height=self.loader.not_the_model)\n",
)


def test_members_reached_through_stored_getters_and_keyword_values_are_in_the_contract(tmp_path):
    """``Manager(get_model=lambda: self.model)`` then ``self._get_model().x`` elsewhere (the
    pattern upstream spreads from 0.5.16 on), and ``f(width=self.model.x)``: both were invisible."""
    tree = make_tree(
        tmp_path,
        {"eplb/manager.py": STORED_GETTERS},
        {
            "model_executor/model_runner.py": [
                GETTER_CALL,
                ("import inspect\n", "import inspect\n\nfrom sglang.srt.eplb.manager import Manager\n"),
            ]
        },
    )
    target = check_tree(tree, ["LlamaForCausalLM"], cache=False).contract.target
    for member, function in (
        ("through_a_stored_getter", "Manager.rebalance"),
        ("through_a_runner_getter", "Manager.reload"),
        ("read_in_a_keyword", "ModelRunner.initialize"),
    ):
        assert member in target, sorted(target)
        (site,) = target[member].sites
        assert site.function == function and site.guard is None
    # the twins: a getter of something else, and a keyword value read on something else
    assert "not_the_model" not in target


CALLER_GUARD = (
    "    def kernel_warmup(self):\n        pass\n",
    "    def kernel_warmup(self):\n"
    "        if not hasattr(self.model, 'probed_by_the_caller'):\n"
    "            return\n"
    "        outer_helper(self.model)\n"
    "        if hasattr(self.model, 'probed_around_the_call'):\n"
    "            read_around(self.model)\n"
    "{twin}",
)
CALLER_GUARD_HELPERS = (
    "def register_hooks(model, hooks):\n",
    "def outer_helper(model):\n"
    "    return inner_helper(model)\n\n\n"
    "def inner_helper(model):\n"
    "    return model.probed_by_the_caller\n\n\n"
    "def read_around(model):\n"
    "    return model.probed_around_the_call\n\n\n"
    "def register_hooks(model, hooks):\n",
)


@pytest.mark.parametrize(
    "twin, required",
    [
        ("", False),
        # the twin: one more call site that probes nothing, so absence still breaks that path
        (
            "\n    def init_device_graphs(self):\n        read_around(self.model)\n"
            "        self.graph_runner = CudaGraphRunner(self)\n",
            True,
        ),
    ],
)
def test_a_guard_in_the_caller_protects_the_reads_in_its_helpers(tmp_path, twin, required):
    """``if not hasattr(model, "x"): return`` then ``helper(model)`` reading ``model.x``: the read
    is guarded on every path that reaches it, also two helpers down (0.5.10 and 0.5.11's
    ``resolve_language_model`` under ``init_piecewise_cuda_graphs``)."""
    old, new = CALLER_GUARD
    edits = [(old, new.format(twin=twin)), CALLER_GUARD_HELPERS]
    if twin:
        edits.append(("    def init_device_graphs(self):\n        self.graph_runner = CudaGraphRunner(self)\n", ""))
    tree = make_tree(tmp_path, {}, {"model_executor/model_runner.py": edits})
    target = check_tree(tree, ["LlamaForCausalLM"], cache=False).contract.target
    deep = target["probed_by_the_caller"]
    assert [(a.function, a.guard) for a in deep.sites if a.kind == "attr"] == [("inner_helper", "hasattr")]
    assert not deep.required
    around = target["probed_around_the_call"]
    assert around.required is required
    assert {a.guard for a in around.sites if a.function == "read_around"} == ({None} if required else {"hasattr"})


LOADER = """
def _initialize_model(model_config, load_config):
    model_class = get_model_architecture(model_config)
    model = model_class(config=model_config.hf_config)
    model.every_model_gets_this = load_config.shared
    if load_config.rl:
        model.only_some_models_get_this = True
    return model


def _reload(model_class, config):
    model = model_class(config=config)
    model.built_but_not_returned = True
    return None
"""
PROTOCOL_READS = """
from typing import Protocol, runtime_checkable


@runtime_checkable
class SupportsProjection(Protocol):
    def set_projector(self, projector): ...


class NotAProtocol:
    def set_other(self, projector): ...


def configure(model):
    if not isinstance(model, SupportsProjection):
        return False
    model.set_projector(None)
    if not isinstance(model, NotAProtocol):
        return False
    model.set_other(None)
    model.every_model_gets_this.clear()
    model.only_some_models_get_this.clear()
    model.built_but_not_returned.clear()
"""


def test_what_the_loader_sets_on_every_model_and_protocol_checks_are_known(tmp_path):
    """The loader sets ``model.X`` on every model it builds (0.5.23's shared_experts_config), and
    ``isinstance(model, P)`` for a Protocol probes P's members (0.5.23's DSpark projector); the
    twins: an attribute set only under a condition or on a model the function does not return,
    and an isinstance test against an ordinary class."""
    tree = make_tree(
        tmp_path,
        {
            "models/plain_wrapper.py": PLAIN_WRAPPER,
            "model_loader/loader.py": LOADER,
            "speculative/projection.py": PROTOCOL_READS,
        },
        {
            "model_executor/model_runner.py": [
                (
                    "    def kernel_warmup(self):\n        pass\n",
                    "    def kernel_warmup(self):\n        configure(self.model)\n",
                ),
                ("import inspect\n", "import inspect\n\nfrom sglang.srt.speculative.projection import configure\n"),
            ]
        },
    )
    report = check_tree(tree, ["PlainVLM"], cache=False)
    target = report.contract.target
    assert [a.guard for a in target["set_projector"].sites] == ["hasattr"]
    assert target["set_other"].required
    found = statuses(report, "PlainVLM")
    given = found["every_model_gets_this"]
    assert given.verdict == "ok" and (given.lookup.owner, given.lookup.kind) == (
        "the model loader",
        "set on every model",
    )
    assert given.lookup.location == f"{SRT}/model_loader/loader.py:5"
    assert found["only_some_models_get_this"].verdict == "unsupported"
    assert found["built_but_not_returned"].verdict == "unsupported"


RUNTIME_CHOICE = PLAIN_WRAPPER.replace("PlainVLM", "ChosenVLM").replace(
    "        self.language_model = LlamaForCausalLM(config.text_config, quant_config)\n",
    "        lm_cls = self._language_model_cls(config.text_config)\n"
    "        self.language_model = lm_cls(config.text_config, quant_config)\n",
)


@pytest.mark.parametrize(
    "entry, verdict",
    [
        ("EntryClass = [LlamaForCausalLM]\n", "gap"),
        # the twin: with no language model SGLang can load, nothing shows the member exists
        ("EntryClass = []\n", "unverified"),
    ],
)
def test_an_inner_model_chosen_at_run_time_is_checked_against_every_candidate(tmp_path, entry, verdict):
    """``self.language_model = lm_cls(...)`` (0.5.9's Llava, 0.5.23's Mistral3): any language model
    SGLang loads may be the inner one, so a required member one of them has is a gap, not
    "unverified" (which let ``check --all-models`` exit 0)."""
    tree = make_tree(
        tmp_path,
        {"models/chosen.py": RUNTIME_CHOICE},
        {"models/llama.py": [("EntryClass = [LlamaForCausalLM]\n", entry)]},
    )
    m = check_tree(tree, ["ChosenVLM"], cache=False).model("ChosenVLM")
    assert m.inners[0]["classes"] == ["<runtime choice>"]
    found = {s.item.label: s for s in m.statuses}
    capture = found["set_eagle3_layers_to_capture"]
    assert capture.verdict == verdict
    if verdict == "gap":
        assert m.inners[0]["candidates"] == 1 and [c for c, _ in capture.inner] == ["LlamaForCausalLM"]


@pytest.mark.parametrize(
    "reads, verdict",
    [
        ("self.language_model.embed_tokens.weight", "broken"),  # LlamaForCausalLM has no embed_tokens
        ("self.language_model.get_embed_and_head()", "ok"),  # the twin: what the inner model has
    ],
)
def test_a_member_whose_body_reads_what_the_inner_model_lacks_is_a_gap(tmp_path, reads, verdict):
    """Present is not enough: 0.5.9's DotsOCR has ``get_embed_and_head`` and it returns
    ``self.model.embed_tokens.weight`` on a Qwen2ForCausalLM, which has no ``embed_tokens``."""
    wrapper = PLAIN_WRAPPER.replace(
        "\n\n\nEntryClass", f"\n\n    def get_embed_and_head(self):\n        return {reads}\n\n\nEntryClass"
    )
    tree = make_tree(tmp_path, {"models/plain_wrapper.py": wrapper})
    m = check_tree(tree, ["PlainVLM"], cache=False).model("PlainVLM")
    status = {s.item.label: s for s in m.statuses}["get_embed_and_head"]
    assert status.verdict == verdict
    assert (status in m.gaps) is (verdict == "broken")
    if verdict == "broken":
        assert status.lookup.note == "it reads self.language_model.embed_tokens, which LlamaForCausalLM lacks"
        assert status.lookup.location == f"{SRT}/models/plain_wrapper.py:18"


NESTED = (
    """
from torch import nn
from sglang.srt.models.llama import LlamaForCausalLM
from sglang.srt.models.plain_wrapper import PlainVLM
from transformers import GenerationMixin


"""
    + "".join(
        f"""
class Deep{n}(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.{"language_model" if n == 4 else "inner"} = {"LlamaForCausalLM" if n == 4 else f"Deep{n + 1}"}(config)

"""
        for n in (4, 3, 2, 1, 0)
    )
    + """

class Holder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.language_model = LlamaForCausalLM(config)
        self.llm = LlamaForCausalLM(config)


class Override(Holder):
    def __init__(self, config, lm_cls=None):
        super().__init__(config)
        self.language_model = self.make_lm(config) if lm_cls else LlamaForCausalLM(config)


class Unknowable(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.language_model = NotImportedAnywhere(config)


class DraftLM(LlamaForCausalLM):
    def __init__(self, config):
        super().__init__(config)
        self.draft = LlamaForCausalLM(config)


class Ping(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.other = Pong(config)


class Pong(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.other = Ping(config)


class Remote(PlainVLM):
    pass


class Mixed(GenerationMixin, Holder):
    pass


EntryClass = [Deep0, Override, Unknowable, DraftLM, Ping, Remote, Mixed]
"""
)


def test_wrappers_are_found_however_deep_whatever_their_bases_hold_and_where(tmp_path):
    """The wrapper half of the class index on one synthetic module: a wrapper five levels deep is a
    wrapper (asked in any order), a subclass's holder overrides its base's and the base's other
    holders still count, a runtime choice beside a known class keeps the known one, a constructor
    that resolves nowhere is a runtime choice, a language model that holds another is no wrapper,
    two classes holding each other are none, an external mixin first in the MRO hides none of the
    holders after it, and an inner held in a base class in another module is located there. Each
    assertion has its twin in the next class."""
    an = Analysis(make_tree(tmp_path, {"models/plain_wrapper.py": PLAIN_WRAPPER, "models/nested.py": NESTED}))
    ci = an.classes
    ref = {
        n: ClassRef("sglang.srt.models.nested", n)
        for n in (
            "Deep0",
            "Deep1",
            "Deep3",
            "Holder",
            "Override",
            "Unknowable",
            "DraftLM",
            "Ping",
            "Pong",
            "Remote",
            "Mixed",
        )
    }
    llama = ClassRef("sglang.srt.models.llama", "LlamaForCausalLM")
    assert ci.is_wrapper(ref["Deep0"]) and ci.is_wrapper(ref["Deep3"]) and ci.is_wrapper(ref["Deep1"])
    assert [(i.attr, i.lm) for i in ci.inner_models(ref["Deep0"])] == [("inner", [ref["Deep1"]])]
    assert ci.held(ref["Override"]) == {"language_model": ["?", llama], "llm": [llama]}
    assert [(i.attr, i.lm) for i in ci.inner_models(ref["Override"])] == [("language_model", [llama]), ("llm", [llama])]
    # an external mixin first in the MRO hides nothing its other bases hold
    assert [(i.attr, i.lm) for i in ci.inner_models(ref["Mixed"])] == [("language_model", [llama]), ("llm", [llama])]
    assert [(i.attr, i.lm, i.candidates) for i in ci.inner_models(ref["Unknowable"])] == [("language_model", [], ["?"])]
    assert ci.is_causal_lm(ref["DraftLM"]) and ci.inherits_causal_lm(ref["DraftLM"])
    assert not ci.is_wrapper(ref["DraftLM"]) and not ci.inherits_causal_lm(llama) and not ci.is_causal_lm(ref["Holder"])
    assert not ci.is_wrapper(ref["Ping"]) and not ci.is_wrapper(ref["Pong"])
    line = {text.strip(): n for n, text in enumerate(textwrap.dedent(NESTED).splitlines(), 1)}
    assert [i.location for i in ci.inner_models(ref["Override"])] == [
        f"python/sglang/srt/models/nested.py:{line[f'self.language_model = self.make_lm(config) if lm_cls else {llama.name}(config)']}",
        f"python/sglang/srt/models/nested.py:{line['self.llm = LlamaForCausalLM(config)']}",
    ]
    report = check_tree(an.path, ["Remote"], analysis=an).models[0].to_json(lambda _: True)
    assert report["inner"] == [
        {
            "attr": "language_model",
            "classes": ["LlamaForCausalLM"],
            "location": "python/sglang/srt/models/plain_wrapper.py:9",
        }
    ]


def test_every_gap_of_a_wrapper_is_reported_in_one_run(mini):
    report = check_tree(mini, ["PlainVLM"], cache=False)
    m = report.model("PlainVLM")
    assert m.wrapper and m.inners[0]["attr"] == "language_model"
    assert m.inners[0]["classes"] == ["LlamaForCausalLM"]
    gaps = {s.item.label: s for s in m.gaps}
    assert set(gaps) == {
        "get_embed_and_head",
        "model",
        "routed_experts_weights_of_layer",
        "set_eagle3_layers_to_capture",
    }
    assert all(s.inner_has for s in gaps.values())
    assert gaps["get_embed_and_head"].item.required_sites[0].location == f"{SRT}/speculative/eagle_worker.py:5"
    optional = {s.item.label for s in m.by("optional")}
    assert optional == {
        "start_layer",
        "get_attention_sliding_window_size",
        "get_model_config_for_expert_location",
        "forward(pp_proxy_tensors)",
    }
    assert [s.item.label for s in m.draft_statuses] == ["set_embed_and_head"]
    data = report.to_json()
    assert data["gaps"] == 4 and not data["passed"]
    assert {x["member"] for x in data["models"][0]["members"] if x["verdict"] == "gap"} == set(gaps)


def test_base_class_across_modules_reexport_alias_property_attributes(tmp_path):
    tree = make_tree(
        tmp_path,
        {
            "models/vlm_base.py": """
            from torch import nn


            class VLMBase(nn.Module):
                routed_experts_weights_of_layer = {}  # class attribute

                def __init__(self):
                    super().__init__()
                    self.get_embed_and_head = self.language_model.get_embed_and_head

                @property
                def model(self):
                    return self.language_model.model

                def set_eagle3_layers_to_capture(self, layer_ids=None):
                    self.language_model.set_eagle3_layers_to_capture(layer_ids)
            """,
            "models/common/__init__.py": """
            from sglang.srt.models.vlm_base import VLMBase as _Base

            Base = _Base
            """,
            "models/wrapped.py": """
            from sglang.srt.models.common import Base as B
            from sglang.srt.models.llama import LlamaForCausalLM

            Parent = B


            class WrappedVLM(Parent):
                def __init__(self, config):
                    self.language_model = LlamaForCausalLM(config)
                    super().__init__()

                def forward(self, input_ids, positions, forward_batch, **kwargs):
                    return self.language_model(input_ids, positions, forward_batch, **kwargs)

                def load_weights(self, weights):
                    pass


            EntryClass = [WrappedVLM]
            """,
        },
    )
    report = check_tree(tree, ["WrappedVLM"], cache=False)
    st = statuses(report, "WrappedVLM")
    assert report.model("WrappedVLM").gaps == []
    base = "sglang.srt.models.vlm_base.VLMBase"
    assert (st["set_eagle3_layers_to_capture"].lookup.owner, st["set_eagle3_layers_to_capture"].lookup.kind) == (
        base,
        "method",
    )
    assert st["model"].lookup.kind == "property"
    assert st["routed_experts_weights_of_layer"].lookup.kind == "class-attr"
    assert st["get_embed_and_head"].lookup.kind == "self-attr (__init__)"
    assert st["named_parameters" if "named_parameters" in st else "forward"].verdict == "ok"
    # **kwargs in forward accepts pp_proxy_tensors
    assert st["forward(pp_proxy_tensors)"].lookup.kind == "**kwargs"


def test_getattr_forwarding_is_reported_as_forwarding(tmp_path):
    tree = make_tree(
        tmp_path,
        {
            "models/forwarding.py": """
        from sglang.srt.models.llama import LlamaForCausalLM


        class ForwardingVLM:
            def __init__(self, **kwargs):
                self.inner = LlamaForCausalLM(**kwargs)

            def __getattr__(self, name):
                return getattr(self.inner, name)


        EntryClass = [ForwardingVLM]
        """
        },
    )
    report = check_tree(tree, ["ForwardingVLM"], cache=False)
    m = report.model("ForwardingVLM")
    assert m.wrapper and m.gaps == []
    st = statuses(report, "ForwardingVLM")
    capture = st["set_eagle3_layers_to_capture"]
    assert capture.lookup.status == "forwarded"
    assert "forwarded by __getattr__ to self.inner (LlamaForCausalLM: method)" in capture.lookup.note
    from sglpatch.contract.render import render

    assert "forwarded by __getattr__: " in render(report)


def test_guarded_and_unguarded_accesses(mini):
    extra = {
        "managers/scheduler.py": """
        class Scheduler:
            def __init__(self, tp_worker):
                self.tp_worker = tp_worker

            def window(self):
                model = self.tp_worker.model_runner.model
                return model.get_attention_sliding_window_size()  # unguarded: now required

            def checked(self):
                model = self.tp_worker.model_runner.model
                if not hasattr(model, "supports_x"):
                    raise ValueError("model lacks supports_x")  # probed only to fail clearly
                return model.supports_x()

            def fallback(self):
                model = self.tp_worker.model_runner.model
                if hasattr(model, "alt_a"):
                    return model.alt_a
                return model.alt_a  # reached only when alt_a is missing: an error path

            def reraised(self):
                try:
                    return self.tp_worker.model_runner.model.reraised_member()
                except AttributeError:
                    raise

            def specific(self):
                model = self.tp_worker.model_runner.model
                if type(model).__name__ == "OneModel":
                    return model.only_one_model_has_it
        """
    }
    before = check_tree(mini, ["PlainVLM"], cache=False)
    assert statuses(before, "PlainVLM")["get_attention_sliding_window_size"].verdict == "optional"
    tree = make_tree(mini.parent / "second", {**extra, "models/plain_wrapper.py": PLAIN_WRAPPER})
    report = check_tree(tree, ["PlainVLM"], cache=False)
    target = report.contract.target
    assert target["get_attention_sliding_window_size"].required
    assert statuses(report, "PlainVLM")["get_attention_sliding_window_size"].verdict == "gap"
    assert target["supports_x"].required and "checked" in target["supports_x"].guards
    assert not target["alt_a"].required and "fallback" in target["alt_a"].guards
    assert target["reraised_member"].required  # an except clause that re-raises guards nothing
    assert not target["only_one_model_has_it"].required
    assert target["only_one_model_has_it"].guards == ["class-check"]


def test_an_unrecognised_layout_is_an_error_not_an_empty_pass(tmp_path):
    tree = make_tree(
        tmp_path,
        {"models/plain_wrapper.py": PLAIN_WRAPPER},
        edits={"model_executor/model_runner.py": [("class ModelRunner(", "class Runner(")]},
    )
    report = check_tree(tree, ["PlainVLM"], cache=False)
    assert any("runner-self" in p for p in report.problems)
    assert not report.passed
    findings = checks.run_check("kimi-k25-eagle3-interface", tree).findings
    assert any("only 3 members" in str(f) for f in findings)
    assert any("'runner-self'" in str(f) for f in findings)
    # a tree with no runtime at all: the contract is empty
    bare = tmp_path / "bare"
    (bare / SRT / "models").mkdir(parents=True)
    (bare / SRT / "models" / "m.py").write_text(PLAIN_WRAPPER)
    empty = check_tree(bare, ["PlainVLM"], cache=False)
    assert any("only 0 members" in p for p in empty.problems)
    assert not checks.run_check("eagle3-capture-wiring", bare).passed


def test_capture_wiring_order_and_resets(tmp_path):
    ok = make_tree(tmp_path / "ok")
    assert check_tree(ok, ["LlamaForCausalLM"], cache=False).wiring.passed
    late = make_tree(
        tmp_path / "late",
        edits={
            "model_executor/model_runner.py": [
                (
                    "        self.init_aux_hidden_state_capture()\n        self.kernel_warmup()\n",
                    "        self.kernel_warmup()\n        self.init_aux_hidden_state_capture()\n",
                )
            ]
        },
    )
    w = check_tree(late, ["LlamaForCausalLM"], cache=False).wiring
    assert not w.passed
    assert w.findings[0][0].startswith(
        f"the configured set_eagle3_layers_to_capture(ids) at {SRT}/model_executor/model_runner.py:39 "
        f"runs after kernel_warmup at {SRT}/model_executor/model_runner.py:20"
    )
    reset = make_tree(
        tmp_path / "reset",
        edits={
            "model_executor/cuda_graph_runner.py": [
                (
                    "        self.capture()\n",
                    "        self.model_runner.model.set_eagle3_layers_to_capture()\n        self.capture()\n",
                )
            ],
            "model_executor/model_runner.py": [
                (
                    "    def kernel_warmup(self):\n        pass\n",
                    "    def kernel_warmup(self):\n        self.model.set_eagle3_layers_to_capture(None)\n",
                )
            ],
        },
    )
    w = check_tree(reset, ["LlamaForCausalLM"], cache=False).wiring
    assert [loc for _, loc in w.findings] == [
        f"{SRT}/model_executor/cuda_graph_runner.py:4",
        f"{SRT}/model_executor/model_runner.py:42",
    ]
    assert "in CudaGraphRunner.__init__" in w.findings[0][0]
    assert "reached from ModelRunner.initialize" in w.findings[1][0]


def test_capture_wiring_phases_driven_from_outside(tmp_path):
    """0.5.2x layout: the scheduler calls the configuring and the capturing phase in turn."""
    split = [
        (
            "        self.init_aux_hidden_state_capture()\n        self.kernel_warmup()\n"
            "        self.init_device_graphs()\n",
            "",
        ),
        (
            "    def init_aux_hidden_state_capture(self):",
            "    def init_attention_backends(self):\n        self.init_aux_hidden_state_capture()\n\n"
            "    def init_cuda_graphs(self):\n        self.kernel_warmup()\n        self.init_device_graphs()\n\n"
            "    def init_aux_hidden_state_capture(self):",
        ),
    ]
    driver = """
        class Scheduler:
            def init_model_worker(self):
                self.tp_worker.model_runner.{first}()
                self.tp_worker.model_runner.{second}()
        """
    good = make_tree(
        tmp_path / "good",
        {"managers/scheduler.py": driver.format(first="init_attention_backends", second="init_cuda_graphs")},
        edits={"model_executor/model_runner.py": split},
    )
    w = check_tree(good, ["LlamaForCausalLM"], cache=False).wiring
    assert w.passed, w.findings
    assert w.order_from == f"{SRT}/managers/scheduler.py:3 (init_model_worker)"
    bad = make_tree(
        tmp_path / "bad",
        {"managers/scheduler.py": driver.format(first="init_cuda_graphs", second="init_attention_backends")},
        edits={"model_executor/model_runner.py": split},
    )
    w = check_tree(bad, ["LlamaForCausalLM"], cache=False).wiring
    assert not w.passed and "calls the capture phase" in w.findings[0][0]


def test_sm12_gates_on_synthetic_trees(tmp_path):
    base = make_tree(tmp_path / "base")
    an = Analysis(base, cache=False)
    assert check_allreduce_gate(an.tree).findings
    assert [loc for _, loc in check_symm_mem(an.tree).findings] == [
        f"{SRT}/distributed/device_communicators/torch_symm_mem.py:14",
        f"{SRT}/distributed/device_communicators/torch_symm_mem.py:17",
    ]
    gate = "model_executor/../layers/communicator.py"
    cases = {
        "helper": (
            "import is_sm90_supported, is_sm100_supported",
            "import is_sm90_supported, is_sm100_supported, is_sm120_supported\n"
            "_is_sm120_supported = is_sm120_supported()",
            "(_is_sm90_supported or _is_sm100_supported)",
            "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)",
            True,
        ),
        "major": (
            "import is_sm90_supported, is_sm100_supported",
            "import is_sm90_supported, is_sm100_supported, get_device_capability",
            "(_is_sm90_supported or _is_sm100_supported)",
            "get_device_capability()[0] in (9, 10, 12)",
            True,
        ),
        "negated": (
            "import is_sm90_supported, is_sm100_supported",
            "import is_sm90_supported, is_sm100_supported, is_sm120_supported",
            "(_is_sm90_supported or _is_sm100_supported)",
            "(_is_sm90_supported or _is_sm100_supported) and not is_sm120_supported()",
            False,
        ),
    }
    for name, (a, b, c, d, passes) in cases.items():
        tree = make_tree(tmp_path / name, edits={gate: [(a, b), (c, d)]})
        assert (not check_allreduce_gate(Analysis(tree, cache=False).tree).findings) is passes, name
    symm = "distributed/device_communicators/torch_symm_mem.py"
    fixed = make_tree(
        tmp_path / "symm",
        edits={
            symm: [
                (
                    "        if self.device_capability < 9:\n",
                    "        if self.device_capability not in TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES:\n"
                    "            logger.warning('capability not supported, communicator is not available')\n",
                ),
                (
                    "self._WORLD_SIZES_MULTIMEM[self.device_capability]",
                    "self._WORLD_SIZES_MULTIMEM.get(self.device_capability, ())",
                ),
            ]
        },
    )
    assert check_symm_mem(Analysis(fixed, cache=False).tree).findings == []
    half = make_tree(
        tmp_path / "half",
        edits={
            symm: [
                (
                    "self._WORLD_SIZES_MULTIMEM[self.device_capability]",
                    "self._WORLD_SIZES_MULTIMEM.get(self.device_capability, ())",
                )
            ]
        },
    )
    assert len(check_symm_mem(Analysis(half, cache=False).tree).findings) == 1


PRETRAINED_WRAPPER = """
from torch import nn
from transformers import PreTrainedModel

from sglang.srt.models.llama import LlamaForCausalLM


class PretrainedVLM(PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.language_model = LlamaForCausalLM(config)

    def forward(self, input_ids, positions, forward_batch):
        return self.language_model(input_ids, positions, forward_batch)

    @property
    def model(self):
        return self.language_model.model

    def get_embed_and_head(self):
        return self.language_model.get_embed_and_head()

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.language_model.set_eagle3_layers_to_capture(layer_ids)
"""


def test_a_wrapper_on_transformers_pretrained_model_gets_real_verdicts(tmp_path):
    """A PreTrainedModel base is known by its members (sglpatch/contract/parse/external.py),
    so its wrapper's missing members are gaps, not 'unknown'; what PreTrainedModel provides
    (config, device, tie_weights) is present, and a default that only raises NotImplementedError
    (get_input_embeddings) is not."""
    tree = make_tree(tmp_path, {"models/pretrained_wrapper.py": PRETRAINED_WRAPPER})
    m = check_tree(tree, ["PretrainedVLM"], cache=False).model("PretrainedVLM")
    verdicts = {s.item.label: s.verdict for s in m.statuses}
    assert "unknown" not in verdicts.values(), verdicts
    assert verdicts["routed_experts_weights_of_layer"] == "gap"  # the inner model has it, the wrapper not
    assert {label for label, v in verdicts.items() if v == "ok"} >= {
        "model",
        "get_embed_and_head",
        "set_eagle3_layers_to_capture",
    }
    an = Analysis(tree, cache=False)
    ref = an.resolve_model("PretrainedVLM")
    for member, status in (
        ("config", "present"),
        ("tie_weights", "present"),
        ("named_modules", "present"),
        ("get_input_embeddings", "missing"),
        ("no_such_member", "missing"),
    ):
        assert an.classes.lookup(ref, member).status == status, member
    # resolves() (for code that is not a model) shares the known members, and nn.Module's
    # __getattr__ (submodules, buffers) leaves every other name open
    assert an.classes.resolves(ref, "tie_weights").owner == "transformers.PreTrainedModel"
    assert an.classes.resolves(ref, "named_modules").owner == "torch.nn.Module"
    assert an.classes.resolves(ref, "no_such_member").status == "unknown"


def test_the_pretrained_model_list_covers_the_installed_transformers(runtime):
    """The list in external.py holds every PreTrainedModel member of the line's transformers and
    names each default that raises NotImplementedError (generated from both lines' runtimes)."""
    from sglpatch.contract.parse.external import PRETRAINED_DEFAULT_RAISES, PRETRAINED_MODEL_MEMBERS

    script = """
import inspect, json, torch
from transformers import PreTrainedModel
own = sorted(set(dir(PreTrainedModel)) - set(dir(torch.nn.Module)))
raises = sorted(n for n in own if callable(getattr(PreTrainedModel, n, None))
                and "NotImplementedError" in inspect.getsource(getattr(PreTrainedModel, n)))
print(json.dumps({"own": own, "raises": raises}))
"""
    result = runtime.run(script, variant=None, harness=False, timeout=300)
    assert result.returncode == 0, result.describe()
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(found["raises"]) <= PRETRAINED_DEFAULT_RAISES
    missing = set(found["own"]) - PRETRAINED_MODEL_MEMBERS - PRETRAINED_DEFAULT_RAISES
    assert not missing, f"regenerate sglpatch/contract/parse/external.py: {sorted(missing)}"


def test_named_checks_are_registered_and_run_on_a_tree(mini):
    checks._load_check_modules()
    assert set(CHECK_NAMES) <= set(checks.REGISTRY)
    assert checks.run_check("eagle3-capture-wiring", mini).passed
    assert not checks.run_check("sm12-torch-symm-mem", mini).passed
    with pytest.raises(UserError, match="no model class 'KimiK25ForConditionalGeneration'"):
        checks.run_check("kimi-k25-eagle3-interface", mini)


def test_recognised_patterns_are_documented():
    doc = (REPO_ROOT / "docs" / "contract.md").read_text()
    for name in list(PATTERNS) + list(CHECK_NAMES):
        assert f"`{name}`" in doc, name


# ---------------------------------------------------------------- real releases


@pytest.fixture(scope="module")
def pristine():
    return lambda version: source.pristine_tree(version, PIN)


def test_pristine_0_5_9_reports_every_kimi_gap_at_once_and_the_broken_wiring(pristine):
    tree = pristine("0.5.9")
    report = check_tree(tree)
    kimi = report.model(KIMI)
    assert kimi.wrapper and kimi.inners[0]["classes"] == ["DeepseekV3ForCausalLM"]
    gaps = {s.item.label: s for s in kimi.gaps}
    assert {"set_eagle3_layers_to_capture", "get_embed_and_head", "model", "routed_experts_weights_of_layer"} <= set(
        gaps
    )
    assert all(s.inner_has for s in gaps.values())
    sites = {a.location for a in gaps["set_eagle3_layers_to_capture"].item.required_sites}
    assert sites == {
        f"{SRT}/model_executor/model_runner.py:622",
        f"{SRT}/model_executor/cuda_graph_runner.py:365",
        f"{SRT}/model_executor/model_runner.py:1906",
    }
    assert {a.location for a in gaps["get_embed_and_head"].item.required_sites} >= {
        f"{SRT}/speculative/eagle_worker.py:157",
        f"{SRT}/speculative/eagle_worker_v2.py:194",
    }
    # set_embed_and_head is only ever called on the draft model: reported in the draft role
    assert "set_embed_and_head" not in report.contract.target
    assert "set_embed_and_head" in [s.item.label for s in kimi.draft_statuses]
    assert {s.item.label for s in kimi.by("optional")} >= {"start_layer", "end_layer"}
    # EPLB's probe returns None without the classmethod; the None goes through four returns and a
    # module global to ExpertDistributionRecorder.init_new's assert (0.5.10 added it to KimiK25)
    eplb = {a.location: a for a in gaps["get_model_config_for_expert_location"].item.required_sites}
    recorder = eplb[f"{SRT}/eplb/expert_distribution.py:65"]
    assert recorder.function == "ExpertDistributionRecorder.init_new" and recorder.guard == "asserted"
    assert recorder.conditions == ("server_args.expert_distribution_recorder_mode is not None",)
    assert recorder.via[0] == f"{SRT}/eplb/expert_location.py:531" and recorder.via[-1].endswith("model_runner.py:471")
    assert f"{SRT}/model_executor/model_runner.py:458" in recorder.via  # set_global_expert_location_metadata(...)
    # ModelRunner keeps the signature probe in self.support_pp and asserts it when pp_size > 1:
    # without the parameter, pipeline parallelism stops at start-up (0.5.10 added it to KimiK25)
    pp = gaps["forward(pp_proxy_tensors)"]
    assert pp.item.features == ["pipeline"] and {s.guard for s in pp.item.required_sites} == {"asserted"}
    assert any("pp_size > 1" in c for s in pp.item.required_sites for c in s.conditions)
    w = report.wiring
    assert not w.passed
    assert [loc for _, loc in w.findings] == [
        f"{SRT}/model_executor/model_runner.py:622",
        f"{SRT}/model_executor/cuda_graph_runner.py:365",
        f"{SRT}/model_executor/model_runner.py:1906",
    ]
    assert "runs after kernel_warmup" in w.findings[0][0]
    failed = {n: checks.run_check(n, tree).passed for n in CHECK_NAMES}
    assert failed == dict.fromkeys(CHECK_NAMES, False)


def test_pristine_0_5_10_fixed_kimi_but_not_the_wiring(pristine):
    tree = pristine("0.5.10")
    report = check_tree(tree)
    assert report.model(KIMI).gaps == [] and report.problems == []
    assert not report.wiring.passed
    assert checks.run_check("kimi-k25-eagle3-interface", tree).passed
    assert not checks.run_check("eagle3-capture-wiring", tree).passed


def test_pristine_0_5_11_kimi_lacks_model_but_the_caller_guards_the_read(pristine):
    """0.5.11 dropped KimiK25's ``.model`` again, but ``init_piecewise_cuda_graphs`` returns early
    without it before ``resolve_language_model(self.model)`` reads it: piecewise CUDA graphs are
    silently off for KimiK25, not a crash. The twin is 0.5.9 (no such guard: a gap, above)."""
    tree = pristine("0.5.11")
    report = check_tree(tree)
    kimi = report.model(KIMI)
    assert kimi.gaps == [] and "model" in {s.item.label for s in kimi.by("optional")}
    (site,) = [a for a in report.contract.target["model"].sites if a.function == "resolve_language_model"]
    assert site.guard == "hasattr" and site.via
    assert checks.run_check("kimi-k25-eagle3-interface", tree).passed


def test_pristine_0_5_12_wheel_passes_both(pristine):
    tree = pristine("0.5.12")
    report = check_tree(tree)
    assert report.version == "0.5.12"
    assert report.model(KIMI).gaps == [] and report.wiring.passed and report.passed
    assert checks.run_check("kimi-k25-eagle3-interface", tree).passed
    assert checks.run_check("eagle3-capture-wiring", tree).passed
    assert not checks.run_check("sm120-allreduce-fusion-gate", tree).passed
    assert not checks.run_check("sm12-torch-symm-mem", tree).passed  # fixed in 0.5.14


def test_pristine_0_5_16_eplb_reads_the_model_through_its_stored_getter(pristine):
    """0.5.16 hands EPLBManager ``get_model=lambda: self.model`` and reads
    ``self._get_model().routed_experts_weights_of_layer`` later: the contract follows it (the
    history benchmark counted the member "unused" there, as if upstream had dropped the call)."""
    tree = pristine("0.5.16")
    assert "get_model=lambda: self.model" in (tree / SRT / "model_executor/model_runner.py").read_text()
    item = check_tree(tree).contract.target["routed_experts_weights_of_layer"]
    sites = {(a.location, a.function) for a in item.required_sites}
    assert (f"{SRT}/eplb/eplb_manager.py:182", "EPLBManager._compute_update_layer_ids_chunks") in sites
    assert item.features == ["eplb"]


def test_pristine_0_5_16_eplb_none_reaches_the_recorder_through_the_resources_object(pristine):
    """From 0.5.16 the expert-location metadata lives in ``get_resources().expert_location_metadata``,
    not in a module global: the probe's None is still followed to the recorder's assert."""
    item = check_tree(pristine("0.5.16")).contract.target["get_model_config_for_expert_location"]
    sites = {a.location: a for a in item.required_sites}
    recorder = sites[f"{SRT}/eplb/expert_distribution.py:71"]
    assert recorder.guard == "asserted" and recorder.detail.startswith("None of")
    assert any(hop.startswith(f"{SRT}/eplb/expert_location.py") for hop in recorder.via)


def test_pristine_0_5_23_loader_attributes_and_protocol_probes_are_not_missing(pristine):
    """0.5.23's loader sets ``model.shared_experts_config`` on every model, and DSpark calls
    ``set_dspark_target_hidden_projector`` only after ``isinstance(target_model, <Protocol>)``:
    each was reported missing on all 47 wrappers."""
    tree = pristine("0.5.23")
    report = check_tree(tree, all_models=True)
    shared = {s.item.label: s for s in report.model(KIMI).statuses}["shared_experts_config"]
    assert shared.verdict == "ok" and shared.lookup.location == f"{SRT}/model_loader/loader.py:311"
    (site,) = report.contract.target["set_dspark_target_hidden_projector"].sites
    assert site.guard == "hasattr" and site.location == f"{SRT}/speculative/dspark_components/dspark_worker_v2.py:143"
    for m in report.models:
        labels = {s.item.label for s in m.statuses if s.verdict != "ok"}
        assert not labels & {"shared_experts_config", "set_dspark_target_hidden_projector"}, m.name


def test_pristine_0_5_9_llava_picks_its_language_model_at_run_time(pristine):
    report = check_tree(pristine("0.5.9"), ["LlavaForConditionalGeneration"])
    llava = report.model("LlavaForConditionalGeneration")
    assert llava.inners[0]["classes"] == ["<runtime choice>"] and llava.inners[0]["candidates"] > 100
    assert {"set_eagle3_layers_to_capture", "get_embed_and_head"} <= {s.item.label for s in llava.gaps}
    assert llava.by("unverified") == []


def test_pristine_0_5_9_dots_ocr_get_embed_and_head_reads_what_qwen2_lacks(pristine):
    """DotsOCR holds a Qwen2ForCausalLM in ``self.model`` and returns ``self.model.embed_tokens``
    from ``get_embed_and_head``: an EAGLE-3 target DotsOCR fails there although the member exists."""
    report = check_tree(pristine("0.5.9"), ["DotsOCRForCausalLM"])
    m = report.model("DotsOCRForCausalLM")
    status = {s.item.label: s for s in m.gaps}["get_embed_and_head"]
    assert status.verdict == "broken" and status.lookup.location == f"{SRT}/models/dots_ocr.py:168"
    assert "get_embed_and_head" in {st.requirement.label for st in m.eagle3_failures}


def test_pristine_0_5_23_prefill_graph_replay_asserts_get_input_embeddings(pristine):
    target = check_tree(pristine("0.5.23")).contract.target
    (site,) = [a for a in target["get_input_embeddings"].sites if "prefill_cuda_graph_runner" in a.location]
    assert site.guard == "asserted" and site.features == {"cuda-graph"} and site.conditions == ("ie is None",)


def _series_checks() -> set[str]:
    from sglpatch.queue.series import read_series

    try:
        series = read_series(REPO_ROOT)
    except Exception:
        return set()
    return {c.value for p in series.patches for c in p.drop_when if c.kind == "check"}


@pytest.mark.skipif(
    not {"kimi-k25-eagle3-interface", "eagle3-capture-wiring"} <= _series_checks(),
    reason="PENDING: patches/ has no patch dropped by check:kimi-k25-eagle3-interface "
    "and check:eagle3-capture-wiring yet (the series is being written)",
)
def test_patched_0_5_9_passes_interface_and_wiring(tmp_path):
    from sglpatch.queue import prepare

    patches = {p.name: p.read_text() for p in (REPO_ROOT / "patches").glob("*.patch")}
    series = [
        line.strip()
        for line in (REPO_ROOT / "patches" / "series").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    root = make_project(tmp_path / "project", patches, series)
    (root / "upstream.toml").write_text((REPO_ROOT / "upstream.toml").read_text())
    tree = prepare.prepare_tree(root)[3].path
    report = check_tree(tree)
    assert report.model(KIMI).gaps == [], [s.item.label for s in report.model(KIMI).gaps]
    assert report.wiring.passed, report.wiring.findings
    for name in ("kimi-k25-eagle3-interface", "eagle3-capture-wiring"):
        assert checks.run_check(name, tree).passed, name


def _history_benchmark():
    return load_module("contract_history", REPO_ROOT / "benchmarks" / "contract_history.py")


def test_the_history_benchmark_judges_each_gap_by_what_upstream_did_later():
    """benchmarks/contract_history.py on the pin and the next release: 0.5.10 gave KimiK25 the
    EAGLE-3 members 0.5.9 lacked, which confirms those gaps and counts them as flagged additions."""
    hist = _history_benchmark()
    s9, s10 = hist.snapshot("0.5.9"), hist.snapshot("0.5.10")
    assert hist.gap_fate(KIMI, "set_eagle3_layers_to_capture", [s10]) == ("added", "0.5.10")
    added = {(w, m): was for w, m, was in hist.additions(s9, s10)}
    assert added[(KIMI, "set_eagle3_layers_to_capture")] == "gap"
    assert added[(KIMI, "start_layer")] == "optional"  # listed as guarded, not flagged: a miss
    # the twins: a gap the next release keeps stays open, a class it drops is removed, and a
    # release compared with itself adds nothing
    kept = next(
        (w, m) for w, ms in s9.verdicts.items() for m, v in ms.items() if v == "gap" and s10.verdict(w, m) == "gap"
    )
    assert hist.gap_fate(*kept, [s10]) == ("open", None)
    assert hist.gap_fate("NoSuchWrapper", "model", [s10]) == ("removed", "0.5.10")
    assert hist.additions(s9, s9) == []
    rows = hist.evaluate([s9, s10])
    assert rows[0]["flagged"] < rows[0]["added_next"] and rows[0]["missed"]
    assert hist.summary(rows)["recall"] == rows[0]["flagged"] / (rows[0]["added_next"] - len(rows[0]["new_features"]))


def test_a_feature_upstream_gives_wrapper_and_inner_model_at_once_is_no_miss():
    """An optional member nothing had (unlisted: the inner model lacked it too) that the next
    release adds is a new feature, outside the recall; its twin, listed as optional because the
    inner model had it, is a miss."""
    hist = _history_benchmark()
    before = hist.Snapshot("1", 0.0, {"new_hook": False, "old_hook": False}, {"W": {"old_hook": "optional"}})
    after = hist.Snapshot("2", 0.0, {"new_hook": False, "old_hook": False}, {"W": {"new_hook": "ok", "old_hook": "ok"}})
    row = hist.evaluate([before, after])[0]
    assert row["new_features"] == ["W.new_hook"] and row["missed"] == ["W.old_hook (optional)"]
    s = hist.summary([row])
    assert (s["additions"], s["new_features"], s["flagged"], s["recall"]) == (1, 1, 0, 0.0)


@pytest.mark.slow
def test_every_release_from_the_pin_to_the_newest_is_understood():
    """Each release on PyPI from the pin on: no crash, a full contract, every anchor matched."""
    from packaging.version import Version

    versions = [v for v in source.released_versions() if Version(v) >= Version(PIN.version)]
    assert len(versions) >= 3
    problems, rows = [], []
    for v in versions:
        tree = source.pristine_tree(v, PIN)
        report = check_tree(tree, all_models=True)
        rows.append(
            (v, len(report.contract.target), report.model(KIMI) and len(report.model(KIMI).gaps), report.wiring.passed)
        )
        if report.problems or len(report.contract.target) < 20:
            problems.append(f"{v}: {report.problems or len(report.contract.target)}")
        if not report.wrappers:
            problems.append(f"{v}: no wrapper models found")
        full = sorted(r.name for r in Analysis(tree).wrappers(prefilter=False))
        if full != report.wrappers:  # the text prefilter must not lose a wrapper
            problems.append(f"{v}: prefilter found {report.wrappers}, a full parse {full}")
        if not any(loc for loc in report.wiring.configure):
            problems.append(f"{v}: no configured set_eagle3_layers_to_capture call found")
        for name in ("sm120-allreduce-fusion-gate", "sm12-torch-symm-mem"):
            findings = checks.run_check(name, tree).findings
            if any("layout changed" in f.message for f in findings):
                problems.append(f"{v}: {name}: {findings[0]}")
        if Version(v) >= Version("0.5.12") and not report.wiring.passed:
            problems.append(f"{v}: wiring regressed: {report.wiring.findings[0]}")
    assert not problems, "\n".join(problems) + "\n" + "\n".join(map(str, rows))


# ---------------------------------------------------------------- EAGLE-3 capture-layer resolution

AUX_CHECK = "eagle3-aux-layer-resolution"


def _patched_copy(pristine_dir: Path, line: str, dest: Path) -> Path:
    """A copy of a pristine release with every patch of the line's series applied."""
    import subprocess

    from sglpatch.queue.line import find_line
    from sglpatch.queue.series import read_series_names

    shutil.copytree(pristine_dir, dest, ignore=shutil.ignore_patterns(".sglpatch-*"))
    root = find_line(REPO_ROOT, line).root
    for name in read_series_names(root):
        subprocess.run(["git", "apply", "-p1", str(root / "patches" / name)], cwd=dest, check=True)
    return dest


@pytest.mark.parametrize("line, version", [("production", "0.5.9"), ("latest", "0.5.23")])
def test_aux_layer_resolution_check_fails_pristine_and_passes_patched(pristine, tmp_path, line, version):
    """The negative twin: the release fails the check (only eagle_config as a dict, a swallowing
    except), the same tree with the line's series applied (0005) passes."""
    tree = pristine(version)
    result = checks.run_check(AUX_CHECK, tree)
    assert not result.passed
    text = "\n".join(str(f) for f in result.findings)
    assert "eagle_config as an object" in text and "top-level eagle_aux_hidden_state_layer_ids" in text
    assert "swallows the error" in text
    assert checks.run_check(AUX_CHECK, _patched_copy(tree, line, tmp_path / "patched")).findings == ()

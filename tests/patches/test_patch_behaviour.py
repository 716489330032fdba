"""What the series' added code does, run from the patched files on the CPU (fast set).

The smoke tests prove the patches inside the real SGLang runtime, minutes per launch. These run
the same functions and methods, compiled from each line's patched files (tests/patch_code.py), in
milliseconds, so that a wrong patch (mutation testing's patch-level mutants: a delegation to the
wrong member, an argument swapped, a condition dropped, a check neutralised) fails the fast set
instead of waiting for a runtime test. Each check has its twin: the right answer is asserted
next to the wrong one a broken patch would give. Patches 0001 to 0004 here; 0005 (the EAGLE-3
capture layers) in test_patch_aux_layers.py. ``patched(line)`` is conftest's fixture.
"""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from patch_code import SRT, load_class, load_module

from sglpatch.upstream.pin import read_pin
from sglpatch.upstream.source import pristine_tree

REPO_ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- 0001: KimiK25 delegates to its language model

KIMI = "KimiK25ForConditionalGeneration"
DELEGATED = [
    "_get_language_model_attr",
    "start_layer",
    "end_layer",
    "routed_experts_weights_of_layer",
    "get_model_config_for_expert_location",
    "get_embed_and_head",
    "set_embed_and_head",
    "set_eagle3_layers_to_capture",
]


class DeepseekV3ForCausalLM:
    """The inner language model: every member records how it was reached."""

    calls: list = []

    def __init__(self):
        self.start_layer, self.end_layer = 3, 61
        self.routed_experts_weights_of_layer = {0: ["w"]}

    @classmethod
    def get_model_config_for_expert_location(cls, config):
        return ("expert-location", config)

    def get_embed_and_head(self):
        return ("embed", "head")

    def set_embed_and_head(self, embed, head):
        self.calls.append(("set_embed_and_head", embed, head))

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.calls.append(("set_eagle3_layers_to_capture", layer_ids))


@pytest.fixture
def kimi(patched):
    cls = load_class(
        patched("production") / SRT / "models/kimi_k25.py",
        KIMI,
        DELEGATED,
        {"DeepseekV3ForCausalLM": DeepseekV3ForCausalLM, "Any": object},
    )
    model = cls()
    model.language_model = DeepseekV3ForCausalLM()
    DeepseekV3ForCausalLM.calls = []
    return model


def test_kimi_forwards_each_member_to_the_same_member_of_its_language_model(kimi):
    assert (kimi.start_layer, kimi.end_layer) == (3, 61)
    assert kimi.routed_experts_weights_of_layer == {0: ["w"]}
    assert kimi.get_embed_and_head() == ("embed", "head")
    kimi.set_embed_and_head("E", "H")
    kimi.set_eagle3_layers_to_capture([2, 30, 58])
    kimi.set_eagle3_layers_to_capture()
    assert DeepseekV3ForCausalLM.calls == [
        ("set_embed_and_head", "E", "H"),
        ("set_eagle3_layers_to_capture", [2, 30, 58]),
        ("set_eagle3_layers_to_capture", None),
    ]
    text_config = object()
    assert type(kimi).get_model_config_for_expert_location(NS(text_config=text_config)) == (
        "expert-location",
        text_config,
    )


def test_kimi_names_both_classes_when_its_language_model_lacks_a_member(kimi):
    kimi.language_model = NS()
    with pytest.raises(
        NotImplementedError,
        match=f"^{KIMI} delegates 'start_layer' to its language model, but SimpleNamespace does not provide it.$",
    ):
        kimi.start_layer
    with pytest.raises(NotImplementedError, match="delegates 'set_eagle3_layers_to_capture'"):
        kimi.set_eagle3_layers_to_capture([1])


# ---------------------------------------------------------------- 0002: the capture layers are configured once


def test_the_runner_configures_the_capture_layers_only_for_an_eagle3_draft(patched):
    runner_cls = load_class(
        patched("production") / SRT / "model_executor/model_runner.py",
        "ModelRunner",
        ["init_aux_hidden_state_capture"],
        {
            "captured_layers": lambda model: ["read back", model.tag],
            "check_captured_layers": lambda aux: logged.append(("checked", aux.captured_layers)),
            "log_eagle3_aux_layers": lambda aux: logged.append(aux.captured_layers),
        },
    )
    calls, logged = [], []
    runner = runner_cls()
    runner.model = NS(tag="m", set_eagle3_layers_to_capture=lambda ids: calls.append(ids))
    runner.eagle_aux_hidden_state_layer_ids, runner.eagle3_aux_layers = [2, 30, 58], NS(captured_layers=None)
    runner.eagle_use_aux_hidden_state = True
    runner.init_aux_hidden_state_capture()
    assert calls == [[2, 30, 58]] and runner.eagle3_aux_layers.captured_layers == ["read back", "m"]
    assert logged == [("checked", ["read back", "m"]), ["read back", "m"]]  # checked, then logged
    runner.eagle_use_aux_hidden_state, runner.eagle3_aux_layers = False, None
    runner.init_aux_hidden_state_capture()
    assert calls == [[2, 30, 58]] and len(logged) == 2  # the twin: nothing configured


# ---------------------------------------------------------------- 0003: allreduce fusion on SM12x


def fake_flashinfer(monkeypatch, version="0.6.3", flags=None, raises=None):
    """A FlashInfer whose JIT spec for trtllm_comm carries ``flags`` (or raises ``raises``)."""

    def gen_trtllm_comm_module():
        if raises is not None:
            raise raises
        return NS(extra_cuda_cflags=flags)

    package = types.ModuleType("flashinfer")
    package.__version__ = version
    jit, comm = types.ModuleType("flashinfer.jit"), types.ModuleType("flashinfer.jit.comm")
    comm.gen_trtllm_comm_module = gen_trtllm_comm_module
    for name, module in [("flashinfer", package), ("flashinfer.jit", jit), ("flashinfer.jit.comm", comm)]:
        monkeypatch.setitem(sys.modules, name, module)


@pytest.fixture
def probe(patched):
    mod = load_module(patched("production") / SRT / "layers/flashinfer_comm_fusion.py", name="fusion_prod")
    return lambda: mod.probe_flashinfer_allreduce_fusion_sm12x.__wrapped__()


@pytest.mark.parametrize(
    "setup, expected",
    [
        (dict(version="0.6.17", flags=["-gencode=arch=compute_120a,code=sm_120a"]), True),
        (dict(version="0.6.3", flags=["-gencode=arch=compute_90a,code=sm_90a", "compute_100a"]), False),
        (dict(version="0.6.3", flags=None), False),
        (
            dict(
                version="0.6.3", raises=RuntimeError("No supported CUDA architectures found for major versions [9, 10]")
            ),
            False,
        ),
        (dict(version="0.6.17", raises=OSError("no nvcc")), True),  # cannot inspect: judged by version
        (dict(version="0.6.16", raises=OSError("no nvcc")), False),
        (dict(version="not-a-version", raises=OSError("no nvcc")), False),
    ],
)
def test_the_probe_says_whether_flashinfer_builds_its_fusion_kernels_for_sm12x(probe, monkeypatch, setup, expected):
    fake_flashinfer(monkeypatch, **setup)
    supported, detail = probe()
    assert supported is expected and f"flashinfer {setup['version']}" in detail


def test_the_probe_without_flashinfer_says_so(probe, monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    assert probe()[0] is False and "cannot be imported" in probe()[1]


@pytest.mark.parametrize(
    "enabled, sm120, available, probed, after, warned, probes",
    [
        (True, True, True, (False, "flashinfer 0.6.3 does not build"), False, True, 1),
        (True, True, True, (True, "ok"), True, False, 1),
        (True, True, False, (True, "ok"), False, True, 0),
        (False, True, True, (True, "ok"), False, False, 0),
        (True, False, True, (False, "no"), True, False, 0),
    ],
)
def test_fusion_asked_for_on_sm12x_is_disabled_with_a_warning_unless_flashinfer_can(
    patched, monkeypatch, caplog, enabled, sm120, available, probed, after, warned, probes
):
    asked = []

    def probe_stub():
        asked.append(1)
        return probed

    layers = types.ModuleType("sglang.srt.layers.flashinfer_comm_fusion")
    layers.probe_flashinfer_allreduce_fusion_sm12x = probe_stub
    for name in ("sglang", "sglang.srt", "sglang.srt.layers"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.layers.flashinfer_comm_fusion", layers)
    cls = load_class(
        patched("production") / SRT / "server_args.py",
        "ServerArgs",
        ["_handle_flashinfer_allreduce_fusion"],
        {
            "is_sm120_supported": lambda: sm120,
            "is_flashinfer_available": lambda: available,
            "logger": logging.getLogger("server_args_prod"),
        },
    )
    args = cls()
    args.enable_flashinfer_allreduce_fusion = enabled
    with caplog.at_level(logging.WARNING, logger="server_args_prod"):
        args._handle_flashinfer_allreduce_fusion()
    assert args.enable_flashinfer_allreduce_fusion is after
    assert bool(caplog.records) is warned and len(asked) == probes
    if warned:
        assert "--enable-flashinfer-allreduce-fusion is disabled on this SM12x GPU" in caplog.text
        assert (probed[1] if available else "flashinfer is not available") in caplog.text


CONDITIONS = ["_is_cuda", "is_sm120_supported", "_is_flashinfer_available", "probe"]


@pytest.mark.parametrize("false", [None, *CONDITIONS])
def test_the_sm12x_fusion_gate_needs_cuda_sm12x_flashinfer_and_the_probe(patched, false):
    values = {name: name != false for name in CONDITIONS}
    mod = load_module(
        patched("production") / SRT / "layers/communicator.py",
        name="communicator_prod",
        provides={
            "_is_cuda": values["_is_cuda"],
            "is_sm120_supported": lambda: values["is_sm120_supported"],
            "_is_flashinfer_available": values["_is_flashinfer_available"],
            "probe_flashinfer_allreduce_fusion_sm12x": lambda: (values["probe"], "detail"),
        },
    )
    assert mod._is_sm120_allreduce_fusion_supported is (false is None)


@pytest.mark.parametrize(
    "sm90, sm100, sm120, expected",
    [(False, False, True, True), (False, False, False, False), (True, False, False, True), (False, True, False, True)],
)
def test_the_fusion_applies_on_sm12x_when_its_gate_admits_it(patched, sm90, sm100, sm120, expected):
    mod = load_module(
        patched("production") / SRT / "layers/communicator.py",
        name="communicator_prod2",
        provides={
            "_is_sm90_supported": sm90,
            "_is_sm100_supported": sm100,
            "_is_sm120_allreduce_fusion_supported": sm120,
            "_is_flashinfer_available": True,
            "is_dp_attention_enabled": lambda: False,
            "get_global_server_args": lambda: NS(enable_flashinfer_allreduce_fusion=True),
        },
    )
    assert bool(mod.apply_flashinfer_allreduce_fusion(8)) is expected
    assert not mod.apply_flashinfer_allreduce_fusion(0)


@pytest.fixture
def resolve_backend(patched):
    platform = NS(is_sm120=True, is_sm90=False, is_sm100=False)
    mod = load_module(
        patched("latest") / SRT / "layers/flashinfer_comm_fusion.py",
        name="fusion_latest",
        provides={"get_platform": lambda: platform},
    )
    return platform, mod._resolve_backend


def test_latest_sm12x_resolves_the_fusion_backend_to_trtllm_single_node_only(resolve_backend):
    platform, resolve = resolve_backend
    assert resolve("auto") == "trtllm" and resolve("trtllm") == "trtllm"
    for backend, multi_node, why in [
        ("mnnvl", False, "supports the trtllm backend only"),
        ("cutedsl", False, "supports the trtllm backend only"),
        ("auto", True, "single-node only"),
        ("trtllm", True, "single-node only"),
    ]:
        with pytest.raises(ValueError, match=why):
            resolve(backend, multi_node)
    platform.is_sm120 = False  # the twin: an SM80 GPU is still refused
    with pytest.raises(ValueError, match="requires SM90, SM10X or SM12x"):
        resolve("auto")


@pytest.mark.parametrize("cuda, sm120", [(True, True), (True, False), (False, True), (False, False)])
def test_latest_add_norm_admits_sm12x_only_on_cuda(patched, cuda, sm120):
    mod = load_module(
        patched("latest") / SRT / "layers/layer_boundary/residual/add_norm.py",
        name="add_norm_latest",
        provides={"_is_cuda": cuda, "get_platform": lambda: NS(is_sm120=sm120)},
    )
    assert bool(mod._is_sm120_supported) is (cuda and sm120)


# ---------------------------------------------------------------- 0004: torch symmetric memory on SM12x


class Tensor:
    """What the communicator does with a tensor: size it, slice it, copy and reshape it."""

    def __init__(self, numel=1024, dtype="bf16"):
        self._numel, self.dtype, self.shape = numel, dtype, (numel,)

    def numel(self):
        return self._numel

    def element_size(self):
        return 2

    def __getitem__(self, _):
        return self

    def view(self, *_):
        return self

    def copy_(self, _):
        return self


def fake_torch(capability, world_size, kernels):
    torch = NS(
        bfloat16="bf16",
        device=lambda d: d,
        empty_like=lambda t: Tensor(t.numel(), t.dtype),
        cuda=NS(set_device=lambda d: None, get_device_capability=lambda d: (capability, 0)),
        ops=NS(
            symm_mem=NS(
                multimem_all_reduce_=lambda *a: kernels.append("multimem"),
                two_shot_all_reduce_=lambda *a: kernels.append("two_shot"),
            )
        ),
    )
    torch.bfloat16 = NS(itemsize=2)
    return {
        "torch": torch,
        "dist": NS(get_world_size=lambda group: world_size),
        "torch_symm_mem": NS(
            empty=lambda n, device, dtype: Tensor(n, dtype), rendezvous=lambda buffer, name: NS(multicast_ptr=1)
        ),
        "torch_symm_mem_available": True,
    }


@pytest.fixture
def communicator(patched):
    pin = read_pin(REPO_ROOT)
    utils = load_module(
        pristine_tree(pin.version, pin) / SRT / "distributed/device_communicators/all_reduce_utils.py",
        name="all_reduce_utils_prod",
    )

    def make(capability, world_size):
        kernels = []
        cls = load_class(
            patched("production") / SRT / "distributed/device_communicators/torch_symm_mem.py",
            "TorchSymmMemCommunicator",
            ["__init__", "should_torch_symm_mem_allreduce", "all_reduce"],
            {
                **fake_torch(capability, world_size, kernels),
                "logger": logging.getLogger("symm_prod"),
                "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES": utils.TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES,
            },
        )
        comm = cls(NS(group_name="tp"), 0)
        return comm, kernels, utils.TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES

    return make


@pytest.mark.parametrize(
    "capability, world_size, why",
    [(12, 8, "Device capability 12 not supported"), (10, 3, "World size 3 not supported")],
)
def test_symm_mem_on_a_gpu_or_world_size_its_tables_lack_disables_itself_with_a_warning(
    communicator, caplog, capability, world_size, why
):
    with caplog.at_level(logging.WARNING, logger="symm_prod"):
        comm, _, _ = communicator(capability, world_size)
    assert comm.disabled and why in caplog.text
    assert comm.should_torch_symm_mem_allreduce(Tensor()) is False


@pytest.mark.parametrize(
    "capability, world_size, kernel", [(10, 8, "multimem"), (9, 4, "multimem"), (9, 2, "two_shot"), (10, 4, "two_shot")]
)
def test_symm_mem_on_a_listed_gpu_is_enabled_and_picks_its_kernel(communicator, capability, world_size, kernel):
    comm, kernels, table = communicator(capability, world_size)
    assert not comm.disabled and comm.max_size == table[capability][world_size]
    assert comm.should_torch_symm_mem_allreduce(Tensor(1024, comm.dtype)) is True
    assert comm.should_torch_symm_mem_allreduce(Tensor(comm.max_size, comm.dtype)) is False  # too large
    comm.all_reduce(Tensor(1024, comm.dtype))
    assert kernels == [kernel]

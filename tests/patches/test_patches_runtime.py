"""The patch series against the real SGLang runtime of each line, on CPU.

A test of a patch runs on every line whose series carries it (``@pytest.mark.patch``), following
the code of the releases it names (``@pytest.mark.sglang``: the SM12x gate moved in 0.5.21).
Every script runs twice in the ``runtime`` fixture (the line's pinned venv, CPU harness):
on the ``patched`` overlay wheel, where the fixed behaviour must hold, and on upstream's
``pristine`` wheel, where the same observation must show the bug. The pristine half is
the negative control: it proves each test notices when its patch is missing.

Models are tiny random ones written here as ``config.json`` files and loaded by SGLang's own
``ModelRunner`` with ``load_format="dummy"``. GPU hardware (SM90/SM100/SM120) is simulated inside
the scripts by replacing the capability queries (``torch.cuda.*``) only; the gates themselves run
as shipped. What only a GPU can prove is in :func:`test_fusion_probe_on_real_sm12x_hardware` and the
smoke tests' GPU twins, skipped without one.
"""

from __future__ import annotations

import json

import pytest
import sglang_runtime
from sglang_runtime import RESULT_MARKER

VARIANTS = ("patched", "pristine")

# --------------------------------------------------------------------------------------------
# Script building blocks (Python source run inside the runtime)

_PRELUDE = (
    '''
import inspect, json, logging, os, socket, sys, tempfile, types

RESULT_MARKER = %r


def emit(obj):
    print(RESULT_MARKER + json.dumps(obj), flush=True)


N_LAYERS = 8
# Draft-configured aux layers; SGLang captures the input of layer i + 1 for each id i.
AUX_IDS = [0, 3, 6]
CONFIGURED = [i + 1 for i in AUX_IDS]  # [1, 4, 7]
DEFAULTS = [2, N_LAYERS // 2, N_LAYERS - 3]  # [2, 4, 5]

TEXT_CONFIG = dict(
    architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", vocab_size=256,
    hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=N_LAYERS,
    num_attention_heads=2, num_key_value_heads=2, n_routed_experts=4, n_shared_experts=1,
    num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1, moe_layer_freq=1,
    routed_scaling_factor=1.0, kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=16,
    qk_nope_head_dim=16, v_head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-6,
    torch_dtype="bfloat16", rope_theta=10000.0, hidden_act="silu", tie_word_embeddings=False,
    # yarn: the CPU rotary embedding path DeepSeek needs
    rope_scaling=dict(type="yarn", factor=1.0, original_max_position_embeddings=512,
                      beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=1.0),
    topk_method="noaux_tc", scoring_func="sigmoid", norm_topk_prob=True,
    bos_token_id=0, eos_token_id=1,
)


def write_model(kind):
    """A config-only model directory: "kimi" (KimiK25), "deepseek" (DeepseekV3) or "draft"."""
    path = tempfile.mkdtemp(prefix=f"tiny-{kind}-")
    if kind == "deepseek":
        config = TEXT_CONFIG
    elif kind == "kimi":
        config = dict(
            architectures=["KimiK25ForConditionalGeneration"], model_type="kimi_k25",
            torch_dtype="bfloat16", text_config=TEXT_CONFIG,
            vision_config=dict(
                patch_size=14, init_pos_emb_height=8, init_pos_emb_width=8, init_pos_emb_time=4,
                num_attention_heads=2, num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                mm_hidden_size=32, merge_kernel_size=[2, 2],
                vt_hidden_size=32, text_hidden_size=TEXT_CONFIG["hidden_size"]),
        )
    else:  # EAGLE-3 draft for the target above
        config = dict(
            architectures=["LlamaForCausalLMEagle3"], model_type="llama", vocab_size=256,
            draft_vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
            rms_norm_eps=1e-6, torch_dtype="bfloat16", target_hidden_size=64,
            tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
            eagle_config=dict(eagle_aux_hidden_state_layer_ids=AUX_IDS, use_aux_hidden_state=True),
        )
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(config, fh)
    return path


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_runner(target, eagle3_draft=None, **server_args):
    """SGLang's own ModelRunner on CPU: distributed init, dummy (random) weights, KV pool."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.server_args import ServerArgs

    spec = {}
    if eagle3_draft:
        spec = dict(speculative_algorithm="EAGLE3", speculative_draft_model_path=eagle3_draft,
                    speculative_num_steps=2, speculative_eagle_topk=1,
                    speculative_num_draft_tokens=3)
    args = ServerArgs(model_path=target, device="cpu", load_format="dummy", dtype="bfloat16",
                      skip_tokenizer_init=True, disable_cuda_graph=True, max_total_tokens=512,
                      mem_fraction_static=0.5, **spec, **server_args)
    return ModelRunner(model_config=ModelConfig.from_server_args(args), mem_fraction_static=0.5,
                       gpu_id=0, tp_rank=0, tp_size=1, moe_ep_rank=0, moe_ep_size=1, pp_rank=0,
                       pp_size=1, nccl_port=free_port(), server_args=args)


def error_text(exc):
    return f"{type(exc).__name__}: {exc}"
'''
    % RESULT_MARKER
)

# Pretend to be on a CUDA machine of a given compute capability: only the hardware queries
# change; SGLang's gates and FlashInfer's own architecture selection run as shipped.
_SIMULATE_GPU = '''
os.environ["FLASHINFER_CUDA_ARCH_LIST"] = "12.0"  # what FlashInfer targets on an SM120 box

import torch
import flashinfer
import flashinfer.jit.comm as fi_comm
import sglang.srt.utils.common as sgl_common

REAL_GEN_TRTLLM_COMM = fi_comm.gen_trtllm_comm_module
REAL_FLASHINFER_VERSION = flashinfer.__version__


def gen_trtllm_comm_module_with_sm12x():
    """flashinfer/jit/comm.py of flashinfer-python >= 0.6.17: majors [9, 10, 12]."""
    nvcc_flags = fi_comm.current_compilation_context.get_nvcc_flags_list(
        supported_major_versions=[9, 10, 12]
    )
    return fi_comm.gen_jit_spec(
        "trtllm_comm",
        [
            fi_comm.jit_env.FLASHINFER_CSRC_DIR / "trtllm_allreduce.cu",
            fi_comm.jit_env.FLASHINFER_CSRC_DIR / "trtllm_allreduce_fusion.cu",
            fi_comm.jit_env.FLASHINFER_CSRC_DIR / "trtllm_moe_allreduce_fusion.cu",
        ],
        extra_cuda_cflags=nvcc_flags,
    )


def gen_trtllm_comm_module_changed(required_new_argument):
    raise AssertionError("a FlashInfer whose internals changed: never called correctly")


FLASHINFERS = {
    # the installed one (0.6.3, SGLang 0.5.9's pin): trtllm_comm for majors [9, 10]
    "installed": (REAL_GEN_TRTLLM_COMM, REAL_FLASHINFER_VERSION),
    "sm12x": (gen_trtllm_comm_module_with_sm12x, "0.6.17"),
    # internals not inspectable: only the version is left to go by
    "opaque-0.6.17": (gen_trtllm_comm_module_changed, "0.6.17"),
    "opaque-0.6.16": (gen_trtllm_comm_module_changed, "0.6.16"),
}


def simulate_gpu(major, flashinfer_kind="installed"):
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.get_device_capability = lambda device=None: (major, 0)
    torch.cuda.get_device_name = lambda device=None: f"Simulated SM{major}0 GPU"
    torch.cuda.set_device = lambda device: None
    torch.version.cuda = "12.8"
    sgl_common.get_nvgpu_memory_capacity = lambda: 97887  # MiB: a 96 GB card (nvidia-smi)
    for fn in (sgl_common.is_cuda, sgl_common.is_cuda_alike, sgl_common.is_flashinfer_available,
               sgl_common.is_sm90_supported, sgl_common.is_sm100_supported,
               sgl_common.is_sm120_supported):
        fn.cache_clear()
    fi_comm.gen_trtllm_comm_module, flashinfer.__version__ = FLASHINFERS[flashinfer_kind]
    fusion = sys.modules.get("sglang.srt.layers.flashinfer_comm_fusion")
    probe = getattr(fusion, "probe_flashinfer_allreduce_fusion_sm12x", None)
    if probe is not None:
        probe.cache_clear()


class Warnings(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


WARNINGS = Warnings()
logging.getLogger().addHandler(WARNINGS)
'''

IFACE_SCRIPT = (
    _PRELUDE
    + """
import torch
from sglang.srt.eplb.expert_location import ModelConfigForExpertLocation
from sglang.srt.model_executor.model_runner import resolve_language_model
from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM

runner = make_runner(write_model("kimi"), attention_backend="torch_native")
model = runner.model
inner = model.language_model
# The reference semantics: the text model class itself, built from the same text config.
reference = DeepseekV3ForCausalLM(model.config.text_config, None)


def capture_state(m):
    return [list(m.model.layers_to_capture), bool(m.capture_aux_hidden_states)]


results = {"class": type(model).__name__, "inner_class": type(inner).__name__}


def check(name):
    def run(fn):
        try:
            results[name] = {"ok": True, "detail": fn()}
        except Exception as exc:
            results[name] = {"ok": False, "detail": error_text(exc)}
    return run


@check("set_eagle3_layers_to_capture(None)")
def _():
    model.set_eagle3_layers_to_capture(None)
    reference.set_eagle3_layers_to_capture(None)
    got, want = capture_state(inner), capture_state(reference)
    assert got == want == [DEFAULTS, True], (got, want)
    return got


@check("set_eagle3_layers_to_capture(ids)")
def _():
    model.set_eagle3_layers_to_capture(AUX_IDS)
    reference.set_eagle3_layers_to_capture(AUX_IDS)
    got, want = capture_state(inner), capture_state(reference)
    assert got == want == [CONFIGURED, True], (got, want)
    return got


@check("set_eagle3_layers_to_capture off the last pipeline rank")
def _():
    for m in (inner, reference):
        m.model.layers_to_capture = ["untouched"]
        m.capture_aux_hidden_states = False
    saved = inner.pp_group, reference.pp_group
    inner.pp_group = reference.pp_group = types.SimpleNamespace(is_last_rank=False)
    try:
        model.set_eagle3_layers_to_capture(AUX_IDS)
        reference.set_eagle3_layers_to_capture(AUX_IDS)
    finally:
        inner.pp_group, reference.pp_group = saved
    got, want = capture_state(inner), capture_state(reference)
    assert got == want == [["untouched"], False], (got, want)


@check("get_embed_and_head")
def _():
    embed, head = model.get_embed_and_head()
    assert embed is inner.model.embed_tokens.weight
    assert head is inner.lm_head.weight


@check("set_embed_and_head")
def _():
    embed = torch.nn.Parameter(torch.randn_like(inner.model.embed_tokens.weight))
    head = torch.nn.Parameter(torch.randn_like(inner.lm_head.weight))
    model.set_embed_and_head(embed, head)
    assert inner.model.embed_tokens.weight is embed
    assert inner.lm_head.weight is head
    got = model.get_embed_and_head()
    assert got[0] is embed and got[1] is head


@check(".model")
def _():
    assert model.model is inner.model
    assert resolve_language_model(model) is inner.model  # piecewise CUDA graph path


@check("start_layer/end_layer")
def _():
    assert (model.start_layer, model.end_layer) == (inner.start_layer, inner.end_layer)
    assert (runner.start_layer, runner.end_layer) == (0, N_LAYERS)


@check("routed_experts_weights_of_layer")
def _():
    got, want = model.routed_experts_weights_of_layer, inner.routed_experts_weights_of_layer
    assert sorted(got) == sorted(want) == list(range(1, N_LAYERS)), (sorted(got), sorted(want))
    assert all(a is b for layer in want for a, b in zip(got[layer], want[layer]))


@check("get_model_config_for_expert_location")
def _():
    got = type(model).get_model_config_for_expert_location(model.config)
    want = DeepseekV3ForCausalLM.get_model_config_for_expert_location(model.config.text_config)
    assert got == want, (got, want)
    assert ModelConfigForExpertLocation.from_model_config(runner.model_config) == want
    return str(got)


@check("forward(pp_proxy_tensors)")
def _():
    assert "pp_proxy_tensors" in inspect.signature(type(model).forward).parameters
    assert runner.support_pp, "ModelRunner.support_pp is False"


@check("missing capability: clear error")
def _():
    class TextModelWithoutEagle3(torch.nn.Module):
        pass

    model.language_model = TextModelWithoutEagle3()
    seen = {}
    try:
        for member, use in [
            ("get_embed_and_head", lambda: model.get_embed_and_head()),
            ("set_eagle3_layers_to_capture", lambda: model.set_eagle3_layers_to_capture(None)),
            ("start_layer", lambda: model.start_layer),
        ]:
            try:
                use()
            except Exception as exc:
                seen[member] = error_text(exc)
                assert not isinstance(exc, AttributeError), f"bare {seen[member]}"
                for part in ("KimiK25ForConditionalGeneration", "TextModelWithoutEagle3", member):
                    assert part in str(exc), (member, part, str(exc))
            else:
                raise AssertionError(f"{member}: no error")
    finally:
        model.language_model = inner
    return seen


emit(results)
"""
)

WIRING_SCRIPT = (
    _PRELUDE
    + """
TARGET = %r  # "deepseek": DeepseekV3 (has the EAGLE-3 interface in 0.5.9) or "kimi"

from sglang.srt.model_executor import model_runner as model_runner_module
from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner
from sglang.srt.model_executor.model_runner import ModelRunner

observed = {}


def capture_state(runner):
    inner = getattr(runner.model, "language_model", runner.model)
    return {"layers": list(inner.model.layers_to_capture),
            "enabled": bool(inner.capture_aux_hidden_states)}


# 1. The moment ModelRunner.initialize() starts capturing device graphs.
original_init_device_graphs = ModelRunner.init_device_graphs


def init_device_graphs(self):
    observed["init_device_graphs"] = capture_state(self)
    return original_init_device_graphs(self)


ModelRunner.init_device_graphs = init_device_graphs

try:
    runner = make_runner(write_model(TARGET), eagle3_draft=write_model("draft"),
                         attention_backend="triton", cuda_graph_bs=[1, 2])
except Exception as exc:
    emit({"init_error": error_text(exc)})
    raise SystemExit(0)
observed["after_initialize"] = capture_state(runner)

# 2. CudaGraphRunner, as built by init_device_graphs() on CUDA and again by
# update_weights_from_disk(recapture_cuda_graph=True): the layers when it captures.
def capture(self):
    observed["cuda_graph_capture"] = capture_state(self.model_runner)


CudaGraphRunner.capture = capture
CudaGraphRunner(runner)
observed["after_cuda_graph_runner"] = capture_state(runner)


# 3. Kernel warmup's _dummy_run(): the layers when its forward pass would start.
class ForwardWouldStart(Exception):
    pass


original_require_mlp_tp_gather = model_runner_module.require_mlp_tp_gather


def require_mlp_tp_gather(server_args):
    observed["dummy_run"] = capture_state(runner)
    raise ForwardWouldStart


model_runner_module.require_mlp_tp_gather = require_mlp_tp_gather
try:
    runner._dummy_run(batch_size=1)
except ForwardWouldStart:
    pass
finally:
    model_runner_module.require_mlp_tp_gather = original_require_mlp_tp_gather

observed["final"] = capture_state(runner)
emit({"observed": observed, "configured": CONFIGURED, "defaults": DEFAULTS})
"""
)

GATE_SCRIPT = (
    _PRELUDE
    + _SIMULATE_GPU
    + """
import importlib

import sglang.srt.layers.communicator as communicator
import sglang.srt.server_args as server_args_module
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

KIMI = write_model("kimi")
out = {"gate": {}, "probe": {}, "server_args": {}}

for major in (8, 9, 10, 12):
    for kind in FLASHINFERS:
        for requested in (True, False):
            simulate_gpu(major, kind)
            importlib.reload(communicator)  # re-runs its import-time capability checks
            set_global_server_args_for_scheduler(
                ServerArgs(model_path="dummy", enable_flashinfer_allreduce_fusion=requested))
            del WARNINGS.messages[:]
            decisions = [communicator.apply_flashinfer_allreduce_fusion(bs)
                         for bs in (1, 128, 2048, 4096)]
            out["gate"][f"sm{major}0/{kind}/requested={requested}"] = {
                "decisions": decisions, "warnings": list(WARNINGS.messages)}
        fusion = sys.modules.get("sglang.srt.layers.flashinfer_comm_fusion")
        probe = getattr(fusion, "probe_flashinfer_allreduce_fusion_sm12x", None)
        if major == 12 and probe is not None:
            out["probe"][kind] = list(probe())

# Server arguments of a KimiK25 launch: the flag as the workers will see it.
for major, kind, requested in [(12, "installed", True), (12, "sm12x", True),
                               (12, "installed", False), (12, "sm12x", False),
                               (9, "installed", False), (9, "installed", True)]:
    simulate_gpu(major, kind)
    del WARNINGS.messages[:]
    args = ServerArgs(model_path=KIMI, device="cpu", skip_tokenizer_init=True,
                      enable_flashinfer_allreduce_fusion=requested)
    out["server_args"][f"sm{major}0/{kind}/requested={requested}"] = {
        "enabled": args.enable_flashinfer_allreduce_fusion,
        "fusion_warnings": [m for m in WARNINGS.messages if "allreduce-fusion" in m
                            or "allreduce fusion" in m],
    }

emit(out)
"""
)

# SGLang 0.5.21+ (the latest line): the gate is flashinfer_ar_fusion_applies() in
# layers/layer_boundary/residual/add_norm.py and the backend comes from _resolve_backend() in
# layers/flashinfer_comm_fusion.py. The GPU is simulated through SGLang's own platform override
# (runtime_context.override_platform) plus is_cuda(); the launch's resolved exec context, which
# only a launch publishes, is given to the gate as a launch with the trtllm backend would.
GATE_SCRIPT_LAYER_BOUNDARY = (
    _PRELUDE
    + """
import importlib

import sglang.srt.utils as sgl_utils
import sglang.srt.utils.common as sgl_common
from sglang.srt.runtime_context import override_platform
import sglang.srt.layers.flashinfer_comm_fusion as fusion
import sglang.srt.layers.layer_boundary.residual.add_norm as add_norm  # imported on the CPU as is

# a CUDA machine, for add_norm's own import-time probes only (its imports are already loaded)
sgl_common.is_cuda = sgl_utils.is_cuda = lambda: True
sgl_common.is_flashinfer_available.cache_clear()  # answered False on import; flashinfer is installed
RESOLVED = types.SimpleNamespace(comm=types.SimpleNamespace(flashinfer_allreduce_fusion_backend="trtllm"))
GPUS = {"sm80": {}, "sm90": {"is_sm90": True}, "sm100": {"is_sm100": True, "is_blackwell": True},
        "sm120": {"is_sm120": True, "is_blackwell": True}}
out = {"resolve": {}, "applies": {}}
for gpu, facts in GPUS.items():
    facts = {"is_cuda": True, "is_sm90": False, "is_sm100": False, "is_sm120": False,
             "is_blackwell": False, **facts}
    with override_platform(**facts):
        for backend in ("auto", "trtllm", "mnnvl", "cutedsl"):
            for multi_node in (False, True):
                try:
                    chosen = fusion._resolve_backend(backend, multi_node)
                except ValueError as exc:
                    chosen = "ValueError: " + str(exc)
                out["resolve"][f"{gpu}/{backend}/multi_node={multi_node}"] = chosen
        add_norm = importlib.reload(add_norm)  # re-runs its import-time capability checks
        add_norm.get_exec = lambda: RESOLVED
        add_norm.is_dp_attention_enabled = lambda: False
        add_norm.uses_cutedsl_ar_fusion = lambda: False
        add_norm.is_flashinfer_allreduce_unavailable = lambda: False
        out["applies"][gpu] = [add_norm.flashinfer_ar_fusion_applies(bs) for bs in (1, 128, 2048, 4096)]
emit(out)
"""
)

SYMM_MEM_SCRIPT = (
    _PRELUDE
    + """
import torch
import torch.distributed as dist
from sglang.srt.distributed.device_communicators import torch_symm_mem

records = []


class Capture(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())


torch_symm_mem.logger.addHandler(Capture())

# What a CUDA machine would answer (no GPU here); the communicator's logic runs as shipped.
torch_symm_mem.torch_symm_mem_available = True
torch.cuda.set_device = lambda device: None
dist.get_world_size = lambda group=None: 2
fake_group = types.SimpleNamespace(group_name="tp")


class Handle:
    multicast_ptr = 1


symm = torch_symm_mem.torch_symm_mem
symm.empty = lambda n, device, dtype: torch.empty(n, dtype=dtype)
symm.rendezvous = lambda buffer, group_name: Handle()

out = {}
for major in (9, 10, 12):
    torch.cuda.get_device_capability = lambda device=None, major=major: (major, 0)
    del records[:]
    try:
        comm = torch_symm_mem.TorchSymmMemCommunicator(group=fake_group, device=0)
        out[f"sm{major}0"] = {"disabled": comm.disabled, "warnings": list(records)}
    except Exception as exc:
        out[f"sm{major}0"] = {"error": error_text(exc), "warnings": list(records)}
emit(out)
"""
)


# --------------------------------------------------------------------------------------------
# Running the scripts once per variant


def _run(runtime, script: str, variant: str) -> dict:
    proc = runtime.run(script, variant=variant, timeout=900)
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            result = json.loads(line[len(RESULT_MARKER) :])
    assert proc.returncode == 0 and result is not None, (
        f"{variant} script failed (exit {proc.returncode})\n--- stdout ---\n{proc.stdout[-6000:]}"
        f"\n--- stderr ---\n{proc.stderr[-12000:]}"
    )
    return result


@pytest.fixture(scope="module")
def interface(runtime):
    return {v: _run(runtime, IFACE_SCRIPT, v) for v in VARIANTS}


@pytest.fixture(scope="module")
def wiring(runtime):
    return {(target, v): _run(runtime, WIRING_SCRIPT % target, v) for target in ("deepseek", "kimi") for v in VARIANTS}


@pytest.fixture(scope="module")
def gates(runtime):
    return {v: _run(runtime, GATE_SCRIPT, v) for v in VARIANTS}


@pytest.fixture(scope="module")
def layer_boundary_gates(runtime):
    return {v: _run(runtime, GATE_SCRIPT_LAYER_BOUNDARY, v) for v in VARIANTS}


@pytest.fixture(scope="module")
def symm_mem(runtime):
    return {v: _run(runtime, SYMM_MEM_SCRIPT, v) for v in VARIANTS}


# --------------------------------------------------------------------------------------------
# Patch 1: KimiK25 delegates the EAGLE-3 target interface to language_model

INTERFACE_CHECKS = [
    "set_eagle3_layers_to_capture(None)",
    "set_eagle3_layers_to_capture(ids)",
    "set_eagle3_layers_to_capture off the last pipeline rank",
    "get_embed_and_head",
    "set_embed_and_head",
    ".model",
    "start_layer/end_layer",
    "routed_experts_weights_of_layer",
    "get_model_config_for_expert_location",
    "forward(pp_proxy_tensors)",
    "missing capability: clear error",
]


@pytest.mark.patch("0001")
@pytest.mark.parametrize("check", INTERFACE_CHECKS)
def test_kimi_k25_target_interface(interface, check):
    patched, pristine = interface["patched"], interface["pristine"]
    for result in (patched, pristine):
        assert (result["class"], result["inner_class"]) == ("KimiK25ForConditionalGeneration", "DeepseekV3ForCausalLM")
    assert patched[check]["ok"], f"patched: {check}: {patched[check]['detail']}"
    # negative control: upstream 0.5.9 lacks it
    assert not pristine[check]["ok"], f"pristine 0.5.9 unexpectedly passes {check}"


@pytest.mark.patch("0001")
def test_kimi_k25_capture_layers_match_deepseek_v3(interface):
    patched = interface["patched"]
    assert patched["set_eagle3_layers_to_capture(None)"]["detail"] == [[2, 4, 5], True]
    assert patched["set_eagle3_layers_to_capture(ids)"]["detail"] == [[1, 4, 7], True]
    pristine = interface["pristine"]["set_eagle3_layers_to_capture(ids)"]["detail"]
    assert pristine == (
        "AttributeError: 'KimiK25ForConditionalGeneration' object has no attribute 'set_eagle3_layers_to_capture'"
    )


# --------------------------------------------------------------------------------------------
# Patch 2: capture layers configured once, before warmup and CUDA graph capture


@pytest.mark.patch("0002")
@pytest.mark.parametrize("target", ["deepseek", "kimi"])
def test_eagle3_capture_layers_fixed_before_graph_capture(wiring, target):
    result = wiring[(target, "patched")]
    assert "init_error" not in result, result.get("init_error")
    configured = {"layers": result["configured"], "enabled": True}
    for moment in (
        "init_device_graphs",
        "after_initialize",
        "cuda_graph_capture",
        "after_cuda_graph_runner",
        "dummy_run",
        "final",
    ):
        assert result["observed"][moment] == configured, (moment, result["observed"])


@pytest.mark.patch("0002")
def test_eagle3_capture_wiring_negative_control(wiring):
    # DeepseekV3 has the EAGLE-3 interface in 0.5.9, so this isolates the wiring bug.
    result = wiring[("deepseek", "pristine")]
    observed, configured, defaults = result["observed"], result["configured"], result["defaults"]
    assert observed["init_device_graphs"]["layers"] != configured  # not yet configured
    assert observed["cuda_graph_capture"]["layers"] == defaults  # graphs capture the defaults
    assert observed["dummy_run"]["layers"] == defaults  # warmup resets to the defaults
    assert observed["after_initialize"]["layers"] == configured  # eager runs: configured


@pytest.mark.patch("0002")
def test_kimi_k25_eagle3_target_starts(wiring):
    assert wiring[("kimi", "patched")]["observed"]["final"]["layers"] == [1, 4, 7]
    assert wiring[("kimi", "pristine")]["init_error"] == (
        "AttributeError: 'KimiK25ForConditionalGeneration' object has no attribute 'set_eagle3_layers_to_capture'"
    )


# --------------------------------------------------------------------------------------------
# Patch 3: FlashInfer allreduce fusion on SM12x only with a FlashInfer that builds it there

FUSED = [True, True, True, False]  # batch sizes 1, 128, 2048 fuse; 4096 > the fusion maximum
UNFUSED = [False] * 4
# Where the gate lives: layers/communicator.py up to 0.5.20, layers/layer_boundary/ from 0.5.21.
COMMUNICATOR_LAYOUT = "<0.5.21"
LAYER_BOUNDARY_LAYOUT = ">=0.5.21"


@pytest.mark.patch("0003")
@pytest.mark.sglang(COMMUNICATOR_LAYOUT)
@pytest.mark.parametrize(
    "gpu, flashinfer, expected",
    [
        ("sm80", "installed", UNFUSED),
        ("sm80", "sm12x", UNFUSED),
        ("sm90", "installed", FUSED),
        ("sm90", "sm12x", FUSED),
        ("sm100", "installed", FUSED),
        ("sm100", "sm12x", FUSED),
        ("sm120", "installed", UNFUSED),  # flashinfer 0.6.3 builds trtllm_comm for [9, 10] only
        ("sm120", "sm12x", FUSED),
        ("sm120", "opaque-0.6.17", FUSED),  # fallback: the release that added SM12x
        ("sm120", "opaque-0.6.16", UNFUSED),
    ],
)
def test_allreduce_fusion_gate(gates, gpu, flashinfer, expected):
    gate = gates["patched"]["gate"]
    requested = gate[f"{gpu}/{flashinfer}/requested=True"]
    assert requested["decisions"] == expected
    assert gate[f"{gpu}/{flashinfer}/requested=False"]["decisions"] == UNFUSED
    # deciding happens per layer and batch: never a warning from there
    assert requested["warnings"] == []


@pytest.mark.patch("0003")
@pytest.mark.sglang(COMMUNICATOR_LAYOUT)
def test_allreduce_fusion_gate_negative_control(gates):
    pristine = gates["pristine"]["gate"]
    assert pristine["sm120/sm12x/requested=True"]["decisions"] == UNFUSED
    assert pristine["sm90/installed/requested=True"]["decisions"] == FUSED


@pytest.mark.patch("0003")
@pytest.mark.sglang(COMMUNICATOR_LAYOUT)
def test_allreduce_fusion_probe_asks_flashinfer(gates):
    probe = gates["patched"]["probe"]
    assert probe["installed"][0] is False
    # the reason is FlashInfer's own architecture check, the error graph capture would raise
    assert "No supported CUDA architectures found for major versions [9, 10]" in probe["installed"][1]
    assert probe["sm12x"][0] is True
    assert probe["opaque-0.6.17"][0] is True and probe["opaque-0.6.16"][0] is False


@pytest.mark.patch("0003")
@pytest.mark.sglang(COMMUNICATOR_LAYOUT)
def test_allreduce_fusion_server_args(gates):
    patched = gates["patched"]["server_args"]
    unsupported = patched["sm120/installed/requested=True"]
    assert unsupported["enabled"] is False
    assert len(unsupported["fusion_warnings"]) == 1, unsupported["fusion_warnings"]
    warning = unsupported["fusion_warnings"][0]
    assert "--enable-flashinfer-allreduce-fusion" in warning and "SM12x" in warning
    assert "0.6.17" in warning
    assert patched["sm120/sm12x/requested=True"] == {"enabled": True, "fusion_warnings": []}
    # never auto-enabled on SM12x, even for KimiK25 (auto-enabled on SM90 in the same set-up)
    assert patched["sm120/installed/requested=False"]["enabled"] is False
    assert patched["sm120/sm12x/requested=False"]["enabled"] is False
    assert patched["sm90/installed/requested=False"]["enabled"] is True
    assert patched["sm90/installed/requested=True"] == {"enabled": True, "fusion_warnings": []}
    # negative control: upstream keeps the flag silently (and never fuses on SM120)
    pristine = gates["pristine"]["server_args"]["sm120/installed/requested=True"]
    assert pristine == {"enabled": True, "fusion_warnings": []}


@pytest.mark.patch("0003")
@pytest.mark.sglang(LAYER_BOUNDARY_LAYOUT)
@pytest.mark.parametrize("gpu, expected", [("sm80", UNFUSED), ("sm90", FUSED), ("sm100", FUSED), ("sm120", FUSED)])
def test_allreduce_fusion_gate_layer_boundary(layer_boundary_gates, gpu, expected):
    assert layer_boundary_gates["patched"]["applies"][gpu] == expected
    if gpu != "sm120":  # unchanged elsewhere
        assert layer_boundary_gates["pristine"]["applies"][gpu] == expected


@pytest.mark.patch("0003")
@pytest.mark.sglang(LAYER_BOUNDARY_LAYOUT)
def test_allreduce_fusion_backend_on_sm12x_is_trtllm_single_node(layer_boundary_gates):
    resolve = layer_boundary_gates["patched"]["resolve"]
    assert resolve["sm120/auto/multi_node=False"] == "trtllm"
    assert resolve["sm120/trtllm/multi_node=False"] == "trtllm"
    # no MNNVL fabric on PCIe RTX PRO 6000, cutedsl is SM100-only, trtllm is single-node
    for key in (
        "sm120/mnnvl/multi_node=False",
        "sm120/cutedsl/multi_node=False",
        "sm120/auto/multi_node=True",
        "sm120/trtllm/multi_node=True",
    ):
        assert resolve[key].startswith("ValueError: "), (key, resolve[key])
    # SM90/SM100/others: exactly upstream's choices (the refusal's message now names SM12x)
    pristine = layer_boundary_gates["pristine"]["resolve"]

    def outcome(result: str) -> str:
        return result.split(":", 1)[0]

    assert {k: outcome(v) for k, v in resolve.items() if not k.startswith("sm120/")} == {
        k: outcome(v) for k, v in pristine.items() if not k.startswith("sm120/")
    }
    assert resolve["sm80/auto/multi_node=False"] == (
        "ValueError: FlashInfer allreduce fusion requires SM90, SM10X or SM12x NVIDIA GPUs."
    )
    assert resolve["sm100/auto/multi_node=False"] == "mnnvl" and resolve["sm90/auto/multi_node=False"] == "trtllm"


@pytest.mark.patch("0003")
@pytest.mark.sglang(LAYER_BOUNDARY_LAYOUT)
def test_allreduce_fusion_layer_boundary_negative_control(layer_boundary_gates):
    pristine = layer_boundary_gates["pristine"]
    assert pristine["applies"]["sm120"] == UNFUSED
    assert pristine["resolve"]["sm120/auto/multi_node=False"] == (
        "ValueError: FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs."
    )


# --------------------------------------------------------------------------------------------
# Patch 4: --enable-torch-symm-mem on SM12x warns and disables instead of KeyError: 12


@pytest.mark.patch("0004")
def test_torch_symm_mem_sm12_disables(symm_mem):
    patched = symm_mem["patched"]
    assert patched["sm120"]["disabled"] is True
    assert patched["sm120"]["warnings"] == [
        "TorchSymmMemCommunicator: Device capability 12 not supported, communicator is not available."
    ]
    # supported capabilities still enable it
    assert patched["sm90"] == {"disabled": False, "warnings": []}
    assert patched["sm100"] == {"disabled": False, "warnings": []}
    assert symm_mem["pristine"]["sm120"]["error"] == "KeyError: 12"  # negative control
    assert symm_mem["pristine"]["sm90"] == {"disabled": False, "warnings": []}


# --------------------------------------------------------------------------------------------


GPU_PROBE = """
import flashinfer, torch
from sglang.srt.layers.flashinfer_comm_fusion import probe_flashinfer_allreduce_fusion_sm12x
supported, why = probe_flashinfer_allreduce_fusion_sm12x()
emit({"major": torch.cuda.get_device_capability()[0], "flashinfer": flashinfer.__version__,
      "supported": supported, "why": why})
"""


@pytest.mark.patch("0003")
@pytest.mark.sglang(COMMUNICATOR_LAYOUT)
@pytest.mark.gpu
@pytest.mark.skipif(
    not sglang_runtime.gpu_available(),
    reason="needs an NVIDIA SM12x GPU: on a CPU the probe only sees simulated "
    "capabilities (tested above); CUDA graph replay is in the smoke GPU twins "
    "and fused-allreduce speed in benchmarks/gpu_eagle3.py",
)
def test_fusion_probe_on_real_sm12x_hardware(runtime):
    from packaging.version import Version

    result = runtime.run(sglang_runtime.emit_snippet() + GPU_PROBE, variant="patched", harness=False)
    assert result.returncode == 0, result.describe()
    data = result.result()
    if data["major"] != 12:
        pytest.skip(f"GPU is SM{data['major']}x, not SM12x")
    assert data["supported"] == (Version(data["flashinfer"]) >= Version("0.6.17")), data["why"]

"""Smoke tests: real SGLang launched with EAGLE-3 on a (tiny, generated) KimiK25 target, on every
line's runtime (production: 0.5.9; latest: 0.5.23).

Every test starts real SGLang in the ``runtime`` fixture's venv: ``sgl.Engine`` in a script of its
own session, or ``python -m sglang.launch_server`` queried over HTTP. On a machine without a GPU
the CPU harness (tests/smoke/cpu_harness, test-only) replaces kernels and hardware queries; the
code our patches change runs as shipped. Launches are shared between assertions through
module-scoped fixtures; only one SGLang runs at a time.

- pristine, on a line that carries the KimiK25 delegation (0001): start-up fails with the
  AttributeError the series fixes (the negative control); on a line that dropped it as upstreamed,
  pristine serves EAGLE-3 (the drop was right);
- patched: starts with EAGLE-3, greedy output equals greedy output without it (one request and a
  batch), the target captures the draft's configured layers (set before device graphs), and over
  HTTP on a constructed pair where every draft token must be accepted the reported accept length
  is >= 2.5 with 3 draft tokens;
- the GPU twin (marked ``gpu``) repeats this with real kernels and CUDA graphs.
"""

from __future__ import annotations

import json
import re

import pytest
import sglang_runtime
import sglang_scripts as scripts
from packaging.version import Version

pytestmark = [pytest.mark.smoke]

GPU = sglang_runtime.gpu_available()
MISSING_METHOD = scripts.MISSING_METHOD


def run_engine(runtime, kwargs: dict, *, variant: str, env: dict | None = None) -> dict:
    """Run ``engine_script`` and return its results; any failure fails the caller with SGLang's
    own output (a start-up error is a test failure, never a dead pytest)."""
    result = runtime.run(scripts.engine_script(kwargs, scripts.PROMPTS), variant=variant, env=env, timeout=1200)
    out = result.result()
    if result.returncode != 0 or out is None:
        pytest.fail(f"SGLang ({variant}) failed:\n{result.describe()}", pytrace=False)
    assert result.leftovers == [], f"processes left behind: {result.leftovers}"
    return out


def read_observations(path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


# ---------------------------------------------------------------------------------------------
# Negative control: pristine 0.5.9


def scheduler_exception(stderr: str) -> str:
    """The last line of the traceback SGLang's scheduler logged ("Scheduler hit an exception")."""
    match = re.search(r"Scheduler hit an exception: Traceback.*?\n(\S[^\n]*Error[^\n]*)\n", stderr, re.S)
    return match.group(1) if match else ""


@pytest.mark.patch("0001")
def test_pristine_kimi_k25_eagle3_fails_at_startup(runtime, kimi_k25_model, eagle3_draft_model):
    kwargs = scripts.engine_kwargs(kimi_k25_model, eagle3_draft_model, gpu=GPU)
    result = runtime.run(scripts.engine_script(kwargs, scripts.PROMPTS), variant="pristine", timeout=900)
    assert result.returncode != 0, "pristine 0.5.9 served KimiK25 with EAGLE-3:\n" + result.describe()
    assert result.result() is None  # it never generated
    assert scheduler_exception(result.stderr) == MISSING_METHOD, result.describe()
    # without CUDA graphs the first caller is ModelRunner.initialize (with them: kernel warmup)
    assert "set_eagle3_layers_to_capture(" in result.stderr
    if not GPU:
        assert re.search(r"model_runner\.py\", line \d+, in initialize", result.stderr)
    assert result.leftovers == [], f"processes left behind: {result.leftovers}"


@pytest.mark.patch("0001")
def test_pristine_launch_server_startup_failure_surfaces_sglang_error(runtime, kimi_k25_model, eagle3_draft_model):
    """The HTTP launcher: SGLang's own SIGQUIT handler kills the server's process tree; the failure
    reaches the test as an exception carrying SGLang's log, and nothing is left running."""
    args = scripts.server_args(scripts.engine_kwargs(kimi_k25_model, eagle3_draft_model, gpu=GPU))
    with pytest.raises(sglang_runtime.ServerStartError) as failure:
        server = runtime.launch_server(args + ["--skip-server-warmup"], variant="pristine", timeout=900)
        server.stop()  # only reached if pristine started: the test then fails on pytest.raises
    assert MISSING_METHOD in str(failure.value)
    assert failure.value.leftovers == [], f"processes left behind: {failure.value.leftovers}"


@pytest.mark.patch("0001", absent=True)
def test_pristine_serves_kimi_k25_eagle3_where_upstream_has_the_fix(runtime, always0_pair):
    """A line that dropped the KimiK25 delegation as upstreamed: upstream's own wheel serves it."""
    target, draft = always0_pair
    out = run_engine(runtime, scripts.engine_kwargs(target, draft, gpu=GPU), variant="pristine")
    fields = scripts.spec_fields(runtime.sglang_version)
    assert out["single"]["output_ids"] == [0] * scripts.GREEDY["max_new_tokens"]
    assert out["single"]["meta_info"][fields["accept_length"]] >= 2.5, out["single"]["meta_info"]


# ---------------------------------------------------------------------------------------------
# Patched: sgl.Engine, random target/draft with non-default capture layers


@pytest.fixture(scope="module")
def eagle_run(runtime, kimi_k25_model, eagle3_draft_model, tmp_path_factory):
    log = tmp_path_factory.mktemp("observe") / "capture-layers.jsonl"
    kwargs = scripts.engine_kwargs(kimi_k25_model, eagle3_draft_model, gpu=GPU)
    out = run_engine(runtime, kwargs, variant="patched", env={"SGLPATCH_OBSERVE": str(log)})
    out["observed"] = read_observations(log)
    return out


@pytest.fixture(scope="module")
def plain_run(runtime, kimi_k25_model):
    return run_engine(runtime, scripts.engine_kwargs(kimi_k25_model, None, gpu=GPU), variant="patched")


def test_patched_engine_starts_with_eagle3_and_generates(runtime, eagle_run):
    fields = scripts.spec_fields(runtime.sglang_version)
    outputs = [eagle_run["single"], *eagle_run["batch"]]
    assert len(outputs) == 1 + len(scripts.PROMPTS)
    for out in outputs:
        meta = out["meta_info"]
        assert len(out["output_ids"]) == scripts.GREEDY["max_new_tokens"] == meta["completion_tokens"]
        # speculative decoding really ran: verify passes, each with the configured draft tokens
        assert meta["spec_verify_ct"] >= 1
        assert meta[fields["proposed"]] == meta["spec_verify_ct"] * (scripts.SPEC_DRAFT_TOKENS - 1)


@pytest.fixture(scope="module")
def capture_layers(runtime, kimi_k25_model, eagle3_draft_model) -> dict:
    """Which target layers feed the draft: as configured by the draft and SGLang's defaults
    [2, n // 2, n - 3], read from the generated configs. DeepseekV2's set_eagle3_layers_to_capture
    captures the input of layer id + 1 up to 0.5.12; 0.5.23 adds 1 only when the first id is 1
    (srt/models/deepseek_v2.py), so the draft's [0, 1, 2] are taken as given there."""
    ids = json.loads((eagle3_draft_model / "config.json").read_text())["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"
    ]
    n = json.loads((kimi_k25_model / "config.json").read_text())["text_config"]["num_hidden_layers"]
    shift = 1 if Version(runtime.sglang_version) < Version("0.5.23") or ids[0] == 1 else 0
    layers = {"configured": [i + shift for i in ids], "default": [2, n // 2, n - 3]}
    assert layers["configured"] != layers["default"], "the draft must not use the default layers"
    return layers


def target_observations(run: dict, event: str) -> list[dict]:
    found = [o for o in run["observed"] if o["event"] == event and not o["is_draft"]]
    assert found, f"no '{event}' observed for the target model runner: {run['observed']}"
    assert {o["model"] for o in found} == {"KimiK25ForConditionalGeneration"}
    return found


def test_patched_target_captures_the_draft_configured_layers(eagle_run, capture_layers):
    """Eager forwards feed the draft the layers its config names, not SGLang's defaults."""
    for o in target_observations(eagle_run, "initialized"):
        assert o["layers_to_capture"] == capture_layers["configured"]


def test_patched_capture_layers_are_set_before_device_graphs(eagle_run, capture_layers):
    """Device graphs (CUDA graphs on a GPU) must be captured with the configured layers already in
    place: pristine 0.5.9 sets them only after init_device_graphs (graphs get the defaults)."""
    for o in target_observations(eagle_run, "device_graphs"):
        assert o["layers_to_capture"] == capture_layers["configured"]


def test_greedy_with_eagle3_equals_greedy_without_single_request(eagle_run, plain_run):
    assert eagle_run["single"]["output_ids"] == plain_run["single"]["output_ids"]
    assert eagle_run["single"]["text"] == plain_run["single"]["text"]
    assert "spec_verify_ct" not in plain_run["single"]["meta_info"]  # the baseline is not speculative


def test_greedy_with_eagle3_equals_greedy_without_batch(eagle_run, plain_run):
    eagle = [o["output_ids"] for o in eagle_run["batch"]]
    plain = [o["output_ids"] for o in plain_run["batch"]]
    assert eagle == plain
    assert len({tuple(ids) for ids in plain}) > 1  # distinct prompts, distinct continuations


# ---------------------------------------------------------------------------------------------
# Patched: python -m sglang.launch_server + HTTP, constructed always-accept pair


@pytest.fixture(scope="module")
def always0_server(runtime, always0_pair):
    target, draft = always0_pair
    # No warm-up request: for a multimodal model SGLang warms up with an image through the chat
    # API, which needs Kimi's own (hub-only) processor; the tests' own requests come instead.
    args = scripts.server_args(scripts.engine_kwargs(target, draft, gpu=GPU)) + ["--skip-server-warmup"]
    server = runtime.launch_server(args, variant="patched", timeout=900)
    try:
        yield server
    finally:
        leftovers = server.stop()
        assert leftovers == [], f"launch_server left processes behind: {leftovers}"


@pytest.fixture(scope="module")
def always0_generate(always0_server):
    single = always0_server.request("/generate", {"text": scripts.PROMPTS[0], "sampling_params": scripts.GREEDY})
    batch = always0_server.request("/generate", {"text": scripts.PROMPTS[1:3], "sampling_params": scripts.GREEDY})
    return single, batch


def test_http_generate_reports_spec_metrics(runtime, always0_generate):
    fields = scripts.spec_fields(runtime.sglang_version)
    single, batch = always0_generate
    for out in [single, *batch]:
        meta = out["meta_info"]
        missing = [f for f in fields.values() if f not in meta]
        assert not missing, f"/generate meta_info lacks {missing}: {sorted(meta)}"
        assert meta["spec_verify_ct"] >= 1
        assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / meta["spec_verify_ct"])
        assert meta[fields["proposed"]] == meta["spec_verify_ct"] * (scripts.SPEC_DRAFT_TOKENS - 1)


def test_constructed_pair_accepts_draft_tokens(runtime, always0_generate):
    """Target and draft both always predict token 0, so every draft token is accepted: with 3
    draft tokens (2 steps, top-1) each verify pass yields up to 3 tokens."""
    single, batch = always0_generate
    for out in [single, *batch]:
        meta = out["meta_info"]
        assert out["output_ids"] == [0] * scripts.GREEDY["max_new_tokens"]
        assert meta["spec_accept_length"] >= 2.5, meta
        fields = scripts.spec_fields(runtime.sglang_version)
        assert meta[fields["accepted"]] == meta[fields["proposed"]], meta  # all accepted


# ---------------------------------------------------------------------------------------------
# GPU twin


gpu_only = pytest.mark.skipif(
    not GPU,
    reason="needs a CUDA GPU: only a GPU runs SGLang's real sgl_kernel EAGLE tree kernels and "
    "attention with CUDA graphs on, and only there can graph replays (captured with the "
    "layers frozen at capture time) be checked to feed the draft the same target layers as "
    "eager runs",
)


@pytest.mark.gpu
@gpu_only
def test_gpu_cuda_graphs_capture_the_draft_configured_layers(eagle_run, capture_layers):
    for o in target_observations(eagle_run, "graph_capture"):
        assert o["layers_to_capture"] == capture_layers["configured"], (
            "graph replays would feed the draft other layers than eager runs"
        )


@pytest.mark.gpu
@gpu_only
def test_gpu_greedy_and_acceptance_with_cuda_graphs(eagle_run, plain_run, always0_generate):
    assert eagle_run["single"]["output_ids"] == plain_run["single"]["output_ids"]
    assert [o["output_ids"] for o in eagle_run["batch"]] == [o["output_ids"] for o in plain_run["batch"]]
    single, _ = always0_generate
    assert single["meta_info"]["spec_accept_length"] >= 2.5

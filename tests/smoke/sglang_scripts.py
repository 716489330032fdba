"""Python sources that the smoke tests run inside the SGLang runtime (``runtime.run``), and the
SGLang arguments shared by the Engine and HTTP launches.

Each script starts one real ``sgl.Engine`` and prints its results as one JSON line (``emit``). It
passes a ``custom_sigquit_handler`` that raises: SGLang's default handler kills the whole process
tree when a child fails. The script runs in its own session, so whatever SGLang does cannot reach
pytest; ``runtime.run`` reaps anything left behind.
"""

from __future__ import annotations

from pathlib import Path

import sglang_runtime
from packaging.version import Version

# EAGLE-3 with 3 draft tokens: 2 draft steps, top-1 chain (the numbers SGLang's own tests use).
SPEC_STEPS, SPEC_TOPK, SPEC_DRAFT_TOKENS = 2, 1, 3

# The first is also sent alone; all three form the batch.
PROMPTS = [
    "the quick brown fox jumps over the lazy dog",
    "an old man reads in the house by the river",
    "people say the city never sleeps",
]

GREEDY = {"temperature": 0.0, "max_new_tokens": 12, "ignore_eos": True}

# What pristine 0.5.9 dies of at start-up with a KimiK25 target and EAGLE-3 (the mission's error).
MISSING_METHOD = (
    "AttributeError: 'KimiK25ForConditionalGeneration' object has no attribute 'set_eagle3_layers_to_capture'"
)
# The speculative-decoding metrics /generate reports in meta_info, by role. Three were renamed
# between 0.5.9 and 0.5.23 (0.5.23: srt/managers/tokenizer_manager.py, spec_num_*_drafts).
_SPEC_FIELDS = {
    "0.5.9": {
        "verify": "spec_verify_ct",
        "accept_length": "spec_accept_length",
        "accept_rate": "spec_accept_rate",
        "accepted": "spec_accept_token_num",
        "proposed": "spec_draft_token_num",
        "histogram": "spec_accept_histogram",
    },
    "0.5.23": {
        "verify": "spec_verify_ct",
        "accept_length": "spec_accept_length",
        "accept_rate": "spec_accept_rate",
        "accepted": "spec_num_correct_drafts",
        "proposed": "spec_num_proposed_drafts",
        "histogram": "spec_correct_drafts_histogram",
    },
}


def spec_fields(sglang_version: str) -> dict[str, str]:
    """The meta_info field of each metric in that SGLang release (the newest naming at or below it)."""
    known = [v for v in _SPEC_FIELDS if Version(v) <= Version(sglang_version)]
    return _SPEC_FIELDS[max(known, key=Version)]


def engine_kwargs(target: Path, draft: Path | None, *, gpu: bool = False) -> dict:
    """``sgl.Engine`` keyword arguments (same names as launch_server's --flags)."""
    kwargs = {
        "model_path": str(target),
        "random_seed": 0,
        "max_total_tokens": 4096,
        "max_running_requests": 8,
        "log_level": "info",
        # float32: greedy argmax margins of a random model survive the different kernels of a
        # verify pass and a decode step (and CPU float16 is slow). Triton attention: it runs the
        # tiny MLA shapes on GPU, and on CPU (Triton's interpreter) torch_native supports neither
        # EAGLE's draft (draft_utils.py) nor MLA extend.
        "dtype": "float32",
        "attention_backend": "triton",
        # as real Kimi K2.5 needs; the tiny target ships a minimal remote-code processor, which
        # 0.5.23's transformers 5 loads (tests/models/builders.py); harmless on 0.5.9
        "trust_remote_code": True,
    }
    if gpu:
        kwargs.update(cuda_graph_max_bs=8, mem_fraction_static=0.5)  # CUDA graphs stay on
    else:
        # CPU harness: CPU engine, no CUDA graphs; one KV split keeps the interpreted decode grid
        # small.
        kwargs.update(device="cpu", disable_cuda_graph=True, triton_attention_num_kv_splits=1)
    if draft is not None:
        kwargs.update(
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path=str(draft),
            speculative_num_steps=SPEC_STEPS,
            speculative_eagle_topk=SPEC_TOPK,
            speculative_num_draft_tokens=SPEC_DRAFT_TOKENS,
        )
    return kwargs


def server_args(kwargs: dict) -> list[str]:
    """The same settings as ``python -m sglang.launch_server`` flags."""
    args: list[str] = []
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is not False and value is not None:
            args += [flag, str(value)]
    return args


def engine_script(kwargs: dict, prompts: list[str], sampling: dict = GREEDY) -> str:
    """Start an Engine, generate for ``prompts[0]`` alone and then for all ``prompts`` as one batch,
    emit ``{"single": out, "batch": [out...]}`` (out = text, output_ids, meta_info), shut down."""
    return (
        sglang_runtime.emit_snippet()
        + f"""
KWARGS = {kwargs!r}
PROMPTS = {prompts!r}
SAMPLING = {sampling!r}


def on_sigquit(signum, frame):
    raise RuntimeError("an SGLang child process failed (SIGQUIT); see its traceback above")


def slim(out):
    return {{"text": out["text"], "output_ids": out.get("output_ids"), "meta_info": out["meta_info"]}}


def main():
    import sglang as sgl

    engine = sgl.Engine(**KWARGS, custom_sigquit_handler=on_sigquit)
    try:
        single = engine.generate(PROMPTS[0], sampling_params=dict(SAMPLING))
        batch = engine.generate(PROMPTS, sampling_params=dict(SAMPLING))
        emit({{"single": slim(single), "batch": [slim(o) for o in batch]}})
    finally:
        engine.shutdown()


if __name__ == "__main__":
    main()
"""
    )

"""Specs of the tiny generated models and their on-disk cache (pytest side: standard library only).

A model directory is ``<cache>/models/<kind>-<key>``, key = hash of the spec and of ``builders.py``;
it is generated once by ``builders.py`` inside the runtime venv (a few seconds) and reused while
complete (built in a temporary directory, renamed when done).

Config requirements (from the notes; re-read in the 0.5.9 code where marked *, and every one is
exercised by the smoke launches, which load these models):
- target: ``KimiK25ForConditionalGeneration`` (``model_type: kimi_k25``, SGLang's own
  KimiK25Config) whose ``text_config`` keeps ``architectures: ["DeepseekV3ForCausalLM"]``; a yarn
  ``rope_scaling`` (as the real Kimi K2.5 config has; the notes found CPU attention needs it; yarn
  -> DeepseekScalingRotaryEmbedding.forward_cpu -> forward_native*); ``vision_config`` carries
  ``vt_hidden_size`` and ``text_hidden_size`` = text hidden size (K2VLMultiModalProjector reads
  both*). The vision weights use the checkpoint names KimiK25's loader renames (wqkv/wo,
  mm_projector.proj.0/2*) and fail the load if misnamed*.
- draft: ``LlamaForCausalLMEagle3`` with ``num_hidden_layers: 1`` (else ValueError*),
  ``draft_vocab_size`` (read unguarded*), ``target_hidden_size`` (fc input = 3x it; falls back to
  hidden_size*), a ``d2t`` tensor (-> hot_token_id*), and exactly 3 distinct
  ``eagle_config.eagle_aux_hidden_state_layer_ids`` (fc takes 3 aux states*), each <= n_layers - 2
  (SGLang captures the input of layer id + 1, which must exist*).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

BUILDERS = Path(__file__).resolve().with_name("builders.py")

WORDS = list(
    dict.fromkeys(
        "the of and to in is was he for it with as his on be at by had are but from or have an they "
        "which one you were all we her she there would their will when who him been has more if no out "
        "do so can what up said about other into than its time only could new them man some these then "
        "two first may any like now my such make over our even most me state after also made many did "
        "must before back see through way where get much go well your know should down work year "
        "because come people just say each those take day good how long very life both between own "
        "under last never us while might great old off come since against right came place around "
        "world three however small found went thought part again house water fox dog cat bird tree "
        "river city road light night green blue red black white quick brown lazy jumps runs sleeps "
        "sings reads writes builds opens closes".split()
    )
)

TOKENIZER = {"words": WORDS, "vocab_size": 256, "max_position_embeddings": 4096}

TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "n_shared_experts": 1,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "q_lora_rank": 32,
    # SGLang 0.5.23's Triton MLA decode kernel (kernels/ops/attention/decode_attention.py:824-834,
    # v = tl.trans(k) at :734) only splits the latent K of width 576 (512 + 64) or 288 (256 + 32)
    # into a value part and a rope part; any other width (0.5.9's tiny 32 + 16 = 48) gives
    # BLOCK_DMODEL != BLOCK_DV and the decode kernel fails to trace. 256 + 32 is the smallest.
    "kv_lora_rank": 256,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 32,
    "v_head_dim": 16,
    "max_position_embeddings": 4096,
}

VISION = {
    "patch_size": 14,
    "pos_emb_size": 8,
    "num_attention_heads": 2,
    "num_hidden_layers": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
}

KIMI_K25 = {
    "seed": 0,
    "dtype": "float32",
    "tokenizer": TOKENIZER,
    "text": TEXT,
    "vision": VISION,
    "zero_final_norm": False,
}

# SGLang's default capture layers for a 4-layer target are [2, n//2, n-3] = [2, 2, 1]; these ids
# make it capture [1, 2, 3] (id + 1), so default and configured layers differ.
AUX_LAYER_IDS = [0, 1, 2]

EAGLE3_DRAFT = {
    "seed": 1,
    "dtype": "float32",
    "target": KIMI_K25,
    "draft_vocab_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "aux_layer_ids": AUX_LAYER_IDS,
    "zero_final_norm": False,
}

# The constructed pair: final norms zeroed, so target and draft both always predict token 0 and
# every draft token is accepted.
KIMI_K25_ALWAYS_0 = {**KIMI_K25, "zero_final_norm": True}
EAGLE3_DRAFT_ALWAYS_0 = {**EAGLE3_DRAFT, "target": KIMI_K25_ALWAYS_0, "zero_final_norm": True}


# An 8-layer target (and its draft): SGLang's default capture layers [2, n//2, n-3] = [2, 4, 5] are
# three distinct layers, as on real targets (for 4 layers they are [2, 2, 1], which captures only
# two hidden states and cannot feed a draft that takes three). Used by the EAGLE-3 capture-layer
# tests (tests/smoke/test_eagle3_aux_layers.py), where the defaults must be servable.
KIMI_K25_8 = {**KIMI_K25, "text": {**TEXT, "num_hidden_layers": 8}}
EAGLE3_DRAFT_8 = {**EAGLE3_DRAFT, "target": KIMI_K25_8}
KIMI_K25_8_ALWAYS_0 = {**KIMI_K25_8, "zero_final_norm": True}
EAGLE3_DRAFT_8_ALWAYS_0 = {**EAGLE3_DRAFT_8, "target": KIMI_K25_8_ALWAYS_0, "zero_final_norm": True}


def model_key(kind: str, spec: dict, sglang_version: str) -> str:
    # The builder runs in the line's venv and writes what its transformers needs (the processor
    # config under transformers 5): one model directory per SGLang runtime.
    payload = json.dumps({"kind": kind, "spec": spec, "sglang": sglang_version}, sort_keys=True).encode()
    return hashlib.sha256(payload + BUILDERS.read_bytes()).hexdigest()[:16]


def ensure_model(runtime, kind: str, spec: dict, cache: Path) -> Path:
    """The directory of the model ``kind`` built from ``spec``, generating it if not cached."""
    target = cache / "models" / f"{kind}-{model_key(kind, spec, runtime.sglang_version)}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    runtime.progress(f"generating tiny model {target.name}")
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        spec_file = tmp / "spec.json"
        spec_file.write_text(json.dumps(copy.deepcopy(spec)))
        out = tmp / "model"
        result = runtime.run(
            f"import runpy, sys\n"
            f"sys.argv = [{str(BUILDERS)!r}, {kind!r}, {str(spec_file)!r}, {str(out)!r}]\n"
            f"runpy.run_path({str(BUILDERS)!r}, run_name='__main__')\n",
            variant=None,
            harness=False,
            timeout=600,
        )
        if result.returncode != 0:
            raise RuntimeError(f"building tiny model {kind} failed:\n{result.describe()}")
        try:
            os.replace(out, target)  # atomic; a concurrent builder may have won: keep theirs
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target

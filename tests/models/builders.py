"""Tiny model generators for the smoke tests (runs inside the SGLang runtime venv: torch, safetensors,
tokenizers, transformers). Nothing is downloaded: every tokenizer and weight is made here from a
spec (see ``tests/models/specs.py``) with a seeded generator, so the same spec gives the same files.

Usage (``tests/models/specs.py`` does this): ``python builders.py <kind> <spec.json> <out_dir>``
with kind ``kimi_k25`` (a ``KimiK25ForConditionalGeneration`` target: DeepseekV3 text model with
MLA and a few routed experts, small MoonViT vision tower, word-level tokenizer) or ``eagle3_draft``
(a ``LlamaForCausalLMEagle3`` draft for such a target).

``zero_final_norm``: the final RMSNorm weight is zero, so every hidden state normalises to zero, all
logits are equal and greedy decoding always picks token 0 (target) / draft id 0 (draft, mapped to
token 0 by ``d2t``): a target/draft pair on which every draft token is accepted.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<|media_pad|>", "<|im_start|>", "<|im_end|>"]


def vocabulary(words: list[str], vocab_size: int) -> dict[str, int]:
    """Words first (token 0 is an ordinary word), fillers, then the special tokens at the end."""
    tokens = list(words)
    n_fill = vocab_size - len(tokens) - len(SPECIALS)
    if n_fill < 0:
        raise ValueError("vocab_size too small for the word list")
    tokens += [f"w{i}" for i in range(n_fill)] + SPECIALS
    return {tok: i for i, tok in enumerate(tokens)}


def build_tokenizer(out: Path, spec: dict) -> dict[str, int]:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = vocabulary(spec["words"], spec["vocab_size"])
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        additional_special_tokens=["<|media_pad|>", "<|im_start|>", "<|im_end|>"],
        model_max_length=spec["max_position_embeddings"],
    )
    fast.save_pretrained(out)
    return vocab


class Init:
    def __init__(self, seed: int, dtype: torch.dtype):
        self.gen = torch.Generator().manual_seed(seed)
        self.dtype = dtype

    def normal(self, *shape, std: float) -> torch.Tensor:
        return (torch.randn(*shape, generator=self.gen) * std).to(self.dtype)

    def linear(self, out_features: int, in_features: int, gain: float = 1.0) -> torch.Tensor:
        return self.normal(out_features, in_features, std=gain / math.sqrt(in_features))

    def ones(self, *shape) -> torch.Tensor:
        return torch.ones(*shape, dtype=self.dtype)

    def zeros(self, *shape) -> torch.Tensor:
        return torch.zeros(*shape, dtype=self.dtype)


def deepseek_v3_text_config(text: dict, vocab: dict[str, int], dtype: str) -> dict:
    return {
        "architectures": ["DeepseekV3ForCausalLM"],  # SGLang keys MLA handling on it
        "model_type": "deepseek_v3",
        "vocab_size": len(vocab),
        "hidden_size": text["hidden_size"],
        "intermediate_size": text["intermediate_size"],
        "moe_intermediate_size": text["moe_intermediate_size"],
        "num_hidden_layers": text["num_hidden_layers"],
        "num_attention_heads": text["num_attention_heads"],
        "num_key_value_heads": text["num_attention_heads"],
        "n_shared_experts": text["n_shared_experts"],
        "n_routed_experts": text["n_routed_experts"],
        "num_experts_per_tok": text["num_experts_per_tok"],
        "routed_scaling_factor": 2.5,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "first_k_dense_replace": text["first_k_dense_replace"],
        "moe_layer_freq": 1,
        "q_lora_rank": text["q_lora_rank"],
        "kv_lora_rank": text["kv_lora_rank"],
        "qk_nope_head_dim": text["qk_nope_head_dim"],
        "qk_rope_head_dim": text["qk_rope_head_dim"],
        "v_head_dim": text["v_head_dim"],
        "hidden_act": "silu",
        "max_position_embeddings": text["max_position_embeddings"],
        "rope_theta": 50000.0,
        # yarn: SGLang's DeepSeek attention on CPU needs it (as the real Kimi K2.5 config has).
        "rope_scaling": {
            "type": "yarn",
            "factor": 4.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": text["max_position_embeddings"] // 4,
        },
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": vocab["<s>"],
        "eos_token_id": vocab["</s>"],
        "pad_token_id": vocab["<pad>"],
        "torch_dtype": dtype,
        "use_cache": True,
    }


def deepseek_v3_text_weights(c: dict, init: Init, zero_final_norm: bool) -> dict[str, torch.Tensor]:
    H, V = c["hidden_size"], c["vocab_size"]
    heads = c["num_attention_heads"]
    qk_head = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    w: dict[str, torch.Tensor] = {"model.embed_tokens.weight": init.normal(V, H, std=1.0)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = init.ones(H)
        w[p + "post_attention_layernorm.weight"] = init.ones(H)
        a = p + "self_attn."
        if c["q_lora_rank"]:
            w[a + "q_a_proj.weight"] = init.linear(c["q_lora_rank"], H)
            w[a + "q_a_layernorm.weight"] = init.ones(c["q_lora_rank"])
            w[a + "q_b_proj.weight"] = init.linear(heads * qk_head, c["q_lora_rank"])
        else:
            w[a + "q_proj.weight"] = init.linear(heads * qk_head, H)
        w[a + "kv_a_proj_with_mqa.weight"] = init.linear(c["kv_lora_rank"] + c["qk_rope_head_dim"], H)
        w[a + "kv_a_layernorm.weight"] = init.ones(c["kv_lora_rank"])
        w[a + "kv_b_proj.weight"] = init.linear(heads * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"])
        w[a + "o_proj.weight"] = init.linear(H, heads * c["v_head_dim"])
        m = p + "mlp."
        if i < c["first_k_dense_replace"]:
            w[m + "gate_proj.weight"] = init.linear(c["intermediate_size"], H)
            w[m + "up_proj.weight"] = init.linear(c["intermediate_size"], H)
            w[m + "down_proj.weight"] = init.linear(H, c["intermediate_size"])
            continue
        inter = c["moe_intermediate_size"]
        w[m + "gate.weight"] = init.linear(c["n_routed_experts"], H)
        w[m + "gate.e_score_correction_bias"] = torch.zeros(c["n_routed_experts"], dtype=torch.float32)
        for e in range(c["n_routed_experts"]):
            x = f"{m}experts.{e}."
            w[x + "gate_proj.weight"] = init.linear(inter, H)
            w[x + "up_proj.weight"] = init.linear(inter, H)
            w[x + "down_proj.weight"] = init.linear(H, inter)
        shared = inter * c["n_shared_experts"]
        w[m + "shared_experts.gate_proj.weight"] = init.linear(shared, H)
        w[m + "shared_experts.up_proj.weight"] = init.linear(shared, H)
        w[m + "shared_experts.down_proj.weight"] = init.linear(H, shared)
    w["model.norm.weight"] = init.zeros(H) if zero_final_norm else init.ones(H)
    w["lm_head.weight"] = init.linear(V, H, gain=4.0)  # wide logit margins: stable greedy argmax
    return w


def vision_config(v: dict, text_hidden: int) -> dict:
    return {
        "patch_size": v["patch_size"],
        "init_pos_emb_height": v["pos_emb_size"],
        "init_pos_emb_width": v["pos_emb_size"],
        "init_pos_emb_time": 4,
        "pos_emb_type": "divided_fixed",
        "num_attention_heads": v["num_attention_heads"],
        "num_hidden_layers": v["num_hidden_layers"],
        "hidden_size": v["hidden_size"],
        "intermediate_size": v["intermediate_size"],
        "merge_kernel_size": [2, 2],
        "video_attn_type": "spatial_temporal",
        "merge_type": "sd2_tpool",
        "mm_projector_type": "patchmerger",
        "mm_hidden_size": v["hidden_size"],
        "projector_hidden_act": "gelu",
        "projector_ln_eps": 1e-5,
        "vt_hidden_size": v["hidden_size"],  # read by K2VLMultiModalProjector
        "text_hidden_size": text_hidden,
    }


def vision_weights(vc: dict, init: Init) -> dict[str, torch.Tensor]:
    """Checkpoint (HF) names, as Kimi K2.5 ships them: ``wqkv``/``wo`` and ``mm_projector.proj.{0,2}``
    are renamed by KimiK25ForConditionalGeneration.load_weights."""
    D, I, P = vc["hidden_size"], vc["intermediate_size"], vc["patch_size"]
    w = {
        "vision_tower.patch_embed.proj.weight": init.linear(D, 3 * P * P).reshape(D, 3, P, P),
        "vision_tower.patch_embed.proj.bias": init.zeros(D),
        "vision_tower.patch_embed.pos_emb.weight": init.normal(
            vc["init_pos_emb_height"], vc["init_pos_emb_width"], D, std=0.02
        ),
        "vision_tower.encoder.final_layernorm.weight": init.ones(D),
        "vision_tower.encoder.final_layernorm.bias": init.zeros(D),
    }
    for j in range(vc["num_hidden_layers"]):
        b = f"vision_tower.encoder.blocks.{j}."
        w.update(
            {
                b + "norm0.weight": init.ones(D),
                b + "norm0.bias": init.zeros(D),
                b + "norm1.weight": init.ones(D),
                b + "norm1.bias": init.zeros(D),
                b + "wqkv.weight": init.linear(3 * D, D),
                b + "wqkv.bias": init.zeros(3 * D),
                b + "wo.weight": init.linear(D, D),
                b + "wo.bias": init.zeros(D),
                b + "mlp.fc0.weight": init.linear(I, D),
                b + "mlp.fc0.bias": init.zeros(I),
                b + "mlp.fc1.weight": init.linear(D, I),
                b + "mlp.fc1.bias": init.zeros(D),
            }
        )
    merged = 4 * D  # merge_kernel_size 2x2
    w.update(
        {
            "mm_projector.pre_norm.weight": init.ones(D),
            "mm_projector.pre_norm.bias": init.zeros(D),
            "mm_projector.proj.0.weight": init.linear(merged, merged),
            "mm_projector.proj.0.bias": init.zeros(merged),
            "mm_projector.proj.2.weight": init.linear(vc["text_hidden_size"], merged),
            "mm_projector.proj.2.bias": init.zeros(vc["text_hidden_size"]),
        }
    )
    return w


# A minimal stand-in for the remote-code processor Kimi K2.5 ships on the hub (KimiK25Processor,
# loaded with trust_remote_code): SGLang 0.5.23's Kimi multimodal processor reads
# ``_processor.media_processor.media_proc_cfg`` when it is constructed
# (multimodal/processors/kimi_k25.py:546), which transformers' own Kimi_K25Processor lacks.
# Text-only here: the smoke requests carry no image (an image would raise).
TINY_PROCESSOR = """
import json, os
from transformers import AutoTokenizer


class TinyKimiMediaProcessor:
    def __init__(self, media_proc_cfg):
        self.media_proc_cfg = media_proc_cfg

    def media_tokens_calculator(self, media):
        raise NotImplementedError("tiny test model: no image support")


class KimiK25Processor:
    attributes = ["tokenizer"]

    def __init__(self, tokenizer, media_proc_cfg):
        self.tokenizer = tokenizer
        self.media_processor = TinyKimiMediaProcessor(media_proc_cfg)
        self.image_processor = None  # read by SGLang's KimiGPUProcessorWrapper (kimi_k25.py:384)

    @classmethod
    def register_for_auto_class(cls, auto_class="AutoProcessor"):
        pass

    @classmethod
    def from_pretrained(cls, path, **kwargs):
        tok_kwargs = {k: kwargs[k] for k in ("trust_remote_code", "revision") if k in kwargs}
        with open(os.path.join(path, "preprocessor_config.json")) as fh:
            cfg = json.load(fh)["media_proc_cfg"]
        return cls(AutoTokenizer.from_pretrained(path, **tok_kwargs), cfg)

    def __call__(self, text=None, images=None, **kwargs):
        if images:
            raise NotImplementedError("tiny test model: no image support")
        return self.tokenizer(text, **kwargs)
"""


def build_processor_configs(out: Path, vision: dict) -> None:
    """transformers >= 5 knows model_type ``kimi_k25``: SGLang 0.5.23's tokenizer manager
    (utils/hf_transformers/processor.py:340, AutoProcessor) then builds a processor, and SGLang's Kimi
    processor needs the hub processor's ``media_processor.media_proc_cfg``. Ship a minimal one as
    remote code (auto_map; needs ``trust_remote_code=True``, as real Kimi K2.5 does).
    transformers 4.x (SGLang 0.5.9) falls back to the tokenizer: nothing is written there, so the
    0.5.9 launches need no trust_remote_code."""
    try:
        import transformers.models.kimi_k25  # noqa: F401
    except ImportError:
        return
    (out / "processing_kimi_k25_tiny.py").write_text(TINY_PROCESSOR)
    (out / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "auto_map": {"AutoProcessor": "processing_kimi_k25_tiny.KimiK25Processor"},
                "media_proc_cfg": {  # the keys SGLang reads (kimi_k25.py:546-556), Kimi K2.5's values
                    "patch_size": vision["patch_size"],
                    "merge_kernel_size": 2,
                    "in_patch_limit": 16384,
                    "patch_limit_on_one_side": 512,
                    "image_mean": [0.5, 0.5, 0.5],
                    "image_std": [0.5, 0.5, 0.5],
                },
            },
            indent=2,
        )
    )


def build_kimi_k25(out: Path, spec: dict) -> None:
    dtype = getattr(torch, spec["dtype"])
    vocab = build_tokenizer(out, spec["tokenizer"])
    build_processor_configs(out, spec["vision"])
    text = deepseek_v3_text_config(spec["text"], vocab, spec["dtype"])
    vision = vision_config(spec["vision"], text["hidden_size"])
    config = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": text,
        "vision_config": vision,
        "media_placeholder_token_id": vocab["<|media_pad|>"],
        "pad_token_id": vocab["<pad>"],
        "bos_token_id": vocab["<s>"],
        "eos_token_id": vocab["</s>"],
        "torch_dtype": spec["dtype"],
        "tie_word_embeddings": False,
    }
    init = Init(spec["seed"], dtype)
    weights = {
        f"language_model.{k}": v for k, v in deepseek_v3_text_weights(text, init, spec["zero_final_norm"]).items()
    }
    weights.update(vision_weights(vision, init))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": vocab["<s>"], "eos_token_id": vocab["</s>"], "do_sample": False})
    )
    save_file(
        {k: v.contiguous() for k, v in weights.items()}, str(out / "model.safetensors"), metadata={"format": "pt"}
    )


def build_eagle3_draft(out: Path, spec: dict) -> None:
    target = spec["target"]
    H = target["text"]["hidden_size"]
    V = target["tokenizer"]["vocab_size"]
    Vd = spec["draft_vocab_size"]
    heads, kv_heads, head_dim = spec["num_attention_heads"], spec["num_key_value_heads"], spec["head_dim"]
    inter = spec["intermediate_size"]
    vocab = vocabulary(target["tokenizer"]["words"], V)
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": H,
        "target_hidden_size": H,
        "intermediate_size": inter,
        "num_hidden_layers": 1,  # SGLang's EAGLE-3 draft supports exactly one layer
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": target["text"]["max_position_embeddings"],
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "vocab_size": V,
        "draft_vocab_size": Vd,
        "tie_word_embeddings": False,
        "bos_token_id": vocab["<s>"],
        "eos_token_id": vocab["</s>"],
        "torch_dtype": spec["dtype"],
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": spec["aux_layer_ids"],
            "use_aux_hidden_state": True,
        },
    }
    init = Init(spec["seed"], getattr(torch, spec["dtype"]))
    # d2t[i] = target id of draft id i, minus i (SpecForge's format). Draft id 0 is token 0.
    hot = torch.cat(
        [torch.zeros(1, dtype=torch.long), 1 + torch.randperm(V - 1, generator=init.gen)[: Vd - 1].sort().values]
    )
    d2t = hot - torch.arange(Vd)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[hot] = True
    p = "midlayer."
    w = {
        "fc.weight": init.linear(H, 3 * H),
        p + "input_layernorm.weight": init.ones(H),
        p + "hidden_norm.weight": init.ones(H),
        p + "post_attention_layernorm.weight": init.ones(H),
        p + "self_attn.q_proj.weight": init.linear(heads * head_dim, 2 * H),
        p + "self_attn.k_proj.weight": init.linear(kv_heads * head_dim, 2 * H),
        p + "self_attn.v_proj.weight": init.linear(kv_heads * head_dim, 2 * H),
        p + "self_attn.o_proj.weight": init.linear(H, heads * head_dim),
        p + "mlp.gate_proj.weight": init.linear(inter, H),
        p + "mlp.up_proj.weight": init.linear(inter, H),
        p + "mlp.down_proj.weight": init.linear(H, inter),
        "norm.weight": init.zeros(H) if spec["zero_final_norm"] else init.ones(H),
        "lm_head.weight": init.linear(Vd, H, gain=4.0),
        "d2t": d2t,
        "t2d": t2d,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    save_file({k: v.contiguous() for k, v in w.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})


BUILDERS = {"kimi_k25": build_kimi_k25, "eagle3_draft": build_eagle3_draft}


if __name__ == "__main__":
    kind, spec_file, out_dir = sys.argv[1:4]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    BUILDERS[kind](out, json.loads(Path(spec_file).read_text()))
    print(f"built {kind} in {out}")

"""Patch 0005: the EAGLE-3 capture layers come from every place a draft config holds them, the
server says which it used, and a draft that cannot take them is refused.

Real SGLang on the CPU, both lines, real tiny weights and tokenizer, the smoke tests' launch path
(``sgl.Engine`` with ``sglang_scripts.engine_kwargs``). One script per variant starts one engine
per case, one after the other (SGLang is imported once per script); every case that starts
generates once and then reads ``Engine.get_server_info()`` (SGLang's ``/server_info``), whose
``eagle3_aux_hidden_state`` field the patch adds. The target's captured layers are recorded by the
CPU harness's observer (``SGLPATCH_OBSERVE``).

Targets have 8 layers, so SGLang's defaults ``[2, n//2, n-3]`` = [2, 4, 5] are three distinct
layers (with the 4-layer smoke model they are [2, 2, 1]: two hidden states, which no three-state
draft can take). Cases, patched:

- ``eagle_config``: the tiny KimiK25 pair as generated (ids [0, 1, 2] under ``eagle_config``);
- ``top_level``: the *layer-probe pair* (below) with its ids at the top level of the draft config:
  the target captures the draft's layers and every draft token is accepted;
- ``none``: the KimiK25 pair's draft with no ids: the defaults, with the warning naming the
  override;
- ``override``: the KimiK25 pair (ids under eagle_config) plus the operator override (0.5.9:
  ``SGLANG_EAGLE3_AUX_HIDDEN_STATE_LAYER_IDS``; 0.5.23: ``--return-aux-hidden-state-layer-ids``),
  which wins;
- ``dp``: the KimiK25 pair with ``dp_size=2``: two schedulers behind SGLang's DP controller,
  which passes the report on to ``/server_info``;
- ``mismatch``: two ids at the top level for a draft whose ``fc`` takes three aux states: start-up
  fails with the one-line message.

Pristine (the negative control, both lines): the layer-probe pair with top-level ids captures the
defaults, reports nothing, logs nothing, and its draft tokens are rejected.

The layer-probe pair (derived from the always-0 8-layer pair, a DeepseekV3ForCausalLM target so
pristine 0.5.9, which cannot start KimiK25 with EAGLE-3, serves it too): the target always predicts
token 0 (final norm zeroed); every layer but two is the identity on the residual stream, and those
two move dimension 0 of it (layer 1 down, layer 3 up), so the target's hidden states tell layers
apart. The draft's ``fc`` reads ``slot 0 - slot 2`` of dimension 0 of the captured states and its
head predicts token 0 when that is positive, another token otherwise: positive for the layers the
draft names ([0, 1, 2]: SGLang 0.5.9 captures [1, 2, 3], 0.5.23 [0, 1, 2]), negative for the
defaults [2, 4, 5]. So only the named layers reach the full accept length.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sglang_runtime
import sglang_scripts as scripts

pytestmark = [pytest.mark.smoke, pytest.mark.patch("0005")]

IDS_KEY = "eagle_aux_hidden_state_layer_ids"
LOG_MARK = "EAGLE-3 capture layers:"
N_LAYERS = 8
DEFAULTS = [2, N_LAYERS // 2, N_LAYERS - 3]  # [2, 4, 5]
# The mismatch case: two ids at the top level, for a draft whose fc takes three aux states.
TWO_IDS = [0, 2]
OVERRIDE_IDS = [2, 3, 4]
PATCHED_CASES = ("eagle_config", "top_level", "none", "override", "dp", "mismatch")  # mismatch last
SAMPLING = {"temperature": 0.0, "max_new_tokens": 6, "ignore_eos": True}
PROMPT = scripts.PROMPTS[0]


def override_name(version: str) -> str:
    return "SGLANG_EAGLE3_AUX_HIDDEN_STATE_LAYER_IDS" if version == "0.5.9" else "--return-aux-hidden-state-layer-ids"


def captured_for(ids: list[int], version: str) -> list[int]:
    """The layers DeepseekV2/V3 (and KimiK25) capture for draft-config ids: 0.5.9 takes the input
    of layer id + 1; 0.5.23 adds 1 only when the first id is 1 (srt/models/deepseek_v2.py)."""
    shift = 1 if version == "0.5.9" or ids[0] == 1 else 0
    return [i + shift for i in ids]


def _draft_variant(base: Path, dest: Path, layout: str) -> Path:
    """``base`` (a draft with its ids under eagle_config) with its ids moved: same weights."""
    config = json.loads((base / "config.json").read_text())
    eagle_config = config.pop("eagle_config")
    ids = eagle_config[IDS_KEY]
    if layout == "eagle_config":
        config["eagle_config"] = eagle_config
    elif layout == "top_level":
        config[IDS_KEY] = ids
    elif layout == "mismatch":
        config[IDS_KEY] = TWO_IDS
    else:
        assert layout == "none", layout
    dest.mkdir(parents=True)
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    (dest / "model.safetensors").symlink_to(base / "model.safetensors")
    return dest


# Runs in the runtime venv (torch, safetensors): the layer-probe pair from the always-0 pair.
PROBE_BUILDER = r"""
import json, shutil, sys
from pathlib import Path
import torch
from safetensors.torch import load_file, save_file

src_target, src_draft, out = map(Path, sys.argv[1:4])
ids = json.loads(sys.argv[4])

# Target: KimiK25's text model as a DeepseekV3ForCausalLM (config, weights, tokenizer).
target = out / "target"
target.mkdir(parents=True)
kimi = json.loads((src_target / "config.json").read_text())
text = dict(kimi["text_config"])
(target / "config.json").write_text(json.dumps(text, indent=2))
for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             "generation_config.json"):
    if (src_target / name).is_file():
        shutil.copy(src_target / name, target / name)
w = {k[len("language_model."):]: v for k, v in load_file(src_target / "model.safetensors").items()
     if k.startswith("language_model.")}
H = text["hidden_size"]
emb = torch.zeros_like(w["model.embed_tokens.weight"])
emb[:, 0], emb[:, 1] = 1.0, 10.0  # dim 0: the probed value; dim 1: a constant the shifts read
w["model.embed_tokens.weight"] = emb
for key in list(w):  # every attention and MLP output zero: each layer is the identity ...
    if key.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight", "down_proj.weight")):
        w[key] = torch.zeros_like(w[key])
for layer, scale in ((1, -0.1), (3, 0.2)):  # ... except that layers 1 and 3 move dim 0
    p = f"model.layers.{layer}.mlp.shared_experts."
    gate, up, down = (torch.zeros_like(w[p + n]) for n in ("gate_proj.weight", "up_proj.weight",
                                                          "down_proj.weight"))
    gate[0, 1] = up[0, 1] = 1.0
    down[0, 0] = scale
    w[p + "gate_proj.weight"], w[p + "up_proj.weight"], w[p + "down_proj.weight"] = gate, up, down
save_file({k: v.contiguous() for k, v in w.items()}, str(target / "model.safetensors"),
          metadata={"format": "pt"})

# Draft: ids at the top level; predicts draft id 0 (token 0) iff slot 0 - slot 2 of dim 0 > 0.
draft = out / "draft"
draft.mkdir()
config = json.loads((src_draft / "config.json").read_text())
config.pop("eagle_config", None)
config["eagle_aux_hidden_state_layer_ids"] = ids
(draft / "config.json").write_text(json.dumps(config, indent=2))
d = load_file(src_draft / "model.safetensors")
fc = torch.zeros_like(d["fc.weight"])
fc[0, 0], fc[0, 2 * H] = 1.0, -1.0
d["fc.weight"] = fc
for key in ("midlayer.self_attn.o_proj.weight", "midlayer.mlp.down_proj.weight"):
    d[key] = torch.zeros_like(d[key])
d["norm.weight"] = torch.ones_like(d["norm.weight"])
head = torch.zeros_like(d["lm_head.weight"])
head[0, 0], head[1, 0] = 10.0, -10.0
d["lm_head.weight"] = head
assert int(d["d2t"][0]) == 0 and int(d["d2t"][1]) + 1 != 0  # draft id 1 is not token 0
save_file({k: v.contiguous() for k, v in d.items()}, str(draft / "model.safetensors"),
          metadata={"format": "pt"})
print("built", out)
"""


@pytest.fixture(scope="module")
def models(runtime, kimi_k25_8_pair, always0_pair_8, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("aux-layers")
    target, draft = kimi_k25_8_pair
    base_ids = json.loads((draft / "config.json").read_text())["eagle_config"][IDS_KEY]
    assert json.loads((target / "config.json").read_text())["text_config"]["num_hidden_layers"] == N_LAYERS
    probe = root / "probe"
    result = runtime.run(
        "import sys, runpy\n"
        f"sys.argv = ['probe', {str(always0_pair_8[0])!r}, {str(always0_pair_8[1])!r}, "
        f"{str(probe)!r}, {json.dumps(base_ids)!r}]\n"
        f"exec(compile({PROBE_BUILDER!r}, 'probe_builder', 'exec'))\n",
        variant=None,
        harness=False,
        timeout=300,
    )
    assert result.returncode == 0, result.describe()
    drafts = {layout: _draft_variant(draft, root / f"draft-{layout}", layout) for layout in ("none", "mismatch")}
    return {
        "root": root,
        "kimi": target,
        "kimi_draft": draft,
        "drafts": drafts,
        "probe": (probe / "target", probe / "draft"),
        "ids": base_ids,
    }


def _cases(models: dict, variant: str, version: str) -> list[dict]:
    """(case, engine kwargs, extra environment) of a variant's script, in launch order."""

    def kw(target, draft, **extra):
        kwargs = scripts.engine_kwargs(target, draft)
        kwargs.update(extra)
        return kwargs

    probe_target, probe_draft = models["probe"]
    if variant == "pristine":
        return [{"case": "top_level", "kwargs": kw(probe_target, probe_draft), "env": {}}]
    kimi, kimi_draft = models["kimi"], models["kimi_draft"]
    override = (
        {"kwargs": kw(kimi, kimi_draft), "env": {override_name(version): ",".join(map(str, OVERRIDE_IDS))}}
        if version == "0.5.9"
        else {"kwargs": kw(kimi, kimi_draft, return_aux_hidden_state_layer_ids=OVERRIDE_IDS), "env": {}}
    )
    return [
        {"case": "eagle_config", "kwargs": kw(kimi, kimi_draft), "env": {}},
        {"case": "top_level", "kwargs": kw(probe_target, probe_draft), "env": {}},
        # log level "warning": the line shows only if it is logged as a warning (SGLang's log
        # format carries no level name)
        {"case": "none", "kwargs": kw(kimi, models["drafts"]["none"], log_level="warning"), "env": {}},
        {"case": "override", **override},
        # two data-parallel ranks: /server_info sees only the DP controller's ready message
        # (SGLang's CPU engine binds each rank's threads to cores: 0.5.9 reads one entry per TP
        # rank of a DP rank, 0.5.23 one per rank of the whole world)
        {
            "case": "dp",
            "kwargs": kw(kimi, kimi_draft, dp_size=2),
            "env": {"SGLANG_CPU_OMP_THREADS_BIND": "0-1" if version == "0.5.9" else "0|1"},
        },
        {"case": "mismatch", "kwargs": kw(kimi, models["drafts"]["mismatch"]), "env": {}},
    ]


def _script(cases: list[dict], observe_dir: Path) -> str:
    runs = [(c["case"], c["kwargs"], c["env"], str(observe_dir / f"observe-{c['case']}.jsonl")) for c in cases]
    return (
        sglang_runtime.emit_snippet()
        + f"""
import os, sys, time
RUNS = {runs!r}
PROMPT = {PROMPT!r}
SAMPLING = {SAMPLING!r}


def on_sigquit(signum, frame):
    raise RuntimeError("an SGLang child process failed (SIGQUIT); see its traceback above")


def main():
    import sglang as sgl

    results = {{}}
    for case, kwargs, env, observe in RUNS:
        # the scheduler process inherits the environment of this one at its start
        os.environ["SGLPATCH_OBSERVE"] = observe
        os.environ.update(env)
        print(f"=== case {{case}} ===", file=sys.stderr, flush=True)
        start = time.monotonic()
        try:
            engine = sgl.Engine(**kwargs, custom_sigquit_handler=on_sigquit)
        except BaseException as exc:
            results[case] = {{"error": f"{{type(exc).__name__}}: {{exc}}"}}
            emit(results)
            break  # a failed start-up may leave the process in any state: last case only
        try:
            # A request first: sgl.Engine starts the tokenizer manager's result loop with the
            # first request, and get_server_info() waits for the scheduler's answer on it.
            out = engine.generate(PROMPT, sampling_params=dict(SAMPLING))
            info = engine.get_server_info()
            results[case] = {{"info": info.get("eagle3_aux_hidden_state", "absent"),
                              "output_ids": out.get("output_ids"), "meta_info": out["meta_info"],
                              "seconds": round(time.monotonic() - start, 1)}}
        finally:
            engine.shutdown()
            for key in env:
                os.environ.pop(key, None)
        emit(results)


if __name__ == "__main__":
    main()
"""
    )


def _observed(path: Path) -> list[list[int]]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    return [r["layers_to_capture"] for r in rows if r["event"] == "initialized" and not r["is_draft"]]


def _split_cases(stderr: str) -> dict[str, str]:
    parts = re.split(r"^=== case (\w+) ===$", stderr, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def _launch(runtime, models: dict, variant: str) -> dict:
    cases = _cases(models, variant, runtime.sglang_version)
    observe_dir = models["root"] / f"observe-{variant}"
    observe_dir.mkdir()
    result = runtime.run(_script(cases, observe_dir), variant=variant, timeout=1500)
    out = result.result() or {}
    return {
        "out": out,
        "logs": _split_cases(result.stderr),
        "describe": result.describe(),
        "leftovers": result.leftovers,
        "returncode": result.returncode,
        "captured": {c["case"]: _observed(observe_dir / f"observe-{c['case']}.jsonl") for c in cases},
    }


@pytest.fixture(scope="module")
def patched(runtime, models):
    run = _launch(runtime, models, "patched")
    assert list(run["out"]) == list(PATCHED_CASES), run["describe"]
    return run


@pytest.fixture(scope="module")
def pristine(runtime, models):
    run = _launch(runtime, models, "pristine")
    assert "info" in run["out"].get("top_level", {}), run["describe"]
    return run


def _log_lines(run: dict, case: str) -> list[str]:
    return [x for x in run["logs"].get(case, "").splitlines() if LOG_MARK in x]


def _started(run: dict, case: str) -> dict:
    got = run["out"][case]
    assert "info" in got, f"{case}: {got}\n{run['describe']}"
    return got


def test_patched_captures_the_draft_ids_from_eagle_config_and_top_level(runtime, models, patched):
    version = runtime.sglang_version
    ids = models["ids"]
    expected = captured_for(ids, version)
    assert expected != DEFAULTS
    for case, source in (
        ("eagle_config", f"draft config eagle_config.{IDS_KEY}"),
        ("top_level", f"draft config {IDS_KEY}"),
    ):
        got = _started(patched, case)
        assert patched["captured"][case] and set(map(tuple, patched["captured"][case])) == {tuple(expected)}, (
            case,
            patched["captured"][case],
        )
        # the server's info endpoint reports the same
        assert got["info"] == {
            "layer_ids": ids,
            "source": source,
            "captured_layers": expected,
            "use_aux_hidden_state": True,
        }, (case, got["info"])
        lines = _log_lines(patched, case)
        assert len(lines) == 1, (case, lines)
        assert f"{LOG_MARK} layer ids {ids} from {source}; the target captures layers {expected}" in lines[0]
        assert got["meta_info"]["spec_verify_ct"] >= 1  # EAGLE-3 ran on those layers


def test_patched_top_level_ids_reach_the_full_accept_length(runtime, patched):
    """The layer-probe draft predicts the target's token only from the layers it names."""
    got = _started(patched, "top_level")
    meta, fields = got["meta_info"], scripts.spec_fields(runtime.sglang_version)
    assert got["output_ids"] == [0] * SAMPLING["max_new_tokens"]
    assert meta[fields["accepted"]] == meta[fields["proposed"]] > 0, meta  # every draft accepted
    assert meta["spec_accept_length"] >= 2.5, meta  # 3 draft tokens: 3.0 up to the last pass


def test_patched_warns_when_the_draft_names_no_layers(runtime, patched):
    got = _started(patched, "none")
    assert patched["captured"]["none"] and all(c == DEFAULTS for c in patched["captured"]["none"])
    assert got["info"] == {
        "layer_ids": None,
        "source": "default",
        "captured_layers": DEFAULTS,
        "use_aux_hidden_state": True,
    }, got["info"]
    lines = _log_lines(patched, "none")  # launched with log level "warning": a warning
    assert len(lines) == 1, lines
    assert lines[0].endswith(
        f"{LOG_MARK} the draft config names none (neither eagle_config.{IDS_KEY} nor {IDS_KEY}), "
        f"so the target captures its default layers {DEFAULTS}; if the draft was trained on other "
        f"layers, set {override_name(runtime.sglang_version)} to its layer ids"
    ), lines[0]


def test_patched_operator_override_wins_over_the_draft_config(runtime, models, patched):
    version = runtime.sglang_version
    name = override_name(version)
    source = f"env {name}" if version == "0.5.9" else name
    expected = captured_for(OVERRIDE_IDS, version)
    assert expected != captured_for(models["ids"], version)  # the draft config names others
    got = _started(patched, "override")
    assert patched["captured"]["override"] and all(c == expected for c in patched["captured"]["override"]), patched[
        "captured"
    ]["override"]
    assert got["info"] == {
        "layer_ids": OVERRIDE_IDS,
        "source": source,
        "captured_layers": expected,
        "use_aux_hidden_state": True,
    }, got["info"]
    lines = _log_lines(patched, "override")
    assert (
        len(lines) == 1 and f"layer ids {OVERRIDE_IDS} from {source}; the target captures layers {expected}" in lines[0]
    ), lines


def test_patched_reports_the_capture_layers_with_data_parallelism(runtime, models, patched):
    """With dp_size 2 both ranks capture the draft's layers and /server_info still says so
    (without 0005's pass-through in the DP controller the field is absent)."""
    expected = captured_for(models["ids"], runtime.sglang_version)
    got = _started(patched, "dp")
    assert len(patched["captured"]["dp"]) == 2 and all(c == expected for c in patched["captured"]["dp"]), patched[
        "captured"
    ]["dp"]
    assert got["info"] == {
        "layer_ids": models["ids"],
        "source": f"draft config eagle_config.{IDS_KEY}",
        "captured_layers": expected,
        "use_aux_hidden_state": True,
    }, got["info"]
    assert got["meta_info"]["spec_verify_ct"] >= 1


def test_patched_refuses_a_draft_that_takes_another_number_of_layers(runtime, patched):
    name = override_name(runtime.sglang_version)
    assert "error" in patched["out"]["mismatch"], patched["out"]["mismatch"]
    lines = [x for x in patched["logs"]["mismatch"].splitlines() if re.match(r"\w*Error: EAGLE-3 draft expects", x)]
    assert lines, patched["describe"]
    assert lines[-1] == (
        f"ValueError: EAGLE-3 draft expects 3 aux hidden states (its fc input width 192 = 3 x 64) "
        f"but the target would capture 2 layers {TWO_IDS} from draft config {IDS_KEY}; set {name} "
        f"to the 3 layer ids the draft was trained on"
    ), lines[-1]
    assert patched["leftovers"] == [], patched["leftovers"]


def test_pristine_captures_the_defaults_for_top_level_ids(runtime, pristine):
    """Negative control: upstream ignores top-level ids, says nothing, and the draft that only
    predicts well from its named layers falls far below the full accept length."""
    got = pristine["out"]["top_level"]
    assert pristine["captured"]["top_level"] and all(c == DEFAULTS for c in pristine["captured"]["top_level"]), (
        pristine["describe"]
    )
    assert got["info"] == "absent"  # upstream's /server_info has no such field
    assert not _log_lines(pristine, "top_level")
    meta, fields = got["meta_info"], scripts.spec_fields(runtime.sglang_version)
    assert got["output_ids"] == [0] * SAMPLING["max_new_tokens"]  # the target's own tokens
    assert meta["spec_verify_ct"] >= 1 and meta[fields["accepted"]] == 0, meta
    assert meta["spec_accept_length"] <= 1.5, meta
    assert pristine["leftovers"] == [], pristine["leftovers"]

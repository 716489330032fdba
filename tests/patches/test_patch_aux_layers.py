"""Patch 0005 on both lines, run from the patched files on the CPU (fast set): where the EAGLE-3
capture layers come from, how they are checked and counted, and where they are reported.

The smoke test tests/smoke/test_eagle3_aux_layers.py proves the same inside the real SGLang
runtime (minutes); these run the patched functions in milliseconds (tests/patch_code.py), each
right answer asserted next to the wrong one a broken patch would give. ``patched(line)`` is
conftest's fixture.
"""

from __future__ import annotations

import json
import logging
import sys
import types
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from patch_code import SRT, load_class, load_module, run_block


class Weight:
    """The two things the width check reads of a tensor: dim() and shape."""

    def __init__(self, *shape):
        self.shape = shape

    def dim(self):
        return len(self.shape)


def draft(width=None, hidden=None, nested=True):
    fc = NS(weight=Weight(*width)) if width else NS()
    inner = NS(fc=fc)
    return NS(model=inner) if nested else inner


# ---------------------------------------------------------------- 0005, both lines: which layers


class Production:
    """0.5.9's eagle3_aux_layers.py: one resolve call, the override from the environment."""

    line = "production"

    def __init__(self, tree: Path, monkeypatch):
        self.mod = load_module(tree / SRT / "speculative/eagle3_aux_layers.py", name="aux_prod")
        self.monkeypatch = monkeypatch
        self.override_source = f"env {self.mod.OVERRIDE_ENV}"
        self.override_name = self.mod.OVERRIDE_ENV

    def resolve(self, cfg, override=None, num_layers=None):
        if override is None:
            self.monkeypatch.delenv(self.mod.OVERRIDE_ENV, raising=False)
        else:
            self.monkeypatch.setenv(
                self.mod.OVERRIDE_ENV, override if isinstance(override, str) else json.dumps(override)
            )
        aux = self.mod.resolve_eagle3_aux_layers(cfg, target_num_layers=num_layers)
        return aux.layer_ids, aux.source

    def use_aux(self, cfg):
        return self.mod.draft_use_aux_hidden_state(cfg)

    def count(self, ids):
        return self.mod.Eagle3AuxLayers(layer_ids=ids, source="x").count

    def captured(self, model):
        return self.mod.captured_layers(model)


class Latest:
    """0.5.23's spec_aux_hidden_state.py: the override is a server option passed in."""

    line = "latest"

    def __init__(self, tree: Path, monkeypatch):
        path = tree / SRT / "model_executor/model_runner_components/spec_aux_hidden_state.py"
        self.mod = load_module(path, name="aux_latest")
        self.override_source = self.override_name = self.mod.EAGLE_AUX_LAYER_OVERRIDE

    def resolve(self, cfg, override=None, num_layers=None):
        ids, source = self.mod.resolve_eagle_aux_layer_ids(cfg, override)
        if ids is not None and num_layers is not None:
            model_config = NS(hf_text_config=NS(num_hidden_layers=num_layers))
            self.mod._check_eagle_layer_ids_in_range(ids, source, model_config)
        return ids, source

    def use_aux(self, cfg):
        return self.mod.draft_use_aux_hidden_state(cfg)

    def count(self, ids):
        return self.mod.eagle_aux_layer_count(ids)

    def captured(self, model):
        return self.mod.eagle_captured_layers(model)


@pytest.fixture(params=[Production, Latest], ids=["production", "latest"])
def aux(request, patched, monkeypatch):
    return request.param(patched(request.param.line), monkeypatch)


INFO_KEY = "eagle3_aux_hidden_state"  # the /server_info field
EAGLE = "draft config eagle_config.eagle_aux_hidden_state_layer_ids"
TOP = "draft config eagle_aux_hidden_state_layer_ids"


@pytest.mark.parametrize(
    "cfg, expected",
    [
        (NS(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}), ([1, 29, 57], EAGLE)),
        (NS(eagle_config=NS(eagle_aux_hidden_state_layer_ids=[1, 29, 57])), ([1, 29, 57], EAGLE)),
        (NS(eagle_aux_hidden_state_layer_ids=(4, 8)), ([4, 8], TOP)),
        (
            NS(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2]}, eagle_aux_hidden_state_layer_ids=[7, 8, 9]),
            ([1, 2], EAGLE),
        ),  # eagle_config before the top level
        (
            NS(eagle_config={"use_aux_hidden_state": True}, eagle_aux_hidden_state_layer_ids=[7, 8, 9]),
            ([7, 8, 9], TOP),
        ),  # an eagle_config without ids falls through to the top level
        ({"eagle_aux_hidden_state_layer_ids": [3, 5]}, ([3, 5], TOP)),  # a config that is a dict
        (NS(), (None, "default")),
        (NS(eagle_config=None), (None, "default")),
    ],
)
def test_the_capture_layers_come_from_the_first_place_that_names_them(aux, cfg, expected):
    assert aux.resolve(cfg) == expected


def test_the_operator_override_wins_over_the_draft_config(aux):
    cfg = NS(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}, eagle_aux_hidden_state_layer_ids=[4])
    assert aux.resolve(cfg, override=[10, 20, 30]) == ([10, 20, 30], aux.override_source)
    assert aux.resolve(cfg) == ([1, 2, 3], EAGLE)  # the twin: without it, the draft config


@pytest.mark.parametrize("bad", [[], [1, -2], [1, True], [1.5], 3])
def test_layer_ids_that_are_not_a_list_of_layers_fail_naming_where_they_came_from(aux, bad):
    with pytest.raises(ValueError, match=f"from {EAGLE} must be a non-empty list"):
        aux.resolve(NS(eagle_config={"eagle_aux_hidden_state_layer_ids": bad}))
    with pytest.raises(ValueError, match=f"from {TOP} must be a non-empty list"):
        aux.resolve(NS(eagle_aux_hidden_state_layer_ids=bad))


def test_layer_ids_past_the_target_fail_at_start_up(aux):
    cfg = NS(eagle_aux_hidden_state_layer_ids=[2, 30, 61])
    with pytest.raises(
        ValueError,
        match=r"ids \[61\] from draft config eagle_aux_hidden_state_layer_ids are "
        r"out of range for a target with 61 layers",
    ):
        aux.resolve(cfg, num_layers=61)
    assert aux.resolve(cfg, num_layers=62) == ([2, 30, 61], TOP)
    assert aux.resolve(cfg, num_layers=None) == ([2, 30, 61], TOP)  # unknown depth: nothing to check
    assert aux.resolve(NS(), num_layers=1) == (None, "default")


@pytest.mark.parametrize(
    "cfg, expected",
    [
        (NS(), True),
        (NS(eagle_config={"use_aux_hidden_state": False}), False),
        (NS(eagle_config=NS(use_aux_hidden_state=False)), False),
        (NS(use_aux_hidden_state=False), False),
        (NS(eagle_config={"use_aux_hidden_state": True}, use_aux_hidden_state=False), True),
        (NS(eagle_config={"use_aux_hidden_state": 0}), False),
        (NS(eagle_config={}), True),
    ],
)
def test_use_aux_hidden_state_is_read_from_eagle_config_then_the_top_level(aux, cfg, expected):
    assert aux.use_aux(cfg) is expected


def test_the_default_layers_count_three(aux):
    assert aux.count(None) == 3
    assert aux.count([4, 8]) == 2


@pytest.mark.parametrize(
    "model, expected",
    [
        (NS(model=NS(layers_to_capture=(2, 30, 58))), [2, 30, 58]),
        (NS(model=NS(), language_model=NS(model=NS(layers_to_capture=[1, 2]))), [1, 2]),
        (NS(language_model=NS(model=NS(layers_to_capture=[5]))), [5]),
        (NS(model=NS(layers_to_capture=[3]), language_model=NS(model=NS(layers_to_capture=[9]))), [3]),
        (NS(model=NS()), None),
        (NS(), None),
    ],
)
def test_the_captured_layers_are_read_back_from_the_decoder_stack(aux, model, expected):
    assert aux.captured(model) == expected


@pytest.mark.parametrize("where", ["eagle_config", "top level", "override"])
def test_a_layer_id_given_twice_fails_naming_where_it_came_from(aux, where):
    """A repeated id is captured once: the draft would get fewer aux states than it takes."""
    ids = [2, 30, 2]
    cfg, override, source = {
        "eagle_config": (NS(eagle_config={"eagle_aux_hidden_state_layer_ids": ids}), None, EAGLE),
        "top level": (NS(eagle_aux_hidden_state_layer_ids=ids), None, TOP),
        "override": (NS(), ids, aux.override_source),
    }[where]
    with pytest.raises(ValueError) as refused:
        aux.resolve(cfg, override=override)
    assert str(refused.value).startswith(
        f"EAGLE-3 aux hidden state layer ids from {source} must not repeat a layer, got [2, 30, 2]; "
        f"set {aux.override_name}"
    ), str(refused.value)
    assert aux.resolve(NS(eagle_aux_hidden_state_layer_ids=[2, 30, 3])) == ([2, 3, 30], TOP)  # the twin


@pytest.mark.parametrize(
    "cfg, override, expected",
    [
        (NS(eagle_aux_hidden_state_layer_ids=[58, 2, 30]), None, ([2, 30, 58], TOP)),
        (NS(eagle_config={"eagle_aux_hidden_state_layer_ids": (30, 1, 57)}), None, ([1, 30, 57], EAGLE)),
        (NS(), [9, 3, 5], ([3, 5, 9], None)),
    ],
)
def test_layer_ids_are_sorted_as_the_target_captures_them(aux, cfg, override, expected):
    """The target captures in layer order; 0.5.23 also picks its id convention from the first id."""
    ids, source = aux.resolve(cfg, override=override)
    assert (ids, source) == (expected[0], expected[1] or aux.override_source)


# ---------------------------------------------------------------- 0005, production: count checks


@pytest.fixture
def prod(patched, monkeypatch):
    return Production(patched("production"), monkeypatch).mod


def test_a_declared_count_that_differs_from_the_layers_fails_at_start_up(prod, monkeypatch):
    monkeypatch.delenv(prod.OVERRIDE_ENV, raising=False)
    cfg = NS(eagle_aux_hidden_state_layer_ids=[1, 2], num_aux_hidden_states=3)
    with pytest.raises(ValueError) as failed:
        prod.resolve_eagle3_aux_layers(cfg)
    assert str(failed.value) == (
        "EAGLE-3 draft expects 3 aux hidden states (declared num_aux_hidden_states) but the target would "
        f"capture 2 layers [1, 2] from {TOP}; set {prod.OVERRIDE_ENV} to the 3 layer ids the draft was "
        "trained on"
    )
    with pytest.raises(ValueError, match=r"expects 2 .* capture 3 layers \(the target's defaults\) from default"):
        prod.resolve_eagle3_aux_layers(NS(num_aux_hidden_states=2))
    # the twins: a matching count, no declared count, or aux states off: no error
    assert (
        prod.resolve_eagle3_aux_layers(NS(eagle_aux_hidden_state_layer_ids=[1, 2], num_aux_hidden_states="2")).count
        == 2
    )
    assert prod.resolve_eagle3_aux_layers(NS(num_aux_hidden_states=3)).layer_ids is None
    assert prod.resolve_eagle3_aux_layers(NS(eagle_aux_hidden_state_layer_ids=[1, 2])).count == 2
    off = prod.resolve_eagle3_aux_layers(NS(use_aux_hidden_state=False, num_aux_hidden_states=5))
    assert off.use_aux_hidden_state is False


@pytest.mark.parametrize(
    "override, expected",
    [("2,30,58", [2, 30, 58]), (" 2, 30 ,58 ", [2, 30, 58]), ("[2, 30, 58]", [2, 30, 58]), ("7", [7])],
)
def test_the_override_takes_a_comma_list_or_a_json_list(prod, monkeypatch, override, expected):
    monkeypatch.setenv(prod.OVERRIDE_ENV, override)
    aux = prod.resolve_eagle3_aux_layers(NS())
    assert (aux.layer_ids, aux.source) == (expected, f"env {prod.OVERRIDE_ENV}")


@pytest.mark.parametrize("override", ["a,b", "2;30", "[1, -1]", "[]"])
def test_an_override_that_is_not_layer_ids_fails_naming_the_variable(prod, monkeypatch, override):
    monkeypatch.setenv(prod.OVERRIDE_ENV, override)
    with pytest.raises(ValueError, match=f"from env {prod.OVERRIDE_ENV} must be"):
        prod.resolve_eagle3_aux_layers(NS())


def test_a_blank_override_is_no_override(prod, monkeypatch):
    monkeypatch.setenv(prod.OVERRIDE_ENV, "  ")
    assert prod.resolve_eagle3_aux_layers(NS(eagle_aux_hidden_state_layer_ids=[4])).layer_ids == [4]


def test_the_server_reports_the_layers_and_their_source(prod):
    aux = prod.Eagle3AuxLayers(layer_ids=[1, 2], source="s", use_aux_hidden_state=False, captured_layers=[1])
    assert aux.info() == {"layer_ids": [1, 2], "source": "s", "captured_layers": [1], "use_aux_hidden_state": False}


def test_the_start_up_line_warns_only_for_the_default_layers(prod, caplog):
    caplog.set_level(logging.INFO, logger="aux_prod")
    prod.log_eagle3_aux_layers(prod.Eagle3AuxLayers(None, "default", captured_layers=[2, 30, 58]))
    prod.log_eagle3_aux_layers(prod.Eagle3AuxLayers([1, 2], TOP, captured_layers=[1, 2]))
    prod.log_eagle3_aux_layers(prod.Eagle3AuxLayers(None, "default", use_aux_hidden_state=False))
    records = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert (
        records[0][0] == "WARNING"
        and "default layers [2, 30, 58]" in records[0][1]
        and prod.OVERRIDE_ENV in records[0][1]
    )
    assert records[1] == (
        "INFO",
        f"EAGLE-3 capture layers: layer ids [1, 2] from {TOP}; the target captures layers [1, 2]",
    )
    assert records[2] == ("INFO", "EAGLE-3 aux hidden states: off (the draft config sets use_aux_hidden_state false)")
    assert len(records) == 3


@pytest.mark.parametrize(
    "model, cfg, expected",
    [
        (draft((4096, 3 * 7168)), NS(target_hidden_size=7168, hidden_size=4096), 3),
        (draft((4096, 2 * 7168), nested=False), NS(target_hidden_size=7168), 2),
        (draft((4096, 3 * 4096)), NS(hidden_size=4096), 3),  # no target_hidden_size: the draft's own
        (draft((4096, 3 * 7168)), NS(target_hidden_size=None, hidden_size=7168), 3),
        (draft(None), NS(hidden_size=4096), None),
        (draft((3 * 4096,)), NS(hidden_size=4096), None),
        (draft((4096, 1000)), NS(hidden_size=4096), None),
        (draft((4096, 3 * 4096)), NS(), None),
    ],
)
def test_a_loaded_draft_says_how_many_aux_states_it_takes(prod, model, cfg, expected):
    assert prod.draft_expected_aux_count(model, cfg) == expected


def test_a_target_that_would_capture_a_layer_twice_fails_at_start_up(prod):
    """The defaults [2, n // 2, n - 3] coincide on a target with fewer than 7 layers."""
    with pytest.raises(ValueError) as refused:
        prod.check_captured_layers(prod.Eagle3AuxLayers(None, "default", captured_layers=[2, 2, 1]))
    assert str(refused.value) == (
        "EAGLE-3 capture layers [2, 2, 1] (default) repeat a layer, so the target would capture 2 aux hidden "
        f"states instead of 3; set {prod.OVERRIDE_ENV} to the layer ids the draft was trained on"
    )
    # the twins: distinct layers, aux states off, or a target rank that captures nothing
    prod.check_captured_layers(prod.Eagle3AuxLayers(None, "default", captured_layers=[2, 4, 5]))
    prod.check_captured_layers(
        prod.Eagle3AuxLayers(None, "default", use_aux_hidden_state=False, captured_layers=[2, 2, 1])
    )
    prod.check_captured_layers(prod.Eagle3AuxLayers(None, "default"))


def test_a_draft_whose_input_width_differs_from_the_capture_fails_at_start_up(prod):
    aux = prod.Eagle3AuxLayers([1, 2], TOP)
    with pytest.raises(ValueError) as failed:
        prod.check_draft_input_width(draft((4096, 3 * 7168)), NS(target_hidden_size=7168), aux)
    assert str(failed.value).startswith(
        "EAGLE-3 draft expects 3 aux hidden states (its fc input width 21504 = 3 x 7168) but the target "
        f"would capture 2 layers [1, 2] from {TOP}"
    )
    # the twins: a matching width, no aux states, or no analysis of the draft: start-up goes on
    prod.check_draft_input_width(draft((4096, 2 * 7168)), NS(target_hidden_size=7168), aux)
    prod.check_draft_input_width(draft((4096, 3 * 7168)), NS(target_hidden_size=7168), None)
    off = prod.Eagle3AuxLayers([1, 2], TOP, use_aux_hidden_state=False)
    prod.check_draft_input_width(draft((4096, 3 * 7168)), NS(target_hidden_size=7168), off)
    prod.check_draft_input_width(draft(None), NS(target_hidden_size=7168), aux)


# ---------------------------------------------------------------- 0005, latest: count checks


@pytest.fixture
def latest(patched, monkeypatch):
    return Latest(patched("latest"), monkeypatch).mod


def spec_config(ids=None, source=TOP, use=True, captured=None):
    return NS(
        eagle_use_aux_hidden_state=use,
        eagle_aux_hidden_state_layer_ids=ids,
        eagle_aux_hidden_state_layer_source=source,
        eagle_aux_hidden_state_captured_layers=captured,
    )


def test_latest_layer_range_counts_looped_layers(latest):
    config = NS(hf_text_config=NS(num_hidden_layers=10, num_loops=2))
    latest._check_eagle_layer_ids_in_range([19], TOP, config)
    with pytest.raises(
        ValueError,
        match=r"\[20\] from x are out of range for a target with 20 layers; set "
        "--return-aux-hidden-state-layer-ids",
    ):
        latest._check_eagle_layer_ids_in_range([3, 20], "x", config)
    latest._check_eagle_layer_ids_in_range([500], "x", NS(hf_text_config=NS()))


def test_latest_mismatch_message_names_both_counts(latest):
    assert latest.eagle_aux_mismatch_message(3, "how", [1, 2], "src") == (
        "EAGLE-3 draft expects 3 aux hidden states (how) but the target would capture 2 layers [1, 2] from "
        "src; set --return-aux-hidden-state-layer-ids to the 3 layer ids the draft was trained on"
    )
    assert "capture 3 layers (the target's defaults) from default" in latest.eagle_aux_mismatch_message(
        2, "how", None, "default"
    )


def test_latest_server_info_and_start_up_line(latest, caplog):
    assert latest.eagle_aux_hidden_state_info(spec_config(source=None)) is None
    assert latest.eagle_aux_hidden_state_info(spec_config([1], TOP, False, [1])) == {
        "layer_ids": [1],
        "source": TOP,
        "captured_layers": [1],
        "use_aux_hidden_state": False,
    }
    caplog.set_level(logging.INFO, logger="aux_latest")
    model = NS(model=NS(layers_to_capture=[2, 30, 58]))
    default = spec_config(None, "default")
    latest.record_eagle_aux_hidden_state(default, model)
    named = spec_config([1, 2], TOP)
    latest.record_eagle_aux_hidden_state(named, NS(model=NS(layers_to_capture=[1, 2])))
    latest.record_eagle_aux_hidden_state(spec_config([1], TOP, use=False), model)
    latest.record_eagle_aux_hidden_state(spec_config(source=None), model)  # no EAGLE-3 draft: silent
    records = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in records] == ["WARNING", "INFO", "INFO"]
    assert "default layers [2, 30, 58]" in records[0][1] and "--return-aux-hidden-state-layer-ids" in records[0][1]
    assert records[1][1] == f"EAGLE-3 capture layers: layer ids [1, 2] from {TOP}; the target captures layers [1, 2]"
    assert "off" in records[2][1]
    assert (default.eagle_aux_hidden_state_captured_layers, named.eagle_aux_hidden_state_captured_layers) == (
        [2, 30, 58],
        [1, 2],
    )


def test_latest_a_target_that_would_capture_a_layer_twice_fails_at_start_up(latest, caplog):
    """The defaults [2, n // 2, n - 3] coincide on a target with fewer than 7 layers: the packer
    would hand the draft a partly unwritten buffer."""
    caplog.set_level(logging.INFO, logger="aux_latest")
    with pytest.raises(ValueError) as refused:
        latest.record_eagle_aux_hidden_state(spec_config(None, "default"), NS(model=NS(layers_to_capture=[2, 2, 1])))
    assert str(refused.value) == (
        "EAGLE-3 capture layers [2, 2, 1] (default) repeat a layer, so the target would capture 2 aux hidden "
        "states instead of 3; set --return-aux-hidden-state-layer-ids to the layer ids the draft was trained on"
    )
    assert not caplog.records  # refused before the start-up line
    # the twins: distinct layers, aux states off, a rank that captures nothing (not the last
    # pipeline stage: set_eagle3_layers_to_capture returns early there)
    latest.record_eagle_aux_hidden_state(spec_config(None, "default"), NS(model=NS(layers_to_capture=[2, 4, 5])))
    latest.record_eagle_aux_hidden_state(
        spec_config(None, "default", use=False), NS(model=NS(layers_to_capture=[2, 2, 1]))
    )
    not_last = spec_config([1, 2], TOP)
    latest.record_eagle_aux_hidden_state(not_last, NS(model=NS()))
    assert not_last.eagle_aux_hidden_state_captured_layers is None


def test_latest_a_draft_whose_input_width_differs_fails_at_start_up(latest):
    with pytest.raises(
        ValueError,
        match=r"^EAGLE-3 draft expects 3 aux hidden states \(its fc input width 21504 "
        r"= 3 x 7168\) but the target would capture 2 layers \[1, 2\] from ",
    ):
        latest.check_draft_aux_input_width(draft((4096, 21504)), NS(target_hidden_size=7168), spec_config([1, 2]))
    with pytest.raises(ValueError, match="expects 2 aux hidden states"):
        latest.check_draft_aux_input_width(
            draft((4096, 8192), nested=False), NS(hidden_size=4096), spec_config(None, "default")
        )
    for model, cfg, config in [
        (draft((4096, 14336)), NS(target_hidden_size=7168), spec_config([1, 2])),  # matches
        (draft((4096, 21504)), NS(target_hidden_size=7168), None),
        (draft((4096, 21504)), NS(target_hidden_size=7168), spec_config([1, 2], source=None)),
        (draft((4096, 21504)), NS(target_hidden_size=7168), spec_config([1, 2], use=False)),
        (draft(None), NS(target_hidden_size=7168), spec_config([1, 2])),
        (draft((21504,)), NS(target_hidden_size=7168), spec_config([1, 2])),
        (draft((4096, 21505)), NS(target_hidden_size=7168), spec_config([1, 2])),
        (draft((4096, 21504)), NS(), spec_config([1, 2])),
    ]:
        latest.check_draft_aux_input_width(model, cfg, config)


@pytest.fixture
def hook(patched):
    declared = []
    mod = load_module(
        patched("latest") / SRT / "arg_groups/validation_hook.py",
        name="hook_latest",
        provides={
            "resolving_view": lambda args: args,
            "declare_resolution": lambda args, *a, **kw: declared.append(kw),
        },
    )
    mod.declared = declared
    return mod


def server_args(layer_ids=None, algorithm="EAGLE3", capture=False):
    return NS(
        enable_return_aux_hidden_states=capture,
        return_aux_hidden_state_layer_ids=layer_ids,
        speculative_algorithm=algorithm,
        speculative_draft_model_path=None,
        pp_size=1,
    )


@pytest.mark.parametrize(
    "bad, why",
    [([], "must not be empty"), ([1, -1], "must be non-negative"), ([2, 2], "must not repeat a layer, got \\[2, 2\\]")],
)
def test_latest_the_override_option_is_validated_with_an_eagle3_draft_and_in_capture_mode(hook, bad, why):
    hook._check_aux_hidden_state_layer_ids([2, 30, 58])
    with pytest.raises(ValueError, match=why):
        hook._check_aux_hidden_state_layer_ids(bad)
    with pytest.raises(ValueError, match=why):
        hook.handle_aux_hidden_state_capture(server_args(bad))  # an override for an EAGLE-3 draft
    with pytest.raises(ValueError, match=why):
        hook.handle_aux_hidden_state_capture(server_args(bad, capture=True))  # capture without a draft


def test_latest_the_override_option_needs_an_eagle3_draft_or_capture_mode(hook):
    hook.handle_aux_hidden_state_capture(server_args([2, 30, 58]))
    hook.handle_aux_hidden_state_capture(server_args([2, 30, 58], algorithm="eagle3"))
    hook.handle_aux_hidden_state_capture(server_args(None, algorithm=None))
    assert hook.declared == []  # a draft keeps speculative decoding on
    for algorithm in ("DFLASH", None):
        with pytest.raises(
            ValueError, match="requires --enable-return-aux-hidden-states or --speculative-algorithm EAGLE3"
        ):
            hook.handle_aux_hidden_state_capture(server_args([2, 30, 58], algorithm=algorithm))
    hook.handle_aux_hidden_state_capture(server_args([2, 30, 58], capture=True))
    assert hook.declared == [{"speculative_algorithm": None, "aux_hidden_state_capture": "eagle3"}]


# ---------------------------------------------------------------- 0005: where the layers are reported and checked


def info_of(layers):
    return NS(tp_worker=NS(model_runner=NS(eagle3_aux_layers=layers)))


@pytest.mark.parametrize(
    "scheduler, reported",
    [
        (info_of(NS(info=lambda: {"layer_ids": [1], "source": "s"})), {"layer_ids": [1], "source": "s"}),
        (info_of(None), None),
        (NS(tp_worker=NS(model_runner=NS())), None),
        (NS(tp_worker=NS()), None),
    ],
)
def test_the_scheduler_reports_the_capture_layers_in_server_info(patched, scheduler, reported):
    ns = run_block(
        patched("production") / SRT / "managers/scheduler.py",
        "eagle3_aux_layers = getattr(",
        {"scheduler": scheduler, "result_dict": {"max_total_num_tokens": 1}, "EAGLE3_INFO_KEY": INFO_KEY},
        count=2,
    )
    assert ns["result_dict"].get("eagle3_aux_hidden_state") == reported
    assert ns["result_dict"]["max_total_num_tokens"] == 1


@pytest.fixture
def spec_aux_module(patched, monkeypatch):
    """The latest line's patched spec_aux_hidden_state, importable under its real name."""
    mod = Latest(patched("latest"), monkeypatch).mod
    name = "sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state"
    for parent in (
        "sglang",
        "sglang.srt",
        "sglang.srt.model_executor",
        "sglang.srt.model_executor.model_runner_components",
    ):
        monkeypatch.setitem(sys.modules, parent, types.ModuleType(parent))
    monkeypatch.setitem(sys.modules, name, mod)
    return mod


@pytest.mark.parametrize(
    "runner, reported",
    [
        (
            NS(spec_aux_config=spec_config([1, 2], TOP, captured=[1, 2])),
            {"layer_ids": [1, 2], "source": TOP, "captured_layers": [1, 2], "use_aux_hidden_state": True},
        ),
        (NS(spec_aux_config=spec_config(source=None)), None),  # no EAGLE-3 draft
        (NS(spec_aux_config=None), None),
        (NS(), None),
    ],
)
def test_latest_the_scheduler_reports_the_capture_layers_in_server_info(patched, spec_aux_module, runner, reported):
    ns = run_block(
        patched("latest") / SRT / "managers/scheduler.py",
        "spec_aux_config = getattr(",
        {"self": NS(tp_worker=NS(model_runner=runner)), "result_dict": {}},
        count=2,
    )
    assert ns["result_dict"].get("eagle3_aux_hidden_state") == reported


def test_latest_the_runner_logs_the_capture_layers_of_its_own_model(patched):
    logged = []
    run_block(
        patched("latest") / SRT / "model_executor/model_runner.py",
        "record_eagle_aux_hidden_state(",
        {
            "self": NS(spec_aux_config="config", model="model"),
            "record_eagle_aux_hidden_state": lambda *args: logged.append(args),
        },
    )
    assert logged == [("config", "model")]


@pytest.mark.parametrize(
    "eagle3, target_runner, checked",
    [
        (True, NS(spec_aux_config="target config"), [("draft model", "draft hf config", "target config")]),
        (True, NS(), [("draft model", "draft hf config", None)]),
        (False, NS(spec_aux_config="target config"), []),
    ],
)
def test_latest_the_draft_worker_checks_its_input_width_against_the_target(patched, eagle3, target_runner, checked):
    calls = []
    me = NS(
        speculative_algorithm=NS(is_eagle3=lambda: eagle3),
        draft_runner=NS(model="draft model", model_config=NS(hf_config="draft hf config")),
    )
    run_block(
        patched("latest") / SRT / "speculative/eagle_worker_v2.py",
        "if self.speculative_algorithm.is_eagle3():",
        {
            "self": me,
            "target_worker": NS(model_runner=target_runner),
            "check_draft_aux_input_width": lambda *args: calls.append(args),
        },
        contains="check_draft_aux_input_width",
    )
    assert calls == checked


REPORT = {"layer_ids": [0, 1, 2], "source": TOP, "captured_layers": [1, 2, 3], "use_aux_hidden_state": True}


@pytest.mark.parametrize(
    "infos, expected",
    [
        ([{INFO_KEY: REPORT, "max_total_num_tokens": 1}, {INFO_KEY: "rank 1"}], {INFO_KEY: REPORT}),
        ([{"max_total_num_tokens": 1}], {}),  # no EAGLE-3 draft: nothing to pass on
        ([{INFO_KEY: None}], {}),
        ([], {}),
    ],
)
def test_the_dp_controller_passes_rank_0s_capture_layers_on(patched, monkeypatch, infos, expected):
    assert Production(patched("production"), monkeypatch).mod.dp_controller_info(infos) == expected
    assert Latest(patched("latest"), monkeypatch).mod.eagle_aux_dp_controller_info(infos) == expected


@pytest.mark.parametrize("infos, reported", [([{INFO_KEY: REPORT}, {INFO_KEY: REPORT}], REPORT), ([{}], None)])
def test_with_dp_the_controller_hands_the_capture_layers_to_server_info(patched, monkeypatch, infos, reported):
    """/server_info sees only the DP controller's ready message (0.5.9) or handshake (0.5.23)."""
    path = patched("production") / SRT / "managers/data_parallel_controller.py"
    prod = Production(patched("production"), monkeypatch).mod
    controller = NS()
    run_block(
        path,
        "self.eagle3_ready_info =",
        {"self": controller, "scheduler_info": infos, "dp_controller_info": prod.dp_controller_info},
    )
    controller.max_total_num_tokens, controller.max_req_input_len = 1, 2
    sent = []
    run_block(path, "pipe_writer.send(", {"pipe_writer": NS(send=sent.append), "controller": controller})
    assert sent[0].get(INFO_KEY) == reported and sent[0]["status"] == "ready"
    sent.clear()  # the twin: a controller that launched no tensor-parallel group reports nothing
    run_block(
        path,
        "pipe_writer.send(",
        {"pipe_writer": NS(send=sent.append), "controller": NS(max_total_num_tokens=1, max_req_input_len=2)},
    )
    assert INFO_KEY not in sent[0]


@pytest.mark.parametrize("infos, reported", [([{INFO_KEY: REPORT}, {INFO_KEY: REPORT}], REPORT), ([{}], None)])
def test_latest_with_dp_the_controller_hands_the_capture_layers_to_server_info(
    patched, spec_aux_module, infos, reported
):
    import threading

    cls = load_class(
        patched("latest") / SRT / "managers/data_parallel_controller.py",
        "DataParallelController",
        ["get_init_info"],
        {"merge_l3_layouts": lambda layouts: None},
    )
    controller = cls()
    controller._scheduler_init_info_lock = threading.Lock()
    controller._scheduler_init_infos = infos
    controller.max_total_num_tokens, controller.max_req_input_len, controller.startup_time = 1, 2, 3
    info = controller.get_init_info()
    assert info.get(INFO_KEY) == reported and info["max_req_input_len"] == 2


@pytest.mark.parametrize("eagle3, draft_worker", [(True, False), (False, False), (True, True)])
def test_the_target_runner_resolves_the_capture_layers_from_the_draft_config(patched, eagle3, draft_worker):
    resolved = NS(use_aux_hidden_state=True, layer_ids=[1, 29, 57])
    calls = []

    def resolve(hf_config, target_num_layers=None):
        calls.append((hf_config, target_num_layers))
        return resolved

    me = NS(
        spec_algorithm=NS(is_eagle3=lambda: eagle3),
        is_draft_worker=draft_worker,
        eagle3_aux_layers="unset",
        eagle_use_aux_hidden_state="unset",
        eagle_aux_hidden_state_layer_ids="unset",
    )
    run_block(
        patched("production") / SRT / "model_executor/model_runner.py",
        "self.eagle3_aux_layers = None",
        {
            "self": me,
            "server_args": NS(speculative_draft_model_path="/draft", speculative_draft_model_revision="r"),
            "model_config": NS(hf_text_config=NS(num_hidden_layers=61)),
            "resolve_eagle3_aux_layers": resolve,
            "ModelConfig": NS(from_server_args=lambda args, **kw: NS(hf_config=("draft config", kw["model_path"]))),
        },
        count=2,
    )
    if eagle3 and not draft_worker:
        assert calls == [(("draft config", "/draft"), 61)]
        assert (me.eagle3_aux_layers, me.eagle_use_aux_hidden_state, me.eagle_aux_hidden_state_layer_ids) == (
            resolved,
            True,
            [1, 29, 57],
        )
    else:
        assert calls == [] and me.eagle3_aux_layers is None


def resolve_latest(latest, cfg, override=None, layers=61):
    """The latest runner's EAGLE-3 branch of _resolve_eagle_aux_hidden_state, run as patched."""
    config = NS(
        eagle_use_aux_hidden_state=False,
        eagle_aux_hidden_state_layer_ids="unset",
        eagle_aux_hidden_state_layer_source="unset",
    )
    run_block(
        Path(latest.__file__),
        "if spec_algorithm.is_eagle3():",
        {
            **vars(latest),
            "spec_algorithm": NS(is_eagle3=lambda: True),
            "draft_model_config": NS(hf_config=cfg),
            "config": config,
            "model_config": NS(hf_text_config=NS(num_hidden_layers=layers)),
            "get_exec": lambda: NS(features=NS(return_aux_hidden_state_layer_ids=override)),
        },
        contains="resolve_eagle_aux_layer_ids",
    )
    return (
        config.eagle_aux_hidden_state_layer_ids,
        config.eagle_aux_hidden_state_layer_source,
        config.eagle_use_aux_hidden_state,
    )


def test_latest_the_runner_resolves_checks_and_records_the_capture_layers(latest):
    ids = NS(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}, num_aux_hidden_states=3)
    assert resolve_latest(latest, ids) == ([1, 2, 3], EAGLE, True)
    assert resolve_latest(latest, NS(eagle_aux_hidden_state_layer_ids=[1]), override=[5, 6]) == (
        [5, 6],
        "--return-aux-hidden-state-layer-ids",
        True,
    )
    assert resolve_latest(latest, NS()) == (None, "default", True)
    two = NS(eagle_aux_hidden_state_layer_ids=[4, 8], num_aux_hidden_states=2)
    assert resolve_latest(latest, two) == ([4, 8], TOP, True)  # the count is that of the ids, not the default 3
    off = NS(
        eagle_config={"use_aux_hidden_state": False, "eagle_aux_hidden_state_layer_ids": [1, 2, 3]},
        num_aux_hidden_states=2,
    )
    assert resolve_latest(latest, off) == ([1, 2, 3], EAGLE, False)  # no aux states: no count to match


@pytest.mark.parametrize(
    "cfg, override, layers, message",
    [
        (
            NS(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}, num_aux_hidden_states=2),
            None,
            61,
            f"EAGLE-3 draft expects 2 aux hidden states (declared num_aux_hidden_states) but the target would capture 3 "
            f"layers [1, 2, 3] from {EAGLE}; set --return-aux-hidden-state-layer-ids to the 2 layer ids",
        ),
        (
            NS(num_aux_hidden_states="2", num_hidden_layers=3),
            None,
            61,
            "expects 2 aux hidden states (declared num_aux_hidden_states) but the target would capture 3 layers (the "
            "target's defaults) from default",
        ),
        (
            NS(eagle_aux_hidden_state_layer_ids=[4, 8], num_aux_hidden_states=3),
            None,
            61,
            f"expects 3 aux hidden states (declared num_aux_hidden_states) but the target would capture 2 layers [4, 8] "
            f"from {TOP}",
        ),
        (
            NS(eagle_aux_hidden_state_layer_ids=[2, 70]),
            None,
            61,
            f"ids [70] from {TOP} are out of range for a target with 61 layers",
        ),
        (NS(), [2, 70], 61, "ids [70] from --return-aux-hidden-state-layer-ids are out of range"),
        (NS(), [], 61, "from --return-aux-hidden-state-layer-ids must be a non-empty list"),
    ],
)
def test_latest_the_runner_refuses_layers_the_draft_or_the_target_cannot_take(latest, cfg, override, layers, message):
    with pytest.raises(ValueError) as refused:
        resolve_latest(latest, cfg, override, layers)
    assert message in str(refused.value)

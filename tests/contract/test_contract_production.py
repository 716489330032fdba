"""`check` tells the gaps on the production launch's paths from the rest.

The launch is deploy/compose/compose.yaml's replica command (TP 8, EAGLE-3, CUDA graphs); each
feature path is on when that launch turns it on or the tree's ServerArgs leaves it on. Real
releases pin the split and the defaults; a mini tree with its own ServerArgs pins the exit codes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import REPO_ROOT, run_cli
from mini_tree import PLAIN_WRAPPER, make_tree
from test_contract import KIMI, PIN

from sglpatch.contract import check_tree
from sglpatch.contract.rules.production import LAUNCH_FILE, field_defaults, parse_flags, production_launch
from sglpatch.upstream import source

PRODUCTION = {"core", "eagle3", "cuda-graph"}


def launch_root(tmp_path: Path, command: list[str]) -> Path:
    """A project root whose production launch is ``command`` (the replica's arguments)."""
    path = tmp_path / "launch" / LAUNCH_FILE
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump({"x-replica": {"command": command}}))
    return tmp_path / "launch"


def test_the_launch_flags_are_parsed_as_launch_server_reads_them():
    assert parse_flags(
        [
            "--tp-size",
            "8",
            "--enable-metrics",
            "--speculative-algorithm",
            "EAGLE3",
            "--mem-fraction-static",
            "0.85",
            "--disable-cuda-graph",
        ]
    ) == {
        "tp_size": 8,
        "enable_metrics": True,
        "speculative_algorithm": "EAGLE3",
        "mem_fraction_static": "0.85",
        "disable_cuda_graph": True,
    }


@pytest.mark.parametrize(
    "version, expected",
    [
        ("0.5.9", PRODUCTION),  # piecewise CUDA graphs are opt-in (enable_piecewise_cuda_graph = False)
        # arg_groups/fields/: no piecewise switch as a plain field, so it counts as on
        ("0.5.23", PRODUCTION | {"piecewise-graph"}),
    ],
)
def test_the_production_launch_takes_what_its_flags_and_the_releases_defaults_turn_on(version, expected):
    tree = source.pristine_tree(version, PIN)
    launch = production_launch(REPO_ROOT, tree)
    assert launch.features == expected and launch.tp == 8
    assert launch.summary.startswith("TP 8, EAGLE-3, CUDA graphs")
    defaults = field_defaults(
        tree, ["enable_eplb", "pp_size", "speculative_algorithm", "enable_pdmux", "dllm_algorithm"]
    )
    assert defaults == {
        "enable_eplb": False,
        "pp_size": 1,
        "speculative_algorithm": None,
        "enable_pdmux": False,
        "dllm_algorithm": None,
    }


def test_flags_turn_paths_on_and_off(tmp_path):
    """The negative twin of the production launch: other flags, other paths."""
    tree = source.pristine_tree("0.5.9", PIN)
    root = launch_root(
        tmp_path,
        [
            "--tp-size",
            "2",
            "--enable-eplb",
            "--pp-size",
            "2",
            "--disable-cuda-graph",
            "--lora-paths",
            "a=/a",
            "--enable-piecewise-cuda-graph",
        ],
    )
    launch = production_launch(root, tree)
    assert launch.features == {"core", "eplb", "pipeline", "lora", "piecewise-graph"} and launch.tp == 2
    assert production_launch(tmp_path, tree) is None  # no deploy/compose/compose.yaml


def test_pristine_0_5_9_kimi_gaps_split_by_the_production_launch(tmp_path):
    tree = source.pristine_tree("0.5.9", PIN)
    report = check_tree(tree, launch=production_launch(REPO_ROOT, tree))
    gaps = report.model(KIMI).gaps
    on = {g.item.label for g in gaps if report.in_production(g)}
    assert on == {"get_embed_and_head", "set_eagle3_layers_to_capture"}
    assert {g.item.label for g in gaps} - on == {
        "forward(pp_proxy_tensors)",
        "model",
        "routed_experts_weights_of_layer",
        "get_model_config_for_expert_location",
    }
    assert report.production_gaps == 2 and report.exit_code == 1
    # with EPLB and pipeline parallelism in the launch, their gaps are on its path too
    wider = check_tree(
        tree,
        launch=production_launch(
            launch_root(tmp_path, ["--speculative-algorithm", "EAGLE3", "--enable-eplb", "--pp-size", "2"]), tree
        ),
    )
    assert {g.item.label for g in wider.model(KIMI).gaps if wider.in_production(g)} == on | {
        "routed_experts_weights_of_layer",
        "forward(pp_proxy_tensors)",
        "get_model_config_for_expert_location",
    }
    # without a launch file every gap counts
    assert check_tree(tree).production_gaps == 6


SERVER_ARGS = """
from dataclasses import dataclass


@dataclass
class ServerArgs:
    speculative_algorithm: str | None = None
    disable_cuda_graph: bool = False
    enable_piecewise_cuda_graph: bool = {piecewise}
    enable_eplb: bool = False
    pp_size: int = 1
    attn_cp_size: int = 1
    enable_lora: bool | None = None
    enable_pdmux: bool = False
    dllm_algorithm: str | None = None
"""

# test_contract's PlainVLM with the EAGLE-3 members delegated: only off-path gaps are left
EAGLE3_MEMBERS = """

    def get_embed_and_head(self):
        return self.language_model.get_embed_and_head()

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.language_model.set_eagle3_layers_to_capture(layer_ids)

    def set_embed_and_head(self, embed, head):
        self.language_model.set_embed_and_head(embed, head)
"""
EAGLE3_WRAPPER = PLAIN_WRAPPER.replace("PlainVLM", "EagleVLM").replace(
    "\n\n\nEntryClass", EAGLE3_MEMBERS + "\n\nEntryClass"
)


def _eagle_tree(tmp_path: Path, piecewise: bool) -> Path:
    return make_tree(
        tmp_path / str(piecewise),
        {"models/eagle_wrapper.py": EAGLE3_WRAPPER, "server_args.py": SERVER_ARGS.format(piecewise=piecewise)},
    )


def test_gaps_only_off_the_production_path_exit_3_and_say_so(tmp_path):
    tree = _eagle_tree(tmp_path, piecewise=False)
    result = run_cli(REPO_ROOT, "check", "--tree", str(tree), "--model", "EagleVLM", "--json")
    data = json.loads(result.stdout)
    assert (result.returncode, data["exit"]) == (3, 3), result.stderr
    assert (data["gaps"], data["production_gaps"], data["other_gaps"]) == (2, 0, 2)
    members = {m["member"]: m.get("production") for m in data["models"][0]["members"]}
    assert members["model"] is False and members["routed_experts_weights_of_layer"] is False
    assert data["production"] == {"source": str(LAUNCH_FILE), "features": sorted(PRODUCTION), "tp": 8}
    text = run_cli(REPO_ROOT, "check", "--tree", str(tree), "--model", "EagleVLM")
    assert text.returncode == 3
    assert "production launch: TP 8, EAGLE-3, CUDA graphs (deploy/compose/compose.yaml)" in text.stdout
    assert "2 gaps in 1 of 1 model (0 on the production launch's paths, 2 elsewhere)" in text.stdout


def test_a_path_the_release_turns_on_by_default_puts_its_gap_on_the_production_path(tmp_path):
    """The negative twin: the same wrapper where piecewise CUDA graphs default to on."""
    tree = _eagle_tree(tmp_path, piecewise=True)
    result = run_cli(REPO_ROOT, "check", "--tree", str(tree), "--model", "EagleVLM", "--json")
    data = json.loads(result.stdout)
    assert result.returncode == 1 and (data["production_gaps"], data["other_gaps"]) == (1, 1)
    rows = [
        line.split()
        for line in run_cli(REPO_ROOT, "check", "--tree", str(tree), "--model", "EagleVLM").stdout.splitlines()
    ]
    table = [r[:2] for r in rows if r and r[0] in ("model", "routed_experts_weights_of_layer")]
    assert table == [["model", "yes"], ["routed_experts_weights_of_layer", "no"]]  # production first


def test_a_default_spanning_lines_is_read_and_a_computed_one_is_not(tmp_path):
    tree = make_tree(
        tmp_path,
        {
            "server_args.py": """
from dataclasses import dataclass, field


@dataclass
class ServerArgs:
    pp_size: int = (
        2
    )
    enable_eplb: bool = field(default=True)
    dllm_algorithm: str | None
    enable_lora: bool = not_a_literal()
"""
        },
    )
    assert field_defaults(tree, ["pp_size", "enable_eplb", "dllm_algorithm", "enable_lora", "absent"]) == {"pp_size": 2}
    # the launch therefore takes pipeline parallelism (default 2) and EPLB (no plain default: on)
    launch = production_launch(launch_root(tmp_path, ["--speculative-algorithm", "EAGLE3"]), tree)
    assert {"pipeline", "eplb", "lora", "dllm"} <= launch.features

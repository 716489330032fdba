"""``python build.py check`` (``sglpatch.cli.check``): the contract checker's command, its table
and JSON, its choice of models and its errors, on the mini SGLang tree."""

from __future__ import annotations

import json

from helpers import REPO_ROOT, run_cli
from mini_tree import mini  # noqa: F401  (a fixture)

from sglpatch.cli.main import main as cli_main


def test_cli_table_json_model_selection_and_errors(mini, tmp_path, capsys):
    assert cli_main(["check", "--tree", str(mini), "--model", "PlainVLM"]) == 1
    out = capsys.readouterr().out
    assert "4 gaps: required by the runtime" in out and "set_eagle3_layers_to_capture" in out
    assert cli_main(["check", "--tree", str(mini), "--model", "LlamaForCausalLM", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gaps"] == 0 and data["models"][0]["wrapper"] is False
    assert data["checks"]["sm12-torch-symm-mem"]["passed"] is False
    # every named check the report does not cover is shown, the aux-layer check too
    assert list(data["checks"]) == ["sm120-allreduce-fusion-gate", "sm12-torch-symm-mem", "eagle3-aux-layer-resolution"]
    assert cli_main(["check", "--tree", str(mini), "--all-models", "--json"]) == 1
    assert [m["name"] for m in json.loads(capsys.readouterr().out)["models"]] == ["PlainVLM"]
    result = run_cli(REPO_ROOT, "check", "--tree", str(mini), "--model", "NoSuchModel")
    assert result.returncode == 2 and result.stderr.startswith("error: no model class 'NoSuchModel'")
    result = run_cli(REPO_ROOT, "check", "--tree", str(tmp_path / "missing"))
    assert result.returncode == 2 and "no such directory" in result.stderr
    result = run_cli(tmp_path, "check")  # default: the patched work tree under --root
    assert result.returncode == 2 and "no patched work tree" in result.stderr

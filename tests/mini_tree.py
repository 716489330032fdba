"""The mini SGLang tree (tests/fixtures/contract/mini): a few files shaped like upstream's
runtime, copied and edited per test, for the contract checker, its `check` command and the build gate."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "contract" / "mini"
SRT = "python/sglang/srt"


def make_tree(
    tmp_path: Path, files: dict[str, str] | None = None, edits: dict[str, list[tuple[str, str]]] | None = None
) -> Path:
    """A copy of the mini tree, plus ``files`` (path under srt/ -> text) and ``edits``."""
    root = tmp_path / "tree"
    shutil.copytree(FIXTURE, root)
    for rel, text in (files or {}).items():
        path = root / SRT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for rel, pairs in (edits or {}).items():
        path = root / SRT / rel
        text = path.read_text()
        for old, new in pairs:
            assert old in text, f"{old!r} not in {rel}"
            text = text.replace(old, new)
        path.write_text(text)
    return root


# A wrapper model around LlamaForCausalLM (models/plain_wrapper.py), the one most tests add to the tree.
PLAIN_WRAPPER = """
from torch import nn
from sglang.srt.models.llama import LlamaForCausalLM


class PlainVLM(nn.Module):
    def __init__(self, config, quant_config=None):
        super().__init__()
        self.language_model = LlamaForCausalLM(config.text_config, quant_config)

    def forward(self, input_ids, positions, forward_batch):
        return self.language_model(input_ids, positions, forward_batch)

    def load_weights(self, weights):
        self.language_model.load_weights(weights)


EntryClass = [PlainVLM]
"""


@pytest.fixture
def mini(tmp_path):
    return make_tree(tmp_path, {"models/plain_wrapper.py": PLAIN_WRAPPER})

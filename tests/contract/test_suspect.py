"""Suspect merges (sglpatch/contract/suspect/merge.py) on real SGLang releases from PyPI.

Each case is a small patch written against 0.5.10 and merged onto 0.5.11, where upstream removed
or changed what the patch's added lines use: ModelRunner.init_double_sparsity_channel_config
(method removed), Scheduler.last_prefill_tokens (attribute dropped; set by a mixin in 0.5.10),
speculative.spec_utils.create_accept_length_filter (module function removed),
verify_tree_greedy_func(retrive_*) (parameters renamed to retrieve_*), and
apply_custom_logit_processor (a new call site in speculative/dflash_info.py). Every case has its
negative twin: the same added lines merged onto 0.5.10 itself, where every name still exists (and
for coverage also a patch that does not change every call), so a check that always fires fails.

A merged tree is an overlay: symlinks to the cached pristine release, real files for the edited
ones (the cache is never written).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers import REPO_ROOT

from sglpatch.contract.suspect.merge import Suspect, added_lines, find_suspects
from sglpatch.upstream import source
from sglpatch.upstream.pin import read_pin

PIN = read_pin(REPO_ROOT)
OLD, NEW = "0.5.10", "0.5.11"
SRT = "python/sglang/srt"
MODEL_RUNNER = f"{SRT}/model_executor/model_runner.py"
SCHEDULER = f"{SRT}/managers/scheduler.py"
EAGLE_INFO = f"{SRT}/speculative/eagle_info.py"
NGRAM_INFO = f"{SRT}/speculative/ngram_info.py"
SAMPLER = f"{SRT}/layers/sampler.py"


@pytest.fixture(scope="module")
def trees():
    return {v: source.pristine_tree(v, PIN) for v in (OLD, NEW)}


def merge(tmp_path: Path, base: Path, edits: dict) -> Path:
    """``base`` with ``edits`` (path -> text -> text) applied, as a symlink overlay in tmp_path."""
    dst = tmp_path / f"merged-{base.name}"
    shutil.copytree(base, dst, copy_function=os.symlink, ignore=shutil.ignore_patterns(".sglpatch-commit"))
    for rel, edit in edits.items():
        path = dst / rel
        text = Path(os.readlink(path)).read_text()
        path.unlink()
        path.write_text(edit(text))
    return dst


def after(anchor: str, text_to_add: str):
    def edit(text: str) -> str:
        assert text.count(anchor) == 1, f"anchor {anchor!r} not unique"
        return text.replace(anchor, anchor + text_to_add)

    return edit


def suspects_on(tmp_path, trees, onto: str, edits: dict) -> list[Suspect]:
    merged = merge(tmp_path, trees[onto], edits)
    return find_suspects(trees[OLD], trees[onto], merged, sorted(edits))


def line_of(tmp_path, onto, rel, needle) -> int:
    text = (tmp_path / f"merged-{onto}" / rel).read_text().splitlines()
    return next(i for i, line in enumerate(text, 1) if needle in line)


# ---------------------------------------------------------------- self.X: removed method, dropped attribute

REMOVED_METHOD = {
    MODEL_RUNNER: after(
        "    def init_attention_backend(self):\n",
        "        self.init_double_sparsity_channel_config(self.server_args.ds_heavy_channel_type)\n",
    )
}


@pytest.mark.parametrize("onto", [NEW, OLD])
def test_a_call_of_a_method_upstream_removed_is_suspect(tmp_path, trees, onto):
    found = suspects_on(tmp_path, trees, onto, REMOVED_METHOD)
    if onto == OLD:  # negative twin: the method exists there
        assert found == []
        return
    line = line_of(tmp_path, onto, MODEL_RUNNER, "self.init_double_sparsity_channel_config(")
    assert [(s.path, s.line, s.name) for s in found] == [(MODEL_RUNNER, line, "init_double_sparsity_channel_config")]
    assert found[0].why.startswith("ModelRunner has no method 'init_double_sparsity_channel_config' in 0.5.11")
    assert "removed upstream; 0.5.10 has it" in found[0].why


DROPPED_ATTRIBUTE = {
    SCHEDULER: after(
        "    def get_internal_state(self, recv_req: GetInternalStateReq):\n",
        "        prefill_tokens = self.last_prefill_tokens or self.server_args.chunked_prefill_size\n",
    )
}


@pytest.mark.parametrize("onto", [NEW, OLD])
def test_a_read_of_an_attribute_upstream_dropped_is_suspect(tmp_path, trees, onto):
    found = suspects_on(tmp_path, trees, onto, DROPPED_ATTRIBUTE)
    if onto == OLD:
        assert found == []
        return
    line = line_of(tmp_path, onto, SCHEDULER, "prefill_tokens = self.last_prefill_tokens")
    assert [(s.line, s.name) for s in found] == [(line, "last_prefill_tokens")]
    assert found[0].why.startswith("Scheduler has no attribute 'last_prefill_tokens' in 0.5.11")
    assert (
        "removed upstream; 0.5.10 has it at python/sglang/srt/observability/scheduler_metrics_mixin.py:" in found[0].why
    )


def test_guarded_and_inherited_names_are_not_suspect(tmp_path, trees):
    """hasattr guards, names a mixin provides through the MRO, and names set with self.X = ... in the
    same patch resolve; a mixin's use of what its concrete class sets is fine too."""
    edits = {
        MODEL_RUNNER: after(
            "    def init_attention_backend(self):\n",
            "        if hasattr(self, 'sorted_channels'):\n"
            "            print(self.sorted_channels)\n"
            "        self.patch_flag = True\n"
            "        print(self.patch_flag, self.init_memory_pool, self.model_config, self.__class__)\n",
        )
    }
    assert suspects_on(tmp_path, trees, NEW, edits) == []


def test_only_a_method_s_first_positional_parameter_is_its_instance(tmp_path, trees):
    """A staticmethod's first parameter and a ``*args`` tuple are not ``self``: their attributes
    are not looked up on the class; the twin, a plain method's ``self``, is."""
    anchor = "    def init_attention_backend(self):\n"
    edits = {
        MODEL_RUNNER: lambda text: text.replace(
            anchor,
            (
                "    @staticmethod\n"
                "    def _patch_static(runner):\n"
                "        return runner.no_such_runner_attr\n\n"
                "    def _patch_varargs(*args):\n"
                "        return args.no_such_tuple_attr\n\n"
                "    def _patch_method(self):\n"
                "        return self.no_such_runner_attr\n\n"
            )
            + anchor,
            1,
        )
    }
    found = suspects_on(tmp_path, trees, NEW, edits)
    line = line_of(tmp_path, NEW, MODEL_RUNNER, "return self.no_such_runner_attr")
    assert [(s.line, s.name) for s in found] == [(line, "no_such_runner_attr")]


# ---------------------------------------------------------------- imported names and module attributes

REMOVED_FUNCTION = {
    EAGLE_INFO: lambda text: (
        text
        + (
            "\n\nfrom sglang.srt.speculative.spec_utils import create_accept_length_filter as _calf\n"
            "from sglang.srt.speculative import spec_utils as _spec_utils\n\n\n"
            "def _patched_filter(*args):\n"
            "    return _spec_utils.create_accept_length_filter(*args), _calf\n"
        )
    )
}


@pytest.mark.parametrize("onto", [NEW, OLD])
def test_an_imported_name_and_a_module_attribute_upstream_removed_are_suspect(tmp_path, trees, onto):
    found = suspects_on(tmp_path, trees, onto, REMOVED_FUNCTION)
    if onto == OLD:
        assert found == []
        return
    imp = line_of(tmp_path, onto, EAGLE_INFO, "import create_accept_length_filter as _calf")
    use = line_of(tmp_path, onto, EAGLE_INFO, "return _spec_utils.create_accept_length_filter")
    assert [(s.line, s.name) for s in found] == [
        (imp, "create_accept_length_filter"),
        (use, "sglang.srt.speculative.spec_utils.create_accept_length_filter"),
    ]
    assert all("removed upstream; 0.5.10 has it" in s.why for s in found)


# ---------------------------------------------------------------- keyword arguments

RENAMED_KEYWORDS = {
    EAGLE_INFO: lambda text: (
        text
        + (
            "\n\ndef _patched_verify(p, a, n, c, r, t, s, tp):\n"
            "    return verify_tree_greedy_func(\n"
            "        predicts=p, accept_index=a, accept_token_num=n, candidates=c,\n"
            "        retrive_index=r, retrive_next_token=t, retrive_next_sibling=s,\n"
            "        target_predict=tp, topk=1,\n"
            "    )\n"
        )
    )
}


@pytest.mark.parametrize("onto", [NEW, OLD])
def test_a_keyword_the_callee_no_longer_accepts_is_suspect(tmp_path, trees, onto):
    found = suspects_on(tmp_path, trees, onto, RENAMED_KEYWORDS)
    if onto == OLD:
        assert found == []
        return
    line = line_of(tmp_path, onto, EAGLE_INFO, "retrive_index=r,")
    assert [(s.line, s.name) for s in found] == [
        (line, "retrive_index"),
        (line, "retrive_next_sibling"),
        (line, "retrive_next_token"),
    ]
    assert found[0].why == (
        "verify_tree_greedy_func() has no parameter 'retrive_index' (and no **kwargs) "
        "in 0.5.11 (removed upstream; 0.5.10 accepts it)"
    )


# ---------------------------------------------------------------- call coverage


def strict_everywhere(*, skip_ngram: bool = False) -> dict:
    """A patch adding strict= to apply_custom_logit_processor and to its calls in 0.5.10."""
    kw = "                strict=True,\n"
    edits = {
        SAMPLER: lambda text: _once(
            _once(
                text,
                "    num_tokens_in_batch: int = 1,\n):",
                "    num_tokens_in_batch: int = 1,\n    strict: bool = False,\n):",
            ),
            "apply_custom_logit_processor(logits, sampling_info)",
            "apply_custom_logit_processor(logits, sampling_info, strict=True)",
        ),
        EAGLE_INFO: after("                num_tokens_in_batch=self.draft_token_num,\n", kw),
        NGRAM_INFO: after("                num_tokens_in_batch=self.draft_token_num,\n", kw),
    }
    if skip_ngram:
        del edits[NGRAM_INFO]
    return edits


def _once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


@pytest.mark.parametrize("onto", [NEW, OLD])
def test_a_call_upstream_added_to_a_function_the_patch_changes_everywhere_is_suspect(tmp_path, trees, onto):
    found = suspects_on(tmp_path, trees, onto, strict_everywhere())
    if onto == OLD:  # no new call site there
        assert found == []
        return
    dflash = f"{SRT}/speculative/dflash_info.py"
    line = line_of(tmp_path, onto, dflash, "apply_custom_logit_processor(")
    assert [(s.path, s.line, s.name) for s in found] == [(dflash, line, "apply_custom_logit_processor")]
    assert "without strict=" in found[0].why and "all 3 call(s)" in found[0].why


def test_a_patch_that_leaves_some_old_calls_alone_has_no_coverage_finding(tmp_path, trees):
    assert suspects_on(tmp_path, trees, NEW, strict_everywhere(skip_ngram=True)) == []


# ---------------------------------------------------------------- added lines


def test_added_lines_are_the_merged_lines_the_new_release_lacks(tmp_path):
    new, merged = tmp_path / "new.py", tmp_path / "merged.py"
    new.write_text("a\nb\nc\n")
    merged.write_text("a\nx\nb\nc2\n")
    assert added_lines(new, merged) == [2, 4]
    assert added_lines(tmp_path / "absent.py", merged) == [1, 2, 3, 4]

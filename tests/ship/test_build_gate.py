"""The build gate checks the whole target interface.

Mutation testing by hand found three wrong series that `python build.py` let through. Each is
built here for real (our series with one patch regenerated from an edited file, applied to the
real 0.5.9 release) and must be refused with one error line naming what is wrong; a twin shows
the right series or an equivalent spelling passes the same gate:

1. the KimiK25 wrapper lost a member of the EAGLE-3 interface (``set_embed_and_head``, which the
   EAGLE workers call on the draft model: KimiK25 is loaded as the draft when a draft checkpoint
   names it). The interface is derived from the release's own source, with a reason per member;
2. a ``__getattr__`` wrapper forwarding to an inner object that lacks the member (the decoder stack
   ``self.language_model.model``) counted as forwarded;
3. the torch symmetric-memory fix neutralised (``if False and ...``): the check matched
   subscripts, not what the code does on a capability the tables lack.
"""

from __future__ import annotations

import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path

import git
import pytest
from helpers import AUTHOR_ENV, REPO_ROOT, assert_one_line_error, make_project, run_cli
from mini_tree import SRT, make_tree

from sglpatch.contract import checks
from sglpatch.contract.core import Analysis
from sglpatch.contract.index.forwards import forward_problems
from sglpatch.contract.parse.tree import SourceTree
from sglpatch.contract.rules.eagle3 import draft_rewrites, interface
from sglpatch.contract.rules.symm_mem import check_symm_mem
from sglpatch.contract.rules.verdicts import check_model
from sglpatch.errors import UserError
from sglpatch.queue import prepare
from sglpatch.queue.series import read_series, read_series_names
from sglpatch.ship import build
from sglpatch.upstream import source
from sglpatch.upstream.pin import read_pin

PIN = read_pin(REPO_ROOT)
KIMI = "KimiK25ForConditionalGeneration"
KIMI_PY = f"{SRT}/models/kimi_k25.py"
SYMM_PY = f"{SRT}/distributed/device_communicators/torch_symm_mem.py"
INTERFACE = "kimi-k25-eagle3-interface"
SYMM = "sm12-torch-symm-mem"
PATCH_KIMI = "0001-KimiK25-delegate-the-EAGLE-3-target-interface-to-lan.patch"
PATCH_SYMM = "0004-torch-symm-mem-disable-instead-of-KeyError-on-unsupp.patch"

# ---------------------------------------------------------------- the edits (on the patched files)

SET_EMBED_AND_HEAD = """    def set_embed_and_head(self, embed: torch.Tensor, head: torch.Tensor) -> None:
        self._get_language_model_attr("set_embed_and_head")(embed, head)

"""
DELEGATIONS = re.compile(r"    def _get_language_model_attr\(self, name: str\) -> Any:\n.*?(?=    def forward\()", re.S)
MODEL_ALIAS = '        self.model = self._get_language_model_attr("model")\n'


# A classmethod EPLB looks up on the class (``hasattr(model_class, ...)``): no ``__getattr__`` on
# instances can forward it, so a forwarding wrapper keeps it.
EPLB_CLASSMETHOD = """    @classmethod
    def get_model_config_for_expert_location(cls, config: KimiK25Config):
        return DeepseekV3ForCausalLM.get_model_config_for_expert_location(
            config.text_config
        )

"""


def forwarding(target: str):
    """KimiK25 with its delegations replaced by one ``__getattr__`` forwarding to ``target`` (and the
    class-level EPLB classmethod, which no ``__getattr__`` reaches)."""
    body = (
        "    def __getattr__(self, name: str) -> Any:\n        try:\n"
        "            return super().__getattr__(name)\n        except AttributeError:\n"
        f"            return getattr({target}, name)\n\n" + EPLB_CLASSMETHOD
    )
    return lambda text: DELEGATIONS.sub(lambda _: body, text.replace(MODEL_ALIAS, ""), count=1)


def drop(snippet: str):
    def edit(text: str) -> str:
        assert snippet in text
        return text.replace(snippet, "", 1)

    return edit


def replace(old: str, new: str):
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)

    return edit


SYMM_GUARD = "        if supported_max_sizes is None:\n"
NEUTRALISED = replace(SYMM_GUARD, "        if False and supported_max_sizes is None:\n")

# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture(scope="module")
def pristine() -> Path:
    source.prepare(PIN, REPO_ROOT)
    return source.pristine_tree(PIN.version, PIN)


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    """Our series applied to the real release by the build's own prepare step: (tree, series, pin)."""
    root = project(tmp_path_factory.mktemp("gate") / "project")
    tree = prepare.prepare_tree(root, gate=True)[3].path
    return tree, read_series(root), read_pin(root)


def project(root: Path, patches: dict[str, str] | None = None) -> Path:
    """A project with our series and pin (required checks included), some patches replaced."""
    ours = {n: (REPO_ROOT / "patches" / n).read_text() for n in read_series_names(REPO_ROOT)}
    make_project(root, {**ours, **(patches or {})}, list(ours))
    (root / "upstream.toml").write_text((REPO_ROOT / "upstream.toml").read_text())
    return root


def regenerated(pristine: Path, work: Path, name: str, path: str, edit) -> str:
    """Our patch ``name`` again (same message and trailers), with ``edit`` applied to the file
    ``path`` it produces: `git am` on the pristine files, edit, amend, `git format-patch`."""
    text = (REPO_ROOT / "patches" / name).read_text()
    repo = git.Repo.init(work)
    for rel in re.findall(r"^diff --git a/(\S+) b/", text, re.M):
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pristine / rel, work / rel)
        repo.index.add([rel])
    (work / "series.patch").write_text(text)
    with repo.git.custom_environment(**AUTHOR_ENV):
        repo.git.commit("-qm", "pristine")
        repo.git.am("-q", str(work / "series.patch"))
        target = work / path
        target.write_text(edit(target.read_text()))
        repo.git.commit("-qa", "--amend", "--no-edit")
    return repo.git.format_patch(
        "--stdout", "--zero-commit", "--no-signature", "--full-index", "-1", "HEAD", strip_newline_in_stdout=False
    )


@contextmanager
def edited(tree: Path, path: str, edit):
    """``path`` in ``tree`` changed by ``edit`` for the duration of the block."""
    file = tree / path
    original = file.read_text()
    file.write_text(edit(original))
    try:
        yield
    finally:
        file.write_text(original)
        os.utime(file)


def gate_error(patched, path: str, edit) -> str:
    """The one line the build gate refuses the patched tree with, once ``edit`` is made."""
    tree, series, pin = patched
    with edited(tree, path, edit), pytest.raises(UserError) as refused:
        build.check_tree(tree, series, pin)
    line = str(refused.value)
    assert "\n" not in line
    return line


# ---------------------------------------------------------------- the right series passes


def test_our_series_passes_the_gate(patched):
    """The negative twin of every mutant below: the series as it is passes the same gate."""
    tree, series, pin = patched
    build.check_tree(tree, series, pin)


# ---------------------------------------------------------------- 1. the EAGLE-3 interface


def test_a_kimi_wrapper_without_set_embed_and_head_is_refused(pristine, tmp_path):
    patch = regenerated(pristine, tmp_path / "patch", PATCH_KIMI, KIMI_PY, drop(SET_EMBED_AND_HEAD))
    result = run_cli(project(tmp_path / "project", {PATCH_KIMI: patch}))
    line = assert_one_line_error(
        result,
        f"check {INTERFACE} failed",
        f"{KIMI} lacks set_embed_and_head",
        "which DeepseekV3ForCausalLM has",
        "called on the draft model by",
        "is the draft when a draft checkpoint names its architecture",
    )
    assert not (tmp_path / "project" / "dist").exists(), line


@pytest.mark.parametrize(
    "member, edit",
    [
        (
            "get_embed_and_head",
            drop("""    def get_embed_and_head(self) -> Tuple[torch.Tensor, torch.Tensor]:
        return self._get_language_model_attr("get_embed_and_head")()

"""),
        ),
        (
            "set_eagle3_layers_to_capture",
            drop("""    def set_eagle3_layers_to_capture(
        self, layer_ids: Optional[List[int]] = None
    ) -> None:
        self._get_language_model_attr("set_eagle3_layers_to_capture")(layer_ids)

"""),
        ),
        ("set_embed_and_head", drop(SET_EMBED_AND_HEAD)),
        ("model", drop(MODEL_ALIAS)),
    ],
)
def test_every_eagle3_member_the_series_delegates_is_required(patched, member, edit):
    line = gate_error(patched, KIMI_PY, edit)
    assert f"check {INTERFACE} failed on the patched tree:" in line
    assert f"{KIMI} lacks {member}, which DeepseekV3ForCausalLM has: " in line


def test_a_kimi_wrapper_without_the_eplb_classmethod_is_refused(patched):
    """Off the EAGLE-3 path, guarded by a ``hasattr`` in EPLB, yet required: the probe's None reaches
    ``ExpertDistributionRecorder.init_new``'s assert. The twin is the series as it is (above)."""
    line = gate_error(patched, KIMI_PY, drop(EPLB_CLASSMETHOD))
    assert f"{KIMI} lacks get_model_config_for_expert_location, which DeepseekV3ForCausalLM has" in line


def test_the_eagle3_interface_is_derived_from_the_release_with_a_reason_each(pristine, patched):
    """Read off 0.5.9's own source: the members, the side they are used on, and why."""
    an = Analysis(pristine)
    reqs = {r.label: r for r in an.eagle3_requirements(KIMI)}
    assert {(r.label, r.role) for r in reqs.values()} == {
        ("get_embed_and_head", "target"),
        ("set_eagle3_layers_to_capture", "target"),
        ("set_embed_and_head", "draft"),
        ("set_embed", "draft"),
        ("hot_token_id", "draft"),
    }
    assert reqs["get_embed_and_head"].reason.startswith(
        "called on the target model by EAGLEWorker.__init__ (srt/speculative/eagle_worker.py:157), "
        "unguarded: missing, it raises AttributeError (+3 more sites)"
    )
    capture = reqs["set_eagle3_layers_to_capture"].reason
    assert "CudaGraphRunner.__init__ (srt/model_executor/cuda_graph_runner.py:365)" in capture
    assert "inside `if model_runner.spec_algorithm.is_eagle3()" in capture  # the configuration
    assert "configs/model_config.py does not rewrite it for drafts" in reqs["set_embed_and_head"].reason
    assert "not (hasattr(self.draft_model_runner.model, 'load_lm_head_from_targ" in reqs["set_embed"].reason
    # the set_embed_and_head it needs is the one its inner model has; set_embed/hot_token_id no one has
    kimi = check_model(an.classes, an.resolve_model(KIMI), an.contract)
    statuses = {s.requirement.label: s.verdict for s in interface(kimi, list(reqs.values()))}
    assert statuses == {
        "get_embed_and_head": "gap",
        "set_eagle3_layers_to_capture": "gap",
        "set_embed_and_head": "draft-role",
        "set_embed": "absent",
        "hot_token_id": "absent",
    }
    # the series adds the capture-layer helper (patch 0005): its guarded reads join the interface
    tree = patched[0]
    patched_reqs = {r.label: r for r in Analysis(tree).eagle3_requirements(KIMI)}
    assert set(patched_reqs) - set(reqs) == {"model", "language_model"}
    assert re.search(
        r"guarded \(getattr-default\): missing, that path is silently off; and read unguarded by "
        r"resolve_language_model \(srt/model_executor/model_runner\.py:\d+\)",
        patched_reqs["model"].reason,
    )


def test_a_class_the_tree_rewrites_for_drafts_needs_no_draft_side(pristine, tmp_path):
    rewrites = draft_rewrites(SourceTree(pristine))
    assert {"DeepseekV3ForCausalLM", "MiMoForCausalLM"} <= rewrites and KIMI not in rewrites
    an = Analysis(pristine)
    assert [r.label for r in an.eagle3_requirements("DeepseekV3ForCausalLM") if r.role == "draft"] == []
    assert [r.label for r in an.eagle3_requirements(KIMI) if r.role == "draft"] != []


# ---------------------------------------------------------------- 1b. forwards that reach the wrong member

HELPER = "    def _get_language_model_attr(self, name: str) -> Any:"


@pytest.mark.parametrize(
    "edit, expected",
    [
        (
            replace(
                'self._get_language_model_attr("set_embed_and_head")(embed, head)',
                'self._get_language_model_attr("start_layer")(embed, head)',
            ),
            f"{KIMI}.set_embed_and_head forwards to start_layer of its inner model (which {KIMI} provides as a "
            "member of its own), not to set_embed_and_head",
        ),
        (
            replace(
                'self.model = self._get_language_model_attr("model")',
                'self.model = self._get_language_model_attr("end_layer")',
            ),
            f"{KIMI}.model forwards to end_layer of its inner model",
        ),
        (
            replace(
                'self._get_language_model_attr("set_embed_and_head")(embed, head)',
                'self._get_language_model_attr("set_embed_and_head")(head, embed)',
            ),
            f"{KIMI}.set_embed_and_head forwards to set_embed_and_head of its inner model with its parameters in "
            "another order (head, embed; it takes embed, head)",
        ),
        (
            replace(
                'self._get_language_model_attr("set_eagle3_layers_to_capture")(layer_ids)',
                'self._get_language_model_attr("set_eagle3_layers_to_capture")(None)',
            ),
            f"{KIMI}.set_eagle3_layers_to_capture forwards to set_eagle3_layers_to_capture of its inner model "
            "without its parameter layer_ids",
        ),
        (
            replace(HELPER, "    def _renamed_helper(self, name: str) -> Any:"),
            f"calls self._get_language_model_attr, which {KIMI} lacks",
        ),
    ],
)
def test_a_forward_that_reaches_another_member_or_drops_an_argument_is_refused(patched, edit, expected):
    line = gate_error(patched, KIMI_PY, edit)
    assert f"check {INTERFACE} failed on the patched tree:" in line and expected in line, line


@pytest.mark.parametrize(
    "edit",
    [
        # the same forwards, spelled otherwise
        replace(
            'self._get_language_model_attr("set_embed_and_head")(embed, head)',
            "self.language_model.set_embed_and_head(embed, head=head)",
        ),
        replace(
            '        return self._get_language_model_attr("start_layer")',
            '        return getattr(self.language_model, "start_layer")',
        ),
        # a member that forwards to a name the wrapper does not have (tied embeddings) is its choice
        replace(
            "    def get_embed_and_head(self)",
            "    @property\n    def lm_head(self):\n"
            "        return self.language_model.model.embed_tokens\n\n    def get_embed_and_head(self)",
        ),
    ],
)
def test_faithful_forwards_in_any_spelling_pass(patched, edit):
    tree, series, pin = patched
    with edited(tree, KIMI_PY, edit):
        build.check_tree(tree, series, pin)


def test_no_release_wrapper_has_an_unfaithful_forward(pristine):
    """Precision on the release itself: none of 0.5.9's 32 loadable wrapper models is reported
    (replayed over every release from 0.5.9 to 0.5.23 while it was written: 782 wrappers, none
    reported)."""
    an = Analysis(pristine)
    wrappers = an.wrappers(prefilter=False)
    assert len(wrappers) >= 30
    assert [p for r in wrappers for p in forward_problems(an.tree, an.classes, r)] == []


# ---------------------------------------------------------------- 2. __getattr__ forwarding


def test_a_getattr_wrapper_forwarding_to_an_object_without_the_member_is_refused(pristine, tmp_path):
    patch = regenerated(pristine, tmp_path / "patch", PATCH_KIMI, KIMI_PY, forwarding("self.language_model.model"))
    result = run_cli(project(tmp_path / "project", {PATCH_KIMI: patch}))
    assert_one_line_error(
        result,
        f"check {INTERFACE} failed",
        f"{KIMI} lacks get_embed_and_head (__getattr__ forwards to "
        "self.language_model.model (DeepseekV2Model lacks it))",
    )


def test_a_getattr_wrapper_forwarding_to_the_language_model_passes(patched):
    tree, series, pin = patched
    with edited(tree, KIMI_PY, forwarding("self.language_model")):
        build.check_tree(tree, series, pin)
        an = Analysis(tree, cache=False)
        kimi = check_model(an.classes, an.resolve_model(KIMI), an.contract)
    st = {s.item.label: s for s in kimi.statuses}
    assert st["set_eagle3_layers_to_capture"].lookup.status == "forwarded"
    assert (
        st["set_eagle3_layers_to_capture"].lookup.note
        == "forwarded by __getattr__ to self.language_model (DeepseekV3ForCausalLM: method)"
    )


FORWARDING_VLM = """
from sglang.srt.models.llama import LlamaForCausalLM


class ForwardingVLM:
    def __init__(self, config, inner=None):
        self.inner = LlamaForCausalLM(config)
        self.given = inner

    def __getattr__(self, name):
{body}


EntryClass = [ForwardingVLM]
"""


@pytest.mark.parametrize(
    "body, member, status, note",
    [
        pytest.param(
            "        return getattr(self.inner, name)",
            "get_embed_and_head",
            "forwarded",
            "forwarded by __getattr__ to self.inner (LlamaForCausalLM: method)",
            id="inner-has-it",
        ),
        pytest.param(
            "        return getattr(self.inner.model, name)",
            "get_embed_and_head",
            "missing",
            "__getattr__ forwards to self.inner.model (LlamaModel lacks it)",
            id="decoder-lacks-it",
        ),
        pytest.param(
            "        return getattr(self.inner.model, name)",
            "layers",
            "forwarded",
            "forwarded by __getattr__ to self.inner.model (LlamaModel: self-attr (__init__))",
            id="decoder-has-it",
        ),
        pytest.param(
            "        return getattr(self.given, name)",
            "get_embed_and_head",
            "unknown",
            "__getattr__ forwards to self.given, whose class is not known statically",
            id="inner-not-known",
        ),
        pytest.param(
            "        if name in ('get_embed_and_head', 'set_embed_and_head'):\n"
            "            return getattr(self.inner, name)\n        raise AttributeError(name)",
            "get_embed_and_head",
            "forwarded",
            "forwarded by __getattr__ to self.inner (LlamaForCausalLM: method)",
            id="listed-name",
        ),
        pytest.param(
            "        if name in ('get_embed_and_head', 'set_embed_and_head'):\n"
            "            return getattr(self.inner, name)\n        raise AttributeError(name)",
            "set_eagle3_layers_to_capture",
            "missing",
            "__getattr__ raises AttributeError for it",
            id="unlisted-name",
        ),
        pytest.param(
            "        if name == 'model':\n            return None\n        return getattr(self.inner, name)",
            "model",
            "missing",
            "__getattr__ returns None for it",
            id="returns-none",
        ),
        pytest.param(
            "        if name.startswith('get_'):\n            return getattr(self.inner, name)\n"
            "        return getattr(self.given, name)",
            "get_embed_and_head",
            "unknown",
            "__getattr__ forwards to self.given, whose class is not known statically; other paths forward it",
            id="undecided-condition",
        ),
        pytest.param(
            "        return self.__dict__['inner']",
            "get_embed_and_head",
            "unknown",
            "__getattr__ returns another value for it",
            id="not-a-forward",
        ),
    ],
)
def test_getattr_forwarding_counts_only_when_the_inner_object_has_the_member(tmp_path, body, member, status, note):
    tree = make_tree(tmp_path, {"models/forwarding.py": FORWARDING_VLM.format(body=body)})
    an = Analysis(tree, cache=False)
    lookup = an.classes.lookup(an.resolve_model("ForwardingVLM"), member)
    assert (lookup.status, lookup.note) == (status, note)


# ---------------------------------------------------------------- 3. the symmetric-memory fix


def test_a_neutralised_symm_mem_fix_is_refused(pristine, tmp_path):
    patch = regenerated(pristine, tmp_path / "patch", PATCH_SYMM, SYMM_PY, NEUTRALISED)
    result = run_cli(project(tmp_path / "project", {PATCH_SYMM: patch}))
    assert_one_line_error(
        result,
        f"check {SYMM} failed",
        f"{SYMM_PY}:84:",
        "compute capability 12",
        "TorchSymmMemCommunicator.__init__ raises TypeError",
        "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES.get(self.device_capability) at line 74 returned None",
        "if at line 77 not taken",
    )


GET = """        supported_max_sizes = TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES.get(
            self.device_capability
        )
"""
WARNING = """            logger.warning(
                "TorchSymmMemCommunicator: Device capability %s not supported, "
                "communicator is not available.",
                self.device_capability,
            )
"""
SPELLINGS = {  # the same effect as patch 0004, spelled otherwise: each passes
    "not in, then index": [
        (GET + SYMM_GUARD, "        if self.device_capability not in TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES:\n"),
        (
            "if self.world_size not in supported_max_sizes:",
            "if self.world_size not in TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[self.device_capability]:",
        ),
        (
            "= supported_max_sizes[self.world_size]",
            "= TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[self.device_capability][self.world_size]",
        ),
    ],
    "except KeyError": [
        (
            GET + SYMM_GUARD,
            "        try:\n            supported_max_sizes = "
            "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[self.device_capability]\n        except KeyError:\n",
        )
    ],
    "falsy": [(SYMM_GUARD, "        if not supported_max_sizes:\n")],
    "walrus": [
        (
            GET + SYMM_GUARD,
            "        if (supported_max_sizes := TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"
            ".get(self.device_capability)) is None:\n",
        )
    ],
    "helper method": [
        (SYMM_GUARD, "        if not self._supported():\n"),
        (
            "    def should_torch_symm_mem_allreduce",
            "    def _supported(self):\n        return "
            "self.device_capability in TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES\n\n"
            "    def should_torch_symm_mem_allreduce",
        ),
    ],
}
NEUTRALISED_SPELLINGS = {  # the fix's text mostly there, its effect gone: each fails, saying why
    "if False and": (
        [(SYMM_GUARD, "        if False and supported_max_sizes is None:\n")],
        "raises TypeError: argument of type 'NoneType' is not iterable",
    ),
    "always false": ([(SYMM_GUARD, "        if supported_max_sizes is None and False:\n")], "raises TypeError"),
    "always true": (
        [(SYMM_GUARD, "        if supported_max_sizes is None or True:\n")],
        "on compute capability 10, which TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES, "
        "_WORLD_SIZES_MULTIMEM list, TorchSymmMemCommunicator.__init__ never enables",
    ),
    "early return": (
        [("        self.disabled = True\n", "        self.disabled = True\n        return\n")],
        "never reaches its capability check at line 74",
    ),
    "return commented out": (
        [(WARNING + "            return\n", WARNING + "            # return\n")],
        "raises TypeError",
    ),
    "warning commented out": (
        [(WARNING, "            # logger.warning(...)\n")],
        "disables the communicator without logging a warning (returns at line 79)",
    ),
    "except re-raises": (
        [
            (
                GET + SYMM_GUARD,
                "        try:\n            supported_max_sizes = "
                "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[self.device_capability]\n"
                "        except KeyError:\n            raise\n        if False:\n",
            )
        ],
        "raises KeyError: 12 (TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[self.device_capability])",
    ),
    "raises instead": (
        [(WARNING + "            return\n", "            raise RuntimeError('unsupported')\n")],
        "raises RuntimeError",
    ),
    ".get commented out": (
        [(GET, "        supported_max_sizes = None  # .get(self.device_capability)\n")],
        "never enables the communicator",
    ),
    "multimem indexed": (
        [
            (
                "self._WORLD_SIZES_MULTIMEM.get(\n            self.device_capability, ()\n        )",
                "self._WORLD_SIZES_MULTIMEM[self.device_capability]",
            )
        ],
        "TorchSymmMemCommunicator.all_reduce raises KeyError: 12",
    ),
    "multimem .get arguments swapped": (
        [
            (
                "self._WORLD_SIZES_MULTIMEM.get(\n            self.device_capability, ()\n        )",
                "self._WORLD_SIZES_MULTIMEM.get((), self.device_capability)",
            )
        ],
        "raises TypeError: argument of type 'int' is not iterable",
    ),
}


@pytest.fixture(scope="module")
def symm_tree(patched, tmp_path_factory) -> Path:
    """The patched torch_symm_mem.py and the table it imports, alone in a tree (fast to edit)."""
    root = tmp_path_factory.mktemp("symm") / "tree"
    for rel in (SYMM_PY, f"{SRT}/distributed/device_communicators/all_reduce_utils.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(patched[0] / rel, root / rel)
    return root


def symm_findings(tree: Path, edits) -> list[str]:
    def edit(text):
        for old, new in edits:
            text = replace(old, new)(text)
        return text

    with edited(tree, SYMM_PY, edit):
        return [f"{loc}: {msg}" for msg, loc in check_symm_mem(SourceTree(tree)).findings]


@pytest.mark.parametrize("name", SPELLINGS)
def test_any_spelling_of_the_symm_mem_fix_passes(symm_tree, name):
    assert symm_findings(symm_tree, SPELLINGS[name]) == []


@pytest.mark.parametrize("name", NEUTRALISED_SPELLINGS)
def test_a_symm_mem_fix_without_its_effect_fails(symm_tree, name):
    edits, why = NEUTRALISED_SPELLINGS[name]
    found = symm_findings(symm_tree, edits)
    assert found and why in found[0], found


def test_the_gate_takes_an_equivalent_symm_mem_fix(patched):
    tree, series, pin = patched
    with edited(tree, SYMM_PY, replace(SYMM_GUARD, "        if not supported_max_sizes:\n")):
        build.check_tree(tree, series, pin)
    assert checks.run_check(SYMM, tree).passed

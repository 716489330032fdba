"""EAGLE-3 target-interface contract checks (static, ``ast`` only; never imports SGLang).

Public API:

- ``check_tree(tree, models=None, *, all_models=False) -> Report``: derive the target/draft model
  contract from ``tree`` (an upstream-shaped checkout, ``python/sglang/...``) and check the
  selected model classes (default ``KimiK25ForConditionalGeneration``) and the capture wiring.
- Named checks registered with :mod:`.findings` (importing :mod:`.named`, which this package
  does, registers them): ``kimi-k25-eagle3-interface``, ``eagle3-capture-wiring``,
  ``sm120-allreduce-fusion-gate``, ``sm12-torch-symm-mem``, ``eagle3-aux-layer-resolution``.

The stages, each a subpackage that imports only the ones before it:

- ``parse``: the source tree read with ``ast``, its modules' outlines and how names resolve;
- ``interp``: a small path-sensitive evaluator of a function, over what is statically known;
- ``index``: the class index (MRO, members, forwards, wrappers);
- ``flow``: the walk of the runtime that derives every access to the model (``flow.derive``);
- ``rules``: the contract's terms and verdicts, and the wiring, gate and other rules;
- ``core``: ``Analysis`` and ``check_tree``, which run them over one tree.

On top: ``named`` (the named checks), ``suspect`` (added lines of a merge that use what the new
release lost) and ``render`` (the report's text); ``checks`` runs a named check, and this package
re-exports the public API. ``findings`` (what a check returns) sits below them all.

See docs/contract.md for what is derived and how.
"""

from sglpatch.contract.core import DEFAULT_MODELS, Analysis, Report, check_tree
from sglpatch.contract.flow.derive import FEATURES, PATTERNS, PROPAGATION
from sglpatch.contract.named import NAMES as CHECK_NAMES
from sglpatch.contract.rules.terms import Contract, ContractItem
from sglpatch.contract.rules.verdicts import MemberStatus, ModelReport
from sglpatch.contract.rules.wiring import WiringResult

__all__ = [
    "check_tree",
    "Report",
    "ModelReport",
    "MemberStatus",
    "Contract",
    "ContractItem",
    "Analysis",
    "WiringResult",
    "DEFAULT_MODELS",
    "PATTERNS",
    "PROPAGATION",
    "FEATURES",
    "CHECK_NAMES",
]

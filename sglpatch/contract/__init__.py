"""EAGLE-3 target-interface contract checks (static, ``ast`` only; never imports SGLang).

Public API:

- ``check_tree(tree, models=None, *, all_models=False) -> Report``: derive the target/draft model
  contract from ``tree`` (an upstream-shaped checkout, ``python/sglang/...``) and check the
  selected model classes (default ``KimiK25ForConditionalGeneration``) and the capture wiring.
- Named checks registered with :mod:`sglpatch.findings` (importing this package registers them):
  ``kimi-k25-eagle3-interface``, ``eagle3-capture-wiring``, ``sm120-allreduce-fusion-gate``,
  ``sm12-torch-symm-mem``.

See docs/contract.md for what is derived and how.
"""

from sglpatch.contract.core import DEFAULT_MODELS, Analysis, Report, check_tree
from sglpatch.contract.rules.terms import Contract, ContractItem
from sglpatch.contract.rules.verdicts import MemberStatus, ModelReport
from sglpatch.contract.flow.derive import FEATURES, PATTERNS, PROPAGATION
from sglpatch.contract.named import NAMES as CHECK_NAMES
from sglpatch.contract.rules.wiring import WiringResult

__all__ = ["check_tree", "Report", "ModelReport", "MemberStatus", "Contract", "ContractItem",
           "Analysis", "WiringResult", "DEFAULT_MODELS", "PATTERNS", "PROPAGATION", "FEATURES",
           "CHECK_NAMES"]

"""EAGLE-3 target-interface contract checks (static, ``ast`` only; never imports SGLang).

Public API:

- ``check_tree(tree, models=None, *, all_models=False) -> Report``: derive the target/draft model
  contract from ``tree`` (an upstream-shaped checkout, ``python/sglang/...``) and check the
  selected model classes (default ``KimiK25ForConditionalGeneration``) and the capture wiring.
- Named checks registered with :mod:`sglpatch.findings` (importing this package registers them):
  ``kimi-k25-eagle3-interface``, ``eagle3-capture-wiring``, ``sm120-allreduce-fusion-gate``,
  ``sm12-torch-symm-mem``.
- ``register_cli(subparsers, common=None)``: the ``check`` command.

See docs/contract.md for what is derived and how.
"""

from .cli import handler, register_cli
from .core import DEFAULT_MODELS, Analysis, Report, check_tree
from .terms import Contract, ContractItem
from .verdicts import MemberStatus, ModelReport
from .derive import FEATURES, PATTERNS, PROPAGATION
from .named import NAMES as CHECK_NAMES
from .wiring import WiringResult

__all__ = ["check_tree", "Report", "ModelReport", "MemberStatus", "Contract", "ContractItem",
           "Analysis", "WiringResult", "DEFAULT_MODELS", "PATTERNS", "PROPAGATION", "FEATURES",
           "CHECK_NAMES", "register_cli", "handler"]

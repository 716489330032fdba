"""Named checks over an SGLang source tree.

A check reads a tree laid out like upstream's repository (``python/sglang/...``) and returns
findings; it never modifies anything. A patch's ``Drop-When: check:<name>`` names the
property the patch establishes: the build requires it to hold on the patched tree (the patch
works), the rebase tests it on the pristine new upstream (upstream has the fix: drop the patch).
Modules that define checks register them with ``findings.register`` (all in :mod:`.named`);
this module loads them.
"""

from __future__ import annotations

from pathlib import Path

from sglpatch.contract.findings import REGISTRY, Check, CheckResult, Finding, register

__all__ = ["REGISTRY", "Check", "CheckResult", "Finding", "register", "run_check", "run_checks"]


def run_check(name: str, tree: Path) -> CheckResult:
    _load_check_modules()
    from sglpatch.errors import UserError

    if name not in REGISTRY:
        known = ", ".join(sorted(REGISTRY)) or "none"
        raise UserError(f"unknown check '{name}'", f"known checks: {known}")
    return CheckResult(name, tuple(REGISTRY[name].run(tree)))


def run_checks(tree: Path, names: list[str]) -> list[CheckResult]:
    return [run_check(name, tree) for name in names]


def _load_check_modules() -> None:
    # Importing a module registers its checks; keep this list the one place that names them.
    from sglpatch.contract import named  # noqa: F401

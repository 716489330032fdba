"""``python build.py check``: the EAGLE-3 target-interface contract checker."""

from __future__ import annotations

import argparse
from pathlib import Path

from sglpatch.cli.common import emit
from sglpatch.contract.core import DEFAULT_MODELS, check_tree
from sglpatch.contract.rules.production import LAUNCH_FILE, production_launch
from sglpatch.errors import UserError

HELP = "check model classes against the EAGLE-3 target-model contract derived from a tree"
DESCRIPTION = f"""\
Derive, from the SGLang source tree itself, every attribute and method the runtime uses on the
target and draft models (model runner, CUDA graph runners, speculative workers, EPLB), then
report every member each selected model lacks while its inner language model has it, the EAGLE-3
capture-layer wiring, and the other named checks. Static (ast only): no GPU, no SGLang import.

Default tree: the patched work tree build/src. Default model: {", ".join(DEFAULT_MODELS)}.
Gaps are split by the production launch ({LAUNCH_FILE}'s replica command: TP 8, EAGLE-3,
CUDA graphs): a gap is on its path when a site that needs the member sits only under features
that launch turns on (or that the tree leaves on by default).
Exit status: 0 clean; 1 what can stop the production launch: a gap on its path, a selected model
failing its EAGLE-3 interface, a contract that could not be derived, or a failing wiring check
(the other named checks are shown but do not affect it; the build gates on them); 2 usage error;
3 gaps only on paths the production launch does not take."""


def register_cli(sub, common) -> None:
    p = sub.add_parser(
        "check",
        parents=[common],
        help=HELP,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--tree", type=Path, metavar="PATH", help="any checkout laid out like upstream's repository (python/sglang/...)"
    )
    where.add_argument(
        "--version",
        dest="upstream_version",
        metavar="V",
        help="a pristine SGLang release (fetched from PyPI and cached)",
    )
    p.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="NAME",
        help=f"model class to check (repeatable; default: {', '.join(DEFAULT_MODELS)})",
    )
    p.add_argument("--all-models", action="store_true", help="check every wrapper model in the tree (plus any --model)")
    p.add_argument(
        "--contract", action="store_true", help="also list the derived contract (every member, its guards and sites)"
    )
    p.set_defaults(func=handler)


def resolve_tree(args) -> Path:
    if getattr(args, "tree", None) is not None:
        tree = Path(args.tree).expanduser()
        if not tree.exists():
            raise UserError(f"no such directory: {tree}", "pass an SGLang checkout with --tree")
        return tree
    root = _root(args)
    if getattr(args, "upstream_version", None):
        from sglpatch.upstream import source
        from sglpatch.upstream.pin import read_pin

        try:
            pin = read_pin(root)  # verifies the pinned release's artifact against the pin
        except UserError:
            pin = None
        return source.pristine_tree(args.upstream_version, pin)
    tree = root / "build" / "src"
    if not (tree / "python" / "sglang").is_dir():
        raise UserError(
            f"no patched work tree at {tree}", "run `python build.py prepare` first, or pass --tree PATH or --version V"
        )
    return tree


def _root(args) -> Path:
    return Path(getattr(args, "root", None) or Path(__file__).resolve().parents[2])


def handler(args) -> int:
    from sglpatch.contract import named
    from sglpatch.contract.findings import REGISTRY

    tree = resolve_tree(args)
    an = named.analysis_for(tree)
    launch = production_launch(_root(args), an.tree)
    report = check_tree(tree, args.models, all_models=args.all_models, analysis=an, launch=launch)
    extra = []
    # The named checks the report does not already cover (the interface and the wiring).
    for name in named.NAMES[2:]:
        check = REGISTRY[name]
        findings = check.run(tree)
        detail = ""
        if findings:
            first = str(findings[0])
            detail = first + (f" (+{len(findings) - 1} more)" if len(findings) > 1 else "")
        extra.append((name, not findings, detail))
    code = report.exit_code if report.wiring.passed else 1
    if getattr(args, "json", False):
        data = report.to_json()
        if not args.contract:
            data["contract"] = {k: v for k, v in data["contract"].items() if k in ("patterns", "problems")} | {
                "target_members": len(report.contract.target),
                "required": sorted(i.label for i in report.contract.target.values() if i.required),
                "draft_members": len(report.contract.draft),
            }
        data["checks"] = {name: {"passed": ok, "detail": detail or None} for name, ok, detail in extra}
        data["exit"] = code
        emit(args, data, "")
    else:
        from sglpatch.contract.render import render

        emit(args, {}, render(report, extra_checks=extra, show_contract=args.contract))
    return code

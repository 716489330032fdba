"""Which feature paths our production launch takes, so a gap there is told apart from the rest.

The launch is the replica command of ``deploy/compose/compose.yaml`` (the same flags as the
Kubernetes base and docs/deploy.md; tests/test_deploy.py keeps them equal). A feature path is on
when the launch turns it on, or when the tree's ``ServerArgs`` leaves it on by default and the
launch does not turn it off. A switch the tree does not show as a plain field counts as on: a gap
is reported as off the production path only when the launch provably does not take it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from sglpatch.contract.parse.tree import Module, SourceTree
from sglpatch.contract.rules.terms import ContractItem

LAUNCH_FILE = Path("deploy") / "compose" / "compose.yaml"

# feature -> (ServerArgs field, how its value turns the path on). "weight-update" is a runtime API
# (update_weights_from_*), never a launch flag, and the deployment does not call it.
SWITCHES = {
    "eagle3": ("speculative_algorithm", lambda v: v not in (None, "None", "")),
    "cuda-graph": ("disable_cuda_graph", lambda v: v is not True),
    "piecewise-graph": ("enable_piecewise_cuda_graph", lambda v: v is not False),
    "eplb": ("enable_eplb", lambda v: v is True),
    "pipeline": ("pp_size", lambda v: isinstance(v, int) and v > 1),
    "context-parallel": ("attn_cp_size", lambda v: isinstance(v, int) and v > 1),
    "lora": ("enable_lora", lambda v: v is True),
    "pdmux": ("enable_pdmux", lambda v: v is True),
    "dllm": ("dllm_algorithm", lambda v: v not in (None, "None", "")),
}
# Launch flags that also turn a path on (lora by its adapters) or off (piecewise by its opt-out).
ALSO = {"--lora-paths": ("lora", True), "--disable-piecewise-cuda-graph": ("piecewise-graph", False)}
LABELS = {
    "eagle3": "EAGLE-3",
    "cuda-graph": "CUDA graphs",
    "piecewise-graph": "piecewise CUDA graphs",
    "eplb": "EPLB",
    "pipeline": "pipeline parallel",
    "context-parallel": "context parallel",
    "lora": "LoRA",
    "pdmux": "PD multiplexing",
    "dllm": "diffusion LM",
}

# ServerArgs fields: one module in 0.5.9, a package of them in the later layout
_FIELD_MODULE, _FIELD_PACKAGE = "sglang.srt.server_args", "sglang.srt.arg_groups.fields"
_MAX_FIELD_LINES = 20


@dataclass(frozen=True)
class Launch:
    source: str  # where the flags came from
    features: frozenset[str]  # the feature paths it takes ("core" always)
    tp: int

    def takes(self, item: ContractItem) -> bool:
        """A member is on the production path when one site that needs it has only features the
        launch takes (a site under ``eplb`` and ``eagle3`` needs both)."""
        sites = item.required_sites or item.sites
        return any(set(s.features) <= self.features for s in sites)

    @property
    def summary(self) -> str:
        shown = [LABELS[f] for f in LABELS if f in self.features]
        return ", ".join([f"TP {self.tp}"] + shown)

    def to_json(self) -> dict:
        return {"source": self.source, "features": sorted(self.features), "tp": self.tp}


def launch_args(root: Path) -> list[str] | None:
    path = Path(root) / LAUNCH_FILE
    if not path.is_file():
        return None
    doc = yaml.safe_load(path.read_text())
    command = (doc or {}).get("x-replica", {}).get("command")
    return [str(a) for a in command] if isinstance(command, list) else None


def parse_flags(argv: list[str]) -> dict[str, object]:
    """``--tp-size 8 --enable-metrics`` -> {"tp_size": 8, "enable_metrics": True}."""
    values: dict[str, object] = {}
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        value: object = True if nxt is None or nxt.startswith("--") else _literal(nxt)
        values[arg[2:].replace("-", "_")] = value
    return values


def _literal(text: str) -> object:
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return {"True": True, "False": False, "None": None}.get(text, text)


def field_defaults(tree: SourceTree | Path, names) -> dict[str, object]:
    """Literal defaults of ServerArgs fields (``name: type = literal`` in a class body), in the
    0.5.9 layout (server_args.py) and the later one (arg_groups/fields/*.py). A field not found,
    or not a literal, is absent from the result. Found through the tree's cached outlines: only
    the field's own statement is parsed, never the whole file."""
    src = tree if isinstance(tree, SourceTree) else SourceTree(Path(tree))
    wanted = set(names)
    found: dict[str, object] = {}
    for mod in _field_modules(src):
        for co in mod.outline.classes.values():
            for name in sorted(wanted & co.members.keys() - found.keys()):
                member = co.members[name]
                if member.kind == "class-attr" and (value := _annotated_value(mod, member.line)) is not None:
                    try:
                        found[name] = ast.literal_eval(value)
                    except ValueError:
                        pass
    return found


def _annotated_value(mod: Module, line: int) -> ast.expr | None:
    """The value of the ``name: type = value`` statement that starts at ``line`` (it may span lines)."""
    for end in range(line, min(line + _MAX_FIELD_LINES, len(mod.lines)) + 1):
        stmt = mod.segment(line, end)
        if stmt is not None:
            return stmt.value if isinstance(stmt, ast.AnnAssign) else None
    return None


def _field_modules(tree: SourceTree) -> list[Module]:
    single = tree.module(_FIELD_MODULE)
    return ([single] if single is not None else []) + tree.package_modules(_FIELD_PACKAGE, recursive=False)


def production_launch(root: Path, tree: SourceTree | Path) -> Launch | None:
    """The feature paths the production launch takes on this tree, or None without a launch file."""
    argv = launch_args(root)
    if argv is None:
        return None
    flags = parse_flags(argv)
    defaults = field_defaults(tree, [name for name, _ in SWITCHES.values()])
    features = {"core"} | {
        feature
        for feature, (name, on) in SWITCHES.items()
        if name not in flags and name not in defaults or on(flags.get(name, defaults.get(name)))
    }
    for flag, (feature, on) in ALSO.items():
        if flag in argv:
            (features.add if on else features.discard)(feature)
    tp = flags.get("tp_size", 1)
    return Launch(str(LAUNCH_FILE), frozenset(features), tp if isinstance(tp, int) else 1)

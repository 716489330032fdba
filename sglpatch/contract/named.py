"""The named checks this module registers with :mod:`sglpatch.checks`.

Each takes an upstream-shaped tree and returns findings (empty = pass). The build runs them as a
gate on the patched tree; the rebase runs ``Drop-When: check:<name>`` on a pristine upstream
(the patch is obsolete once its check passes there). A layout the analysis no longer recognises
is a finding, never a silent pass.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

from ..checks import Finding, register
from .core import Analysis, check_model
from .aux_layers import check_aux_layer_resolution
from .gates import check_allreduce_gate, check_symm_mem

KIMI = "KimiK25ForConditionalGeneration"

_ANALYSES: OrderedDict = OrderedDict()


def analysis_for(tree: Path) -> Analysis:
    """One Analysis per tree state, shared by the checks of one gate run."""
    key = (str(Path(tree).resolve()), _fingerprint(Path(tree)))
    an = _ANALYSES.get(key)
    if an is None:
        an = Analysis(Path(tree))
        _ANALYSES[key] = an
        while len(_ANALYSES) > 4:
            _ANALYSES.popitem(last=False)
    return an


def _fingerprint(tree: Path) -> int:
    """Changes whenever a Python file under python/sglang/srt changes (size or mtime)."""
    acc = 0
    base = tree / "python" / "sglang" / "srt"
    for dirpath, _, files in os.walk(base):
        for f in files:
            if f.endswith(".py"):
                try:
                    st = os.stat(os.path.join(dirpath, f))
                except OSError:
                    continue
                acc = hash((acc, f, st.st_size, st.st_mtime_ns))
    return acc


def contract_findings(an: Analysis) -> list[Finding]:
    return [Finding(p) for p in an.contract.problems]


@register("kimi-k25-eagle3-interface",
          f"{KIMI} has no unguarded gap in the target-model contract derived from the tree "
          "(every member the runtime requires that its inner language model provides)")
def kimi_k25_eagle3_interface(tree: Path) -> list[Finding]:
    an = analysis_for(tree)
    findings = contract_findings(an)
    if findings:
        return findings
    report = check_model(an.classes, an.resolve_model(KIMI), an.contract)
    if not report.wrapper:
        return []  # inherits its language model: nothing to delegate
    out = []
    for s in report.gaps:
        inner = next((c for c, lk in s.inner if lk.ok), "the inner model")
        sites = s.item.required_sites
        more = f" (+{len(sites) - 1} more sites)" if len(sites) > 1 else ""
        out.append(Finding(f"{KIMI} lacks {s.item.label}, which {inner} has (paths: "
                           f"{', '.join(s.item.features)}){more}", sites[0].location if sites else None,
                           subject=f"{KIMI}.{s.item.label}"))
    return out


@register("eagle3-capture-wiring",
          "ModelRunner configures set_eagle3_layers_to_capture(ids) before kernel warmup and CUDA "
          "graph capture, and nothing resets it with a no-argument call afterwards")
def eagle3_capture_wiring(tree: Path) -> list[Finding]:
    an = analysis_for(tree)
    return [Finding(m, loc) for m, loc in an.wiring.findings]


@register("sm120-allreduce-fusion-gate",
          "the FlashInfer allreduce-fusion gate (layers/communicator.py "
          "apply_flashinfer_allreduce_fusion and its helpers) admits SM12x")
def sm120_allreduce_fusion_gate(tree: Path) -> list[Finding]:
    return [Finding(m, loc) for m, loc in check_allreduce_gate(analysis_for(tree).tree).findings]


@register("sm12-torch-symm-mem",
          "distributed/device_communicators/torch_symm_mem.py does not index its "
          "compute-capability keyed size tables unguarded (KeyError: 12 on SM12)")
def sm12_torch_symm_mem(tree: Path) -> list[Finding]:
    return [Finding(m, loc) for m, loc in check_symm_mem(analysis_for(tree).tree).findings]


@register("eagle3-aux-layer-resolution",
          "the EAGLE-3 capture layers are resolved from an operator override, eagle_config (dict "
          "and object) and the draft config's top level, never under a swallowing except, and "
          "falling back to the default layers is a warning")
def eagle3_aux_layer_resolution(tree: Path) -> list[Finding]:
    return [Finding(m, loc) for m, loc in check_aux_layer_resolution(analysis_for(tree).tree)]


NAMES = ("kimi-k25-eagle3-interface", "eagle3-capture-wiring", "sm120-allreduce-fusion-gate",
         "sm12-torch-symm-mem", "eagle3-aux-layer-resolution")

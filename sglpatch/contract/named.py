"""The named checks this module registers with :mod:`sglpatch.findings`.

Each takes an upstream-shaped tree and returns findings (empty = pass). The build runs them as a
gate on the patched tree; the rebase runs ``Drop-When: check:<name>`` on a pristine upstream
(the patch is obsolete once its check passes there). A layout the analysis no longer recognises
is a finding, never a silent pass.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

from sglpatch.contract.core import Analysis
from sglpatch.contract.findings import Finding, register
from sglpatch.contract.index.forwards import forward_problems
from sglpatch.contract.rules import eagle3
from sglpatch.contract.rules.aux_layers import check_aux_layer_resolution
from sglpatch.contract.rules.gates import check_allreduce_gate
from sglpatch.contract.rules.symm_mem import check_symm_mem
from sglpatch.contract.rules.verdicts import check_model

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


@register(
    "kimi-k25-eagle3-interface",
    f"{KIMI} has every member the runtime requires of a target model that its inner language "
    "model provides, and every member of the EAGLE-3 interface (target side, guarded or not; "
    "draft side, as it can be loaded as a draft), each shown to exist (a __getattr__ forward "
    "counts only when the inner object has the member), and each forward reaching the member "
    "it is named for with the arguments it was given",
)
def kimi_k25_eagle3_interface(tree: Path) -> list[Finding]:
    an = analysis_for(tree)
    findings = contract_findings(an)
    if findings:
        return findings
    ref = an.resolve_model(KIMI)
    report = check_model(an.classes, ref, an.contract)
    if not report.wrapper and not an.classes.is_causal_lm(ref):
        return [
            Finding(
                f"{KIMI} neither holds nor inherits a language model the analysis "
                "recognises, so its interface cannot be checked: update "
                "sglpatch/contract/classes.py",
                report.location,
                subject=KIMI,
            )
        ]
    eagle = {
        f.requirement.label: (f.requirement, f.status) for f in eagle3.failures(report, an.eagle3_requirements(KIMI))
    }
    out = []
    for s in report.statuses:
        if s.item.label in eagle or s.verdict == "gap" or (s.item.required and s.verdict in ("unverified", "unknown")):
            out.append(_finding(s, eagle.pop(s.item.label, (None, None))[0]))
    out += [_finding(s, r) for r, s in eagle.values()]  # the draft side
    out += [
        Finding(what, where, subject=f"{KIMI}.{member}")
        for member, what, where in forward_problems(an.tree, an.classes, ref)
    ]
    return out


def _finding(s, req) -> Finding:
    """One line: what the class lacks (or cannot be shown to have) and why the runtime needs it."""
    sites = [req.site] if req else (s.item.required_sites or s.item.sites)
    why = req.reason if req else None
    inner = next((c for c, lk in s.inner if lk.ok), None)
    if s.verdict in ("unknown", "unverified"):
        what = f"{KIMI}.{s.item.label} cannot be shown to exist ({s.lookup.note or s.verdict})"
    else:
        note = f" ({s.lookup.note})" if s.lookup.note else ""
        what = f"{KIMI} lacks {s.item.label}{note}" + (f", which {inner} has" if inner else "")
    if why is None:
        more = f" (+{len(sites) - 1} more sites)" if len(sites) > 1 else ""
        why = f"required on paths {', '.join(s.item.features)}{more}"
    return Finding(f"{what}: {why}", sites[0].location if sites else None, subject=f"{KIMI}.{s.item.label}")


@register(
    "eagle3-capture-wiring",
    "ModelRunner configures set_eagle3_layers_to_capture(ids) before kernel warmup and CUDA "
    "graph capture, and nothing resets it with a no-argument call afterwards",
)
def eagle3_capture_wiring(tree: Path) -> list[Finding]:
    an = analysis_for(tree)
    return [Finding(m, loc) for m, loc in an.wiring.findings]


@register(
    "sm120-allreduce-fusion-gate",
    "the FlashInfer allreduce-fusion gate (layers/communicator.py "
    "apply_flashinfer_allreduce_fusion and its helpers) admits SM12x",
)
def sm120_allreduce_fusion_gate(tree: Path) -> list[Finding]:
    return [Finding(m, loc) for m, loc in check_allreduce_gate(analysis_for(tree).tree).findings]


@register(
    "sm12-torch-symm-mem",
    "on a GPU its capability tables do not list (SM12), TorchSymmMemCommunicator disables "
    "itself with a warning instead of raising, and it can still be enabled on a listed one",
)
def sm12_torch_symm_mem(tree: Path) -> list[Finding]:
    return [Finding(m, loc) for m, loc in check_symm_mem(analysis_for(tree).tree).findings]


@register(
    "eagle3-aux-layer-resolution",
    "the EAGLE-3 capture layers are resolved from an operator override, eagle_config (dict "
    "and object) and the draft config's top level, never under a swallowing except, and "
    "falling back to the default layers is a warning",
)
def eagle3_aux_layer_resolution(tree: Path) -> list[Finding]:
    return [Finding(m, loc) for m, loc in check_aux_layer_resolution(analysis_for(tree).tree)]


NAMES = (
    "kimi-k25-eagle3-interface",
    "eagle3-capture-wiring",
    "sm120-allreduce-fusion-gate",
    "sm12-torch-symm-mem",
    "eagle3-aux-layer-resolution",
)

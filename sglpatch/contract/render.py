"""Human-readable rendering of a contract Report."""

from __future__ import annotations

from collections.abc import Sequence

from sglpatch.contract.core import Report
from sglpatch.contract.rules.verdicts import MemberStatus, ModelReport

PREFIX = "python/sglang/"


def short(loc: str | None) -> str:
    if not loc:
        return "-"
    return loc[len(PREFIX) :] if loc.startswith(PREFIX) else loc


def _sites(s: MemberStatus, limit: int = 2) -> str:
    sites = s.item.required_sites or s.item.sites
    locs = []
    for a in sites:
        loc = short(a.location)
        if loc not in locs:
            locs.append(loc)
    text = ", ".join(locs[:limit])
    return text + (f" (+{len(locs) - limit})" if len(locs) > limit else "")


def _table(rows: list[list[str]], indent: str = "    ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r, widths)]
        out.append((indent + "  ".join(cells)).rstrip())
    return out


def _inner_text(m: ModelReport) -> str:
    parts = []
    for inn in m.inners:
        parts.append(
            f"self.{inn['attr']} = {' | '.join(inn['classes'])}"
            + (f" ({short(inn['location'])})" if inn.get("location") else "")
        )
    return "; ".join(parts)


def render_eagle3(m: ModelReport, everything: bool = False) -> list[str]:
    """The EAGLE-3 interface of a checked model: its failures, or (``everything``) every member."""
    shown = m.eagle3 if everything else m.eagle3_failures
    if not shown:
        return []
    head = (
        f"  EAGLE-3 interface ({len(m.eagle3)} members derived from the tree, {len(m.eagle3_failures)} failing):"
        if everything
        else f"  EAGLE-3 interface: {len(shown)} member{'s' if len(shown) != 1 else ''} missing or "
        "not shown to exist (the build gate refuses these):"
    )
    lines = [head]
    for st in shown:
        note = f" ({st.status.lookup.note})" if st.status and st.status.lookup.note else ""
        lines.append(
            f"    {st.requirement.label} [{st.requirement.role}, {st.verdict}]{note}: "
            f"{short_paths(st.requirement.reason)}"
        )
    return lines


def render_model(m: ModelReport, inner_attr: str | None = None, in_production=lambda status: True) -> list[str]:
    lines = [f"{m.name}  ({short(m.location)})"]
    attr = inner_attr or (m.inners[0]["attr"] if m.inners else None)
    if m.wrapper:
        lines.append(f"  wrapper: {_inner_text(m)}")
    else:
        lines.append("  not a wrapper (inherits its language model or is one)")
    gaps = m.gaps
    if gaps:
        lines.append(
            f"  {len(gaps)} gap{'s' if len(gaps) != 1 else ''}: required by the runtime, "
            "provided by the inner model, missing here"
            + (
                " (or present but reading what the inner model lacks)"
                if any(s.verdict == "broken" for s in gaps)
                else ""
            )
        )
        rows = [["MEMBER", "PRODUCTION", "FEATURE PATHS", "FIX", "FAILS AT"]]
        for s in sorted(gaps, key=lambda s: not in_production(s)):
            inner = next((c for c, lk in s.inner if lk.ok), "inner")
            fix = f"delegate to self.{attr} ({inner})" if attr else "delegate to the inner model"
            if s.item.param:
                fix = f"accept and pass {s.item.param} ({inner} does)"
            if s.verdict == "broken":
                fix = f"fix it: {s.lookup.note} ({short(s.lookup.location)})"
            rows.append([s.item.label, "yes" if in_production(s) else "no", ",".join(s.item.features), fix, _sites(s)])
        lines += _table(rows)
    else:
        lines.append("  no gaps")
    groups = (
        ("unverified", "missing, inner model chosen at runtime (not verified)"),
        ("unknown", "not found, behind an external base class"),
        ("optional", "guarded, so the path is silently off (inner has it)"),
        ("unsupported", "required, but the inner model lacks it too"),
    )
    for verdict, title in groups:
        items = m.by(verdict)
        if items:
            lines.append(f"  {title}: " + ", ".join(f"{s.item.label} [{','.join(s.item.features)}]" for s in items))
    forwarded = [s for s in m.statuses if s.verdict == "ok" and s.lookup.status == "forwarded"]
    if forwarded:
        lines.append("  forwarded by __getattr__: " + ", ".join(s.item.label for s in forwarded))
    if m.draft_statuses:
        lines.append(
            "  draft-role members it lacks (needed only if used as a draft model): "
            + ", ".join(s.item.label for s in m.draft_statuses)
        )
    return lines + render_eagle3(m)


def render(report: Report, *, extra_checks: Sequence[tuple[str, bool, str]] = (), show_contract: bool = False) -> str:
    c = report.contract
    req = sum(1 for i in c.target.values() if i.required)
    sites = sum(len(i.sites) for i in c.target.values())
    lines = [
        f"SGLang {report.version or '(version unknown)'}  {report.tree}",
        f"contract: {len(c.target)} target-model members ({req} required), {len(c.draft)} "
        f"draft-model members, from {sites} access sites; patterns: "
        + ", ".join(f"{k} {v}" for k, v in c.patterns.items()),
    ]
    if report.launch:
        lines.append(f"production launch: {report.launch.summary} ({report.launch.source})")
    for p in report.problems:
        lines.append(f"ERROR: {p}")
    if show_contract:
        lines += ["", "target-model contract (required first):"]
        rows = [["MEMBER", "REQUIRED", "FEATURE PATHS", "GUARDS", "SITES"]]
        for i in c.target.values():
            locs = sorted({short(s.location) for s in (i.required_sites or i.sites)})
            rows.append(
                [
                    i.label,
                    "yes" if i.required else "no",
                    ",".join(i.features),
                    ",".join(i.guards) or "-",
                    ", ".join(locs[:2]) + (f" (+{len(locs) - 2})" if len(locs) > 2 else ""),
                ]
            )
        lines += _table(rows, "  ")
    if len(report.models) > 1:
        found = f" ({len(report.wrappers)} loadable wrapper models in the tree)" if report.wrappers else ""
        lines += ["", f"{len(report.models)} models{found}:"]
        rows = [["MODEL", "INNER", "GAPS", "PRODUCTION", "MISSING (REQUIRED, INNER HAS IT)"]]
        for m in sorted(report.models, key=lambda m: (-len(m.gaps), m.name)):
            inner = ",".join(sorted({c for inn in m.inners for c in inn["classes"]})) or "-"
            rows.append(
                [
                    m.name,
                    inner[:40],
                    str(len(m.gaps)),
                    str(sum(map(report.in_production, m.gaps))),
                    ", ".join(s.item.label for s in m.gaps) or "-",
                ]
            )
        lines += _table(rows, "  ")
    detailed = report.models if len(report.models) <= 3 else [m for m in report.models if m.gaps]
    for m in detailed:
        lines += [""] + render_model(m, in_production=report.in_production)
        if show_contract and m.eagle3:
            lines += render_eagle3(m, everything=True)
    w = report.wiring
    lines += [
        "",
        f"EAGLE-3 capture-layer wiring: {'ok' if w.passed else 'FAIL'}"
        + (f" (order from {short(w.order_from)})" if w.order_from else ""),
    ]
    for msg, _ in w.findings:
        lines.append(f"  - {short_paths(msg)}")
    if extra_checks:
        lines += ["", "other named checks:"]
        for name, passed, detail in extra_checks:
            lines.append(f"  {name}: {'ok' if passed else 'FAIL'}" + (f"  {short_paths(detail)}" if detail else ""))
    verdict = []
    if report.problems:
        verdict.append("contract not derived")
    gap_models = [m for m in report.models if m.gaps]
    verdict.append(
        f"{report.gaps} gap{'s' if report.gaps != 1 else ''} in {len(gap_models)} of "
        f"{len(report.models)} model{'s' if len(report.models) != 1 else ''}"
        + (
            f" ({report.production_gaps} on the production launch's paths, "
            f"{report.gaps - report.production_gaps} elsewhere)"
            if report.launch and report.gaps
            else ""
        )
    )
    if report.eagle3_failures:
        verdict.append(
            f"{report.eagle3_failures} EAGLE-3 interface member{'s' if report.eagle3_failures != 1 else ''} failing"
        )
    verdict.append(f"wiring {'ok' if w.passed else 'FAIL'}")
    lines += ["", "result: " + "; ".join(verdict) + f"  ({report.seconds:.1f} s)"]
    return "\n".join(lines)


def short_paths(text: str) -> str:
    return text.replace(PREFIX, "")

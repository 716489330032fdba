"""The EAGLE-3 capture-layer wiring check, statically.

``ModelRunner`` must configure the target's aux-hidden-state layers
(``model.set_eagle3_layers_to_capture(ids)``) before anything runs the model for kernel warmup or
CUDA graph capture, because the ``if i in self.layers_to_capture`` test is frozen into each
captured graph; and nothing may afterwards reset them to the defaults with a no-argument (or
``None``) call -- 0.5.9/0.5.10 do so in CudaGraphRunner's constructor, ``_dummy_run`` and the
weight-update recapture, which silently feeds the draft the wrong layers on graph replays.

The order is read from the call tree of ``ModelRunner.__init__``, following ModelRunner's own
methods and module-level helpers (across modules); calls into other components count as events by
name (``kernel_warmup``, ``init_*graphs``, ``*GraphRunner(...)``, ``_dummy_run``, ...), since
their callbacks into the runner happen later. No-argument resets are searched everywhere.
When the configuring phase and the capture phase are separate ``ModelRunner`` methods driven from
outside (0.5.2x: the scheduler calls ``init_attention_backends()`` then ``init_cuda_graphs()``),
the order of those calls in their driver decides.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from sglpatch.contract.flow.derive import Deriver
from sglpatch.contract.index.classes import ClassRef

CAPTURE = "set_eagle3_layers_to_capture"
# Calls that run the model for warmup or CUDA-graph capture (by name of the function, method or
# class called). The configured capture layers must be set before the first of these.
GRAPH_EVENT = re.compile(
    r"^(kernel_warmup|_dummy_run|capture|capture_one_batch_size|"
    r"capture_cuda_graphs?|capture_\w*_graphs?|\w*_autotune)$|"
    r"^init_\w*graphs?$|GraphRunner$",
    re.I,
)


@dataclass
class Event:
    kind: str  # configure | reset | graph
    name: str
    location: str


@dataclass
class WiringResult:
    findings: list[tuple[str, str | None]] = field(default_factory=list)  # (message, location)
    sequence: list[Event] = field(default_factory=list)  # the init order that was checked
    configure: list[str] = field(default_factory=list)
    resets: list[str] = field(default_factory=list)
    order_from: str = ""  # "ModelRunner.__init__" or the external driver used

    @property
    def passed(self) -> bool:
        return not self.findings

    def to_json(self) -> dict:
        return {
            "passed": self.passed,
            "findings": [{"message": m, "location": loc} for m, loc in self.findings],
            "configure": self.configure,
            "resets": self.resets,
            "order_from": self.order_from,
            "sequence": [e.__dict__ for e in self.sequence],
        }


def check_wiring(d: Deriver) -> WiringResult:
    out = WiringResult()
    runner = d.runner_class
    if runner is None:
        out.findings.append(("ModelRunner not found: the tree's layout is not recognised", None))
        return out
    keys_by_qual: dict[tuple, tuple] = {}  # (module, qualname) -> key
    for k in d.results:
        if not k[2]:
            keys_by_qual.setdefault((k[0], k[1]), k)
    owner, node = d.method_node(runner, "__init__")
    init_key = keys_by_qual.get((owner.module, f"{owner.name}.__init__")) if owner else None
    if init_key is None:
        out.findings.append(("ModelRunner.__init__ not found", None))
        return out

    flat_cache: dict = {}

    def flatten(key, seen) -> list[Event]:
        events: list[Event] = []
        r = d.results.get(key)
        if r is None:
            return events
        for ev in r.events:
            if ev[0] == "edge":
                info = d.funcs[ev[1]]
                # Follow ModelRunner's own methods and module-level helpers; other components'
                # methods (EPLB manager, graph runners, ...) run later or are events by name.
                if ev[1] not in seen and (info.cls is None or info.cls in d.runner_classes):
                    seen.add(ev[1])
                    events.extend(flatten(ev[1], seen))
            elif ev[0] == "member_call" and ev[1] == CAPTURE and ev[5] in ("target", "any"):
                kind = "reset" if ev[2] == 0 or ev[3] else "configure"
                events.append(Event(kind, CAPTURE, f"{ev[6]}:{ev[4]}"))
            elif ev[0] == "named" and GRAPH_EVENT.search(ev[1]):
                events.append(Event("graph", ev[1], f"{ev[3]}:{ev[2]}"))
        return events

    def flat(key) -> list[Event]:
        if key not in flat_cache:
            flat_cache[key] = flatten(key, {key})
        return flat_cache[key]

    seq = flat(init_key)
    out.order_from = f"{runner.name}.__init__"
    all_calls = _capture_calls(d)
    out.configure = [loc for kind, loc, _ in all_calls if kind == "configure"]
    out.resets = [loc for kind, loc, _ in all_calls if kind == "reset"]
    if not out.configure:
        out.findings.append(
            (
                f"no configured {CAPTURE}(layer_ids) call on the target model was found: "
                "the EAGLE-3 capture layers are never set from the draft's config",
                None,
            )
        )
    conf_idx = next((i for i, e in enumerate(seq) if e.kind == "configure"), None)
    if conf_idx is not None:
        graph_before = [e for e in seq[:conf_idx] if e.kind == "graph"]
        out.sequence = seq[: conf_idx + 1][-40:]
        if graph_before:
            g = graph_before[0]
            out.findings.append(
                (
                    f"the configured {CAPTURE}(ids) at {seq[conf_idx].location} runs after "
                    f"{g.name} at {g.location}: kernel warmup / CUDA graph capture bake in the default "
                    "capture layers",
                    seq[conf_idx].location,
                )
            )
    elif out.configure:
        verdict = _external_order(d, runner, flat, keys_by_qual)
        out.order_from = verdict[2]
        if verdict[0] is None:
            out.findings.append(
                (
                    f"cannot establish that the configured {CAPTURE}(ids) at "
                    f"{out.configure[0]} precedes CUDA graph capture: {verdict[1]}",
                    out.configure[0],
                )
            )
        elif verdict[0] is False:
            out.findings.append((verdict[1], out.configure[0]))
    # Once configured first (as it must be), any later no-argument call resets the layers.
    for kind, loc, key in all_calls:
        if kind != "reset":
            continue
        where = d.funcs[key].qualname
        callers = [c for c in _entry_callers(d, key, runner) if c != where]
        reached = f", reached from {', '.join(callers)}" if callers else ""
        out.findings.append(
            (
                f"{CAPTURE}() without layer ids in {where} ({loc}{reached}) resets the "
                "configured capture layers to the defaults",
                loc,
            )
        )
    return out


def _capture_calls(d: Deriver) -> list[tuple[str, str, tuple]]:
    seen = set()
    out = []
    for k, r in d.results.items():
        for ev in r.events:
            if ev[0] == "member_call" and ev[1] == CAPTURE and ev[5] in ("target", "any"):
                loc = f"{ev[6]}:{ev[4]}"
                if loc in seen:
                    continue
                seen.add(loc)
                out.append(("reset" if ev[2] == 0 or ev[3] else "configure", loc, k))
    out.sort(key=lambda t: (t[1].rpartition(":")[0], int(t[1].rpartition(":")[2])))
    return out


def _entry_callers(d: Deriver, key, runner: ClassRef, limit: int = 5) -> list[str]:
    """ModelRunner (or graph-runner) methods from which ``key`` is reached, nearest first."""
    callers: dict = {}
    for k, r in d.results.items():
        for ev in r.events:
            if ev[0] == "edge":
                callers.setdefault(ev[1], set()).add(k)
    out: list[str]
    out, seen, frontier = [], {key}, [key]
    while frontier and len(out) < limit:
        nxt = []
        for k in frontier:
            for c in sorted(callers.get(k, ()), key=lambda x: x[1]):
                if c in seen:
                    continue
                seen.add(c)
                info = d.funcs[c]
                if info.cls in d.runner_classes and not info.node.name.startswith("__"):
                    out.append(f"{runner.name}.{info.node.name}")
                nxt.append(c)
        frontier = nxt
    if not out and d.funcs[key].cls is not None:
        out.append(d.funcs[key].qualname)
    return out[:limit]


def _external_order(d: Deriver, runner: ClassRef, flat, keys_by_qual):
    """(True|False|None, message, driver) for phases ModelRunner does not sequence itself."""
    conf_phase, graph_phase = set(), set()
    for c in d.runner_mro:
        for name in d.methods(c):
            key = keys_by_qual.get((c.module, f"{c.name}.{name}"))
            if key is None:
                continue
            events = flat(key)
            first_conf = next((i for i, e in enumerate(events) if e.kind == "configure"), None)
            first_graph = next((i for i, e in enumerate(events) if e.kind == "graph"), None)
            if first_conf is not None and (first_graph is None or first_conf < first_graph):
                conf_phase.add(name)
            elif first_graph is not None and _PHASE_NAME.search(name):
                graph_phase.add(name)
    if not conf_phase:
        return None, "no ModelRunner method configures the layers before capturing", ""
    if not graph_phase:
        return True, "", "no capture phase found"
    # Propagate phase names up through functions that delegate to them (TpModelWorker and
    # Scheduler wrappers) until a driver calls both kinds.
    modules = list(d.entry_modules)
    for pkg in ("sglang.srt.managers", "sglang.srt.speculative"):
        for m in d.tree.package_modules(pkg):
            if m not in modules and ("scheduler" in m.name or "worker" in m.name):
                modules.append(m)
    spans: list[tuple] = []  # (module, function name, start, end)
    for mod in modules:
        if not any(name in mod.source for name in conf_phase):
            continue  # a driver or a delegating wrapper calls the configuring phase by name
        spans.extend((mod, name, start, end) for name, start, end in _spans(mod))
    summaries: dict[tuple, tuple] = {}
    good: list[tuple[str, int, int, str]]  # (where, configure line, graph line, path)
    bad: list[tuple[str, int, int, str]]
    good, bad = [], []
    for _ in range(6):
        grown = False
        good, bad = [], []
        names = conf_phase | graph_phase
        for mod, name, start, end in spans:
            key = (mod.name, start)
            if key not in summaries and any(n in mod.text(start, end) for n in names):
                summaries[key] = (mod, _Fn(name, start), _calls(mod.segment(start, end)))
        for mod, fn, calls in summaries.values():
            c_line = next((ln for ln, _, a in calls if a in conf_phase), None)
            g_line = next((ln for ln, _, a in calls if a in graph_phase), None)
            if c_line is not None and g_line is not None:
                where = f"{mod.relpath}:{fn.lineno} ({fn.name})"
                (good if c_line < g_line else bad).append((where, c_line, g_line, mod.relpath))
            elif fn.name.startswith("__"):
                continue
            elif c_line is not None and fn.name not in conf_phase | graph_phase:
                conf_phase.add(fn.name)
                grown = True
            elif g_line is not None and fn.name not in conf_phase | graph_phase and _PHASE_NAME.search(fn.name):
                graph_phase.add(fn.name)
                grown = True
        if not grown:
            break
    if bad:
        w = bad[0]
        return (
            False,
            (
                f"{w[0]} calls the capture phase ({w[3]}:{w[2]}) before the phase that "
                f"configures {CAPTURE} ({w[3]}:{w[1]})"
            ),
            w[0],
        )
    if good:
        return True, "", good[0][0]
    return None, (f"no caller sequences {sorted(conf_phase)[0]}() before {sorted(graph_phase)[0]}()"), ""


# A capture phase is named like one (generic names such as forward() would match any caller).
_PHASE_NAME = re.compile(r"graph|warmup|capture", re.I)


def _calls(fn) -> list[tuple[int, int, str]]:
    """(line, column, called name) of every call in a function, in source order."""
    out: list[tuple[int, int, str]] = []
    if fn is None:
        return out
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            name = (
                n.func.attr
                if isinstance(n.func, ast.Attribute)
                else (n.func.id if isinstance(n.func, ast.Name) else None)
            )
            if name:
                out.append((n.lineno, n.col_offset, name))
    out.sort()
    return out


@dataclass
class _Fn:
    name: str
    lineno: int


def _spans(mod):
    """(name, first line, last line) of every function and method, from the module's outline."""
    out = mod.outline
    for name, (start, end) in out.functions.items():
        yield name, start, end
    for co in out.classes.values():
        for name, m in co.members.items():
            if m.start:
                yield name, m.start, m.end

"""A probe's ``None`` followed across the runtime to what consumes it.

``ModelConfigForExpertLocation.from_model_config`` returns ``None`` when the model class lacks
``get_model_config_for_expert_location``; three helpers hand that ``None`` on, a module global
keeps it, and ``ExpertDistributionRecorder.init_new`` asserts it is not ``None`` whenever a
recorder mode is set. The walk (``walker.py``) sees only the guarded probe, so the member looked
optional although start-up dies. This pass follows such a value through returns, local names,
module globals and call arguments; where an ``assert``, a ``raise`` under ``is None`` or a read of
the value consumes it, the member is required at that site: a new access there says so, with the
hops the value took in ``via``. A test for ``None`` on the way (``if x is None: return None``)
passes it on; one that handles it (``if x is not None:``) ends it.
"""

from __future__ import annotations

import ast
from bisect import bisect_right
from dataclasses import replace

from sglpatch.contract.flow.access import Access
from sglpatch.contract.flow.context import Driver
from sglpatch.contract.flow.none_visit import Taint, Visit, _is_none, _own_nodes, _union
from sglpatch.contract.index.classes import ClassRef
from sglpatch.contract.parse.tree import MODELS, SRT, Module

_PROBE_GUARDS = ("hasattr", "getattr-default")
_MAX_STEPS = 2000


def _unbound(key):
    return (key[0], key[1], frozenset())


class NoneFlow:
    """The fixpoint over the runtime functions a probe's ``None`` reaches."""

    def __init__(self, d: Driver):
        self.d = d
        self.probes: dict[tuple, dict[tuple[int, int], Access]] = {}  # function -> (line, col) -> probe
        self.returns: dict[tuple, Taint] = {}
        self.params: dict[tuple, dict[str, Taint]] = {}
        self.globals: dict[tuple[str, str], Taint] = {}
        self.sinks: dict[tuple, Access] = {}
        self.words: set[str] = set()  # text that can start a taint: "f(" of a tainted return, slot names
        self._queue: list[tuple] = []
        self._runtime: tuple[list[Module], list[int], bytes] | None = None  # modules, offsets, texts
        self._gives: dict[int, bool] = {}

    def run(self) -> list[Access]:
        for key, result in self.d.results.items():
            for a in result.accesses:
                if a.guard in _PROBE_GUARDS and a.kind.endswith(("hasattr", "getattr")):
                    unbound = _unbound(key)  # callers reach the function without the walk's bindings
                    self.probes.setdefault(unbound, {})[(a.line, a.col)] = a
                    self.d.funcs.setdefault(unbound, self.d.funcs[key])
        for key in self.probes:
            self._enqueue(key)
        steps = 0
        while self._queue and steps < _MAX_STEPS:
            Visit(self, self._queue.pop(0)).run()
            steps += 1
        return list(self.sinks.values())

    def _enqueue(self, key) -> None:
        if key is not None and key not in self._queue:
            self._queue.append(key)

    # ------------------------------------------------------------ what a visit learns

    def returned(self, key, taint: Taint) -> None:
        grown = _union(self.returns.get(key, ()), taint)
        if len(grown) == len(self.returns.get(key, ())):
            return
        self.returns[key] = grown
        word = key[1].rpartition(".")[2] + "("
        self.words.add(word)
        self._enqueue_mentions(word)

    def passed(self, key, param: str, taint: Taint) -> None:
        params = self.params.setdefault(key, {})
        grown = _union(params.get(param, ()), taint)
        if len(grown) != len(params.get(param, ())):
            params[param] = grown
            self._enqueue(key)

    def stored(self, slot: tuple[str, str], taint: Taint) -> None:
        """A module global (module, name) or an attribute of a process-wide object ("get_x()", attr)."""
        grown = _union(self.globals.get(slot, ()), taint)
        if len(grown) == len(self.globals.get(slot, ())):
            return
        self.globals[slot] = grown
        owner, name = slot
        self.words.add(name)
        if owner.endswith("()"):  # read back where the accessor is called and the attribute read
            self.words.add(owner)
            self._enqueue_mentions(owner, "." + name)
        else:
            mod = self.d.tree.module(owner)
            if mod is not None:
                self._enqueue_functions(mod, name)

    def consumed(self, taint: Taint, node, visit: Visit) -> None:
        for probe, hops in taint:
            sink = replace(
                probe,
                guard="asserted",
                path=visit.mod.relpath,
                line=node.lineno,
                col=node.col_offset,
                function=visit.info.qualname,
                features=((set(probe.features) | visit.features()) - {"core"}) or {"core"},
                detail=f"None of {probe.location}",
                via=hops,
                conditions=tuple(self.d.unparse(t) for t in visit.tests),
            )
            self.sinks.setdefault(sink.site_key(), sink)

    def gives_values(self, fn) -> bool:
        """A function with a ``return <value>``: its ``return None`` hands a None on (a procedure's
        bare ``return`` does not)."""
        if id(fn) not in self._gives:
            self._gives[id(fn)] = any(isinstance(n, ast.Return) and not _is_none(n.value) for n in _own_nodes(fn))
        return self._gives[id(fn)]

    # ------------------------------------------------------------ finding the functions to visit

    def _enqueue_mentions(self, text: str, *also: str) -> None:
        if self._runtime is None:  # every runtime module's text in one byte string: one find per name
            mods = [
                m for m in self.d.tree.package_modules(SRT) if not (m.name == MODELS or m.name.startswith(MODELS + "."))
            ]
            texts = [m.source.encode() for m in mods]  # bytes: a str with one non-ASCII char is 2-4x slower
            starts, pos = [], 0
            for t in texts:
                starts.append(pos)
                pos += len(t) + 1
            self._runtime = (mods, starts, b"\0".join(texts))
        mods, starts, text_all = self._runtime
        needle = text.encode()
        found, at = [], text_all.find(needle)
        while at != -1:
            i = bisect_right(starts, at) - 1
            found.append(mods[i])
            nxt = starts[i + 1] if i + 1 < len(starts) else len(text_all)
            at = text_all.find(needle, nxt)
        for mod in found:
            self._enqueue_functions(mod, text, *also)

    def _enqueue_functions(self, mod, *texts: str) -> None:
        """The functions of ``mod`` whose text holds every one of ``texts``."""
        out = mod.outline
        for name, (start, end) in out.functions.items():
            if all(t in mod.text(start, end) for t in texts):
                self._enqueue(self.d.key_for(mod, None, name, {}))
        for cname, co in out.classes.items():
            for name, m in co.members.items():
                if m.start and all(t in mod.text(m.start, m.end) for t in texts):
                    self._enqueue(self.d.key_for(mod, ClassRef(mod.name, cname), name, {}))

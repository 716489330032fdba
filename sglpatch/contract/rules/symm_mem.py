"""``sm12-torch-symm-mem``: on a GPU its capability tables do not list, TorchSymmMemCommunicator
disables itself with a warning instead of raising. Judged by what the code does, not its spelling.

0.5.9 rejects only capabilities below 9 and then indexes
``TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES[self.device_capability]``, which lists 9 and 10: SM12
(RTX PRO 6000) raises ``KeyError: 12`` while the TP group is built (patch 0004; upstream 0.5.14).

The check runs the communicator's methods with :mod:`.evaluate`: the tables and other module
constants are known, ``get_device_capability()`` returns the capability under test, anything else
is UNKNOWN and every undecided condition forks the path. It requires:

1. on capability 12 (or, if a table lists 12, the first capability none lists) ``__init__`` raises
   on no path, every path ends with the communicator disabled, and a path that read the capability
   and then gives up logs a warning on the way;
2. on a listed capability (the largest every table lists) some path still enables the
   communicator: a "fix" that disables it on every GPU (an early ``return``, an always-true
   guard) is no fix;
3. the other methods, run in the state (1) leaves behind, raise nothing over the unlisted
   capability (0.5.9's ``self._WORLD_SIZES_MULTIMEM[self.device_capability]`` in ``all_reduce``).

So any spelling with that effect passes (``cap not in T: return``; ``.get`` then ``is None`` or
``not``; ``try/except KeyError``; a helper method), and one without it fails (``if False and ...``,
a guard whose ``return`` was dropped or commented out, ``except KeyError: raise``, a guard that is
always true or always false, a warning commented out).
"""

from __future__ import annotations

import ast
import re
from typing import cast

from sglpatch.contract.interp.evaluate import Evaluator, ModuleGlobals
from sglpatch.contract.interp.values import UNKNOWN, End, PathRaises, Raised, State, merged_attrs
from sglpatch.contract.parse.outline import top_statements
from sglpatch.contract.parse.tree import Module, SourceTree
from sglpatch.contract.rules.gates import GateResult

SYMM_MODULE = "sglang.srt.distributed.device_communicators.torch_symm_mem"
SYMM_CLASS = "TorchSymmMemCommunicator"
SM12 = 12
_CAPABILITY = re.compile(r"(^|\.)get_device_capability$")
_CAPABILITY_PARAM = re.compile(r"capab|^(cc_)?major$")
_WARNING = re.compile(r"(^|\.)(warn\w*|print_warning\w*|error|critical|exception|info\w*|log\w*_on_rank0)$")
LAYOUT = "the layout changed, re-check SM12 behaviour by hand and update sglpatch/contract/symm_mem.py"


def find_communicator(tree: SourceTree) -> tuple[Module, ast.ClassDef] | None:
    mods = [tree.module(SYMM_MODULE)] + [
        m for m in tree.package_modules("sglang.srt.distributed") if f"class {SYMM_CLASS}" in m.source
    ]
    for mod in mods:
        if mod is None:
            continue
        for stmt in top_statements(mod.ast.body):
            if isinstance(stmt, ast.ClassDef) and stmt.name == SYMM_CLASS:
                return mod, stmt
    return None


class _Communicator:
    """The class under test: its methods, constants, capability tables and enabled flag."""

    def __init__(self, tree: SourceTree, mod: Module, cls: ast.ClassDef):
        self.mod, self.cls = mod, cls
        self.globals = ModuleGlobals(tree).for_module(mod)
        self.methods = {s.name: s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.functions = {s.name: s for s in mod.ast.body if isinstance(s, ast.FunctionDef)}
        ev = Evaluator(globals=self.globals)
        self.class_attrs = {}
        for s in cls.body:
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
                try:
                    self.class_attrs[s.targets[0].id] = ev.ev(s.value, State({}, {}))
                except PathRaises:
                    self.class_attrs[s.targets[0].id] = UNKNOWN
        self.tables = self._tables()
        self.flag = self._flag()

    def _tables(self) -> dict[str, dict]:
        """Dicts keyed by integers (capability majors) the class reads: class attributes or
        module-level names, e.g. TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES, _WORLD_SIZES_MULTIMEM."""
        names = {n.id for n in ast.walk(self.cls) if isinstance(n, ast.Name)}
        values = {n: self.globals(n) for n in names} | self.class_attrs
        return {n: v for n, v in values.items() if isinstance(v, dict) and v and all(isinstance(k, int) for k in v)}

    def _flag(self) -> str | None:
        """The attribute that says whether the communicator works (``self.disabled``): set to
        True and to False somewhere in the class. None: working means ``__init__`` ran to its end."""
        seen: dict[str, set] = {}
        for n in ast.walk(self.cls):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, bool):
                for t in n.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        seen.setdefault(t.attr, set()).add(n.value.value)
        both = [a for a, vals in seen.items() if vals == {True, False}]
        return "disabled" if "disabled" in both else (both[0] if both else None)

    def enabled(self, end: End):
        """True, False or UNKNOWN: does this path leave a working communicator?"""
        if self.flag is None:
            return end.kind == "fall"
        v = end.state.attrs.get(self.flag, UNKNOWN)
        if v is UNKNOWN:
            return UNKNOWN
        return not v if self.flag.startswith(("disable", "not_", "un")) else bool(v)

    def run(self, method: str, capability: int, attrs: dict | None = None) -> tuple[list[End], bool]:
        def hook(ev: Evaluator, node: ast.Call, name: str, args: list, kwargs: dict, st: State):
            if _CAPABILITY.search(name):
                return (capability, 0)
            f = node.func
            if (
                isinstance(f, ast.Attribute)
                and isinstance(f.value, ast.Name)
                and f.value.id == ev.self_name
                and f.attr in self.methods
            ):
                return ev.inline(self.methods[f.attr], _bind(self.methods[f.attr], args, kwargs, True), st)
            if isinstance(f, ast.Name) and f.id in self.functions:
                fn = self.functions[f.id]
                return ev.inline(fn, _bind(fn, args, kwargs, False), st, method=False)
            return NotImplemented

        ev = Evaluator(globals=self.globals, class_attr=lambda n: self.class_attrs.get(n, UNKNOWN), call=hook)
        fn = self.methods[method]
        args = {
            p.arg: capability for p in fn.args.args[1:] + fn.args.kwonlyargs if _CAPABILITY_PARAM.search(p.arg)
        }  # the capability passed in (a test layout)
        ends = ev.run(fn, args, attrs or {})
        return ends, ev.truncated

    def reads_capability(self, end: End) -> int | None:
        """Index in the path's calls after which the capability is known (-1: a parameter), or None."""
        fn = self.methods["__init__"]
        if any(_CAPABILITY_PARAM.search(p.arg) for p in fn.args.args[1:] + fn.args.kwonlyargs):
            return -1
        return next((i for i, (name, _) in enumerate(end.state.calls) if _CAPABILITY.search(name)), None)

    def loc(self, line: int) -> str:
        return f"{self.mod.relpath}:{line}"


def _bind(fn, args: list, kwargs: dict, method: bool) -> dict:
    params = [p.arg for p in fn.args.posonlyargs + fn.args.args]
    static = any(getattr(d, "id", None) == "staticmethod" for d in fn.decorator_list)
    if method and not static:
        params = params[1:]
    out = dict(zip(params, args))
    out.update({k: v for k, v in kwargs.items() if k in params or k in [p.arg for p in fn.args.kwonlyargs]})
    return out


def _warned_after(end: End, start: int) -> bool:
    return any(_WARNING.search(name) for name, _ in end.state.calls[start + 1 :])


def check_symm_mem(tree: SourceTree) -> GateResult:
    found = find_communicator(tree)
    if found is None:
        return GateResult([(f"torch_symm_mem.py ({SYMM_CLASS}) was not found: {LAYOUT}", None)])
    c = _Communicator(tree, *found)
    where = c.loc(c.cls.lineno)
    if not c.tables or "__init__" not in c.methods:
        return GateResult(
            [
                (
                    f"{c.mod.relpath} has no compute-capability keyed table (or no "
                    f"{SYMM_CLASS}.__init__) any more: {LAYOUT}",
                    where,
                )
            ]
        )
    unlisted = next(x for x in [SM12, *range(11, 100)] if all(x not in t for t in c.tables.values()))
    common = set.intersection(*(set(t) for t in c.tables.values()))
    listed = max(common or set().union(*(set(t) for t in c.tables.values())))
    ends, truncated = c.run("__init__", unlisted)
    readers = [e for e in ends if c.reads_capability(e) is not None]
    if not readers:
        return GateResult([_never_reached(c, ends)], where)
    findings: list[tuple[str, str | None]] = (
        [(f"{SYMM_CLASS}.__init__ has too many paths to analyse: {LAYOUT}", where)] if truncated else []
    )
    findings += _unlisted(c, unlisted, ends, readers)
    findings += _listed(c, listed)
    findings += _methods(c, unlisted, readers)
    evidence = (
        None
        if findings
        else (f"capability {unlisted}: disabled on every path with a warning; capability {listed}: can be enabled")
    )
    return GateResult(findings, where, evidence)


def _never_reached(c: _Communicator, ends: list[End]) -> tuple[str, str]:
    """No path reads the capability: it is read nowhere (layout), or every path returns first."""
    site = next(
        (n for n in ast.walk(c.cls) if isinstance(n, ast.Call) and _CAPABILITY.search(ast.unparse(n.func))), None
    )
    if site is None:
        return (f"{SYMM_CLASS} never reads torch.cuda.get_device_capability(): {LAYOUT}", c.loc(c.cls.lineno))
    exits = sorted({e.line for e in ends})
    return (
        f"{SYMM_CLASS}.__init__ never reaches its capability check at line {site.lineno} (every "
        f"path leaves at line {', '.join(map(str, exits))}): the communicator is disabled on "
        "every GPU",
        c.loc(exits[0]),
    )


def _unlisted(c: _Communicator, cap: int, ends: list[End], readers: list[End]) -> list[tuple]:
    """(1): on ``cap``, no path raises, every path ends disabled, and gives up with a warning."""
    on = f"on a GPU of compute capability {cap} (listed in none of {', '.join(sorted(c.tables))})"
    out = []
    for e in _unique(x for x in ends if x.kind == "raise"):
        out.append(
            (
                f"{on} {SYMM_CLASS}.__init__ raises {e.error.exc}: {e.error.message}{_path(e, c.reads_capability(e))}",
                c.loc(e.line),
            )
        )
    for e in _unique(x for x in ends if x.kind != "raise" and c.enabled(x) is not False):
        may = "may finish" if c.enabled(e) is UNKNOWN else "finishes"
        out.append(
            (
                f"{on} {SYMM_CLASS}.__init__ {may} with the communicator enabled instead of "
                f"disabled{_path(e, c.reads_capability(e))}",
                c.loc(e.line),
            )
        )
    for e in _unique(
        x
        for x in readers
        if x.kind != "raise" and c.enabled(x) is False and not _warned_after(x, cast(int, c.reads_capability(x)))
    ):  # readers: not None
        out.append(
            (
                f"{on} {SYMM_CLASS}.__init__ disables the communicator without logging a "
                f"warning (returns at line {e.line}){_path(e, c.reads_capability(e))}",
                c.loc(e.line),
            )
        )
    return out


def _listed(c: _Communicator, cap: int) -> list[tuple]:
    """(2): on a capability the tables list, some path still enables the communicator."""
    ends, _ = c.run("__init__", cap)
    if any(e.kind != "raise" and c.enabled(e) is not False for e in ends):
        return []
    exits = sorted({e.line for e in ends if c.reads_capability(e) is not None} or {e.line for e in ends})
    return [
        (
            f"on compute capability {cap}, which {', '.join(sorted(c.tables))} list, {SYMM_CLASS}."
            f"__init__ never enables the communicator (every path leaves at line "
            f"{', '.join(map(str, exits))}): the guard disables it on every GPU",
            c.loc(exits[0]),
        )
    ]


def _methods(c: _Communicator, cap: int, readers: list[End]) -> list[tuple]:
    """(3): the other methods, in the state __init__ leaves on ``cap``, raise nothing over it."""
    state = merged_attrs([e for e in readers if e.kind != "raise"] or readers)
    out = []
    for name in c.methods:
        if name.startswith("__") and name.endswith("__"):
            continue
        ends, _ = c.run(name, cap, state)
        for e in _unique(x for x in ends if x.kind == "raise" and cast(Raised, x.error).key == cap):
            out.append(
                (
                    f"on a GPU of compute capability {cap} {SYMM_CLASS}.{name} raises {e.error.exc}: {e.error.message}",
                    c.loc(e.line),
                )
            )
    return out


def _unique(ends):
    seen, out = set(), []
    for e in ends:
        key = (e.kind, e.line, e.error.exc if e.error else None)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def _path(e: End, since: int | None = -1) -> str:
    """The `if`s this path decided after the capability was read."""
    decided = [(line, t) for line, t, calls in e.state.branches if since is None or calls > since]
    if not decided:
        return ""
    taken = ", ".join(f"line {line} {'taken' if t else 'not taken'}" for line, t in decided[-4:])
    return f" (path: if at {taken})"

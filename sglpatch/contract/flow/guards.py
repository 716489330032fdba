"""Guards: which tests protect an access (hasattr probes, early exits, class checks, Protocols).

``GuardFacts`` is the part of the walk (``walker._Walker``) that reads a test for what it
proves about the model's members, and what a block that always raises or returns leaves known.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import cast

from sglpatch.contract.flow.access import Access, Val, _call_name, _const_str
from sglpatch.contract.flow.context import Driver
from sglpatch.contract.index.classes import ClassRef
from sglpatch.contract.parse.outline import dotted
from sglpatch.contract.parse.tree import Module


class GuardFacts:
    """Mixin of ``_Walker``: facts from tests (``self.known``: member -> guard)."""

    # What the mixin reads of ``_Walker`` (declared for the type checker; set in its __init__).
    d: Driver
    mod: Module
    self_name: str | None
    tests: list[ast.AST]
    checked_probe: set[int]
    probe_results: dict[str, list[Access]]
    ev: Callable[[ast.AST], Val | None]
    features: Callable[[], set[str]]

    def is_class_check(self, test) -> bool:
        """``isinstance(model, X)`` / ``type(model).__name__ == "X"``: a branch for one class only."""
        for n in ast.walk(test):
            if isinstance(n, ast.Compare):
                for side in [n.left] + n.comparators:
                    v = self.ev(side)
                    if v is not None and v.kind == "classname":
                        return True
            elif isinstance(n, ast.Call) and _call_name(n) in ("isinstance", "issubclass") and n.args:
                v = self.ev(n.args[0])
                if v is not None and v.kind in ("model", "class"):
                    return True
        return False

    def _result_name(self, e) -> str | None:
        """``name`` or ``self.name``: where a function keeps a value it tests later."""
        if isinstance(e, ast.Name):
            return e.id
        if (
            isinstance(e, ast.Attribute)
            and isinstance(e.value, ast.Name)
            and self.self_name is not None
            and e.value.id == self.self_name
        ):
            return f"{self.self_name}.{e.attr}"
        return None

    def _enforce_probe_results(self, test, negated: bool) -> None:
        """``assert supported`` / ``if not supported: raise``, where ``supported`` holds a probe's
        result: the probed member is required on the path that enforces it (the probe only turns
        a missing member into a clearer error)."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self._enforce_probe_results(test.operand, not negated)
            return
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and not negated:
            for v in test.values:
                self._enforce_probe_results(v, negated)
            return
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None
        ):
            # assert name is not None / if name is None: raise
            enforced = isinstance(test.ops[0], ast.IsNot) != negated
            name = self._result_name(test.left) if enforced else None
        else:
            name = None if negated else self._result_name(test)
        for access in self.probe_results.get(name, []) if name else []:
            access.guard = "asserted"
            access.conditions += tuple(c for c in map(self.d.unparse, self.tests) if c not in access.conditions)
            access.features = (access.features | self.features()) - {"core"} or {"core"}

    def _mark_checked(self, test, negated: bool) -> None:
        """``if not hasattr(model, "x"): raise ...``: the probe enforces presence."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self._mark_checked(test.operand, not negated)
        elif isinstance(test, ast.BoolOp):
            for v in test.values:
                self._mark_checked(v, negated)
        elif negated and isinstance(test, ast.Call) and _call_name(test) in ("hasattr", "callable"):
            self.checked_probe.add(id(test))
            if test.args and isinstance(test.args[0], ast.Call):
                self.checked_probe.add(id(test.args[0]))

    # ------------------------------------------------------------ facts from conditions

    def probe(self, e) -> str | None:
        """The member a presence probe checks: hasattr(m, "x"), callable(getattr(m, "x", None)), ..."""
        if isinstance(e, ast.Call):
            name = _call_name(e)
            if name in ("hasattr", "getattr") and len(e.args) >= 2 and _const_str(e.args[1]):
                base = self.ev(e.args[0])
                if base is not None and base.kind in ("model", "class"):
                    return cast(str, e.args[1].value)  # _const_str: a str constant
            if name == "callable" and len(e.args) == 1:
                return self.probe(e.args[0])
        return None

    def facts(self, test) -> tuple[dict, dict]:
        pos, neg = {}, {}
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            p, n = self.facts(test.operand)
            return n, p
        if isinstance(test, ast.BoolOp):
            parts = [self.facts(v) for v in test.values]
            if isinstance(test.op, ast.And):
                for p, _ in parts:
                    pos.update(p)
            else:
                for _, n in parts:
                    neg.update(n)
            return pos, neg
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None
        ):
            m = self.probe(test.left)
            if m:
                if isinstance(test.ops[0], ast.IsNot):
                    pos[m] = "hasattr"
                elif isinstance(test.ops[0], ast.Is):
                    neg[m] = "hasattr"
            return pos, neg
        m = self.probe(test)
        if m:
            pos[m] = "hasattr"
            if isinstance(test, ast.Call) and _call_name(test) == "hasattr":
                neg[m] = "absent"  # the else side (or code after `if hasattr(..): return`)
        # isinstance(model, P) for a Protocol P probes each of P's members (the else side only
        # knows that one of them is missing, so it learns nothing)
        pos.update(dict.fromkeys(self.protocol_members(test), "hasattr"))
        return pos, neg

    def protocol_members(self, test) -> list[str]:
        if not (
            isinstance(test, ast.Call)
            and _call_name(test) == "isinstance"
            and len(test.args) == 2
            and isinstance(test.args[1], (ast.Name, ast.Attribute))
        ):
            return []
        base = self.ev(test.args[0])
        if base is None or base.kind != "model":
            return []
        ref = self.d.classes.resolve(self.mod.name, dotted(test.args[1]))
        co = self.d.classes.outline(ref) if isinstance(ref, ClassRef) else None
        if co is None or not any(b and b.rpartition(".")[2] == "Protocol" for b in co.bases):
            return []
        return [name for name in co.members if not name.startswith("__")]

    # ------------------------------------------------------------ expressions


def _required_first(a: str, b: str) -> str:
    """The guard two call sites agree on: one that still requires the member wins."""
    return a if a in ("checked", "asserted") or b not in ("checked", "asserted") else b


def _after_exit(guard: str, how: str) -> str:
    """The fact that holds after ``if <test>: raise/return`` for the code that follows."""
    return "checked" if how == "raise" and guard == "hasattr" else guard


def _exits(stmts) -> str | None:
    """How a block always leaves: "raise", "return" (or continue/break), or None."""
    if not stmts:
        return None
    last = stmts[-1]
    if isinstance(last, ast.Raise):
        return "raise"
    if isinstance(last, (ast.Return, ast.Continue, ast.Break)):
        return "return"
    if isinstance(last, ast.If) and last.orelse:
        a, b = _exits(last.body), _exits(last.orelse)
        if a and b:
            return "raise" if "raise" in (a, b) else "return"
    return None


def caught(node) -> set[str]:
    """What an ``except`` clause (its type expression) catches, with ``*`` for everything that
    includes the errors a missing name raises (bare, Exception, BaseException)."""
    if node is None:
        return {"*"}
    if isinstance(node, ast.Tuple):
        return set().union(*(caught(e) for e in node.elts)) if node.elts else set()
    name = (dotted(node) or "").rpartition(".")[2]
    if name in ("Exception", "BaseException"):
        return {"*"}
    if name == "ModuleNotFoundError":
        return {"ImportError"}
    return {name} if name else set()


def _handler_guards(h: ast.ExceptHandler) -> bool:
    """An except clause that swallows AttributeError (does not re-raise)."""
    if not caught(h.type) & {"AttributeError", "*"}:
        return False
    return not any(isinstance(n, ast.Raise) for s in h.body for n in ast.walk(s))

"""The walk of one function under one set of parameter bindings: values and accesses.

Statements and expressions are walked in order; ``ev`` says which followed value (runner,
worker, model, class, stored getter) an expression denotes; every read, call or probe on a
model value is recorded as an ``Access`` with its guard (``guards.py``) and feature path, and
calls that pass a followed value along become edges (``calls.py``).
"""

from __future__ import annotations

import ast

from sglpatch.contract.flow.access import (
    _ATTR_ROOTS,
    _DRAFT_RUNNER_NAME,
    _EVENT_NAMES,
    _FOLLOWED,
    _NAME_ROOTS,
    GETTER,
    Access,
    FuncInfo,
    Val,
    _call_name,
    _const_str,
    _features_of,
)
from sglpatch.contract.flow.calls import CallGraph
from sglpatch.contract.flow.context import Driver
from sglpatch.contract.flow.guards import GuardFacts, _after_exit, _exits, _handler_guards
from sglpatch.contract.parse.outline import dotted, parameter_names, self_parameter

_LEAVES = (ast.Name, ast.Constant, ast.operator, ast.cmpop, ast.boolop, ast.unaryop, ast.expr_context)


class _Walker(GuardFacts, CallGraph):
    """Walk one function under one set of parameter bindings."""

    def __init__(self, d: Driver, key, info: FuncInfo):
        self.d = d
        self.key = key
        self.info = info
        self.mod = info.module
        self.cls = info.cls
        self.bindings = dict(key[2])
        self.env: dict[str, Val] = {}
        self.accesses: list[Access] = []
        self.events: list[tuple] = []
        self.edge_features: dict[tuple, set] = {}
        self.guarded_edges: set = set()
        self.call_facts: list = []
        self.known: dict[str, str] = {}
        self.try_guard = 0
        self.tests: list[ast.AST] = []
        self.in_assert = False
        self.class_checked = 0
        self.checked_probe: set[int] = set()
        # A probe's result kept in a name (``self.support_pp = "x" in signature(m.forward)...``):
        # the name -> the probe accesses its value holds, upgraded when an assert enforces it.
        self.probe_results: dict[str, list[Access]] = {}
        self.handled: set[int] = set()
        self.parents: dict[int, ast.AST] = {}
        args = info.node.args
        self.params = parameter_names(args)
        self.self_name = self_parameter(info.node)[0] if self.cls is not None else None
        self.is_runner = self.cls in d.runner_classes
        self.in_spec = "/speculative/" in self.mod.relpath
        self.context = f"{self.mod.relpath} {info.qualname}"
        for a in args.posonlyargs + args.args + args.kwonlyargs:
            ann = dotted(a.annotation) if a.annotation is not None else None
            if isinstance(a.annotation, ast.Constant) and isinstance(a.annotation.value, str):
                ann = a.annotation.value
            if ann and ann.rpartition(".")[2] in ("ModelRunner", "Optional[ModelRunner]"):
                self.env[a.arg] = Val("runner", "any", "runner-name")
        self.env.update(self.bindings)

    # ------------------------------------------------------------ evaluation of expressions

    def _stored_getter(self, func) -> Val | None:
        """The getter a call invokes, when it is one: a getter is only ever stored in a local
        name or on ``self``, so no other callee is evaluated."""
        stored = isinstance(func, ast.Name) or (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and bool(self.self_name)
            and func.value.id == self.self_name
        )
        v = self.ev(func) if stored else None
        return v if v is not None and v.kind.startswith(GETTER) else None

    def ev(self, e) -> Val | None:
        if isinstance(e, ast.Name):
            if e.id in self.env:
                return self.env[e.id]
            if self.self_name and e.id == self.self_name and self.is_runner:
                return Val("runner", "any", "runner-self")
            r = _NAME_ROOTS.get(e.id)
            if r is not None and e.id != self.self_name:
                return Val(*r)
            if _DRAFT_RUNNER_NAME.match(e.id):
                return Val("runner", "draft", "draft-runner")
            return None
        if isinstance(e, ast.Attribute):
            base = self.ev(e.value)
            if base is not None:
                if base.kind == "model" and e.attr == "__class__":
                    return Val("class", base.role, base.pattern)
                if base.kind == "class" and e.attr == "__name__":
                    return Val("classname", base.role, base.pattern)
                if base.kind == "runner" and e.attr == "model":
                    return Val("model", base.role, base.pattern)
                if base.kind == "worker" and e.attr in ("model_runner", "_model_runner"):
                    return Val("runner", base.role, base.pattern)
                if base.kind == "worker" and e.attr == "worker":
                    return base
                if base.kind == "runner" and e.attr in ("draft_model_runner", "draft_runner"):
                    return Val("runner", "draft", "draft-runner")
                return None
            is_self = isinstance(e.value, ast.Name) and self.self_name and e.value.id == self.self_name
            if is_self:
                v = self.d.attr_root(self.cls, e.attr)
                if v is not None:
                    return v
            r = _ATTR_ROOTS.get(e.attr)
            if r is not None:
                if r[2] == "runner-attr" and is_self and self.in_spec:
                    return Val("runner", "draft", "spec-self")
                return Val(*r)
            if _DRAFT_RUNNER_NAME.match(e.attr):
                return Val("runner", "draft", "draft-runner")
            return None
        if isinstance(e, ast.Lambda):  # get_model=lambda: self.model: a stored getter
            inner = self.ev(e.body) if not (e.args.args or e.args.posonlyargs) else None
            return Val(GETTER + inner.kind, inner.role, inner.pattern) if inner and inner.kind in _FOLLOWED else None
        if isinstance(e, ast.Call):
            getter = self._stored_getter(e.func)
            if getter is not None:  # self._get_model()
                return Val(getter.kind[len(GETTER) :], getter.role, getter.pattern)
            name = dotted(e.func) or ""
            last = name.rpartition(".")[2]
            if last == "get_model_architecture":
                return Val("archtuple", "target", "model-arch")
            if last == "ModelRunner":
                return Val("runner", "any", "runner-name")
            if isinstance(e.func, ast.Attribute) and _DRAFT_RUNNER_NAME.match(e.func.attr):
                return Val("runner", "draft", "draft-runner")  # self.mtp_model_runner(i)
            if isinstance(e.func, ast.Attribute) and e.func.attr == "get_model_runner":
                base = self.ev(e.func.value)
                if base is not None and base.kind == "worker":
                    return Val("runner", base.role, base.pattern)
            if name == "type" and len(e.args) == 1:
                base = self.ev(e.args[0])
                if base is not None and base.kind == "model":
                    return Val("class", base.role, base.pattern)
            return None
        if isinstance(e, ast.Subscript):
            base = self.ev(e.value)
            if (
                base is not None
                and base.kind == "archtuple"
                and isinstance(e.slice, ast.Constant)
                and e.slice.value == 0
            ):
                return Val("class", base.role, base.pattern)
            if base is not None and base.kind == "runner":  # draft_runner_list[i]
                return base
            return None
        if isinstance(e, ast.IfExp):
            return self.ev(e.body) or self.ev(e.orelse)
        if isinstance(e, ast.NamedExpr):
            return self.ev(e.value)
        if isinstance(e, ast.BoolOp) and isinstance(e.op, ast.Or):
            for operand in e.values:
                found = self.ev(operand)
                if found is not None:
                    return found
        return None

    def _collect_env(self) -> None:
        assigns = self.d.assigns(self.info.node)
        for _ in range(3):
            before = dict(self.env)
            for targets, value in assigns:
                v = self.ev(value)
                for t in targets:
                    if isinstance(t, ast.Name):
                        if v is not None and t.id not in self.bindings:
                            self.env[t.id] = v
                    elif isinstance(t, ast.Tuple) and v is not None and v.kind == "archtuple" and t.elts:
                        first = t.elts[0]
                        if isinstance(first, ast.Name):
                            self.env[first.id] = Val("class", v.role, v.pattern)
                    elif (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and self.self_name
                        and t.value.id == self.self_name
                        and self.cls is not None
                        and v is not None
                        and (v.kind in _FOLLOWED or v.kind.startswith(GETTER))
                        and not self.is_runner
                    ):
                        self.d.set_attr_root(self.cls, t.attr, v)
            if self.env == before:
                break

    # ------------------------------------------------------------ walking

    def run(self) -> None:
        self._collect_env()
        self.block(self.info.node.body)

    def block(self, stmts) -> None:
        saved = dict(self.known)
        for stmt in stmts:
            self.stmt(stmt)
        self.known = saved

    def stmt(self, s) -> None:
        if isinstance(s, ast.If):
            pos, neg = self.facts(s.test)
            body_exit = _exits(s.body)
            else_exit = _exits(s.orelse) if s.orelse else None
            if body_exit == "raise":  # if not hasattr(m, "x"): raise
                self._mark_checked(s.test, negated=False)
                self._enforce_probe_results(s.test, negated=True)
            elif else_exit == "raise":  # if hasattr(m, "x"): m.x() / else: raise (an elif chain's end)
                self._mark_checked(s.test, negated=True)
                self._enforce_probe_results(s.test, negated=False)
            self.with_test(s.test, lambda: self.expr(s.test))
            specific = self.is_class_check(s.test)
            self.class_checked += specific
            self.with_test(s.test, lambda: self.block_with(s.body, pos))
            self.class_checked -= specific
            if s.orelse:
                self.with_test(self.d.negated(s.test), lambda: self.block_with(s.orelse, neg))
            if body_exit:
                self.known.update({m: _after_exit(g, body_exit) for m, g in neg.items()})
            if else_exit:
                self.known.update({m: _after_exit(g, else_exit) for m, g in pos.items()})
        elif isinstance(s, ast.While):
            pos, _ = self.facts(s.test)
            self.with_test(s.test, lambda: self.expr(s.test))
            self.with_test(s.test, lambda: self.block_with(s.body, pos))
            self.block(s.orelse)
        elif isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
            guards = any(_handler_guards(h) for h in s.handlers)
            if guards:
                self.try_guard += 1
            self.block(s.body)
            if guards:
                self.try_guard -= 1
            for h in s.handlers:
                self.block(h.body)
            self.block(s.orelse)
            self.block(s.finalbody)
        elif isinstance(s, ast.Assign) and len(s.targets) == 1:
            first = len(self.accesses)
            self.expr(s.value)
            self.expr(s.targets[0])
            # a probe's result, or getattr(m, "x", None): None when the member is missing
            none_default = _getattr_none_default(s.value)
            probes = [
                a
                for a in self.accesses[first:]
                if a.guard in ("signature-probe", "hasattr")
                or (none_default and a.kind == "getattr" and a.guard == "getattr-default")
            ]
            name = self._result_name(s.targets[0])
            if name is not None:
                if probes:
                    self.probe_results[name] = probes
                else:
                    self.probe_results.pop(name, None)
        elif isinstance(s, ast.Assert):
            self._enforce_probe_results(s.test, negated=False)
            pos, _ = self.facts(s.test)
            self.in_assert = True
            self.expr(s.test)
            self.in_assert = False
            if s.msg is not None:
                self.expr(s.msg)
            self.known.update({m: "asserted" for m in pos})
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            self.expr(s.iter)
            self.block(s.body)
            self.block(s.orelse)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self.expr(item.context_expr)
            self.block(s.body)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in s.decorator_list:
                self.expr(dec)
            self.block(s.body)
        elif isinstance(s, ast.ClassDef):
            return
        elif isinstance(s, ast.Match):
            self.expr(s.subject)
            for case in s.cases:
                self.block(case.body)
        else:
            for child in ast.iter_child_nodes(s):
                if isinstance(child, ast.expr):
                    self.expr(child)
                elif isinstance(child, ast.stmt):
                    self.stmt(child)

    def block_with(self, stmts, facts: dict) -> None:
        saved = dict(self.known)
        self.known.update(facts)
        self.block(stmts)
        self.known = saved

    def with_test(self, test, fn) -> None:
        self.tests.append(test)
        try:
            fn()
        finally:
            self.tests.pop()

    def expr(self, e) -> None:
        if e is None or isinstance(e, _LEAVES):
            return
        if isinstance(e, ast.BoolOp):
            saved = dict(self.known)
            for v in e.values:
                self.expr(v)
                p, n = self.facts(v)
                self.known.update(p if isinstance(e.op, ast.And) else n)
                self.tests.append(v)
            del self.tests[len(self.tests) - len(e.values) :]
            self.known = saved
            return
        if isinstance(e, ast.IfExp):
            pos, neg = self.facts(e.test)
            self.expr(e.test)
            self.tests.append(e.test)
            self.block_expr(e.body, pos)
            self.block_expr(e.orelse, neg)
            self.tests.pop()
            return
        if isinstance(e, ast.Lambda):
            self.expr(e.body)
            return
        if isinstance(e, ast.Call):
            self.call(e)
        elif isinstance(e, ast.Attribute):
            if isinstance(e.value, ast.Attribute):
                self.parents[id(e.value)] = e
            if id(e) not in self.handled:
                self.attribute(e)
        elif isinstance(e, ast.Compare):
            self.signature_probe(e)
        for child in ast.iter_child_nodes(e):
            if isinstance(child, _LEAVES):
                continue
            if isinstance(child, ast.expr):
                self.expr(child)
            elif isinstance(child, ast.keyword):  # f(x=model.member): not an ast.expr
                self.expr(child.value)
            elif isinstance(child, ast.comprehension):
                self.expr(child.iter)
                for cond in child.ifs:
                    self.expr(cond)
                self.expr(child.target)

    def block_expr(self, e, facts) -> None:
        saved = dict(self.known)
        self.known.update(facts)
        self.expr(e)
        self.known = saved

    def attribute(self, e: ast.Attribute) -> None:
        if not isinstance(e.ctx, ast.Load):
            return
        base = self.ev(e.value)
        if base is None or base.kind not in ("model", "class"):
            return
        parent = self.parents.get(id(e))
        detail = ""
        if isinstance(parent, ast.Attribute) and parent.value is e:
            detail = f"{e.attr}.{parent.attr}"
        self.record(e.attr, base, "attr", e, detail=detail)

    def call(self, c: ast.Call) -> None:
        name = _call_name(c)
        if name in ("getattr", "hasattr") and len(c.args) >= 2 and _const_str(c.args[1]):
            base = self.ev(c.args[0])
            if base is not None and base.kind in ("model", "class"):
                member = c.args[1].value
                if name == "getattr":
                    guarded = len(c.args) >= 3 or any(k.arg == "default" for k in c.keywords)
                    self.record(member, base, "getattr", c, guard="getattr-default" if guarded else None)
                else:
                    guard = "asserted" if self.in_assert else ("checked" if id(c) in self.checked_probe else "hasattr")
                    self.record(member, base, "hasattr", c, guard=guard)
        if isinstance(c.func, ast.Attribute):
            base = self.ev(c.func.value)
            if base is not None and base.kind in ("model", "class"):
                none_arg = (
                    bool(c.args)
                    and all(isinstance(a, ast.Constant) and a.value is None for a in c.args)
                    and not c.keywords
                )
                self.record(c.func.attr, base, "call", c.func, nargs=len(c.args) + len(c.keywords), none_arg=none_arg)
                self.handled.add(id(c.func))
                self.events.append(
                    (
                        "member_call",
                        c.func.attr,
                        len(c.args) + len(c.keywords),
                        none_arg,
                        c.lineno,
                        base.role,
                        self.mod.relpath,
                    )
                )
        simple = name.rpartition(".")[2] if name else ""
        if simple and _EVENT_NAMES.search(simple):
            self.events.append(("named", simple, c.lineno, self.mod.relpath))
        self.edge(c)

    def signature_probe(self, e: ast.Compare) -> None:
        # "pp_proxy_tensors" in inspect.signature(model.forward).parameters
        if len(e.ops) != 1 or not isinstance(e.ops[0], (ast.In, ast.NotIn)) or not _const_str(e.left):
            return
        right = e.comparators[0]
        if not (
            isinstance(right, ast.Attribute)
            and right.attr == "parameters"
            and isinstance(right.value, ast.Call)
            and _call_name(right.value).endswith("signature")
            and right.value.args
            and isinstance(right.value.args[0], ast.Attribute)
        ):
            return
        target = right.value.args[0]
        base = self.ev(target.value)
        if base is None or base.kind not in ("model", "class"):
            return
        self.record(target.attr, base, "signature", e, guard="signature-probe", detail=e.left.value)

    def record(self, member, base: Val, kind, node, *, guard=None, nargs=None, none_arg=False, detail=""):
        if member.startswith("__") and member.endswith("__"):
            return
        if guard is None and kind in ("attr", "call"):
            if member in self.known:
                guard = self.known[member]
                if guard == "absent":
                    guard = "fallback"  # reached only when the member is missing: an error path
            elif self.try_guard:
                guard = "try-except"
        elif guard is None and self.try_guard:
            guard = "try-except"
        if guard is None and self.class_checked:
            guard = "class-check"
        role = base.role
        if base.kind == "class":
            kind = "class-" + kind if not kind.startswith("class") else kind
        features = self.features()
        if kind.endswith("signature"):  # the probed parameter names the path (pp_proxy_tensors)
            features = (features | _features_of(detail)) - {"core"} or {"core"}
        self.accesses.append(
            Access(
                member=member,
                role=role,
                kind=kind,
                guard=guard,
                path=self.mod.relpath,
                line=node.lineno,
                col=node.col_offset,
                function=self.info.qualname,
                pattern=base.pattern,
                features=features,
                nargs=nargs,
                none_arg=none_arg,
                detail=detail,
                conditions=tuple(self.d.unparse(t) for t in self.tests),
            )
        )

    def features(self) -> set[str]:
        text = self.context + " " + " ".join(self.d.unparse(t) for t in self.tests)
        return _features_of(text)

    # ------------------------------------------------------------ calls into the tree


def _getattr_none_default(value) -> bool:
    """``getattr(x, "name", None)``: the value is None exactly when the member is missing."""
    if not (isinstance(value, ast.Call) and _call_name(value) == "getattr" and len(value.args) >= 2):
        return False
    default = (
        value.args[2] if len(value.args) >= 3 else next((k.value for k in value.keywords if k.arg == "default"), None)
    )
    return isinstance(default, ast.Constant) and default.value is None

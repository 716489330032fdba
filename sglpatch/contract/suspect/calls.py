"""Rules 3 and 4 of the suspect scan (:mod:`.merge`), on the calls an added line makes: every
keyword an added call passes must be one the callee accepts, and each call is recorded for the
call-coverage rule. A callee is resolved with the contract checker's class index
(``ClassIndex.method_def`` and ``callable_def``)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import cast

from sglpatch.contract.index.classes import ClassRef
from sglpatch.contract.parse.outline import dotted
from sglpatch.contract.parse.tree import Module
from sglpatch.contract.suspect.model import Run, View, _Call, _Scope

SIGNATURE_DECORATORS = frozenset(
    (
        "staticmethod",
        "classmethod",
        "abstractmethod",
        "lru_cache",
        "cache",
        "no_grad",
        "inference_mode",
        "contextmanager",
        "asynccontextmanager",
        "override",
        "final",
        "cached_property",
        "property",
    )
)


class CallChecks:
    """The call half of :class:`.scan.Scan` (which supplies ``view``, ``mod``, ``run_``,
    ``collect``, ``calls``, ``added`` and ``report``)."""

    # What the mixin reads of ``Scan`` (declared for the type checker; set in its __init__).
    view: View
    mod: Module
    run_: Run
    collect: str | None
    calls: list[_Call]
    added: Callable[[int], bool]
    report: Callable[[int, str, str], None]

    def call(self, node: ast.Call, scope: _Scope) -> None:
        if isinstance(node.func, ast.Attribute):
            node.func._parent_call = node  # type: ignore[attr-defined]  # a mark on the node, read by Scan.self_attr
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name is None or (self.collect is not None and name != self.collect):
            return
        target = self.callee(node, scope)
        identity = target[0] if target else None
        if (
            target is None
            and isinstance(node.func, ast.Name)
            and node.func.id not in scope.locals
            and self.view.tree.resolve(self.mod.name, node.func.id).kind == "external"
        ):
            identity = "<external>"  # a library function that happens to share the name
        keywords = frozenset(k.arg for k in node.keywords if k.arg)
        splat = any(k.arg is None for k in node.keywords)
        call = _Call(self.mod.relpath, node.lineno, name, identity, keywords, splat, scope.where)
        if self.collect is not None:
            self.calls.append(call)
            return
        added_kw = [k for k in node.keywords if k.arg and self.added(k.lineno)]
        if self.added(node.lineno) or added_kw:
            self.run_.patched.append(call)
        if target is None or not added_kw:
            return
        qual, fn, override_check = target
        accepts = _accepts(fn)
        if accepts is None:
            return
        for k in added_kw:
            if k.arg in accepts:
                continue
            if override_check is not None and override_check(k.arg):
                continue
            why = f"{_short(qual)}() has no parameter '{k.arg}' (and no **kwargs) in {self.view.version}"
            old_target = self.old_callee(qual)
            old_accepts = _accepts(old_target) if old_target is not None else set()
            if old_accepts is None or k.arg in old_accepts:
                why += f" (removed upstream; {self.run_.old.version} accepts it)"
            self.report(k.lineno, cast(str, k.arg), why)  # added_kw holds named keywords only

    def callee(self, node: ast.Call, scope: _Scope):
        """(qualified name, FunctionDef, override check or None) of a call that resolves in the tree."""
        f = node.func
        tree, ci = self.view.tree, self.view.classes
        if isinstance(f, ast.Name):
            if f.id in scope.locals:
                return None
            return self.from_symbol(tree.resolve(self.mod.name, f.id))
        if not isinstance(f, ast.Attribute):
            return None
        recv = f.value
        if isinstance(recv, ast.Name) and scope.cls is not None and recv.id == scope.self_name:
            found = self.method(scope.cls, f.attr)
            if found is None:
                return None
            subs = ci.subclasses(scope.cls)

            def override_accepts(kw, cls=scope.cls, attr=f.attr):
                for sub in subs:
                    m = self.method(sub, attr)
                    if m is not None and m[1] is not found[1]:
                        acc = _accepts(m[1])
                        if acc is None or kw in acc:
                            return True
                return False

            return found[0], found[1], override_accepts
        d = dotted(recv)
        if d is None or d.split(".")[0] in scope.locals or d.split(".")[0] in ("self", "cls"):
            return None
        sym = tree.resolve_dotted(self.mod.name, d)
        if sym.kind == "module":
            return self.from_symbol(tree.resolve(sym.module, f.attr))
        if sym.kind == "class":
            assert sym.name is not None  # a class symbol is always named
            found = self.method(ClassRef(sym.module, sym.name), f.attr)
            if found is not None:
                return found[0], found[1], None
        return None

    def from_symbol(self, sym):
        target = self.view.classes.callable_def(sym, past_external=False)
        if target is None:
            return None
        _, owner, name, fn = target
        if owner is None:
            return sym.qualname, fn, None
        ref = ClassRef(sym.module, sym.name)
        if self.generated_init(ref, f"{owner.qualname}.{name}"):
            return None
        return f"{sym.module}.{sym.name}", fn, None

    def generated_init(self, ref: ClassRef, init: str) -> bool:
        """A decorated class (``@dataclass``...) or ``__new__`` between ``ref`` and the ``__init__``
        found: the constructor's real signature is not the one written."""
        for c in self.view.classes.mro(ref):
            if not isinstance(c, ClassRef):
                return True
            co = self.view.classes.outline(c)
            if co is None or co.decorators or "__new__" in co.members:
                return True
            if init.startswith(c.qualname + "."):
                return False
        return True

    def method(self, ref: ClassRef, name: str):
        """(qualified owner.method, FunctionDef) of the first definition of ``name`` in the MRO, or
        None when it is not a function (an attribute or a property shadows it) or an external base
        may define it."""
        owner, fn, member = self.view.classes.method_def(ref, name, past_external=False)
        if fn is None or member.kind == "property":
            return None
        return f"{owner.qualname}.{name}", fn

    def old_callee(self, qual: str):
        """The same definition in the old tree (by qualified name), for the 'removed upstream' note."""
        old = self.run_.old
        parts = qual.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            modname = ".".join(parts[:cut])
            mod = old.tree.module(modname)
            if mod is None:
                continue
            rest = parts[cut:]
            if len(rest) == 1:
                if rest[0] in mod.outline.functions:
                    return mod.function(rest[0])
                if rest[0] in mod.outline.classes:
                    m = mod.outline.classes[rest[0]].members.get("__init__")
                    return mod.segment(m.start, m.end) if m and m.start else None
            elif len(rest) == 2 and rest[0] in mod.outline.classes:
                m = mod.outline.classes[rest[0]].members.get(rest[1])
                return mod.segment(m.start, m.end) if m and m.start else None
            return None
        return None


def _accepts(fn) -> set[str] | None:
    """Keyword names a def accepts; None when it takes **kwargs or a decorator may change that."""
    if fn is None or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    for d in fn.decorator_list:
        name = (dotted(d.func if isinstance(d, ast.Call) else d) or "?").rpartition(".")[2]
        if name not in SIGNATURE_DECORATORS and not name.endswith(("setter", "deleter")):
            return None
    args = fn.args
    if args.kwarg is not None:
        return None
    return {a.arg for a in args.args + args.kwonlyargs}


def _short(qual: str) -> str:
    parts = qual.split(".")
    return ".".join(parts[-2:]) if len(parts) >= 2 and parts[-2][:1].isupper() else parts[-1]

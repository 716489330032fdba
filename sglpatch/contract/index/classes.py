"""Classes in the tree: base resolution across modules, MRO and member lookup (``lookup`` for the
contract, ``resolves`` for code that is not a model), through external bases (:mod:`.external`)
and ``__getattr__`` (:mod:`.getattr_forward`). Wrapper models and their inner models are the
index's other half (:mod:`.wrappers`); the types it returns live in :mod:`.refs`.
"""

from __future__ import annotations

import re
from typing import cast

from sglpatch.contract.index.getattr_forward import getattr_paths
from sglpatch.contract.index.loader import loader_set_attributes
from sglpatch.contract.index.wrappers import Wrappers
from sglpatch.contract.parse.external import (
    CLOSED_BASES,
    EMPTY_BASES,
    NN_MODULE_BASES,
    NN_MODULE_MEMBERS,
    OBJECT_MEMBERS,
    PLAIN_CLASS_DECORATORS,
    PRETRAINED_MODEL_BASES,
    PRETRAINED_MODEL_MEMBERS,
)
from sglpatch.contract.parse.outline import ClassOutline, Member
from sglpatch.contract.parse.refs import ClassRef, External, Lookup
from sglpatch.contract.parse.tree import MODELS, SRT, Module, SourceTree, Symbol

__all__ = ["ClassIndex", "ClassRef", "External", "Lookup"]  # the types live in refs.py

# ``__getattr__`` forwarding is followed through at most this many wrappers: a chain that goes on
# (two classes forwarding to each other) is unknown, not missing.
FORWARD_DEPTH = 3
_CLASS_LINE = re.compile(r"^class\s+(\w+)", re.M)


class ClassIndex(Wrappers):
    def __init__(self, tree: SourceTree):
        self.tree = tree
        self._mro: dict[ClassRef, list] = {}
        self._names: dict[str, dict[str, list[ClassRef]]] = {}  # package -> class name -> classes
        self._lm: dict[ClassRef, bool] = {}
        self._wrapper: dict[ClassRef, bool] = {}
        self._inners: dict[ClassRef, list] = {}
        self._getattr_paths: dict[tuple, list] = {}
        self._loader_set: dict[str, str] | None = None
        self._method_defs: dict[tuple, tuple] = {}
        self._lookups: dict[tuple, Lookup] = {}
        self._subclasses: dict[ClassRef, list[ClassRef]] = {}

    @property
    def loader_set(self) -> dict[str, str]:
        """Attributes the model loader sets on every model it builds (``loader.py``)."""
        if self._loader_set is None:
            self._loader_set = loader_set_attributes(self.tree)
        return self._loader_set

    # ------------------------------------------------------------ lookup of classes

    def outline(self, ref: ClassRef) -> ClassOutline | None:
        mod = self.tree.module(ref.module)
        return mod.outline.classes.get(ref.name) if mod else None

    def location(self, ref: ClassRef, line: int | None = None) -> str:
        mod = self.tree.module(ref.module)
        assert mod is not None  # a ClassRef names a module of the tree
        co = self.outline(ref)
        return f"{mod.relpath}:{line if line is not None else (co.line if co else 0)}"

    def resolve(self, module: str, expr: str | None):
        """A class expression as written in ``module`` -> ClassRef, External, or None."""
        if not expr:
            return None
        sym = self.tree.resolve_dotted(module, expr)
        return self._from_symbol(sym)

    @staticmethod
    def _from_symbol(sym: Symbol):
        if sym.kind == "class":
            assert sym.name is not None  # a class symbol is always named
            return ClassRef(sym.module, sym.name)
        if sym.kind == "external":
            return External(sym.qualname)
        return None

    def by_name(self, name: str) -> list[ClassRef]:
        """Classes called ``name``: the model package's if it has any, else the rest of srt's
        (whichever was asked for first); a dotted name is the one class it names."""
        if "." in name:
            module, _, cls = name.rpartition(".")
            ref = ClassRef(module, cls)
            return [ref] if self.outline(ref) else []
        for pkg in (MODELS, SRT):
            found = [r for r in self._class_names(pkg).get(name, []) if self.outline(r) is not None]
            if found:
                return found
        return []

    def _class_names(self, pkg: str) -> dict[str, list[ClassRef]]:
        """The classes of a package by name, by a text scan before any parsing (srt's holds the
        models' too, but is only asked for a name the models lack)."""
        if pkg not in self._names:
            names = self._names[pkg] = {}
            for mod in self.tree.package_modules(pkg):
                for m in _CLASS_LINE.finditer(mod.source):
                    names.setdefault(m.group(1), []).append(ClassRef(mod.name, m.group(1)))
        return self._names[pkg]

    # ------------------------------------------------------------ MRO

    def bases(self, ref: ClassRef) -> list:
        co = self.outline(ref)
        if co is None:
            return []
        out = []
        for b in co.bases:
            r = self.resolve(ref.module, b)
            out.append(r if r is not None else External(b or "?"))
        return out

    def mro(self, ref: ClassRef) -> list:
        if ref in self._mro:
            return self._mro[ref]
        self._mro[ref] = [ref]  # recursion guard for cyclic or self-referential bases
        seqs = []
        for b in self.bases(ref):
            seqs.append(self.mro(b) if isinstance(b, ClassRef) else [b])
        bases = self.bases(ref)
        result = [ref] + _c3_merge(seqs + [list(bases)])
        self._mro[ref] = result
        return result

    # ------------------------------------------------------------ members

    def lookup(self, ref: ClassRef, member: str, *, on_class: bool = False, _depth: int = 0) -> Lookup:
        """Where ``member`` of ``ref`` comes from; asked again for every access of every model, so kept."""
        key = (ref, member, on_class, _depth)
        if key not in self._lookups:
            self._lookups[key] = self._find(ref, member, on_class, _depth)
        return self._lookups[key]

    def _find(self, ref: ClassRef, member: str, on_class: bool, _depth: int) -> Lookup:
        unknown = []
        for c in self.mro(ref):
            if isinstance(c, External):
                found = _external_member(c.dotted, member)
                if found is not None:
                    return found
                if not _module_base(c.dotted) and c.dotted not in EMPTY_BASES:
                    unknown.append(c.dotted)
                continue
            co = self.outline(c)
            if co is None:
                continue
            m = co.members.get(member)
            if m is None or m.kind == "annotation" or (on_class and m.kind == "self-attr"):
                continue
            kind = m.kind + (f" ({m.where}{', conditional' if m.conditional else ''})" if m.kind == "self-attr" else "")
            return Lookup("present", c.qualname, kind, self.location(c, m.line))
        if not on_class and member in self.loader_set:
            return Lookup("present", "the model loader", "set on every model", self.loader_set[member])
        if not on_class:
            owner = next(
                (
                    c
                    for c in self.mro(ref)
                    if isinstance(c, ClassRef)
                    and self.outline(c)
                    and cast(ClassOutline, self.outline(c)).getattr_forward is not None
                ),
                None,
            )
            if owner is not None and _depth >= FORWARD_DEPTH:  # owner: a class with an outline
                where = self.location(owner, cast(ClassOutline, self.outline(owner)).members["__getattr__"].line)
                return Lookup(
                    "unknown",
                    None,
                    None,
                    where,
                    f"__getattr__ forwards through more than {FORWARD_DEPTH} wrappers (or in a circle)",
                )
            if owner is not None:
                return self._via_getattr(ref, owner, member, _depth)
        if unknown:
            return Lookup("unknown", None, None, None, f"not found; external base {unknown[0]} not analysed")
        return Lookup("missing")

    def _via_getattr(self, ref: ClassRef, owner: ClassRef, member: str, depth: int) -> Lookup:
        """``member`` as ``owner.__getattr__`` serves it on an instance of ``ref``: forwarded only
        when every path forwards to an inner object whose class really has it."""
        m = cast(ClassOutline, self.outline(owner)).members["__getattr__"]  # owner: a class with an outline
        where = self.location(owner, m.line)
        key = (owner, member)
        if key not in self._getattr_paths:
            self._getattr_paths[key] = getattr_paths(self.tree, owner, m, member)
        paths = self._getattr_paths[key]
        found, lacking, unsure = [], [], []
        for kind, chain in paths:
            if kind in ("raise", "none"):
                lacking.append(
                    "__getattr__ raises AttributeError for it" if kind == "raise" else "__getattr__ returns None for it"
                )
                continue
            if kind != "forward":
                unsure.append(f"__getattr__ {kind} for it")
                continue
            targets = self.resolve_chain(ref, chain)
            text = "self." + ".".join(chain)
            if targets is None:
                unsure.append(f"__getattr__ forwards to {text}, whose class is not known statically")
                continue
            looks = [(t, self.lookup(t, member, _depth=depth + 1)) for t in targets]
            missing = [t.name for t, lk in looks if lk.status == "missing"]
            unsettled = [f"{t.name}: {lk.note}" for t, lk in looks if lk.status == "unknown"]
            if missing:
                lacking.append(f"__getattr__ forwards to {text} ({', '.join(missing)} lacks it)")
            elif unsettled:
                unsure.append(f"__getattr__ forwards to {text} ({'; '.join(unsettled)})")
            else:
                found.append(
                    f"forwarded by __getattr__ to {text} (" + ", ".join(f"{t.name}: {lk.kind}" for t, lk in looks) + ")"
                )
        if found and not lacking and not unsure:
            return Lookup("forwarded", owner.qualname, "__getattr__", where, found[0])
        if lacking and not found and not unsure:
            return Lookup("missing", None, None, where, lacking[0])
        return Lookup(
            "unknown", None, None, where, (unsure or lacking)[0] + ("; other paths forward it" if found else "")
        )

    def resolve_chain(self, ref: ClassRef, chain: tuple[str, ...]) -> list[ClassRef] | None:
        """Classes of ``self.a.b`` on an instance of ``ref`` (constructed in ``__init__``s), or None
        when any step is chosen at runtime, external, or not constructed where we can see it."""
        current = [ref]
        for attr in chain:
            nxt: list[ClassRef] = []
            for c in current:
                cands = self.held(c).get(attr)
                if not cands or any(not isinstance(x, ClassRef) for x in cands):
                    return None
                nxt.extend(x for x in cands if x not in nxt)
            current = nxt
        return current

    def method_def(self, ref: ClassRef, name: str, *, skip_first: bool = False, past_external: bool = True):
        """(owner, FunctionDef, Member) of the first definition of ``name`` in ``ref``'s MRO
        (``skip_first``: from the next class on, as ``super()`` does); (None, None, None) when an
        attribute that is no function shadows it, it is not found, or (unless ``past_external``,
        which skips external bases) an external base comes first. The one lookup of a method's
        code that the contract walk and the suspect-merge check share."""
        key = (ref, name, skip_first, past_external)
        if key not in self._method_defs:
            self._method_defs[key] = self._method_def(ref, name, skip_first, past_external)
        return self._method_defs[key]

    def _method_def(self, ref: ClassRef, name: str, skip_first: bool, past_external: bool):
        mro = self.mro(ref)[1:] if skip_first else self.mro(ref)
        for c in mro:
            if not isinstance(c, ClassRef):
                if past_external:
                    continue
                return None, None, None
            co = self.outline(c)
            if co is None:
                if past_external:
                    continue
                return None, None, None
            m = co.members.get(name)
            if m is None or m.kind == "annotation":
                continue
            node = cast(Module, self.tree.module(c.module)).segment(m.start, m.end) if m.start else None
            return (c, node, m) if node is not None else (None, None, None)
        return None, None, None

    def callable_def(self, sym: Symbol, *, past_external: bool = True):
        """What calling ``sym`` runs: (module, owner class or None, function name, FunctionDef) for
        a function of the tree, or a class's ``__init__`` found through its MRO; else None."""
        if sym.kind == "function":
            mod = self.tree.module(sym.module)
            assert sym.name is not None  # a function symbol is always named
            fn = mod.function(sym.name) if mod else None
            return (mod, None, sym.name, fn) if fn is not None else None
        if sym.kind == "class":
            assert sym.name is not None  # a class symbol is always named
            owner, node, _ = self.method_def(ClassRef(sym.module, sym.name), "__init__", past_external=past_external)
            if node is not None:
                return self.tree.module(owner.module), owner, "__init__", node
        return None

    def method_params(self, ref: ClassRef, method: str) -> tuple[Member | None, str | None]:
        for c in self.mro(ref):
            if isinstance(c, ClassRef):
                co = self.outline(c)
                m = co.members.get(method) if co else None
                if m is not None and m.kind in ("method", "classmethod", "staticmethod"):
                    return m, self.location(c, m.line)
        return None, None

    def resolves(self, ref: ClassRef, member: str, *, on_class: bool = False) -> Lookup:
        """Does ``member`` exist on instances (or, ``on_class``, on the class) of ``ref``?

        The strict-but-humble variant of :meth:`lookup` for code that is not a model: present,
        missing, or unknown whenever something outside the static view may provide it: an
        external base (torch.nn.Module included, whose ``__getattr__`` serves registered
        buffers, parameters and submodules), ``__getattr__``/``__getattribute__``, a class
        decorator other than ``dataclass``, or attributes set under a computed name.
        Annotations (``x: int`` in the body) count as present (dataclass fields, protocols).
        """
        unknown = []
        for c in self.mro(ref):
            if isinstance(c, External):
                found = _external_member(c.dotted, member)
                if found is not None:
                    return found
                if _module_base(c.dotted) or c.dotted not in CLOSED_BASES:
                    unknown.append(c.dotted)
                continue
            co = self.outline(c)
            if co is None:
                unknown.append(c.qualname)
                continue
            m = co.members.get(member)
            if m is not None and not (on_class and m.kind == "self-attr"):
                return Lookup("present", c.qualname, m.kind, self.location(c, m.line))
            if co.getattr_forward is not None or "__getattribute__" in co.members:
                unknown.append(f"{c.name}.__getattr__")
            if co.dynamic_attrs and not on_class:
                unknown.append(f"{c.name} (setattr with a computed name)")
            if any(d.rpartition(".")[2] not in PLAIN_CLASS_DECORATORS for d in co.decorators):
                unknown.append(f"{c.name} (class decorator)")
        if member in OBJECT_MEMBERS:
            return Lookup("present", "builtins.object", "object")
        if unknown:
            return Lookup("unknown", None, None, None, f"may come from {unknown[0]}")
        return Lookup("missing")

    def subclasses(self, ref: ClassRef) -> list[ClassRef]:
        """Classes in the package whose MRO holds ``ref``, however far down: a grandchild names
        only its parent in its bases, so each class found is searched for in turn."""
        if ref not in self._subclasses:
            out, todo = [], [ref]
            while todo:
                for sub in self._named_subclasses(todo.pop()):
                    if sub != ref and sub not in out:
                        out.append(sub)
                        todo.append(sub)
            self._subclasses[ref] = out
        return self._subclasses[ref]

    def _named_subclasses(self, ref: ClassRef) -> list[ClassRef]:
        """Classes whose bases name ``ref`` (text prefilter on the class name) and whose MRO holds it."""
        pattern = re.compile(r"^\s*class\s+\w+\s*\([^)]*\b" + re.escape(ref.name) + r"\b", re.M)
        found: list[ClassRef] = []
        for mod in self.tree.grep(pattern, literal=ref.name):
            subs = (ClassRef(mod.name, name) for name in mod.outline.classes)
            found.extend(sub for sub in subs if sub != ref and ref in self.mro(sub))
        return found


def _module_base(dotted: str) -> bool:
    """torch's nn.Module, or transformers' PreTrainedModel (an nn.Module with its own API)."""
    return dotted in NN_MODULE_BASES or dotted in PRETRAINED_MODEL_BASES or dotted.endswith(".nn.Module")


def _external_member(dotted: str, member: str) -> Lookup | None:
    """What an external base provides of ``member``, or None. PreTrainedModel's defaults that
    only raise (external.PRETRAINED_DEFAULT_RAISES) are in neither list: they do not count."""
    if dotted in PRETRAINED_MODEL_BASES and member in PRETRAINED_MODEL_MEMBERS:
        return Lookup("present", "transformers.PreTrainedModel", "PreTrainedModel")
    if _module_base(dotted) and member in NN_MODULE_MEMBERS:
        return Lookup("present", "torch.nn.Module", "nn.Module")
    return None


def _c3_merge(seqs: list[list]) -> list:
    seqs = [list(s) for s in seqs if s]
    out = []
    while seqs:
        for s in seqs:
            head = s[0]
            if not any(head in t[1:] for t in seqs):
                break
        else:  # inconsistent hierarchy: fall back to depth-first order
            for s in seqs:
                for x in s:
                    if x not in out:
                        out.append(x)
            return out
        out.append(head)
        seqs = [[x for x in s if x != head] for s in seqs]
        seqs = [s for s in seqs if s]
    return out

"""The class index (sglpatch/contract/index/classes.py) on a synthetic tree: what a ``__getattr__`` serves,
whether a name exists on code that is not a model (``resolves``, the suspect-merge check's
question), and which classes derive from one however far down. Each verdict has its twin: the
same class with the one thing that decides it changed.
"""

from __future__ import annotations

import pytest
from mini_tree import make_tree

from sglpatch.contract.index.classes import FORWARD_DEPTH, ClassIndex
from sglpatch.contract.parse.refs import ClassRef
from sglpatch.contract.parse.tree import SourceTree, Symbol

WANTED = "set_eagle3_layers_to_capture"  # LlamaForCausalLM of the mini tree has it; Plain has not
FORWARDERS = """
from torch import nn
from sglang.srt.models.llama import LlamaForCausalLM


def build(config):
    return LlamaForCausalLM(config)


class Plain:
    def forward(self):
        return None


class Forwards(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.inner = LlamaForCausalLM(config)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class ForwardsToPlain:
    def __init__(self):
        self.inner = Plain()

    def __getattr__(self, name):
        return getattr(self.inner, name)


class ForwardsToBuilt:
    def __init__(self, config):
        self.inner = build(config)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class Raises(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.inner = LlamaForCausalLM(config)

    def __getattr__(self, name):
        return super().__getattr__(name)


class ReturnsNone:
    def __getattr__(self, name):
        return None


class ReturnsValue:
    def __getattr__(self, name):
        return 42


class TakesNoName:
    def __getattr__(self, *args):
        return getattr(self.inner, args[0])


class ForwardsSometimes:
    def __init__(self, config, flag):
        self.flag = flag
        self.inner = LlamaForCausalLM(config)

    def __getattr__(self, name):
        if self.flag:
            return getattr(self.inner, name)
        raise AttributeError(name)


class RaisesFirst:
    def __init__(self, config, flag):
        self.flag = flag
        self.inner = LlamaForCausalLM(config)

    def __getattr__(self, name):
        if not self.flag:
            raise AttributeError(name)
        return getattr(self.inner, name)


class NoneFirst:
    def __init__(self, config, flag):
        self.flag = flag
        self.inner = LlamaForCausalLM(config)

    def __getattr__(self, name):
        if self.flag:
            return None
        return getattr(self.inner, name)


class ValueFirst:
    def __init__(self, config, flag):
        self.flag = flag
        self.inner = LlamaForCausalLM(config)

    def __getattr__(self, name):
        if self.flag:
            return 42
        return getattr(self.inner, name)


class BuiltFirst:
    def __init__(self, config, flag):
        self.flag = flag
        self.built = build(config)
        self.inner = LlamaForCausalLM(config)

    def __getattr__(self, name):
        if self.flag:
            return getattr(self.built, name)
        return getattr(self.inner, name)


class Selective:
    def __init__(self, config):
        self.inner = LlamaForCausalLM(config)

    def __getattr__(self, name):
        if name == "set_eagle3_layers_to_capture":
            return getattr(self.inner, name)
        raise AttributeError(name)


class ForwardsDeep:
    def __init__(self, config):
        self.inner = LlamaForCausalLM(config)

    def __getattr__(self, name):
        return getattr(self.inner.model, name)


class ForwardsToEither:
    def __init__(self, config, flag):
        self.inner = LlamaForCausalLM(config) if flag else Forwards(config)
        self.plain = Plain() if flag else ReturnsNone()
        self.choice = ForwardsToBuilt(config) if flag else ReturnsValue()

    def __getattr__(self, name):
        if name == "forward":
            return getattr(self.plain, name)
        if name == "unsettled":
            return getattr(self.choice, name)
        return getattr(self.inner, name)


class ForwardsToNothing:
    def __getattr__(self, name):
        return getattr(self.never_set, name)


class Inherits(Forwards):
    pass


class Ping:
    def __init__(self):
        self.inner = Pong()

    def __getattr__(self, name):
        return getattr(self.inner, name)


class Pong:
    def __init__(self):
        self.inner = Ping()

    def __getattr__(self, name):
        return getattr(self.inner, name)
"""


def chain(length: int) -> str:
    """``Outer0`` forwards to ``Outer1`` ... to ``Outer{length-1}``, which forwards to Llama."""
    classes = []
    for i in range(length):
        inner = f"Outer{i + 1}()" if i + 1 < length else "LlamaForCausalLM(None)"
        classes.append(
            f"class Outer{i}:\n    def __init__(self):\n        self.inner = {inner}\n\n"
            f"    def __getattr__(self, name):\n        return getattr(self.inner, name)\n"
        )
    return "from sglang.srt.models.llama import LlamaForCausalLM\n\n\n" + "\n\n".join(classes)


@pytest.fixture
def index(tmp_path):
    root = make_tree(
        tmp_path,
        {
            "models/forwarders.py": FORWARDERS,
            "models/short_chain.py": chain(FORWARD_DEPTH),
            "models/long_chain.py": chain(FORWARD_DEPTH + 1),
            "managers/shapes.py": SHAPES,
            "speculative/wider.py": WIDER,
        },
    )
    return ClassIndex(SourceTree(root))


def look(index, module: str, cls: str, member: str = WANTED, **kw):
    found = index.lookup(ClassRef(f"sglang.srt.{module}", cls), member, **kw)
    return found.status, found.note


FORWARD_CASES = [
    ("Forwards", WANTED, "forwarded", "forwarded by __getattr__ to self.inner (LlamaForCausalLM: method)"),
    ("Inherits", WANTED, "forwarded", "forwarded by __getattr__ to self.inner (LlamaForCausalLM: method)"),
    (
        "ForwardsDeep",
        "layers",
        "forwarded",
        "forwarded by __getattr__ to self.inner.model (LlamaModel: self-attr (__init__))",
    ),
    (
        "ForwardsToEither",
        WANTED,
        "forwarded",
        "forwarded by __getattr__ to self.inner (LlamaForCausalLM: method, Forwards: __getattr__)",
    ),
    (
        "ForwardsToEither",
        "missing_everywhere",
        "missing",
        "__getattr__ forwards to self.inner (LlamaForCausalLM, Forwards lacks it)",
    ),
    (
        "ForwardsToEither",
        "unsettled",
        "unknown",
        "__getattr__ forwards to self.choice (ForwardsToBuilt: __getattr__ "
        "forwards to self.inner, whose class is not known statically; ReturnsValue: __getattr__ returns another "
        "value for it)",
    ),
    ("ForwardsToEither", "forward", "missing", "__getattr__ forwards to self.plain (ReturnsNone lacks it)"),
    ("ForwardsToPlain", WANTED, "missing", "__getattr__ forwards to self.inner (Plain lacks it)"),
    ("ForwardsToBuilt", WANTED, "unknown", "__getattr__ forwards to self.inner, whose class is not known statically"),
    (
        "ForwardsToNothing",
        WANTED,
        "unknown",
        "__getattr__ forwards to self.never_set, whose class is not known statically",
    ),
    ("Raises", WANTED, "missing", "__getattr__ raises AttributeError for it"),
    ("ReturnsNone", WANTED, "missing", "__getattr__ returns None for it"),
    ("ReturnsValue", WANTED, "unknown", "__getattr__ returns another value for it"),
    ("TakesNoName", WANTED, "unknown", "__getattr__ is not analysable for it"),
    ("ForwardsSometimes", WANTED, "unknown", "__getattr__ raises AttributeError for it; other paths forward it"),
    ("RaisesFirst", WANTED, "unknown", "__getattr__ raises AttributeError for it; other paths forward it"),
    ("NoneFirst", WANTED, "unknown", "__getattr__ returns None for it; other paths forward it"),
    ("ValueFirst", WANTED, "unknown", "__getattr__ returns another value for it; other paths forward it"),
    (
        "BuiltFirst",
        WANTED,
        "unknown",
        "__getattr__ forwards to self.built, whose class is not known statically; other paths forward it",
    ),
    ("Selective", WANTED, "forwarded", "forwarded by __getattr__ to self.inner (LlamaForCausalLM: method)"),
    ("Selective", "load_weights", "missing", "__getattr__ raises AttributeError for it"),
]


def getattr_line(text: str, cls: str) -> int:
    """The line of the ``__getattr__`` that class ``cls`` of ``text`` defines."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith((f"class {cls}:", f"class {cls}(")))
    return next(i for i in range(start, len(lines)) if "def __getattr__" in lines[i]) + 1


def getattr_location(cls: str) -> str:
    """Where the ``__getattr__`` that serves ``cls`` is: its own, or the class it inherits it from."""
    return f"python/sglang/srt/models/forwarders.py:{getattr_line(FORWARDERS, {'Inherits': 'Forwards'}.get(cls, cls))}"


@pytest.mark.parametrize("cls, member, status, note", FORWARD_CASES)
def test_what_a_getattr_serves_decides_the_member(index, cls, member, status, note):
    found = index.lookup(ClassRef("sglang.srt.models.forwarders", cls), member)
    assert (found.status, found.note, found.location) == (status, note, getattr_location(cls))
    forwarded = status == "forwarded"
    owner = {"Inherits": "Forwards"}.get(cls, cls)
    assert (found.owner, found.kind) == (
        (f"sglang.srt.models.forwarders.{owner}", "__getattr__") if forwarded else (None, None)
    )


def test_one_index_answers_every_getattr_as_a_fresh_one_does(index, tmp_path):
    """Paths are kept per class and member: asking in the opposite order changes nothing."""
    ask = [(cls, member) for cls, member, _, _ in FORWARD_CASES]
    answers = {q: look(index, "models.forwarders", *q) for q in ask}
    again = ClassIndex(SourceTree(index.tree.root))
    assert {q: look(again, "models.forwarders", *q) for q in reversed(ask)} == answers


def test_a_member_of_the_class_itself_never_asks_its_getattr(index):
    assert look(index, "models.forwarders", "ForwardsToPlain", "inner")[0] == "present"
    assert look(index, "models.forwarders", "ForwardsToPlain", "forward")[0] == "forwarded"  # Plain's
    assert look(index, "models.forwarders", "Raises", "parameters")[0] == "present"  # nn.Module's own
    # on the class, __getattr__ serves nothing (it runs for instances only)
    assert look(index, "models.forwarders", "Forwards", on_class=True)[0] == "missing"


def test_forwarding_is_followed_through_a_chain_of_wrappers_up_to_its_limit(index):
    assert look(index, "models.short_chain", "Outer0")[0] == "forwarded"
    status, note = look(index, "models.long_chain", "Outer0")
    assert status == "unknown"
    last = index.lookup(ClassRef("sglang.srt.models.long_chain", f"Outer{FORWARD_DEPTH}"), WANTED, _depth=FORWARD_DEPTH)
    line = getattr_line(chain(FORWARD_DEPTH + 1), f"Outer{FORWARD_DEPTH}")
    assert last.location == f"python/sglang/srt/models/long_chain.py:{line}"
    assert f"(Outer{FORWARD_DEPTH}: __getattr__ forwards through more than {FORWARD_DEPTH} wrappers" in note


def test_two_wrappers_forwarding_to_each_other_are_unknown_not_missing(index):
    status, note = look(index, "models.forwarders", "Ping")
    assert status == "unknown" and "in a circle" in note


SHAPES = """
import abc
import enum
import functools
from dataclasses import dataclass

from megatron.core import nn as megatron_nn
from torch import nn
from outside import Thing
from transformers import PreTrainedModel


def register(cls):
    return cls


def make_base():
    return object


class Base(abc.ABC):
    limit = 3

    def size(self):
        return self.limit


class Plain(Base):
    depth: int

    def __init__(self, tall=False):
        self.width = 1
        if tall:
            self.height = 2

    @classmethod
    def build(cls):
        return cls()

    @staticmethod
    def unit():
        return 1


@dataclass
class Record:
    name: str


@functools.total_ordering
class Ordered:
    def __lt__(self, other):
        return False


@register
class Registered:
    pass


class Dynamic:
    def __init__(self, **fields):
        for key, value in fields.items():
            setattr(self, key, value)


class Forwarding:
    def __getattr__(self, name):
        return 1


class Layer(nn.Module):
    pass


class Colour(enum.Enum):
    RED = 1


class FromOutside(Thing):
    pass


class Late(Thing, Base):
    pass


class LateInit(Thing, Plain):
    pass


class Intercepts:
    def __getattribute__(self, name):
        return 1


class Over(Base):
    def size(self):
        return super().size() + 1


class Deeper(Over):
    def size(self):
        return super().size() + 1


class Annotated(Base):
    size: object


class Shadow(Base):
    size = 3


class Left(Base):
    pass


class Right(Base):
    pass


class Diamond(Left, Right):
    pass


class Inconsistent(Base, Left):
    pass


class Computed(make_base()):
    pass


class Reexported(megatron_nn.Module):
    pass


class Hugging(PreTrainedModel):
    pass
"""
WIDER = """
from sglang.srt.managers.shapes import Plain


class Wider(Plain):
    pass


class Widest(Wider):
    extra = 1
"""


def resolves(index, cls: str, member: str, module: str = "managers.shapes", **kw):
    found = index.resolves(ClassRef(f"sglang.srt.{module}", cls), member, **kw)
    return (found.status, found.owner, found.kind) if found.status == "present" else (found.status, found.note)


@pytest.mark.parametrize(
    "cls, member, kw, expected",
    [
        ("Plain", "size", {}, ("present", "sglang.srt.managers.shapes.Base", "method")),
        ("Plain", "limit", {}, ("present", "sglang.srt.managers.shapes.Base", "class-attr")),
        ("Plain", "width", {}, ("present", "sglang.srt.managers.shapes.Plain", "self-attr")),
        ("Plain", "width", {"on_class": True}, ("missing", "")),
        ("Plain", "depth", {}, ("present", "sglang.srt.managers.shapes.Plain", "annotation")),  # an annotation counts
        ("Plain", "__class__", {}, ("present", "builtins.object", "object")),
        ("Plain", "breadth", {}, ("missing", "")),
        ("Record", "name", {}, ("present", "sglang.srt.managers.shapes.Record", "annotation")),
        ("Record", "height", {}, ("missing", "")),  # dataclass adds nothing unseen
        ("Ordered", "height", {}, ("missing", "")),  # neither does total_ordering
        ("Registered", "height", {}, ("unknown", "may come from Registered (class decorator)")),
        ("Dynamic", "height", {}, ("unknown", "may come from Dynamic (setattr with a computed name)")),
        ("Dynamic", "height", {"on_class": True}, ("missing", "")),
        ("Forwarding", "height", {}, ("unknown", "may come from Forwarding.__getattr__")),
        ("Layer", "parameters", {}, ("present", "torch.nn.Module", "nn.Module")),
        ("Reexported", "parameters", {}, ("present", "torch.nn.Module", "nn.Module")),  # any <pkg>.nn.Module
        ("Reexported", "height", {}, ("unknown", "may come from megatron.core.nn.Module")),
        ("Hugging", "from_pretrained", {}, ("present", "transformers.PreTrainedModel", "PreTrainedModel")),
        ("Hugging", "parameters", {}, ("present", "torch.nn.Module", "nn.Module")),
        ("Hugging", "height", {}, ("unknown", "may come from transformers.PreTrainedModel")),
        ("Nowhere", "height", {}, ("unknown", "may come from sglang.srt.managers.shapes.Nowhere")),
        ("Layer", "height", {}, ("unknown", "may come from torch.nn.Module")),
        ("Colour", "height", {}, ("unknown", "may come from enum.Enum")),
        ("FromOutside", "height", {}, ("unknown", "may come from outside.Thing")),
        ("Late", "size", {}, ("present", "sglang.srt.managers.shapes.Base", "method")),  # past an unknown base
        ("Intercepts", "height", {}, ("unknown", "may come from Intercepts.__getattr__")),
    ],
)
def test_whether_a_name_exists_on_code_that_is_not_a_model(index, cls, member, kw, expected):
    assert resolves(index, cls, member, **kw) == expected


def test_subclasses_are_found_however_far_down_and_in_other_modules(index):
    def names(cls, module="managers.shapes"):
        return sorted(r.name for r in index.subclasses(ClassRef(f"sglang.srt.{module}", cls)))

    assert names("Base") == [
        "Annotated",
        "Deeper",
        "Diamond",
        "Inconsistent",
        "Late",
        "LateInit",
        "Left",
        "Over",
        "Plain",
        "Right",
        "Shadow",
        "Wider",
        "Widest",
    ]
    assert names("Plain") == ["LateInit", "Wider", "Widest"]
    assert names("Widest", "speculative.wider") == []
    # a class with the same name elsewhere is no base of theirs
    assert names("Plain", "models.forwarders") == []
    assert resolves(index, "Widest", "size", "speculative.wider") == (
        "present",
        "sglang.srt.managers.shapes.Base",
        "method",
    )


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_where_a_member_is_found_is_its_own_line(index):
    plain = ClassRef("sglang.srt.managers.shapes", "Plain")
    where = "python/sglang/srt/managers/shapes.py:"
    assert index.resolves(plain, "size").location == where + str(line_of(SHAPES, "def size"))
    assert index.lookup(plain, "width").location == where + str(line_of(SHAPES, "self.width"))
    for method in ("build", "unit", "size"):
        member, location = index.method_params(plain, method)
        assert location == where + str(line_of(SHAPES, f"def {method}"))
        assert member.kind == {"build": "classmethod", "unit": "staticmethod"}.get(method, "method")
    assert index.method_params(plain, "width") == (None, None)  # an attribute is no method
    assert index.method_params(ClassRef("sglang.srt.managers.shapes", "Nowhere"), "size") == (None, None)


@pytest.mark.parametrize(
    "member, kw, status, kind",
    [
        ("width", {}, "present", "self-attr (__init__)"),
        ("height", {}, "present", "self-attr (__init__, conditional)"),
        ("width", {"on_class": True}, "missing", None),
        ("limit", {"on_class": True}, "present", "class-attr"),
        ("depth", {}, "missing", None),  # for a model, an annotation alone sets nothing
        ("breadth", {}, "missing", None),
    ],
)
def test_what_a_model_class_has(index, member, kw, status, kind):
    found = index.lookup(ClassRef("sglang.srt.managers.shapes", "Plain"), member, **kw)
    assert (found.status, found.kind) == (status, kind)


def test_an_external_base_other_than_a_module_leaves_a_model_member_unknown(index):
    found = index.lookup(ClassRef("sglang.srt.managers.shapes", "FromOutside"), "width")
    assert (found.status, found.note) == ("unknown", "not found; external base outside.Thing not analysed")
    assert index.lookup(ClassRef("sglang.srt.managers.shapes", "Late"), "size").status == "present"
    assert index.lookup(ClassRef("sglang.srt.managers.shapes", "Layer"), "width").status == "missing"


def test_classes_are_found_by_name_models_first_whatever_was_asked_before(index):
    def found(name):
        return [f"{r.module}.{r.name}" for r in index.by_name(name)]

    for _ in range(2):  # the second round reads what the first scanned: the same answers
        assert found("Wider") == ["sglang.srt.speculative.wider.Wider"]
        assert found("Plain") == ["sglang.srt.models.forwarders.Plain"]  # not managers.shapes'
        assert found("Forwards") == ["sglang.srt.models.forwarders.Forwards"]
        assert found("Intercepts") == ["sglang.srt.managers.shapes.Intercepts"]
        assert found("sglang.srt.managers.shapes.Plain") == ["sglang.srt.managers.shapes.Plain"]
        assert found("sglang.srt.managers.shapes.Nowhere") == []
        assert found("Nowhere") == []


def test_where_a_method_s_code_is_found(index):
    def found(cls, name, **kw):
        owner, node, member = index.method_def(ClassRef("sglang.srt.managers.shapes", cls), name, **kw)
        assert (node is None) == (owner is None) == (member is None)
        return owner and (owner.name, node.lineno)

    size, over = line_of(SHAPES, "def size"), line_of(SHAPES, "return super().size() + 1") - 1
    assert found("Plain", "size") == ("Base", size)
    assert found("Deeper", "size")[0] == "Deeper"
    assert found("Deeper", "size", skip_first=True) == ("Over", over)  # as super() finds it
    assert found("Over", "size", skip_first=True) == ("Base", size)
    assert found("Annotated", "size") == ("Base", size)  # an annotation alone defines nothing
    assert found("Shadow", "size") is None  # a class attribute hides the method
    assert found("Late", "size") == ("Base", size)  # past the external base before it
    assert found("Late", "size", past_external=False) is None
    assert found("Plain", "nothing") is None


def test_method_resolution_order_is_python_s_and_survives_what_python_refuses(index):
    def mro(cls):
        classes = index.mro(ClassRef("sglang.srt.managers.shapes", cls))
        return [c.name if isinstance(c, ClassRef) else c.dotted for c in classes]

    assert mro("Diamond") == ["Diamond", "Left", "Right", "Base", "abc.ABC"]
    # Python refuses this class (Base before its own subclass): every base is still searched
    assert mro("Inconsistent") == ["Inconsistent", "Base", "abc.ABC", "Left"]
    assert mro("Computed") == ["Computed", "?"]  # a base computed by a call: known to be unknown
    assert resolves(index, "Computed", "height") == ("unknown", "may come from ?")
    assert (
        index.location(ClassRef("sglang.srt.managers.shapes", "Diamond"))
        == f"python/sglang/srt/managers/shapes.py:{line_of(SHAPES, 'class Diamond')}"
    )
    assert index.location(ClassRef("sglang.srt.managers.shapes", "Nowhere")) == "python/sglang/srt/managers/shapes.py:0"


def test_what_calling_a_name_runs(index):
    def runs(kind, name, module="sglang.srt.managers.shapes", **kw):
        found = index.callable_def(Symbol(kind, module, name), **kw)
        return found and (found[0].name, found[1] and found[1].name, found[2], found[3].lineno)

    shapes = "sglang.srt.managers.shapes"
    init = line_of(SHAPES, "def __init__(self, tall=False)")
    assert runs("function", "register") == (shapes, None, "register", line_of(SHAPES, "def register"))
    assert runs("class", "Plain") == (shapes, "Plain", "__init__", init)
    assert runs("class", "Wider", "sglang.srt.speculative.wider") == (shapes, "Plain", "__init__", init)
    assert runs("class", "LateInit") == (shapes, "Plain", "__init__", init)  # past the external base
    assert runs("class", "LateInit", past_external=False) is None  # outside.Thing's __init__ is unseen
    assert runs("class", "Base") is None  # object's
    assert runs("function", "no_such_function") is None
    assert runs("function", "anything", "sglang.srt.no_such_module") is None
    assert runs("module", None) is None

"""How the checker names classes and what a member lookup finds: leaf types shared by the class
index (:mod:`.classes`), the wrapper view (:mod:`.wrappers`) and every check."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ClassRef:
    module: str
    name: str

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class External:
    dotted: str


@dataclass
class Lookup:
    status: str  # present | forwarded | missing | unknown
    owner: str | None = None  # class that provides it (qualified), or "torch.nn.Module"
    kind: str | None = None
    location: str | None = None
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("present", "forwarded")


@dataclass
class Inner:
    attr: str
    location: str | None  # path:line of the assignment that holds it (in whichever class of the MRO)
    candidates: list  # ClassRef | External | "?"
    lm: list[ClassRef] = field(default_factory=list)  # the candidates that are language models

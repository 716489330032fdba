"""Wrapper models and their inner language models, as the class index sees them.

A *wrapper model* is a class under ``srt/models/`` that holds an inner language model in an
attribute (``self.language_model = DeepseekV3ForCausalLM(...)``) instead of inheriting from it,
so every part of the runtime interface the inner model has must be delegated by hand. A
*language model* is a class whose MRO builds the logits processor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sglpatch.contract.parse.refs import ClassRef, Inner

if TYPE_CHECKING:
    from sglpatch.contract.parse.outline import ClassOutline

# Attribute names that hold the language model in multimodal wrappers; used only when the class
# assigned there is chosen at runtime (e.g. ``self.language_model = lm_cls(...)``).
DYNAMIC_INNER_ATTRS = ("language_model", "llm")


class Wrappers:
    """The wrapper half of :class:`.classes.ClassIndex` (which supplies ``mro``, ``outline``,
    ``resolve``, ``location`` and the ``_lm``, ``_wrapper`` and ``_inners`` caches)."""

    # What the mixin reads of ``ClassIndex`` (declared for the type checker; set in its __init__).
    _lm: dict[ClassRef, bool]
    _wrapper: dict[ClassRef, bool]
    _inners: dict[ClassRef, list]
    mro: Callable[[ClassRef], list]
    outline: Callable[[ClassRef], ClassOutline | None]
    resolve: Callable[[str, str | None], Any]
    location: Callable[[ClassRef, int | None], str]

    def held(self, ref: ClassRef) -> dict[str, list]:
        """attr -> classes constructed into ``self.attr`` anywhere in the MRO (subclass first)."""
        out: dict[str, list] = {}
        for c in self.mro(ref):
            if not isinstance(c, ClassRef):
                continue
            co = self.outline(c)
            if co is None:
                continue
            for attr, cands in co.holds.items():
                if attr in out:
                    continue
                out[attr] = [self.resolve(c.module, cand) or "?" for cand in cands]  # "?": chosen at run time
        return out

    def _holds_location(self, ref: ClassRef, attr: str) -> str | None:
        """Where ``self.attr`` is assigned its inner model: the first class of the MRO that does."""
        for c in self.mro(ref):
            if isinstance(c, ClassRef):
                co = self.outline(c)
                if co and attr in co.holds_line:
                    return self.location(c, co.holds_line[attr])
        return None

    def is_causal_lm(self, ref: ClassRef) -> bool:
        """A complete language model: its MRO builds the logits processor (LM head side).

        Names are no evidence: many wrappers are called ``...ForCausalLM`` too.
        """
        if ref not in self._lm:
            self._lm[ref] = any(
                isinstance(c, ClassRef) and getattr(self.outline(c), "sets_logits_processor", False)
                for c in self.mro(ref)
            )
        return self._lm[ref]

    def inherits_causal_lm(self, ref: ClassRef) -> bool:
        return any(isinstance(c, ClassRef) and c != ref and self.is_causal_lm(c) for c in self.mro(ref)[1:])

    def inner_models(self, ref: ClassRef) -> list[Inner]:
        """The attributes of ``ref`` that hold its inner model (a language model, or a wrapper of
        one, nested as deep as it goes); asked once per member by the check and the forward
        reader, so kept."""
        if ref not in self._inners:
            self._inners[ref] = self._find_inners(ref)
        return self._inners[ref]

    def _find_inners(self, ref: ClassRef) -> list[Inner]:
        out = []
        for attr, cands in self.held(ref).items():
            lm = [
                c
                for c in cands
                if isinstance(c, ClassRef) and c != ref and (self.is_causal_lm(c) or self.is_wrapper(c))
            ]
            dynamic = cands and all(c == "?" for c in cands) and attr in DYNAMIC_INNER_ATTRS
            if lm or dynamic:
                out.append(Inner(attr, self._holds_location(ref, attr), cands, lm))
        return out

    def is_wrapper(self, ref: ClassRef) -> bool:
        if ref not in self._wrapper:
            self._wrapper[ref] = False  # asked again while it is being answered: classes that hold each other
            self._wrapper[ref] = (
                self.outline(ref) is not None and not self.inherits_causal_lm(ref) and bool(self.inner_models(ref))
            )
        return self._wrapper[ref]

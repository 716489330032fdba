"""Wrapper models and their inner language models, as the class index sees them.

A *wrapper model* is a class under ``srt/models/`` that holds an inner language model in an
attribute (``self.language_model = DeepseekV3ForCausalLM(...)``) instead of inheriting from it,
so every part of the runtime interface the inner model has must be delegated by hand. A
*language model* is a class whose MRO builds the logits processor.
"""

from __future__ import annotations

from .refs import ClassRef, Inner

# Attribute names that hold the language model in multimodal wrappers; used only when the class
# assigned there is chosen at runtime (e.g. ``self.language_model = lm_cls(...)``).
DYNAMIC_INNER_ATTRS = ("language_model", "llm")


class Wrappers:
    """The wrapper half of :class:`.classes.ClassIndex` (which supplies ``mro``, ``outline``,
    ``resolve``, ``location`` and the ``_lm``, ``_wrapper`` and ``_inners`` caches)."""

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
                resolved = []
                for cand in cands:
                    if cand == "?":
                        resolved.append("?")
                        continue
                    r = self.resolve(c.module, cand)
                    resolved.append(r if r is not None else "?")
                out[attr] = resolved
        return out

    def _holds_line(self, ref: ClassRef, attr: str) -> str | None:
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
            self._lm[ref] = False
            for c in self.mro(ref):
                if isinstance(c, ClassRef):
                    co = self.outline(c)
                    if co is not None and co.sets_logits_processor:
                        self._lm[ref] = True
                        break
        return self._lm[ref]

    def inherits_causal_lm(self, ref: ClassRef) -> bool:
        return any(isinstance(c, ClassRef) and c != ref and self.is_causal_lm(c) for c in self.mro(ref)[1:])

    def inner_models(self, ref: ClassRef, _depth: int = 0) -> list[Inner]:
        """The attributes of ``ref`` that hold its inner model; asked once per member by the
        check and the forward reader, so the top-level answer is kept."""
        if _depth == 0 and ref in self._inners:
            return self._inners[ref]
        out = self._find_inners(ref, _depth)
        if _depth == 0:
            self._inners[ref] = out
        return out

    def _find_inners(self, ref: ClassRef, _depth: int) -> list[Inner]:
        out = []
        for attr, cands in self.held(ref).items():
            lm = [c for c in cands if isinstance(c, ClassRef) and c != ref
                  and (self.is_causal_lm(c) or (_depth < 3 and self.is_wrapper(c, _depth + 1)))]
            dynamic = cands and all(c == "?" for c in cands) and attr in DYNAMIC_INNER_ATTRS
            if lm or dynamic:
                where = self._holds_line(ref, attr)
                line = int(where.rpartition(":")[2]) if where else 0
                out.append(Inner(attr, line, cands, lm))
        return out

    def is_wrapper(self, ref: ClassRef, _depth: int = 0) -> bool:
        if ref in self._wrapper:
            return self._wrapper[ref]
        self._wrapper[ref] = False  # recursion guard
        result = (self.outline(ref) is not None and not self.inherits_causal_lm(ref)
                  and bool(self.inner_models(ref, _depth)))
        self._wrapper[ref] = result
        return result

"""The mini SGLang tree (tests/fixtures/contract/mini): a few files shaped like upstream's
runtime, copied and edited per test, for the contract checker and the build gate."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "contract" / "mini"
SRT = "python/sglang/srt"


def make_tree(
    tmp_path: Path, files: dict[str, str] | None = None, edits: dict[str, list[tuple[str, str]]] | None = None
) -> Path:
    """A copy of the mini tree, plus ``files`` (path under srt/ -> text) and ``edits``."""
    root = tmp_path / "tree"
    shutil.copytree(FIXTURE, root)
    for rel, text in (files or {}).items():
        path = root / SRT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for rel, pairs in (edits or {}).items():
        path = root / SRT / rel
        text = path.read_text()
        for old, new in pairs:
            assert old in text, f"{old!r} not in {rel}"
            text = text.replace(old, new)
        path.write_text(text)
    return root

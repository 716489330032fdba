"""The contributor docs stay true to the code (fast, no network).

- docs/INTERNAL-API.md and docs/architecture.md: every code span that starts with ``sglpatch.``
  names an object that exists, and a span ``sglpatch.module.name(params) -> return`` is that
  object's signature: the same parameters in the same order and of the same kind (``*`` before
  keyword-only ones), a default exactly where the code has one and equal to it; annotations and
  the return annotation are compared where the doc writes them.
- docs/*.md: every ``sglpatch/...`` or ``tests/...`` path it mentions exists (a ``.py`` file, a
  folder written with its trailing ``/``, or any other path that names a file).

Each check has a negative twin: a tiny doc with a wrong entry is reported.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest
from helpers import REPO_ROOT

API_DOCS = ("docs/INTERNAL-API.md", "docs/architecture.md")
DOCS = sorted((REPO_ROOT / "docs").glob("*.md"))

SPAN = re.compile(r"(`+)(.+?)\1", re.S)
DOTTED = re.compile(r"sglpatch(?:\.[A-Za-z_]\w*)+")
# a path of the house: not part of a longer path (~/.cache/sglpatch/..., $SGLPATCH_CACHE/...)
PATH = re.compile(r"(?<![\w./$~-])((?:sglpatch|tests)/[\w./-]*)")


# --------------------------------------------------------------------------- names and signatures


def resolve(dotted: str):
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            if exc.name is not None and not ".".join(parts[:cut]).startswith(exc.name):
                raise  # the module exists but one of its own imports is missing
            continue
        for attr in parts[cut:]:
            try:
                obj = getattr(obj, attr)
            except AttributeError:
                try:  # a submodule that its package does not import itself
                    obj = importlib.import_module(f"{obj.__name__}.{attr}")
                except (ImportError, AttributeError):
                    raise LookupError(f"{dotted}: {'.'.join(parts[:cut])} has no {attr!r}") from None
        return obj
    raise LookupError(f"{dotted}: no such module")


def _norm(text: str) -> str:
    return re.sub(r"[\s'\"]", "", text)


def _annotation(value) -> str:
    return value if isinstance(value, str) else inspect.formatannotation(value)


def _default_matches(written: ast.expr, actual) -> bool:
    text = ast.unparse(written)
    try:
        if ast.literal_eval(written) == actual and type(ast.literal_eval(written)) is type(actual):
            return True
    except ValueError:
        pass
    return text == getattr(actual, "__name__", None) or text == repr(actual)


def _documented_params(node: ast.arguments):
    """(name, kind, default node or None, annotation node or None) in order, as written."""
    P = inspect.Parameter
    positional = [*node.posonlyargs, *node.args]
    defaults = [None] * (len(positional) - len(node.defaults)) + list(node.defaults)
    out = [(a.arg, P.POSITIONAL_ONLY, d, a.annotation) for a, d in zip(node.posonlyargs, defaults)]
    out += [
        (a.arg, P.POSITIONAL_OR_KEYWORD, d, a.annotation) for a, d in zip(node.args, defaults[len(node.posonlyargs) :])
    ]
    if node.vararg:
        out.append((node.vararg.arg, P.VAR_POSITIONAL, None, node.vararg.annotation))
    out += [(a.arg, P.KEYWORD_ONLY, d, a.annotation) for a, d in zip(node.kwonlyargs, node.kw_defaults)]
    if node.kwarg:
        out.append((node.kwarg.arg, P.VAR_KEYWORD, None, node.kwarg.annotation))
    return out


def signature_problems(written: str) -> list[str]:
    """What is wrong with one documented span (a name, or a name with its signature)."""
    name = DOTTED.match(written)
    assert name, written
    dotted, rest = name.group(0), written[name.end() :].strip()
    try:
        obj = resolve(dotted)
    except (LookupError, ImportError) as exc:
        return [f"`{written}`: {exc}"]
    if not rest.startswith("("):
        return []  # a name alone: it exists
    try:
        func = ast.parse(f"def _{rest}: pass").body[0]
    except SyntaxError:
        return [f"`{written}`: not a parseable signature (write `name(params) -> return`)"]
    assert isinstance(func, ast.FunctionDef)
    try:
        actual = inspect.signature(obj)
    except (TypeError, ValueError) as exc:
        return [f"`{written}`: {dotted} has no signature ({exc})"]
    where = f"`{written}`: the code says {dotted}{actual}"
    params = list(actual.parameters.values())
    wanted = _documented_params(func.args)
    if [(n, k) for n, k, _, _ in wanted] != [(p.name, p.kind) for p in params]:
        return [f"{where} (parameters differ)"]
    problems = []
    for (pname, _, default, ann), param in zip(wanted, params):
        if (default is None) != (param.default is inspect.Parameter.empty):
            problems.append(f"{where} ({pname}: a default in one and not the other)")
        elif default is not None and not _default_matches(default, param.default):
            problems.append(f"{where} ({pname}: default {ast.unparse(default)} is {param.default!r})")
        if ann is not None and _norm(ast.unparse(ann)) != _norm(_annotation(param.annotation)):
            problems.append(f"{where} ({pname}: annotation {ast.unparse(ann)})")
    if func.returns is not None and _norm(ast.unparse(func.returns)) != _norm(_annotation(actual.return_annotation)):
        problems.append(f"{where} (returns {ast.unparse(func.returns)})")
    return problems


def documented_spans(text: str) -> list[str]:
    """Code spans that start with a ``sglpatch.`` name, whitespace folded (a span may wrap)."""
    spans = (" ".join(m.group(2).split()) for m in SPAN.finditer(text))
    return [s for s in spans if DOTTED.match(s)]


def api_problems(text: str) -> list[str]:
    return [p for span in documented_spans(text) for p in signature_problems(span)]


@pytest.mark.parametrize("doc", API_DOCS)
def test_every_documented_name_and_signature_matches_the_code(doc):
    text = (REPO_ROOT / doc).read_text(encoding="utf-8")
    assert documented_spans(text) or doc != "docs/INTERNAL-API.md", "INTERNAL-API.md documents nothing"
    assert api_problems(text) == []


def test_internal_api_documents_signatures_not_only_names():
    spans = documented_spans((REPO_ROOT / "docs/INTERNAL-API.md").read_text(encoding="utf-8"))
    assert sum("(" in s for s in spans) >= 20, spans


def test_a_wrong_signature_or_a_missing_name_is_reported():
    doc = """
- `sglpatch.ship.build.build(root, *, rebuild=False)`: right.
- `sglpatch.ship.build.build(root, *, json=False) -> BuildResult`: drifted (the old doc).
- `sglpatch.upstream.pin.same_version(a, b) -> str`: wrong return.
- `sglpatch.lock.exclusive(path, what, wait=True, where='in this checkout')`: wrong default.
- `sglpatch.queue.importer.import_files(root, files, name=None, subject=None, author=None, split=False) -> list[Path]`:
  keyword-only parameters written as positional.
- `sglpatch.rebase.start(root, onto)`: a module that moved.
- `sglpatch.queue.rebase.begin`: a name that does not exist.
"""
    problems = api_problems(doc)
    assert len(problems) == 6, problems
    assert not any("`sglpatch.ship.build.build(root, *, rebuild=False)`" in p for p in problems)
    for wrong in ("json=False", "-> str", "wait=True", "split=False", "sglpatch.rebase.start", "rebase.begin"):
        assert any(wrong in p for p in problems), (wrong, problems)


def test_the_right_signature_of_a_tiny_doc_passes():
    assert (
        api_problems(
            "`sglpatch.queue.importer.import_files(root, files, *, name=None, subject=None, "
            "author=None, split=False) -> list[Path]` and `sglpatch.queue.rehearse.rehearse("
            "root, releases=None, progress=say) -> dict` and `sglpatch.queue.hunks.Moves`"
        )
        == []
    )


# --------------------------------------------------------------------------- paths


def missing_paths(text: str, root: Path = REPO_ROOT) -> list[str]:
    missing = []
    for raw in PATH.findall(text):
        path = raw.rstrip(".")  # a path that ends a sentence
        if not path.endswith((".py", "/")) and "." not in Path(path).name:
            continue  # a folder without its slash or a name inside a path: not a claim to check
        if not (root / path).exists():
            missing.append(path)
    return missing


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_in_the_docs_exists(doc):
    assert missing_paths(doc.read_text(encoding="utf-8")) == []


def test_a_path_that_does_not_exist_is_reported(tmp_path):
    (tmp_path / "sglpatch" / "queue").mkdir(parents=True)
    (tmp_path / "sglpatch" / "queue" / "rebase.py").write_text("")
    text = (
        "`sglpatch/queue/rebase.py` stays, `sglpatch/rebase.py` moved, `tests/test_survivors.py` was split, "
        "`sglpatch/queue/` is a folder, `sglpatch/ship/` is not here; `~/.cache/sglpatch/trees/x.py` is no path "
        "of the house."
    )
    assert missing_paths(text, tmp_path) == ["sglpatch/rebase.py", "tests/test_survivors.py", "sglpatch/ship/"]

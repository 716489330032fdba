"""Run the code a patch adds, on the CPU, without SGLang's runtime.

The series adds functions and methods to modules that import torch, FlashInfer and half of
SGLang. The smoke tests run them inside the real runtime (minutes, `-m slow`); these helpers let a
fast test call the same code, read from the patched file, with the few names it uses from its
module supplied by the test:

- :func:`load_module` executes a patched module's top-level statements one by one, in order,
  skipping those that fail (an import of torch, a class on a base that is not installed); names
  the test ``provides`` are bound first and never rebound by the module's own imports or
  assignments;
- :func:`load_class` makes a plain class from chosen members of a patched class (methods,
  properties, classmethods as written), so a wrapper's delegations can run over a test object;
- :func:`run_block` runs a few statements a patch adds inside a long upstream function, with the
  variables they read supplied.

What runs is the patched source, compiled from the file; only its surroundings are supplied.
"""

from __future__ import annotations
import __future__

import ast
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

from sglpatch.contract.parse.outline import bound_names

SRT = "python/sglang/srt"  # where SGLang's runtime lives in a tree laid out like upstream's
_FLAGS = __future__.annotations.compiler_flag  # annotations stay strings: torch need not exist


def _run(stmt: ast.stmt, path: Path, namespace: dict) -> bool:
    code = compile(ast.Module(body=[stmt], type_ignores=[]), str(path), "exec", flags=_FLAGS, dont_inherit=True)
    try:
        exec(code, namespace)
        return True
    except Exception:  # a statement that needs the runtime: its names stay unbound
        return False


def load_module(path: Path, provides: dict | None = None, name: str = "patched") -> types.ModuleType:
    """The patched module at ``path``, every top-level statement that can run on the CPU run."""
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module  # dataclasses and pickling look their module up there
    namespace = module.__dict__
    namespace.update(provides or {})
    for stmt in ast.parse(path.read_text(), str(path)).body:
        if bound_names(stmt) & set(provides or {}):
            continue
        _run(stmt, path, namespace)
    return module


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except ValueError:
        return False


def load_class(path: Path, class_name: str, members: list[str], provides: dict | None = None) -> type:
    """A plain class holding ``members`` of ``class_name`` exactly as the patched file writes them."""
    tree = ast.parse(path.read_text(), str(path))
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name)
    chosen = [
        s
        for s in cls.body
        if (isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name in members)
        or (isinstance(s, ast.Assign) and _literal(s.value))
    ]  # constant class attributes come along
    missing = set(members) - {getattr(s, "name", None) for s in chosen}
    if missing:
        raise AssertionError(f"{class_name} in {path.name} has no {', '.join(sorted(missing))}")
    body = ast.ClassDef(name=class_name, bases=[], keywords=[], body=chosen, decorator_list=[])
    namespace = dict(provides or {})
    code = compile(
        ast.fix_missing_locations(ast.Module(body=[body], type_ignores=[])),
        str(path),
        "exec",
        flags=_FLAGS,
        dont_inherit=True,
    )
    exec(code, namespace)
    return namespace[class_name]


def patched_files(pristine: Path, patches: list[Path], dest: Path) -> Path:
    """The files ``patches`` touch, copied from ``pristine`` and patched in order by `git apply`."""
    subprocess.run(["git", "init", "-q", str(dest)], check=True)  # apply relative to dest, not a repo above
    for patch in patches:
        for rel in re.findall(r"^diff --git a/(\S+) b/", patch.read_text(), re.M):
            if (pristine / rel).exists() and not (dest / rel).exists():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(pristine / rel, dest / rel)
    for patch in patches:
        subprocess.run(["git", "apply", "-p1", str(patch.resolve())], cwd=dest, check=True, capture_output=True)
    return dest


def run_block(path: Path, first_line: str, namespace: dict, count: int = 1, contains: str | None = None) -> dict:
    """Run ``count`` statements of the patched file, from the one whose first line holds
    ``first_line`` (and whose text holds ``contains``), wherever it is nested, with ``namespace``
    as its variables (``self``, the function's locals, the names it calls); returns it."""
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text, str(path))
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for i, stmt in enumerate(block):
                if not isinstance(stmt, ast.stmt) or first_line not in lines[stmt.lineno - 1]:
                    continue
                if contains is not None and contains not in (ast.get_source_segment(text, stmt) or ""):
                    continue
                code = compile(
                    ast.Module(body=block[i : i + count], type_ignores=[]),
                    str(path),
                    "exec",
                    flags=_FLAGS,
                    dont_inherit=True,
                )
                exec(code, namespace)
                return namespace
    raise AssertionError(f"{path.name} has no statement starting {first_line!r}")

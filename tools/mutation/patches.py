"""Patch-level mutants: does the build gate or the fast set notice a wrong patch? (issue 20, item 2)

    python tools/mutation/patches.py                    # both lines, gate then fast set
    python tools/mutation/patches.py --line latest      # one line
    python tools/mutation/patches.py --patch 0005       # one patch's mutants, both lines
    python tools/mutation/patches.py --gate-only        # which mutants pass the gate (minutes)

No Python mutation tool mutates a `.patch` file, so this makes the mutants itself. Each operator
edits what one patch *adds* (the file after that patch, only nodes whose lines the patch adds) in
the way a series goes wrong in practice:

- drop-member      a member or helper the patch adds is gone (a delegation, an attribute it sets);
- wrong-delegate   a by-name delegation names another member (``getattr(x, "a")`` -> ``"b"``);
- wrong-argument   a call the patch adds passes ``None`` for its last argument, or its first two
                   arguments swapped;
- default-on       one condition of an ``and`` the patch adds is dropped (an opt-in gate that
                   opens without its opt-in, a probe no longer consulted);
- neutralise       an ``if`` the patch adds never fires (``if False:``);
- move-call        a call the patch adds before an upstream step moves after that step.

The mutated patch is regenerated the way a maintainer makes one (``git am``, edit, ``commit
--amend``, ``git format-patch``) and the rest of the series applied on top; a mutant after which
the series no longer applies is counted apart (it cannot reach a build). Each applying mutant runs
against the build gate (``check_tree`` on the line's real release, patched) and, when the gate
lets it through, against the fast set (``-m "not slow and not image"``, ``-x``) in a scratch copy
of HEAD with the mutated patch in place. Target: every mutant caught by one of them.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: sglpatch, tools.mutation

import git  # noqa: E402

from sglpatch.errors import UserError  # noqa: E402
from sglpatch.queue import prepare  # noqa: E402
from sglpatch.queue.line import all_lines, line_dir  # noqa: E402
from sglpatch.queue.series import read_series  # noqa: E402
from sglpatch.ship import build  # noqa: E402
from sglpatch.upstream import source  # noqa: E402
from sglpatch.upstream.pin import read_pin  # noqa: E402
from tools.mutation.scratch import EQUIVALENTS, scratch_copy  # noqa: E402  (a committed work tree: some fast tests need one)

OPERATORS = ("drop-member", "wrong-delegate", "wrong-argument", "default-on", "neutralise", "move-call")
IDENTITY = {
    "GIT_AUTHOR_NAME": "Mutant",
    "GIT_AUTHOR_EMAIL": "mutant@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "Mutant",
    "GIT_COMMITTER_EMAIL": "mutant@example.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}
# Fast tests that read the series first, so that a caught mutant stops early (-x).
FIRST = [
    "tests/patches/test_patch_behaviour.py",
    "tests/patches/test_patch_aux_layers.py",
    "tests/ship/test_build_gate.py",
    "tests/patches/test_series_content.py",
]
# Calls whose arguments are words or plain data, not the wiring a patch gets wrong.
_PLAIN_CALLS = {
    "isinstance",
    "len",
    "getattr",
    "hasattr",
    "int",
    "str",
    "list",
    "tuple",
    "dict",
    "set",
    "bool",
    "any",
    "all",
    "print",
    "repr",
    "sorted",
    "range",
    "enumerate",
    "zip",
    "type",
}
_LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log", "getLogger"}


@dataclasses.dataclass
class Mutant:
    line: str
    patch: str
    path: str
    operator: str
    where: str
    text: str = dataclasses.field(repr=False)
    patch_text: str = dataclasses.field(default="", repr=False)
    verdict: str = ""  # gate / fast set / survived / does not apply / ...
    detail: str = ""

    def label(self) -> str:
        return f"{self.line}:{self.patch[:4]} {self.operator} {self.where}"


# ---------------------------------------------------------------- what a patch adds


def added_lines(patch_text: str, path: str) -> set[int]:
    """Line numbers, in the file after the patch, of the lines the patch adds to ``path``."""
    added, current, new_line = set(), None, 0
    for line in patch_text.splitlines():
        if line.startswith("diff --git "):
            current = line.split(" b/", 1)[1] if " b/" in line else None
        elif line.startswith("@@") and current == path:
            new_line = int(re.match(r"@@ -\S+ \+(\d+)", line).group(1))
        elif current == path and new_line and not line.startswith(("+++", "---")):
            if line.startswith("+"):
                added.add(new_line)
                new_line += 1
            elif line.startswith(" "):
                new_line += 1
    return added


def _span(node: ast.AST) -> range:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return range(first, node.end_lineno + 1)


def _added(node: ast.AST, added: set[int]) -> bool:
    return all(n in added for n in _span(node))


# ---------------------------------------------------------------- text edits


def _offsets(text: str) -> list[int]:
    starts, pos = [0], 0
    for line in text.splitlines(keepends=True):
        pos += len(line.encode())
        starts.append(pos)
    return starts


def _replace(text: str, node: ast.AST, new: str) -> str:
    data, starts = text.encode(), _offsets(text)
    begin = starts[node.lineno - 1] + node.col_offset
    end = starts[node.end_lineno - 1] + node.end_col_offset
    return (data[:begin] + new.encode() + data[end:]).decode()


def _delete_lines(text: str, span: range) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[: span.start - 1] + lines[span.stop - 1 :])


def _move_after(text: str, stmt: ast.stmt, after: ast.stmt) -> str:
    lines = text.splitlines(keepends=True)
    moved = lines[stmt.lineno - 1 : stmt.end_lineno]
    indent = re.match(r"\s*", lines[stmt.lineno - 1]).group()
    target_indent = re.match(r"\s*", lines[after.lineno - 1]).group()
    moved = [target_indent + l[len(indent) :] if l.startswith(indent) else l for l in moved]
    head, rest = lines[: stmt.lineno - 1], lines[stmt.end_lineno :]
    offset = stmt.end_lineno - stmt.lineno + 1
    cut = after.end_lineno - offset
    return "".join(head + rest[: cut - len(head)] + moved + rest[cut - len(head) :])


# ---------------------------------------------------------------- the operators


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _blocks(tree: ast.AST):
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def drop_member(text, tree, added):
    for cls in (n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.Module))):
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _added(stmt, added):
                yield f"{stmt.name} (line {stmt.lineno})", _delete_lines(text, _span(stmt))
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        if _added(fn, added):
            continue
        for stmt in ast.walk(fn):
            if (
                isinstance(stmt, (ast.Assign, ast.AnnAssign))
                and _added(stmt, added)
                and any(
                    isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                    for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
                )
            ):
                yield (
                    f"{ast.unparse(stmt).split('=')[0].strip()} (line {stmt.lineno})",
                    _delete_lines(text, _span(stmt))
                    if len(_parent_block(tree, stmt)) > 1
                    else _replace(text, stmt, "pass"),
                )


def _parent_block(tree, stmt):
    return next((b for b in _blocks(tree) if stmt in b), [stmt])


def _member_names(tree, added) -> list[ast.Constant]:
    """The member-name argument of every by-name lookup the patch adds: ``getattr(x, "a")``,
    ``hasattr(x, "a")``, ``self._get_language_model_attr("a")``."""
    found = []
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and _added(call, added) and "attr" in _callee(call).lower()):
            continue
        position = 1 if _callee(call) in ("getattr", "hasattr", "setattr", "delattr") else 0
        arg = call.args[position] if len(call.args) > position else None
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.isidentifier():
            found.append(arg)
    return found


def wrong_delegate(text, tree, added):
    names = _member_names(tree, added)
    values = sorted({c.value for c in names})
    for const in names:
        others = [v for v in values if v != const.value]
        if others:
            other = others[(values.index(const.value)) % len(others)]
            yield f"{const.value!r} -> {other!r} (line {const.lineno})", _replace(text, const, repr(other))


def _wiring_call(call: ast.Call) -> bool:
    func = call.func
    name = _callee(call)
    if name in _PLAIN_CALLS or name.endswith(("Error", "Exception", "Warning")) or not call.args:
        return False  # an exception's arguments are its message
    if isinstance(func, ast.Attribute) and func.attr in _LOG_METHODS:
        return False
    return not all(isinstance(a, ast.Constant) for a in call.args)


def wrong_argument(text, tree, added):
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and _added(call, added) and _wiring_call(call)):
            continue
        last = call.args[-1]
        if not isinstance(last, (ast.Constant, ast.Starred)):
            yield f"{_callee(call)}(..., None) (line {call.lineno})", _replace(text, last, "None")
        first, second = call.args[:2] if len(call.args) > 1 else (None, None)
        if (
            first is not None
            and ast.dump(first) != ast.dump(second)
            and not isinstance(first, ast.Starred)
            and not isinstance(second, ast.Starred)
        ):
            new_call = ast.Call(func=call.func, args=[second, first, *call.args[2:]], keywords=call.keywords)
            yield f"{_callee(call)}(b, a) (line {call.lineno})", _replace(text, call, ast.unparse(new_call))


def default_on(text, tree, added):
    for node in ast.walk(tree):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And) and _added(node, added):
            for i, operand in enumerate(node.values):
                rest = node.values[:i] + node.values[i + 1 :]
                new = rest[0] if len(rest) == 1 else ast.BoolOp(op=ast.And(), values=rest)
                yield (
                    f"without {ast.unparse(operand)[:50]!r} (line {node.lineno})",
                    _replace(text, node, f"({ast.unparse(new)})"),
                )


def neutralise(text, tree, added):
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.test.lineno in added and node.lineno in added:
            yield (
                f"if {ast.unparse(node.test)[:50]} -> if False (line {node.lineno})",
                _replace(text, node.test, "False"),
            )


def move_call(text, tree, added):
    for block in _blocks(tree):
        for stmt, nxt in zip(block, block[1:]):
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Call)
                and _added(stmt, added)
                and not any(n in added for n in _span(nxt))
            ):
                yield f"{_callee(stmt.value)}() after line {nxt.lineno}", _move_after(text, stmt, nxt)


OPERATOR_FUNCTIONS = {
    "drop-member": drop_member,
    "wrong-delegate": wrong_delegate,
    "wrong-argument": wrong_argument,
    "default-on": default_on,
    "neutralise": neutralise,
    "move-call": move_call,
}


def mutants_of(text: str, added: set[int]):
    """(operator, where, mutated text) for every place an operator applies; all still parse."""
    tree = ast.parse(text)
    for name, operator in OPERATOR_FUNCTIONS.items():
        for where, new in operator(text, tree, added):
            if new != text:
                yield name, where, new


# ---------------------------------------------------------------- making the mutated patches


class SeriesRepo:
    """The files a line's series touches, pristine from its release, then one commit per patch."""

    def __init__(self, line_root: Path, work: Path):
        self.pin, self.series = read_pin(line_root), read_series(line_root)
        source.prepare(self.pin, line_root)
        pristine = source.pristine_tree(self.pin.version, self.pin)
        self.repo = git.Repo.init(work)
        self.work = work
        for rel in self.series.touched_files():
            if (pristine / rel).exists():
                (work / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(pristine / rel, work / rel)
                self.repo.index.add([rel])
        self._git("commit", "-qm", "pristine", "--allow-empty")
        self.commits = []
        for patch in self.series.patches:
            self._git("am", "-q", "--keep-cr", str(patch.path))
            self.commits.append(self.repo.head.commit.hexsha)

    def _git(self, *args: str) -> str:
        with self.repo.git.custom_environment(**IDENTITY):
            return self.repo.git.execute(["git", *args], strip_newline_in_stdout=False)

    def mutants(self, line: str, operators: tuple[str, ...], patches: tuple[str, ...] = ()):
        for index, patch in enumerate(self.series.patches):
            if patches and patch.name[:4] not in patches:
                continue
            self._git("reset", "-q", "--hard", self.commits[index])
            patch_text = patch.path.read_text()
            for path in patch.files:
                file = self.work / path
                if not path.endswith(".py") or not file.exists():
                    continue
                added = added_lines(patch_text, path)
                for operator, where, text in mutants_of(file.read_text(), added):
                    if operator in operators:
                        yield index, Mutant(line, patch.name, path, operator, f"{Path(path).name}: {where}", text)

    def realise(self, index: int, mutant: Mutant) -> dict[str, str] | None:
        """Write ``mutant`` as patch ``index`` (its text into mutant.patch_text) and apply the rest
        of the series on top: the touched files' final contents, or None if the series breaks."""
        self._git("reset", "-q", "--hard", self.commits[index])
        (self.work / mutant.path).write_text(mutant.text)
        self._git("commit", "-qa", "--amend", "--no-edit")
        mutant.patch_text = self._git(
            "format-patch", "--stdout", "--zero-commit", "--no-signature", "--full-index", "-1", "HEAD"
        )
        try:
            for commit in self.commits[index + 1 :]:
                self._git("cherry-pick", "--allow-empty", commit)
        except git.GitCommandError:
            self.repo.git.execute(["git", "cherry-pick", "--abort"], with_exceptions=False)
            return None
        return {rel: (self.work / rel).read_text() for rel in self.series.touched_files() if (self.work / rel).exists()}


# ---------------------------------------------------------------- judging them


class Gate:
    """The line's series applied to its real release once; a mutant's files swapped in and out."""

    def __init__(self, line_root: Path):
        with contextlib.redirect_stderr(io.StringIO()):  # "applied ..." for each patch
            pin, series, _, queue = prepare.prepare_tree(line_root, gate=True)
        self.tree, self.series, self.pin = queue.path, series, pin

    def refuses(self, files: dict[str, str]) -> str | None:
        originals = {rel: (self.tree / rel).read_text() for rel in files}
        try:
            for rel, text in files.items():
                (self.tree / rel).write_text(text)
            with contextlib.redirect_stderr(io.StringIO()):  # the gate's "check ...: ok" lines
                build.check_tree(self.tree, self.series, self.pin)
            return None
        except UserError as refused:
            return str(refused)
        finally:
            for rel, text in originals.items():
                (self.tree / rel).write_text(text)


class FastSet:
    """The fast set in a committed scratch copy of HEAD, run with a mutant's patch committed in its
    place. In stages: the tests that read the series first (seconds), then the whole fast set; the
    verdict is that of one run of the whole set with -x, the cost of a caught mutant is not. Each
    stage must pass on the series as it is before it judges a mutant: a test failing for another
    reason would count every mutant as caught."""

    def __init__(self, scratch: Path, stages: list[list[str]]):
        self.scratch, self.stages, self.clean = scratch, stages, set()
        self.base = self._git("rev-parse", "HEAD").strip()

    def _git(self, *args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=self.scratch, check=True, capture_output=True, text=True, env={**os.environ, **IDENTITY}
        ).stdout

    def _first_failure(self, files: list[str]) -> str | None:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-m",
                "not slow and not image",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                *files,
            ],
            cwd=self.scratch,
            capture_output=True,
            text=True,
        )
        if run.returncode == 0:
            return None
        failed = re.findall(r"^FAILED (\S+)", run.stdout, re.M) or re.findall(r"^ERROR (\S+)", run.stdout, re.M)
        return failed[0] if failed else f"pytest exit {run.returncode}"

    def fails(self, line_rel: str, mutant: Mutant) -> str | None:
        """The first failing fast test with ``mutant`` in place, or None."""
        for stage, files in enumerate(self.stages):
            if stage not in self.clean:
                if (failed := self._first_failure(files)) is not None:
                    sys.exit(
                        f"error: the fast set fails without any mutant ({failed}): fix that before judging mutants"
                    )
                self.clean.add(stage)
            (self.scratch / line_rel / "patches" / mutant.patch).write_text(mutant.patch_text)
            self._git("commit", "-qa", "--allow-empty", "-m", f"mutant: {mutant.label()}")
            try:
                failed = self._first_failure(files)
            finally:
                self._git("reset", "-q", "--hard", self.base)
            if failed is not None:
                return failed
        return None


def run_line(line, scratch: Path, work: Path, fast_set: FastSet, args) -> list[Mutant]:
    line_root = line_dir(scratch, line.name)
    line_rel = str(line_root.relative_to(scratch))
    print(f"{line.name}: applying the series to SGLang {read_pin(line_root).version} ...", flush=True)
    series_repo = SeriesRepo(line_root, work / f"{line.name}-series")
    gate = Gate(line_root)
    results = []
    for index, mutant in series_repo.mutants(line.name, tuple(args.operator or OPERATORS), tuple(args.patch or ())):
        start = time.monotonic()
        files = series_repo.realise(index, mutant)
        if mutant.label() in args.equivalents:
            mutant.verdict, mutant.detail = "equivalent", args.equivalents[mutant.label()]
        elif files is None:
            mutant.verdict = "does not apply"
        elif (refusal := gate.refuses(files)) is not None:
            mutant.verdict, mutant.detail = "gate", refusal
        elif args.gate_only:
            mutant.verdict = "passes the gate"
        elif (failed := fast_set.fails(line_rel, mutant)) is not None:
            mutant.verdict, mutant.detail = "fast set", failed
        else:
            mutant.verdict = "survived"
        print(f"  {mutant.label():90.90} {mutant.verdict} ({time.monotonic() - start:.0f} s)", flush=True)
        results.append(mutant)
    return results


def summary(results: list[Mutant], seconds: float, gate_only: bool) -> bool:
    print(f"\n{'line':10} {'patch':5} {'mutants':>7} {'gate':>5} {'fast':>5} {'left':>5} {'n/a':>4} {'equiv':>5}")
    groups: dict[tuple[str, str], list[Mutant]] = {}
    for m in results:
        groups.setdefault((m.line, m.patch[:4]), []).append(m)
    for (line, patch), ms in groups.items():

        def count(*verdicts: str, ms: list[Mutant] = ms) -> int:
            return sum(m.verdict in verdicts for m in ms)

        print(
            f"{line:10} {patch:5} {len(ms):7} {count('gate'):5} {count('fast set'):5} "
            f"{count('survived', 'passes the gate'):5} {count('does not apply'):4} {count('equivalent'):5}"
        )
    left = [m for m in results if m.verdict in ("survived", "passes the gate")]
    for m in left:
        print(f"  {'passes the gate' if gate_only else 'SURVIVED'}: {m.label()}")
    print(f"time: {seconds:.0f} s on {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores")
    what = "the build gate" if gate_only else "the build gate or the fast set"
    scored = [m for m in results if m.verdict not in ("equivalent", "does not apply")]
    print(
        f"patch-level target {'met' if not left else 'NOT met'}: {len(scored) - len(left)} of "
        f"{len(scored)} mutants caught by {what} (equivalent and not applying ones apart)"
    )
    return not left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--line", action="append", help="a maintained line (default: all)")
    parser.add_argument("--operator", action="append", choices=OPERATORS, help="only this operator")
    parser.add_argument(
        "--patch",
        action="append",
        metavar="NNNN",
        help="only the mutants of this patch (its number, e.g. 0005; repeatable)",
    )
    parser.add_argument("--gate-only", action="store_true", help="stop at the build gate")
    parser.add_argument("--json", metavar="FILE", help="also write every mutant's verdict here")
    parser.add_argument(
        "--fast-files",
        nargs="+",
        help="judge by these test files only (default: the whole fast set, those that read the series first)",
    )
    args = parser.parse_args(argv)
    args.equivalents = tomllib.loads(EQUIVALENTS.read_text()).get("patch-equivalent", {})
    args.stages = [args.fast_files] if args.fast_files else [FIRST[:2], [*FIRST, "tests"]]
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="sglpatch-patch-mutation-"))
    try:
        scratch = work / "repo"
        scratch.mkdir()
        scratch_copy(scratch)
        lines = [l for l in all_lines(scratch) if not args.line or l.name in args.line]
        fast_set = FastSet(scratch, args.stages)
        results = [m for line in lines for m in run_line(line, scratch, work, fast_set, args)]
        met = summary(results, time.monotonic() - start, args.gate_only)
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    [
                        {k: v for k, v in dataclasses.asdict(m).items() if k not in ("text", "patch_text")}
                        for m in results
                    ],
                    indent=2,
                )
            )
        return 0 if met else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

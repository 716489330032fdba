"""Mutation testing of the tool: does the fast suite fail when the code is wrong? (issue 20)

    pip install -r tools/mutation/requirements.txt
    python tools/mutation/modules.py                    # each series module, then the patch-level mutants
    python tools/mutation/modules.py sglpatch/upstream/pin.py       # one module (minutes)
    python tools/mutation/modules.py --all              # every module of sglpatch/, in one run
    python tools/mutation/modules.py sglpatch/queue/rebase.py --sample 150 --seed 23   # a random 150 of its mutants

Each module runs in its own scratch copy against its own tests (MODULE_TESTS). queue/rebase.py,
upstream/source.py and queue/patch_queue.py are sampled by default (SAMPLED_BY_DEFAULT: their full
runs take about 9.5, 1 and 0.6 hours on 2 cores, the default run about 2.5 hours with the
patch-level mutants, git/env.py's share about 15 minutes); `--sample 0` runs every mutant (about
13 hours).

Runs mutmut (pinned) on a scratch copy of HEAD, never on this checkout, with the fast tests
(`-m "not slow and not image"`); mutmut runs for each mutant only the tests that reach the mutated
function, in the test process or in a `python build.py` child (tools/mutation/children/). Prints per
module: mutants, killed, survived, no tests, timed out, the score and the time.
Not part of CI (it runs for hours). What is left out of the score, and nothing else:

- message-only mutants: the mutant differs from the original only inside string literals
  (wording of a message); counted and reported apart, no target;
- equivalent mutants: listed by their change in tools/mutation/equivalents.toml, one reason each.

Target (issue 20): at least 90 % killed in the modules that write or judge the series.
"""

from __future__ import annotations

import argparse
import ast
import collections
import contextlib
import difflib
import functools
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `tools.mutation` below

from tools.mutation.scratch import EQUIVALENTS, HERE, scratch_copy  # noqa: E402

SERIES_MODULES = (
    "sglpatch/queue/rebase.py",
    "sglpatch/queue/rebase_finish.py",
    "sglpatch/queue/rebase_report.py",
    "sglpatch/queue/rebase_resolution.py",
    "sglpatch/queue/rebase_state.py",
    "sglpatch/queue/rebase_verdicts.py",
    "sglpatch/queue/patch_queue.py",
    "sglpatch/queue/series.py",
    "sglpatch/queue/line.py",
    "sglpatch/queue/line_add.py",
    "sglpatch/upstream/pin.py",
    "sglpatch/upstream/source.py",
    "sglpatch/upstream/artifacts.py",
    "sglpatch/upstream/mirror.py",
    "sglpatch/upstream/trees.py",
    "sglpatch/ship/wheel.py",
    "sglpatch/contract/index/classes.py",
    "sglpatch/contract/index/wrappers.py",
    "sglpatch/git/diffheader.py",
    "sglpatch/git/env.py",
)
# The test files that exercise each series module directly. A one-module run uses only these, so
# mutmut's first phase (the tests run once traced, once clean) takes seconds, not the whole fast
# set's half hour; `--tests` overrides, `--tests tests` is the whole fast set.
MODULE_TESTS = {
    # rebase.py and the modules split out of it (state, verdicts, resolution, finish, report)
    **dict.fromkeys(
        [
            "sglpatch/queue/rebase.py",
            "sglpatch/queue/rebase_finish.py",
            "sglpatch/queue/rebase_report.py",
            "sglpatch/queue/rebase_resolution.py",
            "sglpatch/queue/rebase_state.py",
            "sglpatch/queue/rebase_verdicts.py",
        ],
        [
            "tests/queue/test_rebase.py",
            "tests/queue/test_rebase_verdicts.py",
            "tests/queue/test_rebase_releases.py",
            "tests/cli/test_parser.py",
            "tests/queue/test_reliability.py",
            "tests/queue/test_rebase_leftovers.py",
            "tests/queue/test_hunks.py",
            "tests/queue/test_changelog.py",
            "tests/queue/test_rehearse.py",
        ],
    ),
    "sglpatch/queue/patch_queue.py": [
        "tests/queue/test_patch_queue.py",
        "tests/queue/test_patch_queue_stateful.py",
        "tests/git/test_env.py",
    ],
    "sglpatch/queue/series.py": [
        "tests/queue/test_series.py",
        "tests/patches/test_series_content.py",
        "tests/queue/test_importer.py",
    ],
    "sglpatch/queue/line.py": [
        "tests/queue/test_lines.py",
        "tests/queue/test_rebase.py",
        "tests/queue/test_line_add.py",
    ],
    "sglpatch/queue/line_add.py": [
        "tests/queue/test_lines.py",
        "tests/queue/test_rebase.py",
        "tests/queue/test_line_add.py",
    ],
    "sglpatch/upstream/pin.py": ["tests/upstream/test_pin.py"],
    "sglpatch/upstream/source.py": [
        "tests/upstream/test_source.py",
        "tests/upstream/test_artifacts.py",
        "tests/upstream/test_mirror.py",
        "tests/upstream/test_trees.py",
        "tests/upstream/test_cache_integrity.py",
    ],
    "sglpatch/upstream/artifacts.py": [
        "tests/upstream/test_artifacts.py",
        "tests/upstream/test_source.py",
        "tests/upstream/test_cache_integrity.py",
    ],
    "sglpatch/upstream/mirror.py": [
        "tests/upstream/test_mirror.py",
        "tests/upstream/test_source.py",
        "tests/upstream/test_cache_integrity.py",
    ],
    "sglpatch/upstream/trees.py": [
        "tests/upstream/test_trees.py",
        "tests/upstream/test_source.py",
        "tests/upstream/test_cache_integrity.py",
    ],
    "sglpatch/ship/wheel.py": ["tests/ship/test_build.py", "tests/ship/test_wheel.py"],
    "sglpatch/contract/index/classes.py": [
        "tests/contract/test_contract_classes.py",
        "tests/contract/test_contract.py",
        "tests/contract/test_suspect.py",
        "tests/contract/test_contract_production.py",
        "tests/cli/test_check.py",
    ],
    "sglpatch/contract/index/wrappers.py": ["tests/contract/test_contract.py", "tests/cli/test_check.py"],
    "sglpatch/git/diffheader.py": [
        "tests/git/test_diffheader.py",
        "tests/queue/test_series.py",
        "tests/queue/test_rebase.py",
        "tests/queue/test_patch_queue.py",
        "tests/git/test_env.py",
    ],
    # every git command of the tool runs in git_env, so every test of the queue reaches it; these are
    # the ones that read what it changes (a maintainer's configuration ignored, the work tree's pinned,
    # fixed identity and dates, non-UTF-8 diffs and names, a refusing hook, git killed by a signal).
    # Whole files took about an hour, most of it the equivalents running every kill test.
    "sglpatch/git/env.py": [
        *(
            f"tests/git/test_env.py::test_{name}"
            for name in (
                "the_maintainers_global_and_system_git_configuration_is_not_read",
                "no_setting_of_the_work_repositorys_own_configuration_changes_a_patch_or_a_hunk_read",
            )
        ),
        *(
            f"tests/queue/test_patch_queue.py::test_{name}"
            for name in (
                "a_change_whose_bytes_are_not_utf8_is_exported_byte_for_byte",
                "a_stale_patch_with_bytes_that_are_not_utf8_is_diagnosed",
                "push_all_applies_each_patch_as_one_commit",
                "a_mail_header_git_am_refuses_after_applying_is_named_not_taken_for_a_stale_hunk",
                "a_hook_that_refuses_git_am_is_named_not_taken_for_a_mail_header",
                "git_ams_refusal_is_gits_error_else_its_hooks_last_line",
            )
        ),
        "tests/upstream/test_mirror.py::test_import_is_reproducible",
        *(
            f"tests/queue/test_reliability.py::test_{name}"
            for name in (
                "a_git_killed_alone_is_an_interrupt_not_a_patch_that_does_not_apply",
                "a_git_killed_alone_in_a_rebase_is_an_interrupt_not_a_conflict",
                "an_interrupted_push_exits_130_and_leaves_the_line_as_before",
                "a_group_ctrl_c_stops_a_push_started_with_sigint_ignored",
            )
        ),
        "tests/git/test_diffheader.py",
    ],
}
TARGET = 0.90
# A full run of rebase.py takes about 9.5 hours on 2 cores (its tests drive real git repositories
# through the CLI), of source.py about an hour, of patch_queue.py 40 minutes; the default run scores a
# seeded random sample of each instead, so it ends within an afternoon.
SAMPLED_BY_DEFAULT = {
    "sglpatch/queue/rebase.py": 150,
    "sglpatch/upstream/source.py": 150,
    "sglpatch/queue/patch_queue.py": 150,
}
# mutmut stops a mutant after 30 times its tests' estimated CPU time (timeout_multiplier 15, twice):
# a mutant that loops forever in a function the whole contract suite reaches then holds a worker
# for 25 minutes. 3 (6 times) still leaves a survivor on a loaded 2-core machine room to finish.
CONFIG = """[tool.mutmut]
timeout_multiplier = 3.0
source_paths = ["sglpatch"]
only_mutate = {only}
also_copy = {also_copy}
pytest_add_cli_args = ["-m", "not slow and not image", "-p", "no:cacheprovider", "-p", "mutation_hits", "-q"]
pytest_add_cli_args_test_selection = {tests}
"""


def tests_for(modules: list[str], override: list[str] | None) -> list[str]:
    """The test files for these modules: the map's, or the whole fast set for a module it lacks."""
    if override:
        return override
    if any(m not in MODULE_TESTS for m in modules):
        return ["tests"]
    return sorted({t for m in modules for t in MODULE_TESTS[m]})


# Calls whose string arguments are words for a person: an error, a warning, a progress line. None:
# every argument; otherwise the positions and keywords that are words (a Problem's key is data).
MESSAGE_CALLS: dict[str, set | None] = {
    "UserError": None,
    "Refused": None,
    "print": None,
    "say": None,
    "progress": None,
    "_say": None,
    "_note": None,
    "note": None,
    "warn": None,
    "write": None,
    "Problem": {1, 2, "what", "hint"},
    "ensure_clean": {0},  # the action it names in its refusal
    "decode_utf8": {2, "hint"},
    "refuse_conflict_markers": {2, "hint"},  # the hint of their error
    "add_argument": {"help"},
    "add_parser": {"help", "description"},
}  # what --help says


class _BlankMessages(ast.NodeTransformer):
    """Blank the string constants of messages only: a dict key or a TOML field stays as it is."""

    def visit_Call(self, call):
        func = call.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in MESSAGE_CALLS:
            words = MESSAGE_CALLS[name]
            call.args = [_blank(a) if words is None or i in words else self.visit(a) for i, a in enumerate(call.args)]
            call.keywords = [
                ast.keyword(
                    arg=k.arg, value=_blank(k.value) if words is None or k.arg in words else self.visit(k.value)
                )
                for k in call.keywords
            ]
            return call
        return self.generic_visit(call)


def _blank(node: ast.AST) -> ast.AST:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            sub.value = ""
        elif isinstance(sub, ast.JoinedStr):  # how much of a value an f-string quotes: `{author[:60]}`
            for part in ast.walk(sub):
                if isinstance(part, ast.Constant) and type(part.value) is int:
                    part.value = 0
    return node


def _normalised(node: ast.AST) -> str:
    fn = _BlankMessages().visit(ast.parse(ast.unparse(node)))
    body = fn.body[0]
    return ast.dump(ast.Module(body=body.body, type_ignores=[])) + ast.dump(body.args)


def message_only(mutated_file: Path) -> set[str]:
    """Mutant function names whose only change is inside string literals."""
    return _message_only(mutated_file.read_text())


@functools.cache  # a sampled run classifies the same mutated file before and after mutmut runs
def _message_only(source: str) -> set[str]:
    tree = ast.parse(source)
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found = set()
    for name, node in functions.items():
        base, sep, number = name.rpartition("__mutmut_")
        if not sep or not number.isdigit() or f"{base}__mutmut_orig" not in functions:
            continue
        if _normalised(node) == _normalised(functions[f"{base}__mutmut_orig"]):
            found.add(name)
    return found


def _readable(function: str) -> str:
    """mutmut's mangled name as the source spells it: x_add_line -> add_line, xǁLineǁcommand -> Line.command."""
    return ".".join(filter(None, function.split("ǁ")[1:])) if "ǁ" in function else function.removeprefix("x_")


def mutant_changes(mutated_file: Path, module: str) -> dict[str, str]:
    """Each mutant's change as ``MODULE FUNCTION: the mutated line``, the key of an equivalent
    mutant: it survives edits elsewhere in the function, which renumber mutmut's mutants."""
    return _mutant_changes(mutated_file.read_text(), module)


@functools.cache
def _mutant_changes(source: str, module: str) -> dict[str, str]:
    lines = source.splitlines()  # sliced by each function's span: get_source_segment splits the
    # whole file per call, hours for rebase.py's 2,100 mutants in a 60,000-line file
    functions = {
        n.name: "\n".join(lines[n.lineno - 1 : n.end_lineno]).replace(n.name, "", 1).splitlines()
        for n in ast.walk(ast.parse(source))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    found = {}
    for name, lines in functions.items():
        base, sep, number = name.rpartition("__mutmut_")
        if not sep or not number.isdigit() or f"{base}__mutmut_orig" not in functions:
            continue
        diff = difflib.unified_diff(functions[f"{base}__mutmut_orig"], lines, lineterm="", n=0)
        added = [line[1:].strip() for line in diff if line.startswith("+") and not line.startswith("+++")]
        found[name] = f"{module} {_readable(base)}: {' / '.join(added)}"
    return found


def statuses(workdir: Path) -> dict[str, str]:
    from mutmut.stats import status_by_exit_code

    found = {}
    for meta in (workdir / "mutants").rglob("*.meta"):
        for key, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            found[key] = status_by_exit_code[code]
    return found


def module_of(key: str) -> str:
    return key.split(".x_")[0].split(".xǁ")[0].replace(".", "/") + ".py"


def expand(workdir: Path, modules: list[str]) -> list[str]:
    """The module files a pattern names, as mutmut's only_mutate matches them (``*`` spans /)."""
    return sorted(
        str(p.relative_to(workdir))
        for m in modules
        for p in (workdir.glob(m.replace("*", "**/*.py")) if "*" in m else [workdir / m])
    )


def scored_mutants(workdir: Path, modules: list[str], equivalents: dict[str, str]) -> list[str]:
    """Every mutant the score counts (neither message-only nor a listed equivalent), named as
    mutmut names it, from mutmut's own mutation of each file (before mutmut runs anything)."""
    from mutmut.mutation.file_mutation import mutate_file_contents
    from mutmut.utils.format_utils import get_mutant_name

    names = []
    for module in expand(workdir, modules):
        with contextlib.chdir(workdir):  # mutmut reads its configuration from the working directory
            mutated = mutate_file_contents(module, (workdir / module).read_text())
        copy = workdir / ".sample" / module
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(mutated.code)
        messages, changes = message_only(copy), mutant_changes(copy, module)
        names += [
            get_mutant_name(Path(module), name)
            for name in mutated.mutant_names
            if name not in messages and changes.get(name) not in equivalents
        ]
    return names


def wilson(killed: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % interval of a proportion measured on a random sample (Wilson's score interval)."""
    if n == 0:
        return 0.0, 1.0
    p = killed / n
    centre, spread = p + z * z / (2 * n), z * ((p * (1 - p) + z * z / (4 * n)) / n) ** 0.5
    return (centre - spread) / (1 + z * z / n), (centre + spread) / (1 + z * z / n)


def report(
    workdir: Path, seconds: float, equivalents: dict[str, str], population: dict[str, int] | None = None
) -> tuple[list[dict], bool]:
    """``population``: a sampled run's count of scored mutants per module; the mutants it did
    not draw are left out and the score is an estimate with its interval."""
    found = statuses(workdir)
    if population is not None:
        found = {key: status for key, status in found.items() if status != "not checked"}
    rows, met = [], True
    by_module = collections.defaultdict(dict)
    for key, status in found.items():
        by_module[module_of(key)][key] = status
    for module, keys in sorted(by_module.items()):
        messages = {f"{key.rsplit('.', 1)[0]}.{name}" for name in message_only(workdir / "mutants" / module)}
        changes = {
            f"{key.rsplit('.', 1)[0]}.{name}": change
            for name, change in mutant_changes(workdir / "mutants" / module, module).items()
        }
        equivalent = {key for key in keys if changes.get(key) in equivalents}
        counts = collections.Counter()
        for key, status in keys.items():
            kind = "equivalent" if key in equivalent else "message" if key in messages else status
            counts[kind] += 1
        scored = len(keys) - counts["equivalent"] - counts["message"]
        score = counts["killed"] / scored if scored else 1.0
        series = module in SERIES_MODULES
        met &= not series or score >= TARGET
        if population is not None:
            low, high = wilson(counts["killed"], scored)
            sample = {
                "sampled": scored,
                "population": population.get(module, 0),
                "interval": [round(low, 3), round(high, 3)],
            }
        else:
            sample = {}
        rows.append(
            {
                "module": module,
                "mutants": len(keys),
                "killed": counts["killed"],
                "survived": counts["survived"],
                "no_tests": counts["no tests"],
                "timeout": counts["timeout"],
                "message_only": counts["message"],
                "equivalent": counts["equivalent"],
                "score": round(score, 3),
                "target": TARGET if series else None,
                "run_seconds": round(seconds),
                "survivors": sorted(
                    changes.get(k, k)
                    for k, s in keys.items()
                    if s in ("survived", "no tests") and k not in equivalent and k not in messages
                ),
                **sample,
            }
        )
    return rows, met


def print_table(rows: list[dict], seconds: float) -> None:
    print(
        f"{'module':34} {'mutants':>7} {'killed':>6} {'surv':>5} {'none':>5} {'t/o':>4} {'msg':>4} "
        f"{'equiv':>5} {'score':>6}  target"
    )
    for r in rows:
        verdict = "" if r["target"] is None else ("met" if r["score"] >= TARGET else "NOT MET")
        print(
            f"{r['module']:34} {r['mutants']:7} {r['killed']:6} {r['survived']:5} {r['no_tests']:5} "
            f"{r['timeout']:4} {r['message_only']:4} {r['equivalent']:5} {r['score']:6.1%}  {verdict}"
        )
        if "sampled" in r:
            low, high = r["interval"]
            print(
                f"{'':34} a random {r['sampled']} of its {r['population']} scored mutants: the score is an "
                f"estimate, 95 % interval {low:.1%}-{high:.1%}"
            )
    print(f"time: {seconds:.0f} s on {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores")


def run_mutmut(
    modules: list[str],
    tests: list[str],
    sample: int,
    seed: int,
    max_children: int,
    equivalents: dict[str, str],
    keep: bool,
) -> tuple[list[dict], bool]:
    """One mutmut run over ``modules`` (all of them, or a seeded random ``sample`` of each one's
    scored mutants) in its own scratch copy of HEAD; its rows and whether they meet the target."""
    workdir = Path(tempfile.mkdtemp(prefix="sglpatch-mutation-"))
    try:
        scratch_copy(workdir)
        # the tests read the whole checkout (docs, CHANGELOG, docker/, deploy/, lines/...): copy all of it
        rest = sorted(p.name for p in workdir.iterdir() if p.name not in ("sglpatch", "pyproject.toml"))
        (workdir / "pyproject.toml").write_text(
            CONFIG.format(only=json.dumps(modules), also_copy=json.dumps(rest), tests=json.dumps(tests))
        )
        start = time.monotonic()
        log = workdir / "mutmut.log"
        print(f"mutmut on {', '.join(modules)} against {' '.join(tests)} (progress: {log})", flush=True)
        hits = workdir / ".children-hits"
        hits.mkdir()
        # the functions the tests' `python build.py` children reach count too (children/, this
        # checkout's: read only, and there whether or not HEAD has them yet)
        env = {
            **os.environ,
            "SGLPATCH_MUTMUT_HITS": str(hits),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE / "children"), os.environ.get("PYTHONPATH")])),
        }
        # A survivor runs every test that reaches it to the end: the stateful queue test's 20
        # examples made each surviving patch_queue.py mutant cost 5-8 minutes. 5 examples still kill
        # in the first ones what they kill at all; export a larger value for a deeper run.
        env.setdefault("SGLPATCH_STATEFUL_EXAMPLES", "5")
        chosen, population = [], None
        if sample:
            scored = scored_mutants(workdir, modules, equivalents)
            population = collections.Counter(module_of(name) for name in scored)
            chosen = sorted(
                name
                for module in population
                for name in random.Random(seed).sample(
                    [n for n in scored if module_of(n) == module], min(sample, population[module])
                )
            )
            print(
                f"a random {sample} of each module's scored mutants ({len(chosen)} of {len(scored)}, seed {seed})",
                flush=True,
            )
        with log.open("w") as out:
            run = subprocess.run(
                [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children), *chosen],
                cwd=workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
            )
        if run.returncode != 0:
            spinner = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
            said = [l for l in log.read_text().replace("\r", "\n").splitlines() if l.strip() and l[0] not in spinner]
            raise RuntimeError(f"mutmut failed ({run.returncode}): " + " | ".join(said[-6:]))
        seconds = time.monotonic() - start
        rows, met = report(workdir, seconds, equivalents, population)
        print_table(rows, seconds)
        if keep:
            print(f"scratch copy kept: {workdir}")
        return rows, met
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="paths under sglpatch/ (default: the series modules)")
    parser.add_argument("--all", action="store_true", help="every module of sglpatch/, in one run")
    parser.add_argument(
        "--tests",
        nargs="+",
        metavar="PATH",
        help="the tests mutmut runs (default: MODULE_TESTS for the modules; `tests` for all)",
    )
    parser.add_argument("--max-children", type=int, default=2)
    parser.add_argument("--json", metavar="FILE", help="also write the figures and survivors here")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy (mutmut show/browse there)")
    parser.add_argument(
        "--sample",
        type=int,
        metavar="N",
        help="run a random N of each module's scored mutants (seeded): an estimate with its 95 %% "
        "interval (default: SAMPLED_BY_DEFAULT's N for rebase.py, source.py and patch_queue.py, "
        "every mutant of the others; 0: every mutant)",
    )
    parser.add_argument("--seed", type=int, default=20, help="the sample's seed (default: 20)")
    parser.add_argument(
        "--no-patches",
        action="store_true",
        help="skip the patch-level mutants (tools/mutation/patches.py), which the default run adds",
    )
    args = parser.parse_args(argv)
    if importlib.util.find_spec("mutmut") is None:
        print("error: mutmut is not installed: pip install -r tools/mutation/requirements.txt", file=sys.stderr)
        return 2
    # one run per module: mutmut runs each mutant against every test that reaches its function, so
    # modules run together against the union of their tests cost more than the sum of their runs
    groups = [["sglpatch/*"]] if args.all else [[m] for m in (args.modules or SERIES_MODULES)]
    equivalents = tomllib.loads(EQUIVALENTS.read_text()).get("equivalent", {}) if EQUIVALENTS.exists() else {}
    rows, met, seconds = [], True, 0.0
    for modules in groups:
        sample = args.sample if args.sample is not None else SAMPLED_BY_DEFAULT.get(modules[0], 0)
        start = time.monotonic()
        try:
            found, ok = run_mutmut(
                modules, tests_for(modules, args.tests), sample, args.seed, args.max_children, equivalents, args.keep
            )
        except RuntimeError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        rows, met, seconds = rows + found, met and ok, seconds + time.monotonic() - start
    if len(groups) > 1:
        print("\nevery module:")
        print_table(rows, seconds)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "target_met": met}, indent=2))
    print("targets " + ("met" if met else "NOT met") + f": at least {TARGET:.0%} killed in the series modules")
    if not (args.modules or args.all or args.no_patches):  # the default run: the series' patches too
        from tools.mutation import patches

        met = patches.main([]) == 0 and met
        print("all targets " + ("met" if met else "NOT met"))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

"""Imported at start-up by every Python child of a test while tools/mutation/modules.py runs mutmut.

mutmut maps each function to the tests that reach it by recording calls in the test process
only; most of this repository's tests drive `python build.py` in a child process, so without this
the functions reached only there would count as having no test, and their mutants would never
run. While mutmut collects its stats (MUTANT_UNDER_TEST=stats), a child records the functions it
reaches and writes them, at exit, to SGLPATCH_MUTMUT_HITS; mutation_hits.py (a pytest plugin)
hands them to mutmut for the test that ran the child. Otherwise this does nothing.
"""

import atexit
import os
from pathlib import Path


def _record_children_hits(directory: str) -> None:
    try:
        import mutmut.mutation.trampoline as trampoline
    except ImportError:  # a child in another environment (a venv a test made): nothing to record
        return
    hits: set[str] = set()
    trampoline.record_trampoline_hit = lambda name, caller=None: hits.add(name)

    def save() -> None:
        if hits:
            # UTF-8 whatever the locale: a method is named xǁClassǁmethod, and a test may run its child
            # in the POSIX locale, where the default encoding (ASCII) would lose every hit of that child
            (Path(directory) / f"{os.getpid()}.hits").write_text("\n".join(sorted(hits)), encoding="utf-8")

    atexit.register(save)


if os.environ.get("MUTANT_UNDER_TEST") == "stats" and os.environ.get("SGLPATCH_MUTMUT_HITS"):
    _record_children_hits(os.environ["SGLPATCH_MUTMUT_HITS"])

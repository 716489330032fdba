"""Test-only: activates the sglpatch CPU harness in every process of a test's SGLang runtime.

tests/sglang_runtime.py puts this directory on PYTHONPATH (after the variant overlay) of each
process it starts; Python imports ``sitecustomize`` at start-up, so SGLang's spawned scheduler and
detokenizer processes get the harness too. Does nothing unless SGLPATCH_CPU_HARNESS=1 or
SGLPATCH_OBSERVE is set. See README.md here.
"""

import os

if os.environ.get("SGLPATCH_CPU_HARNESS") == "1" or os.environ.get("SGLPATCH_OBSERVE"):
    try:
        import sglpatch_cpu_harness

        if os.environ.get("SGLPATCH_CPU_HARNESS") == "1":
            sglpatch_cpu_harness.activate()
        if os.environ.get("SGLPATCH_OBSERVE"):
            from sglpatch_cpu_harness import observe

            observe.activate()
    except BaseException as exc:  # site.py would print and carry on half-set-up: stop instead
        import traceback

        traceback.print_exc()
        raise SystemExit(f"sglpatch CPU harness failed to activate: {exc!r}")

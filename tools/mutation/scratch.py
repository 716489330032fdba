"""What both mutation tools share: the checkout they test and its scratch copy.

modules.py (mutmut over the package's modules) and patches.py (the patch-level mutants) each run
in a scratch copy of HEAD, never in this checkout. Both import this module; it imports neither.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # tools/mutation/scratch.py -> the checkout
HERE = Path(__file__).resolve().parent
EQUIVALENTS = HERE / "equivalents.toml"  # the mutants that cannot change behaviour, one reason each

IDENTITY = {
    "GIT_AUTHOR_NAME": "mutation",
    "GIT_AUTHOR_EMAIL": "mutation@example.invalid",
    "GIT_COMMITTER_NAME": "mutation",
    "GIT_COMMITTER_EMAIL": "mutation@example.invalid",
}


def scratch_copy(dest: Path) -> None:
    """HEAD's tracked files (what a clean clone has), without the submodule, committed: some
    tests need a work tree with a commit (the image's revision label)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    env = {**os.environ, **IDENTITY}
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "scratch copy of HEAD"]):
        subprocess.run(["git", *command], cwd=dest, check=True, env=env, capture_output=True)

"""What a patch never takes from the work tree: build products and editor files.

A tree imported from PyPI has no ``.gitignore``, so ``__pycache__/*.pyc`` from running the
patched code, an editor's backup or swap file, or a ``.rej`` left by ``patch`` would be folded
into a patch by ``refresh``, ``new`` or ``rebase --continue`` as if the maintainer had written
it. The work tree's own ``.git/info/exclude`` lists them, so every git command the queue runs
(``add --all``, status, snapshots) leaves them alone; what was left out is named.
"""

from __future__ import annotations

from sglpatch.git.repo import Repo, git_dir, run
from sglpatch.output import warn
from sglpatch.queue.snapshot import write_file

BEGIN = "# sglpatch: build products and editor files, never part of a patch"
END = "# sglpatch: end"
PATTERNS = (
    "__pycache__/",
    "*.py[cod]",
    "*.so.tmp",
    "*~",
    ".*.sw[a-p]",
    ".#*",
    "\\#*#",
    "*.orig",
    "*.rej",
    "*.bak",
    ".DS_Store",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".ipynb_checkpoints/",
)
BLOCK = "\n".join([BEGIN, *PATTERNS, END]) + "\n"


def keep_out_build_products(repo: Repo) -> None:
    """Make the work tree's ``info/exclude`` hold :data:`PATTERNS` (once; the rest kept)."""
    path = git_dir(repo) / "info" / "exclude"
    try:
        text = path.read_text()
    except FileNotFoundError:
        text = ""
    if BLOCK in text:
        return
    if BEGIN in text:  # an older block of ours: replaced whole
        head, _, rest = text.partition(BEGIN)
        text = head + rest.partition(END)[2].lstrip("\n")
    write_file(path, (text + ("" if not text or text.endswith("\n") else "\n") + BLOCK).encode())


def left_out(repo: Repo) -> list[str]:
    """The untracked files and directories the work tree ignores (build products, editor files)."""
    listed = run(repo, "ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z")
    return sorted(p for p in listed.split("\0") if p)


def name_left_out(repo: Repo, what: str) -> None:
    """Say which ignored files ``what`` (e.g. "patch 0003-x.patch") did not take."""
    files = left_out(repo)
    if files:
        shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
        warn(
            f"left out of {what}: {shown} (build products or editor files; they stay in the work "
            f"tree; `git -C {repo.working_tree_dir} add -f PATH` takes one in on purpose)"
        )

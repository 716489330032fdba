"""Every git invocation of the project goes through one layer, ``sglpatch/git/``: only its modules
import GitPython (``git``), run the git program through ``subprocess``, or call GitPython's command
object (``repo.git.<command>(...)``). The rest of the package calls the layer's functions
(``sglpatch.git.repo.run``, ``sglpatch.git.run.run_git``, ...).

Modules that still drive git themselves are listed in KNOWN_EXCEPTIONS; the test requires the list
to be exactly the modules that do, so it can only shrink: convert a module, then delete its name.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO_ROOT

# Not yet converted to the git layer (owned elsewhere). Empty this set, never grow it.
KNOWN_EXCEPTIONS: set[str] = set()

SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}


def modules_of(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``root``, by dotted name."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _is_gitpython(module: str | None) -> bool:
    return module == "git" or (module or "").startswith("git.")


def _subprocess_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names bound to the subprocess module, names bound to its functions) in one module."""
    modules, functions = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "subprocess"}
        elif isinstance(node, ast.ImportFrom) and node.module == "subprocess" and not node.level:
            functions |= {a.asname or a.name for a in node.names if a.name in SUBPROCESS_CALLS}
    return modules, functions


def _names_git_program(arg: ast.expr) -> bool:
    """``["git", ...]``, ``("git", ...)`` or a shell string ``"git ..."``."""
    if isinstance(arg, (ast.List, ast.Tuple)) and arg.elts:
        first = arg.elts[0]
        return isinstance(first, ast.Constant) and first.value == "git"
    return isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.split(" ", 1)[0] == "git"


def _runs_git_program(call: ast.Call, modules: set[str], functions: set[str]) -> bool:
    func = call.func
    by_module = (
        isinstance(func, ast.Attribute)
        and func.attr in SUBPROCESS_CALLS
        and isinstance(func.value, ast.Name)
        and func.value.id in modules
    )
    by_name = isinstance(func, ast.Name) and func.id in functions
    if not (by_module or by_name):
        return False
    args = call.args[:1] + [k.value for k in call.keywords if k.arg == "args"]
    return any(_names_git_program(a) for a in args)


def _gitpython_command(call: ast.Call) -> str | None:
    """The command of ``<anything>.git.<command>(...)`` (GitPython's command object, called
    directly), else None."""
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) and func.value.attr == "git":
        return func.attr
    return None


def git_uses(path: Path) -> list[str]:
    """Where one module drives git itself, as "line: what"."""
    tree = ast.parse(path.read_text(), str(path))
    modules, functions = _subprocess_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: imports {a.name}" for a in node.names if _is_gitpython(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and _is_gitpython(node.module):
            found.append(f"{node.lineno}: imports from {node.module}")
        elif isinstance(node, ast.Call) and _runs_git_program(node, modules, functions):
            found.append(f"{node.lineno}: runs the git program through subprocess")
        elif isinstance(node, ast.Call) and (command := _gitpython_command(node)):
            found.append(f"{node.lineno}: calls GitPython's repo.git.{command}")
    return sorted(found, key=lambda f: int(f.split(":")[0]))


def drivers_outside_the_git_layer(root: Path, package: str) -> dict[str, list[str]]:
    """Each module of ``package`` outside ``package.git`` that drives git itself, with where."""
    layer = f"{package}.git"
    return {
        name: uses
        for name, path in modules_of(root, package).items()
        if not (name == layer or name.startswith(layer + ".")) and (uses := git_uses(path))
    }


def test_only_the_git_layer_drives_git_and_the_exceptions_only_shrink():
    found = drivers_outside_the_git_layer(REPO_ROOT, "sglpatch")
    new = {name: uses for name, uses in found.items() if name not in KNOWN_EXCEPTIONS}
    assert new == {}, f"drive git through sglpatch.git instead: {new}"
    converted = KNOWN_EXCEPTIONS - set(found)
    assert converted == set(), f"these no longer drive git: delete them from KNOWN_EXCEPTIONS: {converted}"


def test_the_git_layer_itself_is_where_gitpython_is_used():
    # the rule is not vacuous: the layer's own modules are what the scan would report
    layer = {
        name: git_uses(path)
        for name, path in modules_of(REPO_ROOT, "sglpatch").items()
        if name.startswith("sglpatch.git.")
    }
    assert any(uses for uses in layer.values())


# ---------------------------------------------------------------- twin: the rule fires


def test_a_module_that_drives_git_outside_the_git_folder_is_reported(tmp_path):
    files = {
        "pkg/__init__.py": "",
        "pkg/git/__init__.py": "",
        "pkg/git/repo.py": "import git\nimport subprocess\nsubprocess.run(['git', 'status'])\n",
        "pkg/queue/__init__.py": "",
        "pkg/queue/imports.py": "import git\n",
        "pkg/queue/imports_from.py": "from git.exc import GitCommandError\n",
        "pkg/queue/spawns.py": "import subprocess as sp\n\ndef f():\n    return sp.run(('git', 'log'), text=True)\n",
        "pkg/queue/spawns_by_name.py": "from subprocess import check_output\ncheck_output(args=['git', 'var'])\n",
        "pkg/queue/shell.py": "import subprocess\nsubprocess.call('git status', shell=True)\n",
        "pkg/queue/drives.py": "def f(queue):\n    queue.repo.git.checkout('-B', 'x')\n",
        # what is fine: another program, the layer's functions, a name that merely says git
        "pkg/queue/fine.py": (
            "import subprocess\nfrom pkg.git.repo import run\n"
            "subprocess.run(['docker', 'ps'])\nrun(None, 'status')\ngit = 'git'\n"
            "print(git.upper())\n"
        ),
    }
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert drivers_outside_the_git_layer(tmp_path, "pkg") == {
        "pkg.queue.imports": ["1: imports git"],
        "pkg.queue.imports_from": ["1: imports from git.exc"],
        "pkg.queue.spawns": ["4: runs the git program through subprocess"],
        "pkg.queue.spawns_by_name": ["2: runs the git program through subprocess"],
        "pkg.queue.shell": ["2: runs the git program through subprocess"],
        "pkg.queue.drives": ["2: calls GitPython's repo.git.checkout"],
    }

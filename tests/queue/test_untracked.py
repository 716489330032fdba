"""``sglpatch.queue.untracked``: build products and editor files never reach a patch. A tree
imported from PyPI has no .gitignore; running the patched code leaves __pycache__/*.pyc in it,
an editor leaves backups. refresh, new and rebase --continue take the maintainer's edits and new
files, leave those out and name them."""

from __future__ import annotations

import pytest
from helpers import assert_one_line_error, run_cli
from patch_queues import KIMI, RUNNER, project, upstream  # noqa: F401  (fixtures)
from test_rebase import V2, env, make_repo  # noqa: F401  (env: a fixture)

from sglpatch.errors import UserError
from sglpatch.git.repo import git_dir, open_repo
from sglpatch.queue.untracked import BEGIN, BLOCK, keep_out_build_products

STRAYS = (
    "python/sglang/srt/models/__pycache__/kimi_k25.cpython-311.pyc",
    "python/sglang/srt/models/kimi_k25.py~",
    "python/sglang/srt/models/.kimi_k25.py.swp",
    "python/sglang/srt/models/kimi_k25.py.rej",
)


def leave_strays(work):
    for path in STRAYS:
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_bytes(b"\x00\x01 not the maintainer's work\n")


def test_refresh_takes_the_edit_and_leaves_build_products_out_by_name(project, capsys):
    root, queue = project
    queue.push(all=True)
    (queue.path / KIMI).write_text((queue.path / KIMI).read_text() + "# first\n")
    queue.new("0003-kimi-note", "kimi: note\n\nBody.\n\nUpstream-Status: Pending\nDrop-When: check:x\n")
    leave_strays(queue.path)
    (queue.path / KIMI).write_text((queue.path / KIMI).read_text() + "# the maintainer's edit\n")
    path = queue.refresh()
    text = path.read_text()
    assert "+# the maintainer's edit" in text
    assert not any(stray.rpartition("/")[2] in text for stray in STRAYS)
    said = capsys.readouterr().err
    assert "left out of patch 0003-kimi-note.patch" in said and "__pycache__/" in said and "kimi_k25.py~" in said
    assert all((queue.path / stray).exists() for stray in STRAYS)  # left in place, not deleted


def test_new_takes_a_new_source_file_but_not_its_bytecode(project):
    root, queue = project
    queue.push(all=True)
    leave_strays(queue.path)
    (queue.path / "python/sglang/srt/models/helper.py").write_text("X = 1\n")  # the twin: new work is taken
    path = queue.new("0003-helper", "models: helper\n\nBody.\n\nUpstream-Status: Pending\nDrop-When: check:x\n")
    text = path.read_text()
    assert "helper.py" in text and ".pyc" not in text and "kimi_k25.py~" not in text


def test_refresh_with_only_build_products_has_nothing_to_fold(project):
    root, queue = project
    queue.push(all=True)
    leave_strays(queue.path)
    with pytest.raises(UserError, match="has no edits to fold into 0002-kimi.patch"):
        queue.refresh()


def test_a_build_is_not_refused_over_build_products(project):
    root, queue = project
    queue.push(all=True)
    leave_strays(queue.path)
    assert not queue.is_dirty()
    (queue.path / KIMI).write_text("# an uncommitted edit\n")  # the twin: real work still stops it
    assert queue.is_dirty()


def test_rebase_continue_leaves_bytecode_out_of_the_resolution(env):
    root = make_repo(env, ["clean", "conflict", "moved"])
    assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    work = root / "build" / "src"
    leave_strays(work)
    (work / RUNNER).write_text(V2[RUNNER].replace("line 10 upstream\n", "line ten upstream\n"))
    result = run_cli(root, "rebase", "--continue", env=env["env"])
    assert result.returncode == 0, result.stderr
    text = (root / "patches" / "0002-conflict.patch").read_text()
    assert "+line ten upstream" in text and ".pyc" not in text and "GIT binary patch" not in text
    assert "left out of the resolution of 0002-conflict.patch" in result.stderr


def test_rebase_continue_still_refuses_markers_with_strays_around(env):
    root = make_repo(env, ["clean", "conflict", "moved"])
    assert run_cli(root, "rebase", "--onto", "1.1.0", env=env["env"]).returncode == 1
    leave_strays(root / "build" / "src")
    assert_one_line_error(run_cli(root, "rebase", "--continue", env=env["env"]), "conflict markers remain")


def test_the_exclude_block_is_written_once_and_keeps_the_users_lines(project):
    _, queue = project
    exclude = git_dir(queue.repo) / "info" / "exclude"
    exclude.write_text("my-notes.txt\n" + BEGIN + "\nold-pattern\n# sglpatch: end\nafter.txt\n")
    repo = open_repo(queue.path)
    keep_out_build_products(repo)
    keep_out_build_products(repo)
    text = exclude.read_text()
    assert text.count(BEGIN) == 1 and BLOCK in text and "old-pattern" not in text
    assert "my-notes.txt\n" in text and "after.txt\n" in text

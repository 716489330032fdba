"""``sglpatch.cli.main.main``: parse, find the line, run the command; a failure is one line on
stderr and an exit status, never a traceback."""

from __future__ import annotations

from helpers import REPO_ROOT

from sglpatch.cli.main import main


def test_an_unknown_line_is_one_line_and_exit_2(capsys):
    assert main(["--root", str(REPO_ROOT), "--line", "no-such-line", "status"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown line 'no-such-line'")


def test_a_known_line_runs_its_command(capsys):
    assert main(["--root", str(REPO_ROOT), "--line", "latest", "lines", "--json"]) == 0
    assert '"latest"' in capsys.readouterr().out

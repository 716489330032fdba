"""sglpatch.output, the one way the tool speaks: results on stdout, the rest on stderr."""

from __future__ import annotations

import json

import pytest

from sglpatch import output


@pytest.fixture(autouse=True)
def loud():
    yield
    output.set_quiet(False)


def test_a_result_is_json_with_json_and_text_without(capsys):
    output.result({"a": [1]}, "text", as_json=True)
    output.result({"a": [1]}, "text", as_json=False)
    out, err = capsys.readouterr()
    first, _, second = out.partition("}\n")
    assert json.loads(first + "}") == {"a": [1]} and second == "text\n" and err == ""


def test_progress_warnings_and_errors_go_to_stderr_only(capsys):
    output.say("doing")
    output.warn("look")
    output.error("broken")
    out, err = capsys.readouterr()
    assert out == "" and err == "doing\nwarning: look\nerror: broken\n"


def test_quiet_silences_progress_but_never_a_warning(capsys):
    output.set_quiet(True)
    output.say("doing")
    output.warn("look")
    assert capsys.readouterr().err == "warning: look\n"


def test_a_figure_is_drawn_on_a_terminal_only(capsys, monkeypatch):
    output.figure("download: 50%")
    output.figure_done()
    assert capsys.readouterr().err == ""  # captured: not a terminal
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    output.figure("download: 50%")
    output.figure_done()
    assert capsys.readouterr().err == "\rdownload: 50%\n"


def test_a_childs_lines_are_relayed_as_they_came(capsys):
    output.relay("step 1/2\n")
    output.relay("no newline")
    assert capsys.readouterr().err == "step 1/2\nno newline"

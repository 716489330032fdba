"""The command line's shape: what `build.py COMMAND --help` tells a maintainer."""

from __future__ import annotations

import argparse

from sglpatch import cli


def undescribed(parser: argparse.ArgumentParser, path: str = "build.py") -> list[str]:
    """Every option or argument, in every command, that `--help` lists without saying what it does."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                found += undescribed(command, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            found.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return found


def test_every_option_of_every_command_says_what_it_does():
    assert undescribed(cli.parser()) == []


def test_an_option_without_its_words_is_found():
    """The twin: the check fires on an option, a positional and one inside a command."""
    top = argparse.ArgumentParser(prog="t")
    top.add_argument("--said", help="words")
    top.add_argument("--silent")
    command = top.add_subparsers().add_parser("go")
    command.add_argument("target")
    assert undescribed(top, "t") == ["t --silent", "t go target"]


def test_rebase_s_usage_names_its_value_and_its_actions_reach_the_handler_as_one():
    """`rebase --help` shows `--onto VERSION`; --continue, --skip and --abort each set the one
    action the handler passes on (the op the log records: `rebase --continue`)."""
    parser = cli.parser()
    rebase_parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["rebase"]
    assert "--onto VERSION" in rebase_parser.format_usage()
    for action in ("continue", "skip", "abort"):
        args = parser.parse_args(["rebase", f"--{action}"])
        assert (args.action, args.onto) == (action, None)
    assert parser.parse_args(["rebase", "--onto", "1.2.3"]).action is None

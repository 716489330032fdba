"""The command line's shape: what `build.py COMMAND --help` tells a maintainer."""

from __future__ import annotations

import argparse

from sglpatch.cli import parser as cli


def undescribed(parser: argparse.ArgumentParser, path: str = "build.py") -> list[str]:
    """Every command, and every option or argument in every command, that `--help` lists without
    saying what it does."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            described = {listed.dest for listed in action._choices_actions if listed.help}
            found += [f"{path} {name}" for name in action.choices if name not in described]
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
    commands = top.add_subparsers()
    command = commands.add_parser("go", help="goes")
    command.add_argument("target")
    commands.add_parser("stay")  # in `t --help`'s list of commands, with no words of its own
    assert undescribed(top, "t") == ["t --silent", "t stay", "t go target"]


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

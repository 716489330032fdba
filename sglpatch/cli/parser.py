"""The parser: the options every command takes, and each command module's subparsers."""

from __future__ import annotations

import argparse
from pathlib import Path

from sglpatch.cli import queue_commands
from sglpatch.queue.line import PRODUCTION

ROOT = Path(__file__).resolve().parents[2]


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's copy of an option must not reset a value given before the command.
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output on stdout"
    )
    common.add_argument(
        "--line",
        default=argparse.SUPPRESS,
        metavar="NAME",
        help=f"the maintained line to work on (default: {PRODUCTION}; `build.py lines` lists them)",
    )
    top = argparse.ArgumentParser(
        prog="build.py",
        parents=[common],
        description="Maintain the SGLang patch series: with no command, build the overlay wheel.",
    )
    top.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    top.set_defaults(func=queue_commands.cmd_build)
    sub = top.add_subparsers(title="commands", metavar="COMMAND")
    # The order of `build.py --help`'s list of commands.
    for module in (queue_commands, *command_modules()):
        module.register_cli(sub, common)
    return top


def command_modules() -> list:
    """The other command modules; each defines register_cli(subparsers, common) and handler(args).
    Imported when the parser is built: they bring in the domains they drive."""
    from sglpatch.cli import check, deploy, image, importing, rebase, rehearse

    return [check, deploy, image, importing, rebase, rehearse]

"""How every `antidote` command fails: one line on stderr, `antidote <command>: ...`
(wire.cli_prefix, which the operator also reads the consumer's refusals by), and one
exit-code scheme (wire.CliExit: usage errors 2 as argparse's, runtime errors 1). docs/cli.md."""

from __future__ import annotations

import argparse
import sys

from antidote_api.wire import CliExit, cli_prefix


class CliError(Exception):
    """A user-facing error: printed as one line with the command's prefix; exit `code`."""

    def __init__(self, message: str, code: int = CliExit.ERROR):
        super().__init__(message)
        self.code = int(code)


def say_error(command: str, message: str) -> None:
    print(cli_prefix(command) + message, file=sys.stderr)


def fail(command: str, message: str, code: int = CliExit.ERROR) -> int:
    """Print `message` as the command's one error line; the exit code to return."""
    say_error(command, message)
    return int(code)


def usage_error(message: str) -> CliError:
    """A flag combination the parser cannot express (exit 2, as argparse's own)."""
    return CliError(message, CliExit.USAGE)


def command_of(prog: str) -> str:
    """`inspect` of `antidote inspect`, `dev up` of `antidote dev up`, '' of `antidote`."""
    return prog.partition(" ")[2].strip()


class Parser(argparse.ArgumentParser):
    """argparse with the CLI's one-line errors: `antidote inspect: the following arguments
    are required: consumer (antidote inspect --help)`, exit 2, instead of the usage block and
    `antidote inspect: error: ...`. Subparsers inherit the class."""

    def error(self, message: str):
        say_error(command_of(self.prog), f"{message} (see {self.prog} --help)")
        sys.exit(CliExit.USAGE)

    def parse_args(self, args=None, namespace=None):
        # argparse reports a subcommand's unknown flags from the top parser (`antidote:
        # unrecognized arguments`): named here with the subcommand, as its other errors.
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            prog = " ".join(filter(None, (self.prog, getattr(ns, "command", None))))
            say_error(command_of(prog), f"unrecognized arguments: {' '.join(extras)} (see {prog} --help)")
            sys.exit(CliExit.USAGE)
        return ns

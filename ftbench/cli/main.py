"""Entry point: builds the parser from the command modules and maps errors to exit codes."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import NoReturn

# Command modules, each with `register(subparsers)`; the order is the order in --help.
# Commands other distributions add (the test rig's `ftbench dev`): entry points `name = "module"` whose
# module has `register(subparsers)`.
PLUGIN_GROUP = "ftbench.commands"
COMMAND_MODULES = (
    "ftbench.cli.cmd_validate",
    "ftbench.cli.cmd_catalog",
    "ftbench.cli.cmd_crd",
    "ftbench.cli.cmd_render",
    "ftbench.cli.cmd_docs",
    "ftbench.cli.cmd_run",
    "ftbench.cli.cmd_predict",
    "ftbench.cli.cmd_calibrate",
    "ftbench.cli.cmd_sweep",
    "ftbench.cli.cmd_results",
    "ftbench.cli.cmd_report",
    "ftbench.cli.cmd_dataset",
    "ftbench.cli.cmd_engines",
)


class UsageError(Exception):
    """A user mistake the CLI reports in one line, exit code 2."""


def non_negative(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative: use 0 or more")
    return value


class Parser(argparse.ArgumentParser):
    """argparse, with its errors in one line (its own print a usage block first) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; for `argv` that runs one of ftbench's own commands (no --help), that command's alone:
    importing every command and reading the release table for the epilog took half of a repeated
    `ftbench predict`'s 0.8 s (docs/benchmarks.md, "Predict latency")."""
    only = _command_module(argv)
    if only is not None:
        parser = Parser(prog="ftbench")
        sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
        importlib.import_module(only).register(sub)
        return parser
    from ftbench.cli.picks import epilog

    parser = Parser(
        prog="ftbench",
        description="Run LLM fine-tuning benchmarks locally or on Kubernetes, and read what they measured.",
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    for plugin in entry_points(group=PLUGIN_GROUP):
        if plugin.name not in sub.choices:
            plugin.load().register(sub)
    if "dev" not in sub.choices:  # without the test rig: the stub that says how to install it
        importlib.import_module("ftbench.cli.cmd_dev").register(sub)
    for command in sub.choices.values():  # every command's --help ends with what a user can pick
        command.epilog = parser.epilog
        command.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def _command_module(argv: Sequence[str] | None) -> str | None:
    """The module of the command `argv` runs, where it is one of COMMAND_MODULES and asks for no help."""
    if not argv or argv[0].startswith("-") or any(a in ("-h", "--help") for a in argv):
        return None
    name = f"ftbench.cli.cmd_{argv[0]}"
    return name if name in COMMAND_MODULES else None


def main(argv: Sequence[str] | None = None) -> int:
    # `ftbench catalog models | head` should end quietly, as Unix tools do.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as err:
        print(f"ftbench {args.command}: {err}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:  # an optional extra's module, reached without a check up front
        from ftbench.extras import MissingExtra, from_import_error

        text = str(err) if isinstance(err, MissingExtra) else from_import_error(err)
        if text is None:
            raise
        print(f"ftbench {args.command}: {text}", file=sys.stderr)
        return 2
    except OSError as err:  # a path the user gave cannot be read or written: say which and why
        where = f"{err.filename}: " if err.filename else ""
        print(f"ftbench {args.command}: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ftbench {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

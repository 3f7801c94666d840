"""The ``fabricwatch`` command line: one module per command, each with ``register(subparsers)``.

Bad input never shows a traceback: an :class:`~fabricwatch.errors.InputError` becomes one line on
stderr (one per problem) and exit status 2; argparse's own errors are one line too.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from fabricwatch import __version__
from fabricwatch.errors import InputError

# Module names under fabricwatch.cli, in the order `fabricwatch --help` lists them.
COMMANDS = [
    "demo",
    "topology",
    "simulate",
    "collect",
    "parse",
    "replay",
    "capture",
    "score",
    "query",
    "process",
    "correlate",
    "serve",
    "record",
    "runbook",
    "forensics",
    "dashboards",
    "detect_series",
]


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage dump) and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> Parser:
    parser = Parser(
        prog="fabricwatch",
        description="Observability and fault diagnosis for GPU supernodes and their optical fabric.",
    )
    parser.add_argument("--version", action="version", version=f"fabricwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser, required=True)
    for name in COMMANDS:
        importlib.import_module(f"fabricwatch.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except InputError as exc:
        for line in str(exc).splitlines():
            print(f"fabricwatch {args.command}: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fabricwatch {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def positive_float(text: str) -> float:
    """argparse type: a number > 0 (seconds, intervals)."""
    try:
        value = float(text.removesuffix("s"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a number > 0")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be ≥ 0")
    return value

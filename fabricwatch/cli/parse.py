"""``fabricwatch parse``: a saved tool output → the telemetry messages a source makes of it, as JSON Lines.

For debugging and for checks from outside: one message per line in the schema's JSON form (the
``value`` of a capture line), exactly what ``collect`` would put on the bus for the same output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from fabricwatch.cli.collect import config_from_args, load_source_class, make_parser
from fabricwatch.clock import WallClock
from fabricwatch.collectors.toolsource import Options, ToolSource
from fabricwatch.errors import InputError

_ENCODER = msgspec.json.Encoder()


def register(sub: argparse._SubParsersAction) -> None:
    p = make_parser(
        sub,
        "parse",
        help="turn a saved tool output into telemetry messages (JSON Lines)",
        description="Parse a saved output of a real tool (nvidia-smi -q -x, a dcgm-exporter page, ethtool, a "
        "sysfs tree, gNMI JSON, switch CLI text, ...) with the parser of --source and print the messages, one "
        "JSON object per line. Add --source NAME --help to see that source's options.",
    )
    p.add_argument("path", type=Path, metavar="PATH", help="the saved output (a file, or a folder for sysfs)")
    p.add_argument("--ts", type=float, metavar="EPOCH_S", help="the messages' timestamp (default: now)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    cls = load_source_class(args.source)
    if not (isinstance(cls, type) and issubclass(cls, ToolSource)):
        raise InputError("--source", f"{args.source} reads no saved output (it is not a tool source)")
    if not args.path.exists():
        raise InputError(str(args.path), "no such file or folder")
    ts = args.ts if args.ts is not None else WallClock().now()
    opts = Options.from_config(config_from_args(cls.Config, args))
    out = sys.stdout.buffer
    for message in cls.parse_saved(args.path, opts, ts):
        out.write(_ENCODER.encode(message) + b"\n")
    out.flush()
    return 0

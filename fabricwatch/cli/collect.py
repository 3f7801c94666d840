"""``fabricwatch collect``: run one source on an interval and send what it reads to the bus.

``fabricwatch collect --source NAME --interval 5s [--duration S] [--bootstrap HOST:PORT]
[--output prometheus --port N]``. Messages go to Kafka with ``--bootstrap`` (through the Bus
interface), else to stdout as JSON Lines; ``--output prometheus`` also serves them on /metrics.
A failed scrape is counted and reported on one line and the loop goes on; a source that cannot
start at all (no NVIDIA driver for ``nvml``, a bad port map) stops with one line and exit status 2.

Each source adds its own options (``--iface``, ``--url``, ``--sysfs-root``, ...): only the chosen
source's options are added, just before parsing, so sources never clash over an option name and a
host without one source's dependencies can still use every other source (``collect --source NAME
--help`` lists them). An option's dest is a field of the source's typed ``Config``:
:func:`config_from_args` turns the parsed arguments into that config, and the source is built from it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from fabricwatch import yamlconf
from fabricwatch.cli import Parser, positive_float
from fabricwatch.clock import WallClock
from fabricwatch.collectors.base import SOURCES, Source, SourceConfig, source_class
from fabricwatch.collectors.runner import BusSink, JsonLinesSink, Keyer, Runner, key_by_source
from fabricwatch.errors import InputError


def _chosen_source(args: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--source" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--source="):
            return arg.split("=", 1)[1]
    return None


class SourceOptionsParser(Parser):
    """A subcommand parser that adds the chosen source's options before it parses."""

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        arg_list = list(sys.argv[1:] if args is None else args)
        name = _chosen_source(arg_list)
        added: set[str] = self.__dict__.setdefault("_sources_added", set())
        if name in SOURCES and name not in added:
            added.add(name)
            try:
                cls = source_class(name)
            except ImportError:
                cls = None  # run() reports it as one clear line
            if cls is not None:
                group = self.add_argument_group(f"options of --source {name}", conflict_handler="resolve")
                cls.add_arguments(group)  # type: ignore[arg-type]
        return super().parse_known_args(args, namespace)


def make_parser(sub: argparse._SubParsersAction, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand parser with ``--source`` and the options every tool source shares."""
    p = sub.add_parser(name, **kwargs)
    p.__class__ = SourceOptionsParser
    p.add_argument(
        "--source", required=True, choices=sorted(SOURCES), metavar="NAME", help=f"one of: {', '.join(sorted(SOURCES))}"
    )
    p.add_argument("--host", help="the host (or switch) the data is from (default: this machine's hostname)")
    p.add_argument("--port-map", type=Path, metavar="FILE", help="YAML interface → port id map (collectors/portmap.py)")
    p.add_argument(
        "--timeout", dest="timeout_s", type=positive_float, metavar="S", help="seconds a tool may take (default 10)"
    )
    return p


C = TypeVar("C", bound=SourceConfig)


def config_from_args(config: type[C], args: argparse.Namespace) -> C:
    """The source's typed config from the parsed arguments: each field from the option with its name
    as dest (an option left out keeps the field's default); a bad value is one line naming it."""
    names = [f.name for f in msgspec.structs.fields(config)]
    given = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    try:
        return yamlconf.convert(given, config, "command line")
    except InputError as exc:  # name the option, not the field: "--seed: must be an integer ≥ 0, not -1"
        field, _, why = exc.message.partition(": ")
        if field in names and why:
            raise InputError(f"--{field.replace('_', '-')}", why) from None
        raise


def build_source(cls: type[Source], args: argparse.Namespace) -> Source:
    """The source from the command line: arguments → its typed Config → :meth:`Source.build`."""
    return cls.build(config_from_args(cls.Config, args))


def load_source_class(name: str) -> Any:
    """The source's class, or an InputError when its module cannot be imported on this host."""
    try:
        return source_class(name)
    except ImportError as exc:
        raise InputError("--source", f"{name} cannot be loaded on this host: {exc}") from None


def register(sub: argparse._SubParsersAction) -> None:
    p = make_parser(
        sub,
        "collect",
        help="scrape a telemetry source on an interval and send it to the bus",
        description="Scrape one source (nvml, nvidia-smi, dcgm, ethtool, sysfs, gnmi, switchcli, ibtools, sim) every "
        "--interval and send its messages to Kafka (--bootstrap) or stdout (JSON Lines). Add --source NAME --help "
        "to see that source's options.",
    )
    p.add_argument("--interval", type=positive_float, default=5.0, metavar="S", help="seconds between scrapes (5s)")
    p.add_argument("--duration", type=positive_float, metavar="S", help="stop after S seconds (default: run on)")
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="Kafka bootstrap server (default: JSON Lines on stdout)")
    p.add_argument("--output", choices=("bus", "prometheus"), default="bus", help="prometheus: also serve /metrics")
    p.add_argument("--port", type=int, default=9464, help="/metrics port with --output prometheus (default 9464)")
    p.add_argument("--listen", default="0.0.0.0", metavar="ADDR", help="/metrics address (default 0.0.0.0)")
    p.add_argument("--file", type=Path, metavar="PATH", help="re-read this saved output instead of the tool")
    p.add_argument("--topology", type=Path, metavar="FILE", help="cluster YAML: key messages by fault domain")
    p.add_argument(
        "--module-every", type=positive_float, default=300.0, metavar="S", help="resend unchanged module rows (300s)"
    )
    p.set_defaults(run=run)


def fault_domain_keyer(topology_path: Path) -> Keyer:
    """Split each message by the fault domain of its rows (DESIGN §1), so both ends of a link share a key."""
    from fabricwatch import topology as topo_mod
    from fabricwatch.stream.keys import split_by_fault_domain

    topo = topo_mod.load(topology_path)
    return lambda m: split_by_fault_domain(m, topo)


def run(args: argparse.Namespace) -> int:
    cls = load_source_class(args.source)
    keyer = fault_domain_keyer(args.topology) if args.topology else key_by_source
    source = build_source(cls, args)  # a source that cannot start raises InputError here: exit 2
    bus = None
    server = None
    try:
        if args.bootstrap:
            try:
                from fabricwatch.stream.kafka import KafkaBus
            except ImportError as exc:
                raise InputError("--bootstrap", f"the Kafka transport is not available: {exc}") from None
            bus = KafkaBus(args.bootstrap, client_id=f"fabricwatch-collect-{args.source}")
            sink: Any = BusSink(bus, keyer)
        else:
            sink = JsonLinesSink(sys.stdout.buffer)
        observer = None
        if args.output == "prometheus":
            from fabricwatch.collectors.metrics import CollectorMetrics, serve

            observer = CollectorMetrics()
            try:
                server = serve(observer, args.port, args.listen)
            except OSError as exc:
                raise InputError("--port", f"cannot serve /metrics on {args.listen}:{args.port}: {exc}") from None
            print(f"fabricwatch collect: serving /metrics on {args.listen}:{args.port}", file=sys.stderr)
        runner = Runner(
            source,
            sink,
            WallClock(),
            time.sleep,
            name=args.source,
            interval_s=args.interval,
            duration_s=args.duration,
            module_every_s=args.module_every,
            observer=observer,
        )
        stats = runner.run()
        failed = sum(stats.failed.values())
        print(
            f"fabricwatch collect: {args.source}: {stats.scrapes} scrapes, {failed} failed, {stats.messages} messages",
            file=sys.stderr,
        )
        return 0
    finally:
        source.close()
        if bus is not None:
            bus.close()
        if server is not None:
            server.shutdown()

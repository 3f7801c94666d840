"""``fabricwatch correlate``: stage 2 of detection, one per deployment.

Reads every partition of ``fabricwatch.findings`` (what each ``fabricwatch process`` found in its
fault domains), joins them per tick, runs correlation and the incident tracker, stores incidents in
its own DuckDB file and sends them to ``fabricwatch.incidents``, exactly once, with ids
``inc-<instance>-0001`` that no restart reuses (stream/stage2_loop.py). SIGTERM or Ctrl-C: the batch
in hand is stored and published, and the command exits 0 within seconds.
"""

from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabricwatch.cli import non_negative_int
from fabricwatch.errors import InputError

DEFAULT_GROUP = "fabricwatch-correlate"
STALL_S = 300.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "correlate",
        help="stage 2: join every processor's findings into incidents, exactly once",
        description="Consume every partition of fabricwatch.findings (consumer group --group: run one per group), "
        "correlate the findings of all fault domains per tick (a cooling loop over several processors, a "
        "switch's links over several leaves), store incidents in --db and send them to fabricwatch.incidents "
        "exactly once. Stops cleanly on SIGTERM.",
    )
    p.add_argument("--bootstrap", required=True, metavar="HOST:PORT", help="Kafka bootstrap server(s)")
    p.add_argument("--topology", required=True, type=Path, metavar="FILE", help="cluster YAML")
    p.add_argument("--db", required=True, type=Path, metavar="FILE", help="DuckDB file of this stage 2")
    p.add_argument("--group", default=DEFAULT_GROUP, metavar="ID", help=f"consumer group (default {DEFAULT_GROUP})")
    p.add_argument(
        "--instance", metavar="NAME",
        help="names the incident ids inc-NAME-0001 (default: the --db file's name without suffix)",
    )  # fmt: skip
    p.add_argument(
        "--stall", type=float, default=STALL_S, metavar="S",
        help=f"close a tick without a processor that is S seconds of telemetry behind the others (default {STALL_S:g})",
    )  # fmt: skip
    p.add_argument(
        "--tickets", type=Path, metavar="FILE",
        help="change tickets (YAML list of {switch, start, end}), re-read when the file changes: an outage "
        "of a switch inside its ticket is held, not paged",
    )  # fmt: skip
    p.add_argument("--partitions", type=int, default=12, help="partitions of topics created at start (default 12)")
    p.add_argument("--replication", type=int, default=1, help="replication of topics created at start (default 1)")
    p.add_argument("--max-records", type=non_negative_int, default=10_000, help="records per batch (default 10000)")
    p.set_defaults(run=run)


@dataclass
class Settings:
    """What stage 2 needs; from the command line (correlate) or a config file (serve)."""

    bootstrap: str
    db: Path
    topology: Path
    group: str = DEFAULT_GROUP
    instance: str | None = None
    stall: float = STALL_S
    partitions: int = 12
    replication: int = 1
    max_records: int = 10_000
    engine: Any = None  # fabricwatch.detectors.config.EngineConfig: correlation and tracker settings (None: defaults)
    tickets: Path | None = None  # change tickets filed while running (fabricwatch/app/tickets.py)


def instance_name(settings: Settings) -> str:
    name = settings.instance if settings.instance is not None else settings.db.name.split(".", 1)[0]
    if not name or not all(c.isalnum() or c in "-_" for c in name):
        raise InputError("--instance", f"{name!r}: use letters, digits, - and _ (it goes into incident ids)")
    return name


def run(args: argparse.Namespace) -> int:
    from fabricwatch.cli.process import run_until_stopped

    if args.max_records < 1:
        raise InputError("--max-records", "must be at least 1")
    for name in ("partitions", "replication"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name}", "must be at least 1")
    if not 0 < args.stall < float("inf"):
        raise InputError("--stall", "must be a number of seconds > 0")
    settings = Settings(
        bootstrap=args.bootstrap, db=args.db, topology=args.topology, group=args.group, instance=args.instance,
        stall=args.stall, partitions=args.partitions, replication=args.replication, max_records=args.max_records,
        tickets=args.tickets,
    )  # fmt: skip
    service = Service(settings)
    run_until_stopped(service)
    s = service.loop.stats if service.loop else None
    if s is not None:
        print(
            f"fabricwatch correlate: stopped: {s.records:,} findings records, {s.incidents:,} incident changes "
            f"stored, {s.published:,} published, {s.skipped:,} already seen",
            file=sys.stderr,
        )
    return 0


class Service:
    """Store, stage 2 and its consumer loop built from :class:`Settings`; ``run`` retries an absent broker."""

    def __init__(self, settings: Settings, registry: Any = None) -> None:
        import duckdb

        from fabricwatch import topology as topo_mod
        from fabricwatch.detectors.stage import Stage2
        from fabricwatch.stream.stage2 import Joiner
        from fabricwatch.stream.stage2_loop import Stage2Metrics
        from fabricwatch.stream.store import Store

        self.settings = settings
        self.instance = instance_name(settings)
        self.loop: Any = None
        self.ready = False
        self.on_incident: Any = None  # called with every incident change after it is stored (serve's runbooks)
        topo = topo_mod.load(settings.topology)
        self.topology = topo
        try:
            self.store = Store(settings.db, group=settings.group)
        except (duckdb.Error, OSError) as exc:
            raise InputError(str(settings.db), f"cannot open the DuckDB file: {_first_line(exc)}") from None
        self.metrics = Stage2Metrics(registry)
        # prune: a service's state is saved on every batch for months; resolved incidents are in its store
        stage2 = Stage2(topo, settings.engine, id_prefix=f"inc-{self.instance}-", prune=True)
        self.joiner = Joiner(stage2, stall_s=settings.stall)
        self.tickets = None
        if settings.tickets is not None:
            from fabricwatch.app.tickets import TicketsFile

            self.tickets = TicketsFile(settings.tickets)  # a bad file fails the start with its line
            stage2.file_tickets(self.tickets.tickets)

    def run(self, stop: threading.Event) -> None:
        from fabricwatch.cli.process import retry_until_broker

        if self.tickets is not None:
            from fabricwatch.app.tickets import watch

            watch(self.tickets, self.joiner.engine.file_tickets, stop)
        retry_until_broker(self, stop, "correlate", self._run_once)

    def _run_once(self, stop: threading.Event) -> None:
        from fabricwatch.schema import TOPIC_INCIDENTS
        from fabricwatch.stream.kafka import KafkaBus
        from fabricwatch.stream.stage2_loop import CorrelateLoop, topic_values

        s = self.settings
        bus = KafkaBus(
            s.bootstrap,
            client_id=f"fabricwatch-correlate-{self.instance}",
            group_id=s.group,
            partitions=s.partitions,
            replication=s.replication,
        )
        self.loop = CorrelateLoop(
            bus,
            self.store,
            self.joiner,
            delivered=lambda: topic_values(s.bootstrap, TOPIC_INCIDENTS),
            unacknowledged=bus.pending,
            metrics=self.metrics,
            max_records=s.max_records,
            on_incident=self.on_incident,
        )
        print(
            f"fabricwatch correlate: group {s.group} on {s.bootstrap} → {s.db} "
            f"(incidents inc-{self.instance}-…, {self.joiner.ticks} ticks closed before)",
            file=sys.stderr,
        )
        self.ready = True
        self.loop.run(stop)

    def close(self) -> None:
        self.ready = False
        self.store.checkpoint()
        self.store.close()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]

"""``fabricwatch process``: a consumer-group member that stores telemetry from Kafka in DuckDB.

With --topology it runs stage 1 of detection over its partitions (detectors/stage.py) and publishes
findings and tick marks to ``fabricwatch.findings``; ``fabricwatch correlate`` (stage 2) turns the
findings of every processor into incidents.

Rows and the offsets they came from are stored in one transaction, and each partition is sought to
its stored (or newer committed) offset on every assignment, so a killed and restarted processor
stores every row exactly once (stream/consume.py). Undecodable or invalid records go to the
dead-letter topic with their reason. SIGTERM or Ctrl-C: the batch in hand is stored and committed,
polling stops, and the command exits 0 within seconds.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabricwatch.cli import non_negative_int
from fabricwatch.errors import InputError

if TYPE_CHECKING:
    from fabricwatch.detectors.config import EngineConfig

PROGRESS_EVERY_S = 30.0
RETRY_MAX_S = 30.0
SAVE_STATE_S = 300.0  # the detection engine's state is saved this often (telemetry time) and on stop


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "process",
        help="consume telemetry from Kafka into DuckDB, exactly once, with dead letters",
        description="Join consumer group --group on the telemetry topics, store every record's rows in --db "
        "exactly once (offsets stored in the same transaction), send bad records to fabricwatch.deadletter, "
        "and run detection when --topology is given. Stops cleanly on SIGTERM.",
    )
    p.add_argument("--bootstrap", required=True, metavar="HOST:PORT", help="Kafka bootstrap server(s)")
    p.add_argument("--db", required=True, type=Path, metavar="FILE", help="DuckDB file of this processor")
    p.add_argument("--group", default="fabricwatch", metavar="ID", help="consumer group (default fabricwatch)")
    p.add_argument(
        "--topology", type=Path, metavar="FILE",
        help="cluster YAML: enables stage-1 detection (findings for `fabricwatch correlate`)",
    )  # fmt: skip
    p.add_argument(
        "--name", metavar="NAME",
        help="this processor's name in its findings and tick marks (default: host/DB file name); unique per processor",
    )  # fmt: skip
    p.add_argument("--partitions", type=int, default=12, help="partitions of topics created at start (default 12)")
    p.add_argument("--replication", type=int, default=1, help="replication of topics created at start (default 1)")
    p.add_argument("--max-records", type=non_negative_int, default=10_000, help="records per batch (default 10000)")
    p.add_argument(
        "--seal-every", type=float, default=60.0, metavar="S",
        help="seal rows older than --seal-horizon to Parquet every S seconds, so `fabricwatch query` can read them "
        "while this process writes (default 60; 0: never)",
    )  # fmt: skip
    p.add_argument("--seal-horizon", type=float, default=300.0, metavar="S", help="telemetry kept hot (default 300)")
    p.set_defaults(run=run)


@dataclass
class Settings:
    """What a processor needs; from the command line (process) or a config file (serve)."""

    bootstrap: str
    db: Path
    group: str = "fabricwatch"
    topology: Path | None = None
    partitions: int = 12
    replication: int = 1
    max_records: int = 10_000
    seal_every: float = 60.0  # seconds between sealings of old rows to Parquet (0: never)
    seal_horizon: float = 300.0  # seconds of telemetry kept in the hot DuckDB file
    engine: EngineConfig | None = None  # detection cadence and detector settings (None: the defaults)
    name: str | None = None  # names its findings and tick marks for stage 2 (default host/DB file name)


def run(args: argparse.Namespace) -> int:
    if args.max_records < 1:
        raise InputError("--max-records", "must be at least 1")
    for name in ("partitions", "replication"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name}", "must be at least 1")
    for name in ("seal_every", "seal_horizon"):
        if not 0 <= getattr(args, name) < float("inf"):
            raise InputError(f"--{name.replace('_', '-')}", "must be a number of seconds ≥ 0")
    settings = Settings(
        bootstrap=args.bootstrap, db=args.db, group=args.group, topology=args.topology, partitions=args.partitions,
        replication=args.replication, max_records=args.max_records, seal_every=args.seal_every,
        seal_horizon=args.seal_horizon, name=args.name,
    )  # fmt: skip
    service = Service(settings)
    run_until_stopped(service)
    s = service.loop.stats if service.loop else None
    if s is not None:
        print(
            f"fabricwatch process: stopped: {s.records:,} records, {s.rows:,} rows stored, "
            f"{s.deadletters:,} dead letters, {s.skipped:,} already stored",
            file=sys.stderr,
        )
    return 0


def run_until_stopped(service: Any) -> None:
    """Run a service (processor or stage 2) until SIGTERM or Ctrl-C, then close it whatever happened."""
    stop = threading.Event()
    stop_on_signals(stop)
    try:
        service.run(stop)
    finally:
        service.close()


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT set ``stop``: the loop finishes its batch and exits cleanly."""

    def handler(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def retry_until_broker(service: Any, stop: threading.Event, name: str, run_once: Any) -> None:
    """Call ``run_once(stop)`` until it returns or ``stop`` is set, retrying an absent broker.

    The first failure is said once; retries back off from 0.5 s to ``RETRY_MAX_S`` so a broker that
    comes back is found within seconds and a long outage costs nothing. ``service.ready`` is False
    while the broker is away (the health endpoint reports it).
    """
    from fabricwatch.stream.kafka import KafkaUnavailable

    wait, said = 0.5, False
    while not stop.is_set():
        try:
            run_once(stop)
            return
        except KafkaUnavailable as exc:
            service.ready = False
            if not said:
                print(f"fabricwatch {name}: {exc}; retrying until it answers", file=sys.stderr)
                said = True
            stop.wait(wait)
            wait = min(wait * 2, RETRY_MAX_S)


class Service:
    """Store, processor and consumer loop built from :class:`Settings`; ``run`` retries an absent broker."""

    def __init__(self, settings: Settings, registry: Any = None) -> None:
        import duckdb

        from fabricwatch import topology as topo_mod
        from fabricwatch.clock import WallClock
        from fabricwatch.stream.metrics import PipelineMetrics
        from fabricwatch.stream.processor import Processor
        from fabricwatch.stream.store import Store

        self.settings = settings
        self.loop: Any = None
        self.ready = False
        topo = topo_mod.load(settings.topology) if settings.topology else topo_mod.Topology("unknown", [], [], [])
        engine = None
        self.name = settings.name or f"{socket.gethostname()}/{settings.db.name}"
        if settings.topology:
            try:
                from fabricwatch.detectors.stage import Stage1
            except ImportError:
                print("fabricwatch: detection is not available in this build; storing only", file=sys.stderr)
            else:
                engine = Stage1(topo, settings.engine, split=True)
        try:
            self.store = Store(settings.db, group=settings.group)
        except (duckdb.Error, OSError) as exc:
            raise InputError(str(settings.db), f"cannot open the DuckDB file: {_first_line(exc)}") from None
        self.metrics = PipelineMetrics(registry)
        self.processor = Processor(
            topo, self.store, clock=WallClock(), engine=engine, metrics=self.metrics, save_state_every_s=SAVE_STATE_S
        )

    def run(self, stop: threading.Event) -> None:
        retry_until_broker(self, stop, "process", self._run_once)

    def _run_once(self, stop: threading.Event) -> None:
        from fabricwatch.stream.consume import ProcessingLoop
        from fabricwatch.stream.kafka import KafkaBus

        s = self.settings
        bus = KafkaBus(
            s.bootstrap,
            client_id=f"fabricwatch-process-{s.group}",
            group_id=s.group,
            partitions=s.partitions,
            replication=s.replication,
        )
        self.loop = ProcessingLoop(
            bus,
            self.processor,
            max_records=s.max_records,
            on_batch=self._progress,
            seal_every_s=s.seal_every,
            seal_horizon_s=s.seal_horizon,
            tick_marks=self.name if self.processor.engine is not None else None,
        )
        print(
            f"fabricwatch process: group {s.group} on {s.bootstrap} → {s.db} "
            f"(resuming from {len(self.processor.next_offsets)} stored partition offsets)",
            file=sys.stderr,
        )
        self.ready = True
        self.loop.run(stop)

    _last_progress = 0.0

    def _progress(self, stats: Any) -> None:
        now = time.monotonic()
        if now - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = now
            print(
                f"fabricwatch process: {stats.records:,} records, {stats.rows:,} rows, "
                f"{stats.deadletters:,} dead letters",
                file=sys.stderr,
            )

    def close(self) -> None:
        self.ready = False
        self.processor.save_state()  # learnt baselines and open incidents, for the next start
        self.store.checkpoint()
        self.store.close()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]

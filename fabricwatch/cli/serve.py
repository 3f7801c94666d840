"""``fabricwatch serve --config FILE``: the processor, stage 2, or both, as a service, with /metrics,
/healthz and /readyz.

The config file is YAML, validated strictly: every problem is reported on its own line with the
file and line, unknown keys included (a misspelt key silently ignored is a 3 a.m. surprise)::

    bootstrap: 127.0.0.1:9092        # required: Kafka bootstrap server(s)
    db: /var/lib/fabricwatch/a.duckdb  # required: this processor's DuckDB file
    group: fabricwatch               # consumer group
    topology: cluster.yaml           # cluster YAML: enables detection (paths are relative to this file)
    partitions: 12                   # for topics created at start
    replication: 1
    max_records: 10000               # records per batch
    seal_every: 60                   # seconds between sealings of old rows to Parquet (0: never), so
    seal_horizon: 300                #   `fabricwatch query` reads all but the newest 300 s while we write
    http: {listen: 127.0.0.1, port: 9108}
    runbooks: {enabled: true, mode: shadow}  # off by default; needs role both (fabricwatch.runbooks.service)
    alertmanager: http://127.0.0.1:9093   # incidents go to Alertmanager's v2 API (dashboards/alertmanager.py)
    grafana: http://127.0.0.1:3000        # where alerts' dashboard links point
    runbook_url: https://wiki/runbooks    # where alerts' runbook links point (+ /<runbook>)
    clock: wall                           # or telemetry: detection time follows the data (a capture replayed
                                          #   through serve at full speed still opens and resolves incidents)
    engine:                          # detection as a whole (detectors/config.py EngineConfig)
      window_s: 60                   #   history a tick looks at
      every_s: 10                    #   tick cadence in telemetry time
      step_tick: true                #   and halfway, a tick of the step detectors only (links down, dark lanes)
      open_after_s: 30               #   a diagnosis holds this long before it pages
    detectors:                       # one section per detector: every registered one runs unless disabled
      pfc_storm: {enabled: false}
      gpu_temp: {gpu_hot_c: 83}      # a threshold of that detector's own Config (its module lists them)
      gpu_xid: {xid_ignore: [13, 31, 43]}
    role: process                    # process (stage 1), correlate (stage 2), or both in one service
    stage2_db: a.stage2.duckdb       # role both: stage 2's own file (default <db name>.stage2.duckdb)
    stage2_group: fabricwatch-correlate  # stage 2's consumer group (one stage 2 per group)
    instance: a                      # stage 2: incident ids inc-<instance>-0001 (default its file's name)
    stall: 300                       # stage 2: seconds a quiet processor is waited for
    tickets: tickets.yaml            # stage 2: change tickets, re-read when the file changes
                                     #   (fabricwatch/app/tickets.py; engine.maintenance: fixed ones)

With ``role: correlate`` the ``db`` is stage 2's file and ``topology`` is required (as for ``both``).

Endpoints: ``/metrics`` (Prometheus text: received, stored, dead-lettered, errors by stage, lag per
partition, incidents, findings no correlation rule reads), ``/healthz`` (200 while the consumer loop
polls; 503 when it has not polled for 60 s), ``/readyz`` (200 once the processor has joined its group
and has its partitions; 503 before, and while the broker cannot be reached). /metrics also carries
the on-call health and incidents of dashboards/METRICS.md.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from fabricwatch import yamlconf
from fabricwatch.detectors.config import DetectorConfig, EngineConfig
from fabricwatch.errors import InputError
from fabricwatch.runbooks.service import RunbooksConfig

HEALTHY_POLL_S = 60.0
ROLES = ("process", "correlate", "both")
DEFAULT_LISTEN, DEFAULT_PORT = "127.0.0.1", 9108


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="run the processor as a service with /metrics, /healthz, /readyz",
        description="Run `fabricwatch process` from a YAML config file, with an HTTP endpoint for Prometheus "
        "(/metrics) and for liveness and readiness probes (/healthz, /readyz). Stops cleanly on SIGTERM.",
    )
    p.add_argument("--config", required=True, type=Path, metavar="FILE", help="service config (YAML)")
    p.set_defaults(run=run)


# --- config ------------------------------------------------------------------------------------------

Text = Annotated[str, msgspec.Meta(min_length=1)]
Seconds = Annotated[float, msgspec.Meta(ge=0)]
Url = Annotated[str, msgspec.Meta(pattern=r"^https?://[^\s/]+")]


class HttpConfig(yamlconf.Config):
    listen: Text = DEFAULT_LISTEN
    port: Annotated[int, msgspec.Meta(ge=0, le=65_535)] = DEFAULT_PORT


class ServeConfig(yamlconf.Config):
    """The service's file, as typed settings (the module docstring shows every key)."""

    bootstrap: Text
    db: Text
    group: Text = "fabricwatch"
    topology: Text | None = None
    partitions: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 12
    replication: Annotated[int, msgspec.Meta(ge=1, le=100)] = 1
    max_records: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 10_000
    seal_every: Seconds = 60.0
    seal_horizon: Seconds = 300.0
    http: HttpConfig = msgspec.field(default_factory=HttpConfig)
    engine: EngineConfig = msgspec.field(default_factory=EngineConfig)
    detectors: dict[str, DetectorConfig] = msgspec.field(default_factory=dict)
    runbooks: RunbooksConfig = msgspec.field(default_factory=RunbooksConfig)
    role: Literal["process", "correlate", "both"] = "process"
    stage2_db: Text | None = None
    stage2_group: Text | None = None
    instance: Text | None = None
    stall: Annotated[float, msgspec.Meta(gt=0)] = 300.0  # fabricwatch.cli.correlate.STALL_S
    tickets: Text | None = None
    alertmanager: Url | None = None
    grafana: Url | None = None
    runbook_url: Url | None = None
    clock: Literal["wall", "telemetry"] = "wall"

    def engine_config(self) -> EngineConfig:
        """The engine's settings with the file's detector sections (``detectors:`` wins over ``engine:``)."""
        return msgspec.structs.replace(self.engine, detectors={**self.engine.detectors, **self.detectors})


@dataclass
class Config:
    """What one ``serve`` runs: a processor, a stage 2, or both; and where it listens."""

    process: Any  # fabricwatch.cli.process.Settings, or None
    correlate: Any  # fabricwatch.cli.correlate.Settings, or None
    listen: str
    port: int
    runbooks: RunbooksConfig
    base: Path  # the config file's folder: relative paths in it count from there


def load_config(path: Path) -> Config:
    """The service's settings from the YAML file; every problem at once."""
    from fabricwatch.cli import correlate
    from fabricwatch.cli.process import Settings

    data = yamlconf.load(path)
    if not isinstance(data, dict):
        raise InputError(str(path), "must be a mapping of settings (bootstrap: ..., db: ...)")
    config = yamlconf.convert(data, ServeConfig, str(path))
    role = config.role
    if role in ("correlate", "both") and config.topology is None:
        raise InputError(f"{path}:{yamlconf.line_of(data, 'role')}", f"topology: required for role {role}")
    if config.tickets is not None and role == "process":
        where = f"{path}:{yamlconf.line_of(data, 'tickets')}"
        raise InputError(where, "tickets: stage 2 reads them (role correlate or both)")
    if config.runbooks.enabled and role != "both":
        raise InputError(
            f"{path}:{yamlconf.line_of(data, 'runbooks')}",
            "runbooks: need role both (incidents come from stage 2, the telemetry they verify from stage 1)",
        )

    def relative(value: str) -> Path:
        p = Path(value)
        return p if p.is_absolute() else path.parent / p

    db = relative(config.db)
    stage2 = None
    if role != "process":
        assert config.topology is not None
        stage2_db = db if role == "correlate" else db.with_name(db.name.split(".", 1)[0] + ".stage2.duckdb")
        stage2 = correlate.Settings(
            bootstrap=config.bootstrap,
            db=relative(config.stage2_db) if config.stage2_db else stage2_db,
            topology=relative(config.topology),
            group=config.stage2_group or correlate.DEFAULT_GROUP,
            instance=config.instance,
            stall=float(config.stall),
            partitions=config.partitions,
            replication=config.replication,
            max_records=config.max_records,
            engine=config.engine_config(),
            tickets=relative(config.tickets) if config.tickets else None,
        )
    process = None
    if role != "correlate":
        process = Settings(
            bootstrap=config.bootstrap,
            db=db,
            group=config.group,
            topology=relative(config.topology) if config.topology else None,
            partitions=config.partitions,
            replication=config.replication,
            max_records=config.max_records,
            seal_every=float(config.seal_every),
            seal_horizon=float(config.seal_horizon),
            engine=config.engine_config(),
        )
    return Config(process, stage2, config.http.listen, config.http.port, config.runbooks, path.parent)


def attach_oncall(path: Path, service: Any, incidents_from: Any = None, *, registry: Any = None) -> Any:
    """Health and incidents on /metrics, incidents to Alertmanager when configured (dashboards/surface.py).

    ``service`` is the processor's (stage 1: the health summaries of its windows; alone in one process,
    its incidents too), ``incidents_from`` stage 2's service, whose incidents page; either may be None.
    """
    from fabricwatch.clock import VirtualClock, WallClock
    from fabricwatch.dashboards.alertmanager import AlertmanagerClient, Links
    from fabricwatch.dashboards.surface import OncallSurface

    config = yamlconf.convert(yamlconf.load(path), ServeConfig, str(path))
    processor = service.processor if service is not None else None
    registry = registry if registry is not None else service.metrics.registry
    topology = processor.topology if processor is not None else incidents_from.topology
    if processor is not None and config.clock == "telemetry":
        processor.clock = VirtualClock()  # the processor moves it to each tick's time (stream/processor.py)
    alerts = None
    if config.alertmanager:
        links = Links(**{k: v for k, v in (("grafana", config.grafana), ("runbook_base", config.runbook_url)) if v})
        alerts = AlertmanagerClient(config.alertmanager, topology, clock=WallClock(), registry=registry,
                                    links=links)  # fmt: skip
    surface = OncallSurface(topology, registry, alerts=alerts)
    if processor is not None and processor.engine is not None:
        processor.engine = surface.wrap(processor.engine)
    if incidents_from is not None:
        also_on_incident(incidents_from, lambda incident: surface.incidents([incident]))
    return surface


def also_on_incident(service: Any, hook: Any) -> None:
    """Add ``hook`` to what stage 2's service calls with each incident change it stored."""
    previous = service.on_incident

    def both(incident: Any) -> None:
        previous(incident)
        hook(incident)

    service.on_incident = hook if previous is None else both


# --- HTTP --------------------------------------------------------------------------------------------


class Services:
    """The services of one ``serve`` (a processor, a stage 2, or both) behind one HTTP endpoint."""

    def __init__(self, services: list[Any], registry: Any) -> None:
        self.services = services
        self.registry = registry


def make_handler(service: Any) -> type[BaseHTTPRequestHandler]:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(service.registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                ok, why = _all(health, service.services)
                self._send(200 if ok else 503, f"{why}\n".encode())
            elif path == "/readyz":
                ok, why = _all(readiness, service.services)
                self._send(200 if ok else 503, f"{why}\n".encode())
            else:
                self._send(404, b"not found: try /metrics, /healthz, /readyz\n")

        def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: no log line each
            pass

    return Handler


def _all(check: Any, services: list[Any]) -> tuple[bool, str]:
    """Every service's answer on one line (the first word of each: ok/ready, or why not)."""
    answers = [check(s) for s in services]
    return all(ok for ok, _ in answers), "; ".join(why for _, why in answers)


def health(service: Any) -> tuple[bool, str]:
    loop = service.loop
    if loop is None or not loop.stats.last_poll:
        return True, "ok: starting"
    idle = time.monotonic() - loop.stats.last_poll
    if idle > HEALTHY_POLL_S:
        return False, f"unhealthy: no poll for {idle:.0f} s"
    return True, "ok"


def readiness(service: Any) -> tuple[bool, str]:
    loop = service.loop
    if not service.ready or loop is None:
        return False, "not ready: not connected to Kafka"
    if not loop.stats.joined:
        return False, "not ready: joining the consumer group"
    return True, f"ready: {loop.stats.assigned} partitions"


def run(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry

    from fabricwatch.cli import correlate
    from fabricwatch.cli.process import Service, stop_on_signals

    config = load_config(args.config)
    registry = CollectorRegistry()
    services: list[Any] = []
    try:
        if config.process is not None:
            services.append(Service(config.process, registry))
        if config.correlate is not None:
            services.append(correlate.Service(config.correlate, registry))
    except BaseException:
        for service in services:
            service.close()
        raise
    try:
        server = ThreadingHTTPServer((config.listen, config.port), make_handler(Services(services, registry)))
    except OSError as exc:
        for service in services:
            service.close()
        where = f"{config.listen}:{config.port}"
        raise InputError(f"{args.config}: http", f"cannot listen on {where}: {exc.strerror or exc}") from None
    server.daemon_threads = True
    process = next((s for s in services if isinstance(s, Service)), None)
    stage2 = next((s for s in services if isinstance(s, correlate.Service)), None)
    surface = attach_oncall(args.config, process, stage2, registry=registry)
    runbooks = start_runbooks(config, services)
    threading.Thread(target=server.serve_forever, name="fabricwatch-http", daemon=True).start()
    where = f"http://{config.listen}:{server.server_address[1]}"
    print(f"fabricwatch serve: {where}/metrics /healthz /readyz", file=sys.stderr)
    stop = threading.Event()
    stop_on_signals(stop)
    failures: list[BaseException] = []

    def one(service: Any) -> None:
        try:
            service.run(stop)
        except BaseException as exc:  # one role failing stops the others: the service is down, say why
            failures.append(exc)
            stop.set()

    threads = [threading.Thread(target=one, args=(s,), name=f"fabricwatch-{i}") for i, s in enumerate(services)]
    sender = surface.start(stop)
    try:
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(0.2)
    finally:
        stop.set()
        if sender is not None:  # its last flush sends what the final batch changed; bounded by the post timeout
            sender.join(3 * surface.alerts.timeout_s)
        server.shutdown()
        server.server_close()
        if runbooks is not None:
            runbooks.stop()
        for service in services:
            service.close()
    if failures:
        raise failures[0]
    return 0


def start_runbooks(config: Config, services: list[Any]) -> Any:
    """The runbook worker when the config enables it (role both; shadow mode by default): it reads the
    processor's telemetry and is handed stage 2's incidents."""
    if not config.runbooks.enabled:
        return None
    from fabricwatch.runbooks.service import RunbookWorker, actions_producer

    process, correlate = services
    publish, bus = actions_producer(config.process.bootstrap)
    worker = RunbookWorker(process, config.runbooks.to_dict(), config.base, publish=publish, bus=bus)
    also_on_incident(correlate, worker.submit)
    print(f"fabricwatch serve: runbooks enabled, {worker.mode} mode", file=sys.stderr)
    return worker

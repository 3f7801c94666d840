"""``fabricwatch serve --config FILE``: the processor as a service, with /metrics, /healthz and /readyz.

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
    runbooks: {enabled: true, mode: shadow}  # off by default (fabricwatch.runbooks.service lists the keys)
    alertmanager: http://127.0.0.1:9093   # incidents go to Alertmanager's v2 API (dashboards/alertmanager.py)
    grafana: http://127.0.0.1:3000        # where alerts' dashboard links point
    runbook_url: https://wiki/runbooks    # where alerts' runbook links point (+ /<runbook>)
    clock: wall                           # or telemetry: detection time follows the data (a capture replayed
                                          #   through serve at full speed still opens and resolves incidents)
    engine:                          # detection as a whole (detectors/config.py EngineConfig)
      window_s: 60                   #   history a tick looks at
      every_s: 10                    #   tick cadence in telemetry time
      open_after_s: 30               #   a diagnosis holds this long before it pages
    detectors:                       # one section per detector: every registered one runs unless disabled
      pfc_storm: {enabled: false}
      gpu_temp: {gpu_hot_c: 83}      # a threshold of that detector's own Config (its module lists them)
      gpu_xid: {xid_ignore: [13, 31, 43]}

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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from fabricwatch import yamlconf
from fabricwatch.detectors.config import DetectorConfig, EngineConfig
from fabricwatch.errors import InputError
from fabricwatch.runbooks.service import RunbooksConfig

HEALTHY_POLL_S = 60.0
DEFAULT_LISTEN, DEFAULT_PORT = "127.0.0.1", 9108


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="run the processor as a service with /metrics, /healthz, /readyz",
        description="Run `fabricwatch process` from a YAML config file, with an HTTP endpoint for Prometheus "
        "(/metrics) and for liveness and readiness probes (/healthz, /readyz). Stops cleanly on SIGTERM. "
        "Besides the process settings, the file's engine: section sets detection's cadence and its "
        "detectors: section enables, disables ({enabled: false}) and tunes each detector by name.",
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
    alertmanager: Url | None = None
    grafana: Url | None = None
    runbook_url: Url | None = None
    clock: Literal["wall", "telemetry"] = "wall"

    def engine_config(self) -> EngineConfig:
        """The engine's settings with the file's detector sections (``detectors:`` wins over ``engine:``)."""
        return msgspec.structs.replace(self.engine, detectors={**self.engine.detectors, **self.detectors})


def load_config(path: Path) -> tuple[Any, str, int]:
    """(process Settings, HTTP listen address, port) from the YAML file; every problem at once."""
    from fabricwatch.cli.process import Settings

    data = yamlconf.load(path)
    if not isinstance(data, dict):
        raise InputError(str(path), "must be a mapping of settings (bootstrap: ..., db: ...)")
    config = yamlconf.convert(data, ServeConfig, str(path))

    def relative(value: str) -> Path:
        p = Path(value)
        return p if p.is_absolute() else path.parent / p

    settings = Settings(
        bootstrap=config.bootstrap,
        db=relative(config.db),
        group=config.group,
        topology=relative(config.topology) if config.topology else None,
        partitions=config.partitions,
        replication=config.replication,
        max_records=config.max_records,
        seal_every=float(config.seal_every),
        seal_horizon=float(config.seal_horizon),
        engine=config.engine_config(),
    )
    return settings, config.http.listen, config.http.port


def attach_oncall(path: Path, service: Any) -> Any:
    """Health and incidents on /metrics, incidents to Alertmanager when configured (dashboards/surface.py)."""
    from fabricwatch.clock import VirtualClock, WallClock
    from fabricwatch.dashboards.alertmanager import AlertmanagerClient, Links
    from fabricwatch.dashboards.surface import OncallSurface

    config = yamlconf.convert(yamlconf.load(path), ServeConfig, str(path))
    processor, registry = service.processor, service.metrics.registry
    if config.clock == "telemetry":
        processor.clock = VirtualClock()  # the processor moves it to each tick's time (stream/processor.py)
    alerts = None
    if config.alertmanager:
        links = Links(**{k: v for k, v in (("grafana", config.grafana), ("runbook_base", config.runbook_url)) if v})
        alerts = AlertmanagerClient(config.alertmanager, processor.topology, clock=WallClock(), registry=registry,
                                    links=links)  # fmt: skip
    surface = OncallSurface(processor.topology, registry, alerts=alerts)
    if processor.engine is not None:
        processor.engine = surface.wrap(processor.engine)
    return surface


# --- HTTP --------------------------------------------------------------------------------------------


def make_handler(service: Any) -> type[BaseHTTPRequestHandler]:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(service.metrics.registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                ok, why = health(service)
                self._send(200 if ok else 503, f"{why}\n".encode())
            elif path == "/readyz":
                ok, why = readiness(service)
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
    from fabricwatch.cli.process import Service, stop_on_signals

    settings, listen, port = load_config(args.config)
    service = Service(settings)
    surface = attach_oncall(args.config, service)
    try:
        server = ThreadingHTTPServer((listen, port), make_handler(service))
    except OSError as exc:
        service.close()
        raise InputError(f"{args.config}: http", f"cannot listen on {listen}:{port}: {exc.strerror or exc}") from None
    server.daemon_threads = True
    runbooks = start_runbooks(args.config, service)
    threading.Thread(target=server.serve_forever, name="fabricwatch-http", daemon=True).start()
    print(f"fabricwatch serve: http://{listen}:{server.server_address[1]}/metrics /healthz /readyz", file=sys.stderr)
    stop = threading.Event()
    stop_on_signals(stop)
    sender = surface.start(stop)
    try:
        service.run(stop)
    finally:
        stop.set()
        if sender is not None:  # its last flush sends what the final batch changed; bounded by the post timeout
            sender.join(3 * surface.alerts.timeout_s)
        server.shutdown()
        server.server_close()
        if runbooks is not None:
            runbooks.stop()
        service.close()
    return 0


def start_runbooks(path: Path, service: Any) -> Any:
    """The runbook worker when the config's ``runbooks`` section enables it (shadow mode by default)."""
    section = yamlconf.convert(yamlconf.load(path), ServeConfig, str(path)).runbooks
    if not section.enabled:
        return None
    from fabricwatch.runbooks.service import RunbookWorker, actions_producer

    publish, bus = actions_producer(service.settings.bootstrap)
    worker = RunbookWorker(service, section.to_dict(), path.parent, publish=publish, bus=bus)
    print(f"fabricwatch serve: runbooks enabled, {worker.mode} mode", file=sys.stderr)
    return worker

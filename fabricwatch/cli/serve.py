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
    alertmanager: http://127.0.0.1:9093   # incidents go to Alertmanager's v2 API (dashboards/alertmanager.py)
    grafana: http://127.0.0.1:3000        # where alerts' dashboard links point
    runbooks: https://wiki/runbooks       # where alerts' runbook links point (+ /<runbook>)
    clock: wall                           # or telemetry: detection time follows the data (a capture replayed
                                          #   through serve at full speed still opens and resolves incidents)

Endpoints: ``/metrics`` (Prometheus text: received, stored, dead-lettered, errors by stage, lag per
partition, incidents), ``/healthz`` (200 while the consumer loop polls; 503 when it has not polled for
60 s), ``/readyz`` (200 once the processor has joined its group and has its partitions; 503 before,
and while the broker cannot be reached). /metrics also carries the on-call health and incidents of
dashboards/METRICS.md.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from fabricwatch.errors import InputError, InputErrors

HEALTHY_POLL_S = 60.0
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


def _str(v: Any) -> str | None:
    return None if isinstance(v, str) and v.strip() else "must be a non-empty string"


def _int(low: int, high: int) -> Any:
    def check(v: Any) -> str | None:
        ok = isinstance(v, int) and not isinstance(v, bool) and low <= v <= high
        return None if ok else f"must be an integer from {low} to {high}"

    return check


def _url(v: Any) -> str | None:
    ok = isinstance(v, str) and v.startswith(("http://", "https://")) and len(v) > len("https://")
    return None if ok else "must be an http:// or https:// URL"


def _clock(v: Any) -> str | None:
    return None if v in CLOCKS else f"must be one of {', '.join(CLOCKS)}"


def _seconds(v: Any) -> str | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < float("inf")
    return None if ok else "must be a number of seconds ≥ 0"


KEYS = {
    "bootstrap": _str,
    "db": _str,
    "group": _str,
    "topology": _str,
    "partitions": _int(1, 10_000),
    "replication": _int(1, 100),
    "max_records": _int(1, 1_000_000),
    "seal_every": _seconds,
    "seal_horizon": _seconds,
    "http": None,  # a mapping, checked below
    "alertmanager": _url,
    "grafana": _url,
    "runbooks": _url,
    "clock": _clock,
}
ONCALL_KEYS = ("alertmanager", "grafana", "runbooks", "clock")
CLOCKS = ("wall", "telemetry")
REQUIRED = ("bootstrap", "db")
HTTP_KEYS = {"listen": _str, "port": _int(0, 65_535)}


def load_config(path: Path) -> tuple[Any, str, int]:
    """(process Settings, HTTP listen address, port) from the YAML file; every problem at once."""
    from fabricwatch.cli.process import Settings

    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise InputError(f"{path}:{mark.line + 1}" if mark else str(path), f"invalid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise InputError(str(path), f"invalid YAML: {exc}") from None
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise InputError(str(path), "must be a mapping of settings (bootstrap: ..., db: ...)")
    lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}
    http_lines: dict[str, int] = {}
    for k, v in node.value:
        if getattr(k, "value", None) == "http" and isinstance(v, yaml.MappingNode):
            http_lines = {hk.value: hk.start_mark.line + 1 for hk, _ in v.value if isinstance(hk, yaml.ScalarNode)}
    errors: list[InputError] = []

    def problem(key: str, message: str, line: int | None = None) -> None:
        errors.append(InputError(f"{path}:{line or lines.get(key, 1)}", f"{key}: {message}"))

    for key, value in data.items():
        if key not in KEYS:
            problem(str(key), f"unknown key (known: {', '.join(KEYS)})")
        elif KEYS[key] is not None and (why := KEYS[key](value)):
            problem(key, why)
    for key in REQUIRED:
        if key not in data:
            errors.append(InputError(f"{path}:1", f"{key}: missing (required)"))
    http = data.get("http", {})
    if http is None:
        http = {}
    if not isinstance(http, dict):
        problem("http", "must be a mapping (listen: ..., port: ...)")
        http = {}
    for key, value in http.items():
        if key not in HTTP_KEYS:
            problem(f"http.{key}", f"unknown key (known: {', '.join(HTTP_KEYS)})", http_lines.get(key))
        elif why := HTTP_KEYS[key](value):
            problem(f"http.{key}", why, http_lines.get(key))
    if errors:
        raise InputErrors(errors)

    def relative(value: str) -> Path:
        p = Path(value)
        return p if p.is_absolute() else path.parent / p

    settings = Settings(
        bootstrap=data["bootstrap"],
        db=relative(data["db"]),
        group=data.get("group", "fabricwatch"),
        topology=relative(data["topology"]) if data.get("topology") else None,
        partitions=data.get("partitions", 12),
        replication=data.get("replication", 1),
        max_records=data.get("max_records", 10_000),
        seal_every=float(data.get("seal_every", 60.0)),
        seal_horizon=float(data.get("seal_horizon", 300.0)),
    )
    return settings, http.get("listen", DEFAULT_LISTEN), http.get("port", DEFAULT_PORT)


def load_oncall(path: Path) -> dict[str, str]:
    """The on-call settings of a config that :func:`load_config` has already checked."""
    data = yaml.safe_load(path.read_text())
    return {k: data[k] for k in ONCALL_KEYS if k in data}


def attach_oncall(service: Any, options: dict[str, str]) -> Any:
    """Health and incidents on /metrics, incidents to Alertmanager when configured (dashboards/surface.py)."""
    from fabricwatch.clock import VirtualClock, WallClock
    from fabricwatch.dashboards.alertmanager import AlertmanagerClient, Links
    from fabricwatch.dashboards.surface import OncallSurface

    processor, registry = service.processor, service.metrics.registry
    if options.get("clock") == "telemetry":
        processor.clock = VirtualClock()  # the processor moves it to each tick's time (stream/processor.py)
    alerts = None
    if "alertmanager" in options:
        links = Links(
            **{k: v for k, v in (("grafana", options.get("grafana")), ("runbook_base", options.get("runbooks"))) if v}
        )
        alerts = AlertmanagerClient(
            options["alertmanager"], processor.topology, clock=WallClock(), registry=registry, links=links
        )
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
    surface = attach_oncall(service, load_oncall(args.config))
    try:
        server = ThreadingHTTPServer((listen, port), make_handler(service))
    except OSError as exc:
        service.close()
        raise InputError(f"{args.config}: http", f"cannot listen on {listen}:{port}: {exc.strerror or exc}") from None
    server.daemon_threads = True
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
        service.close()
    return 0

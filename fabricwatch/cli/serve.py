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
    role: process                    # process (stage 1), correlate (stage 2), or both in one service
    stage2_db: a.stage2.duckdb       # role both: stage 2's own file (default <db name>.stage2.duckdb)
    stage2_group: fabricwatch-correlate  # stage 2's consumer group (one stage 2 per group)
    instance: a                      # stage 2: incident ids inc-<instance>-0001 (default its file's name)
    stall: 300                       # stage 2: seconds a quiet processor is waited for

With ``role: correlate`` the ``db`` is stage 2's file and ``topology`` is required (as for ``both``).

Endpoints: ``/metrics`` (Prometheus text: received, stored, dead-lettered, errors by stage, lag per
partition, incidents), ``/healthz`` (200 while the consumer loop polls; 503 when it has not polled for
60 s), ``/readyz`` (200 once the processor has joined its group and has its partitions; 503 before,
and while the broker cannot be reached).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from fabricwatch.errors import InputError, InputErrors

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


def _str(v: Any) -> str | None:
    return None if isinstance(v, str) and v.strip() else "must be a non-empty string"


def _int(low: int, high: int) -> Any:
    def check(v: Any) -> str | None:
        ok = isinstance(v, int) and not isinstance(v, bool) and low <= v <= high
        return None if ok else f"must be an integer from {low} to {high}"

    return check


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
    "role": lambda v: None if v in ROLES else f"must be one of {', '.join(ROLES)}",
    "stage2_db": _str,
    "stage2_group": _str,
    "instance": _str,
    "stall": lambda v: None if not _seconds(v) and v > 0 else "must be a number of seconds > 0",
}
REQUIRED = ("bootstrap", "db")
HTTP_KEYS = {"listen": _str, "port": _int(0, 65_535)}


@dataclass
class Config:
    """What one ``serve`` runs: a processor, a stage 2, or both; and where it listens."""

    process: Any  # fabricwatch.cli.process.Settings, or None
    correlate: Any  # fabricwatch.cli.correlate.Settings, or None
    listen: str
    port: int


def load_config(path: Path) -> Config:
    """The service's settings from the YAML file; every problem at once."""
    from fabricwatch.cli import correlate
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
    role = data.get("role", "process")
    if role in ("correlate", "both") and "topology" not in data:
        errors.append(InputError(f"{path}:{lines.get('role', 1)}", f"topology: required for role {role}"))
    if errors:
        raise InputErrors(errors)

    def relative(value: str) -> Path:
        p = Path(value)
        return p if p.is_absolute() else path.parent / p

    db = relative(data["db"])
    stage2 = None
    if role != "process":
        stage2_db = db if role == "correlate" else db.with_name(db.name.split(".", 1)[0] + ".stage2.duckdb")
        stage2 = correlate.Settings(
            bootstrap=data["bootstrap"],
            db=relative(data["stage2_db"]) if "stage2_db" in data else stage2_db,
            topology=relative(data["topology"]),
            group=data.get("stage2_group", correlate.DEFAULT_GROUP),
            instance=data.get("instance"),
            stall=float(data.get("stall", correlate.STALL_S)),
            partitions=data.get("partitions", 12),
            replication=data.get("replication", 1),
            max_records=data.get("max_records", 10_000),
        )
    if role == "correlate":
        return Config(None, stage2, http.get("listen", DEFAULT_LISTEN), http.get("port", DEFAULT_PORT))
    settings = Settings(
        bootstrap=data["bootstrap"],
        db=db,
        group=data.get("group", "fabricwatch"),
        topology=relative(data["topology"]) if data.get("topology") else None,
        partitions=data.get("partitions", 12),
        replication=data.get("replication", 1),
        max_records=data.get("max_records", 10_000),
        seal_every=float(data.get("seal_every", 60.0)),
        seal_horizon=float(data.get("seal_horizon", 300.0)),
    )
    return Config(settings, stage2, http.get("listen", DEFAULT_LISTEN), http.get("port", DEFAULT_PORT))


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
    try:
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(0.2)
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        for service in services:
            service.close()
    if failures:
        raise failures[0]
    return 0

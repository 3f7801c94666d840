"""``collect --output prometheus``: what the collector reads, served on /metrics with its own registry.

Every numeric column becomes a family ``fabricwatch_<kind>_<column>`` labelled by ``source`` and the
kind's key columns (``device``, or ``port`` and ``lane``); ``_total`` columns are counters, the rest
gauges. The text columns of ``module`` rows become ``fabricwatch_module_info{port, media, vendor,
part_number} 1``. A null value is left out (no sample), never exported as a number. The latest message
of each (source, kind) replaces the previous one, so a port that disappears stops being exported.

The collector's own health: ``fabricwatch_collector_scrapes_total{source}``,
``fabricwatch_collector_scrape_failures_total{source, reason}`` and
``fabricwatch_collector_last_success_timestamp_seconds{source}``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from fabricwatch.schema import KINDS, Message


class TelemetryCollector:
    """A prometheus-client custom collector over the latest message of each (source, kind)."""

    def __init__(self) -> None:
        self._latest: dict[tuple[str, str], Message] = {}
        self._lock = threading.Lock()

    def update(self, messages: list[Message]) -> None:
        with self._lock:
            for m in messages:
                self._latest[(m.source, m.kind)] = m

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            latest = sorted(self._latest.items())
        for kind, spec in KINDS.items():
            messages = [m for (_, k), m in latest if k == kind]
            keys = [c.name for c in spec.keys]
            labels = ["source", *keys]
            for col in spec.values:
                if col.type == "str":
                    continue
                if col.name.endswith("_total"):
                    family: Any = CounterMetricFamily(
                        f"fabricwatch_{kind}_{col.name.removesuffix('_total')}", f"{kind} {col.name}", labels=labels
                    )
                else:
                    family = GaugeMetricFamily(f"fabricwatch_{kind}_{col.name}", f"{kind} {col.name}", labels=labels)
                for m in messages:
                    values = m.rows.get(col.name)
                    if values is None:
                        continue
                    key_values = [m.rows[k] for k in keys]
                    for i, value in enumerate(values):
                        if value is not None:
                            family.add_metric([m.source, *(str(kv[i]) for kv in key_values)], value)
                if family.samples:
                    yield family
            text_cols = [c.name for c in spec.values if c.type == "str"]
            if text_cols:
                info = GaugeMetricFamily(
                    f"fabricwatch_{kind}_info", f"{kind} identity", labels=["source", *keys, *text_cols]
                )
                for m in messages:
                    n = len(m.rows[keys[0]])
                    for i in range(n):
                        info.add_metric(
                            [m.source, *(str(m.rows[k][i]) for k in keys)]
                            + [str(m.rows.get(c, [None] * n)[i] or "") for c in text_cols],
                            1,
                        )
                if info.samples:
                    yield info


class CollectorMetrics:
    """The registry served on /metrics: telemetry values plus the collector's own scrape counters."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.telemetry = TelemetryCollector()
        self.registry.register(self.telemetry)  # type: ignore[arg-type]
        self.scrapes = Counter("fabricwatch_collector_scrapes", "Scrapes attempted", ["source"], registry=self.registry)
        self.failures = Counter(
            "fabricwatch_collector_scrape_failures",
            "Scrapes that failed, by reason",
            ["source", "reason"],
            registry=self.registry,
        )
        self.last_success = Gauge(
            "fabricwatch_collector_last_success_timestamp_seconds",
            "Time of the last scrape that read everything",
            ["source"],
            registry=self.registry,
        )

    def scraped(self, source: str, messages: list[Message], failure: str | None) -> None:
        """Runner observer hook: count the scrape and keep what it read."""
        self.scrapes.labels(source).inc()
        if failure is not None:
            self.failures.labels(source, failure).inc()
        elif messages:
            self.last_success.labels(source).set(max(m.ts for m in messages))
        self.telemetry.update(messages)


def serve(metrics: CollectorMetrics, port: int, addr: str = "0.0.0.0") -> Any:
    """Start the /metrics HTTP server in a daemon thread; returns the server (``.shutdown()``, ``.server_port``)."""
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=addr, registry=metrics.registry)
    return server

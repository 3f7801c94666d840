"""``collect --output prometheus``: what the collector reads, served on /metrics with its own registry.

Every numeric column becomes a family ``fabricwatch_<kind>_<column>`` labelled by ``source`` and the
kind's key columns (``device``, or ``port`` and ``lane``); ``_total`` columns are counters, the rest
gauges. Names follow Prometheus conventions, in base units (:func:`base_unit`): ``temp_c`` is exported
as ``temp_celsius``, ``power_w`` as ``power_watts``, ``sm_clock_mhz`` as ``sm_clock_hertz`` (× 1e6),
``bias_ma`` as ``bias_amperes``, ``util_pct`` as ``util_ratio``, ``speed_gbps`` as
``speed_bits_per_second``. The names of the previous release (``fabricwatch_gpu_temp_c``, ...) are
exported beside them, unchanged, for one more release: the seeds' ``br-monitor --output prometheus``
users have dashboards on them (``legacy_names=False`` drops them).

The text columns of ``module`` rows become ``fabricwatch_module_info{port, media, vendor, part_number} 1``.
A null value is left out (no sample), never exported as a number. The latest message of each
(source, kind) replaces the previous one, so a port that disappears stops being exported.

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

# column suffix → (Prometheus base-unit suffix, factor to base units); a factor below 1 is applied as a
# division by its inverse, so 95 % is exported as 0.95, not 0.9500000000000001
BASE_UNITS = {
    "_c": ("_celsius", 1.0),
    "_w": ("_watts", 1.0),
    "_mhz": ("_hertz", 1e6),
    "_ma": ("_amperes", 1e-3),
    "_v": ("_volts", 1.0),
    "_pct": ("_ratio", 0.01),
    "_gbps": ("_bits_per_second", 1e9),
}


def _scaled(value: float, factor: float) -> float:
    return value if factor == 1.0 else value * factor if factor > 1 else value / round(1 / factor)


def base_unit(column: str) -> tuple[str, float]:
    """A column's Prometheus name stem and the factor to its base unit: ``sm_clock_mhz`` →
    ``('sm_clock_hertz', 1e6)``; a column already in a base unit (or unitless) is unchanged."""
    for suffix, (unit, factor) in BASE_UNITS.items():
        if column.endswith(suffix):
            return column.removesuffix(suffix) + unit, factor
    return column, 1.0


class TelemetryCollector:
    """A prometheus-client custom collector over the latest message of each (source, kind)."""

    def __init__(self, legacy_names: bool = True) -> None:
        self._latest: dict[tuple[str, str], Message] = {}
        self._lock = threading.Lock()
        self.legacy_names = legacy_names

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
                stem, factor = base_unit(col.name)
                names = [(stem, factor)]
                if self.legacy_names and stem != col.name:
                    names.append((col.name, 1.0))  # the previous release's name, for one more release
                for name, scale in names:
                    family = self._family(kind, name, col.name, labels, legacy=name != stem)
                    for m in messages:
                        values = m.rows.get(col.name)
                        if values is None:
                            continue
                        key_values = [m.rows[k] for k in keys]
                        for i, value in enumerate(values):
                            if value is not None:
                                family.add_metric([m.source, *(str(kv[i]) for kv in key_values)], _scaled(value, scale))
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

    @staticmethod
    def _family(kind: str, name: str, column: str, labels: list[str], legacy: bool) -> Any:
        help_ = f"{kind} {column}" + (f" (deprecated name: use {base_unit(column)[0]})" if legacy else "")
        if name.endswith("_total"):
            return CounterMetricFamily(f"fabricwatch_{kind}_{name.removesuffix('_total')}", help_, labels=labels)
        return GaugeMetricFamily(f"fabricwatch_{kind}_{name}", help_, labels=labels)


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

"""The pipeline's own telemetry, after vector's instrumentation spec: what was received, stored,
dead-lettered (with a small fixed set of reason codes) and failed, by stage; Prometheus names end in
``_total`` for counters. A registry is passed in, so tests and several processors never share one.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Why a record went to the dead-letter topic; a reason string with the details travels beside it.
DEADLETTER_CODES = (
    "undecodable",  # not MessagePack at all, or truncated
    "structure",  # decodes, but fields are missing or of the wrong type
    "schema",  # wrong schema version, unknown kind, bad header values
    "topic_mismatch",  # a message of one kind on another kind's topic
    "value",  # a value outside its column's type or physical range
    "too_large",  # over the size a message may have
)
STAGES = ("decode", "validate", "store", "detect", "publish")


class PipelineMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.received = Counter(
            "fabricwatch_received_messages_total", "Telemetry messages received", ["kind"], registry=r
        )
        self.received_bytes = Counter("fabricwatch_received_bytes_total", "Bytes of records received", registry=r)
        self.stored_rows = Counter("fabricwatch_stored_rows_total", "Rows stored in DuckDB", ["kind"], registry=r)
        self.deadlettered = Counter(
            "fabricwatch_deadlettered_messages_total", "Records sent to the dead-letter topic", ["code"], registry=r
        )
        self.errors = Counter("fabricwatch_errors_total", "Errors by pipeline stage", ["stage"], registry=r)
        self.unknown_columns = Counter(
            "fabricwatch_unknown_columns_total", "Columns ignored because the schema does not know them", registry=r
        )
        self.ticks = Counter("fabricwatch_detection_ticks_total", "Detection ticks run", registry=r)
        self.unconsumed = Counter(
            "fabricwatch_unconsumed_findings_total",
            "Findings whose symptom no correlation rule reads (a new or misspelt symptom): never an incident",
            ["symptom"],
            registry=r,
        )
        self.tick_seconds = Histogram(
            "fabricwatch_detection_tick_seconds",
            "Wall time of one detection tick",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=r,
        )
        self.incidents_opened = Counter(
            "fabricwatch_incidents_opened_total", "Incidents opened", ["type", "cause"], registry=r
        )
        self.incident_firing = Gauge(
            "fabricwatch_incident_firing",
            "1 while an incident fires (one series per incident)",
            ["id", "type", "cause", "entity", "location", "severity", "runbook"],
            registry=r,
        )
        self.watermark = Gauge(
            "fabricwatch_telemetry_watermark_seconds",
            "Watermark over sources (the slowest live one): detection has run up to here",
            registry=r,
        )
        self.clock_offset = Gauge(
            "fabricwatch_source_clock_offset_seconds",
            "Each source's clock offset, estimated against the median of sources (positive: ahead); "
            "detection takes it out of the source's timestamps once it exceeds two scrape intervals",
            ["source"],
            registry=r,
        )
        self.lag = Gauge(
            "fabricwatch_consumer_lag_records",
            "Records behind the end of each partition",
            ["topic", "partition"],
            registry=r,
        )
        for code in DEADLETTER_CODES:
            self.deadlettered.labels(code)
        for stage in STAGES:
            self.errors.labels(stage)

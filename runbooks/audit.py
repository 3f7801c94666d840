"""The audit trail: every decision about a runbook goes into ``runbook_audit`` (DESIGN §5b), out as
Prometheus metrics, and to the ``fabricwatch.actions`` topic.

Outcomes: planned, diagnosed, observed (shadow), refused, started, executed, failed, verified,
verify_failed, rolled_back, escalated, out_of_service, validated, validation_failed,
returned_to_service, replaced (history escalated a repair to a replacement). A row is written, and
committed, *before* the next thing happens: ``started`` is on disk before a command runs, which is
what keeps a crash between executing and auditing from executing twice on restart.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import duckdb
from prometheus_client import CollectorRegistry, Counter, Gauge

from fabricwatch.clock import Clock
from fabricwatch.runbooks.telemetry import as_timestamp

ACTIONS_TOPIC = "fabricwatch.actions"
# columns beyond the original table, added to files written before them
_COLUMNS = ("kind", "mode", "backend", "guard", "reason", "component", "domain")
FIELDS = (
    "ts", "incident_id", "runbook", "action", "argv", "target", "approved_by", "dry_run", "outcome", "exit_code",
    "output", *_COLUMNS,
)  # fmt: skip


class RunbookMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.decisions = Counter(
            "fabricwatch_runbook_decisions_total", "Runbook decisions by outcome", ["runbook", "outcome", "mode"],
            registry=r,
        )  # fmt: skip
        self.refusals = Counter(
            "fabricwatch_runbook_refusals_total", "Actions refused, by guard", ["guard"], registry=r
        )
        self.out_of_service = Gauge(
            "fabricwatch_runbook_out_of_service", "Devices out of service by fabricwatch, by kind", ["kind"], registry=r
        )


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    from fabricwatch.stream.store import _DDL

    con.execute(next(d for d in _DDL if "runbook_audit" in d))
    for col in _COLUMNS:
        con.execute(f"ALTER TABLE runbook_audit ADD COLUMN IF NOT EXISTS {col} VARCHAR")


def kafka_publisher(bus: Any, topic: str = ACTIONS_TOPIC) -> Callable[[dict[str, Any]], None]:
    """Publish each audit row to ``topic`` on a :class:`~fabricwatch.stream.bus.Bus`, keyed by fault domain."""
    from fabricwatch.stream.bus import Outgoing

    def publish(row: dict[str, Any]) -> None:
        value = json.dumps(row, sort_keys=True, default=str).encode()
        bus.produce([Outgoing(topic, row.get("domain") or row["incident_id"], value, row["ts"])])

    return publish


class Audit:
    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        clock: Clock,
        *,
        metrics: RunbookMetrics | None = None,
        publish: Callable[[dict[str, Any]], None] | None = None,
        read_only: bool = False,
    ) -> None:
        self.con = con
        self.clock = clock
        self.metrics = metrics
        self.publish = publish
        self.read_only = read_only
        if not read_only:
            ensure_schema(con)

    def record(self, incident_id: str, runbook: str, outcome: str, **fields: Any) -> dict[str, Any]:
        row: dict[str, Any] = dict.fromkeys(FIELDS)
        row.update(fields, ts=self.clock.now(), incident_id=incident_id, runbook=runbook, outcome=outcome)
        row["argv"] = list(row["argv"] or []) or None
        row["dry_run"] = bool(row["dry_run"])
        values = [as_timestamp(row["ts"]) if k == "ts" else row[k] for k in FIELDS]
        self.con.execute(
            f"INSERT INTO runbook_audit ({', '.join(FIELDS)}) VALUES ({', '.join('?' * len(FIELDS))})", values
        )
        if self.metrics is not None:
            self.metrics.decisions.labels(runbook or "", outcome, row.get("mode") or "").inc()
            if outcome == "refused" and row.get("guard"):
                self.metrics.refusals.labels(row["guard"]).inc()
        if self.publish is not None:
            self.publish(row)
        return row

    def ledger_rows(self) -> list[tuple[Any, ...]]:
        try:
            return self.con.execute(
                "SELECT epoch_us(ts) / 1e6, incident_id, runbook, action, outcome, component, domain, dry_run "
                "FROM runbook_audit ORDER BY ts, incident_id"
            ).fetchall()
        except (duckdb.BinderException, duckdb.CatalogException):
            if not self.read_only:
                raise
            return []  # read-only view of a file from before the audit had these columns: nothing recorded

"""DuckDB storage (DESIGN §5b): one typed table per telemetry kind, incidents, findings, dead letters,
the runbook audit trail, and the consumer offsets each batch came from.

Rows go in as Arrow tables, one ``INSERT … SELECT`` per kind and batch (columnar inserts run at
millions of rows a second; row-by-row ``executemany`` runs at about a thousand). Everything of one
batch, offsets included, is written in one transaction: after a crash the stored offsets say exactly
which records are in the file, which is what makes replaying from Kafka exactly-once in effect.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from fabricwatch.incident import Incident
from fabricwatch.records import DeadLetter, Finding
from fabricwatch.schema import KINDS, table_schema
from fabricwatch.stream import segments

DEFAULT_GROUP = "fabricwatch"
CHECKPOINT_THRESHOLD = "256MB"


def _kind_ddl(kind: str) -> str:
    columns = ["ts TIMESTAMP NOT NULL", "source VARCHAR NOT NULL"]
    for col in KINDS[kind].columns:
        columns.append(f"{col.name} {col.duckdb_type}")
    columns.append("seq BIGINT")
    return f"CREATE TABLE IF NOT EXISTS {kind} ({', '.join(columns)})"


_DDL = [
    *(_kind_ddl(kind) for kind in KINDS),
    """CREATE TABLE IF NOT EXISTS incidents (
        id VARCHAR PRIMARY KEY, type VARCHAR, cause VARCHAR, location_entity VARCHAR, location_id VARCHAR,
        severity VARCHAR, first_seen TIMESTAMP, detected_at TIMESTAMP, resolved_at TIMESTAMP,
        evidence JSON, symptoms VARCHAR[], runbook VARCHAR, status VARCHAR, forecast JSON,
        source_offsets JSON)""",
    # a file made before DESIGN §5's optional fields were stored gets them (at the end, as above)
    "ALTER TABLE incidents ADD COLUMN IF NOT EXISTS forecast JSON",
    "ALTER TABLE incidents ADD COLUMN IF NOT EXISTS source_offsets JSON",
    """CREATE TABLE IF NOT EXISTS findings (
        ts TIMESTAMP, detector VARCHAR, symptom VARCHAR, entity VARCHAR, id VARCHAR, first_seen TIMESTAMP,
        last_seen TIMESTAMP, severity VARCHAR, cause VARCHAR, score DOUBLE, evidence JSON)""",
    """CREATE TABLE IF NOT EXISTS deadletters (
        ts TIMESTAMP, topic VARCHAR, "partition" INTEGER, "offset" BIGINT, key VARCHAR, code VARCHAR,
        reason VARCHAR, value BLOB)""",
    """CREATE TABLE IF NOT EXISTS runbook_audit (
        ts TIMESTAMP, incident_id VARCHAR, runbook VARCHAR, action VARCHAR, argv VARCHAR[], target VARCHAR,
        approved_by VARCHAR, dry_run BOOLEAN, outcome VARCHAR, exit_code INTEGER, output VARCHAR,
        kind VARCHAR, mode VARCHAR, backend VARCHAR, guard VARCHAR, reason VARCHAR, component VARCHAR,
        domain VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS engine_state (
        grp VARCHAR PRIMARY KEY, saved_at TIMESTAMP, state JSON)""",
    """CREATE TABLE IF NOT EXISTS consumer_offsets (
        grp VARCHAR, topic VARCHAR, "partition" INTEGER, next_offset BIGINT,
        PRIMARY KEY (grp, topic, "partition"))""",
]


def _timestamps(seconds: list[float | None]) -> pa.Array:
    """Epoch seconds → an Arrow TIMESTAMP (UTC, microseconds) column."""
    return pa.array([None if s is None else round(s * 1e6) for s in seconds], pa.int64()).cast(pa.timestamp("us"))


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _json_or_null(value: Any) -> str | None:
    return None if value is None else _json(value)


class Store:
    """One writer's DuckDB file (``":memory:"`` for throwaway runs). Not thread-safe."""

    def __init__(self, path: str | Path = ":memory:", *, group: str = DEFAULT_GROUP) -> None:
        self.path = str(path)
        self.group = group
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.con = duckdb.connect(self.path)
        # Fewer, larger checkpoints: folding the WAL into the file costs per checkpoint, and at the
        # default 16 MB a busy processor checkpoints every other batch (bench: 1.1 → 1.6 M rows/s
        # amortised); a crash replays at most this much WAL on the next start.
        self.con.execute(f"SET checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")
        for ddl in _DDL:
            self.con.execute(ddl)
        self._by_name: set[str] = set()  # kinds whose columns are not in the schema's order (upgraded)
        self._upgrade_kinds()
        if self.path != ":memory:":
            segments.drop_sealed_duplicates(self.con, self.path)

    def _upgrade_kinds(self) -> None:
        """A file made before a kind's optional columns existed (DESIGN §3 extends, never renames) gets
        them, null in its old rows. They land after ``seq``, so telemetry rows go in by name."""
        have = set(
            self.con.execute(
                "SELECT table_name, column_name FROM information_schema.columns"
                " WHERE table_catalog = current_database() AND table_schema = 'main'"
            ).fetchall()
        )
        for kind, spec in KINDS.items():
            for col in spec.columns:
                if (kind, col.name) not in have:
                    self.con.execute(f"ALTER TABLE {kind} ADD COLUMN {col.name} {col.duckdb_type}")
        order = self.con.execute(
            "SELECT table_name, list(column_name ORDER BY ordinal_position) FROM information_schema.columns"
            " WHERE table_catalog = current_database() AND table_schema = 'main' GROUP BY table_name"
        ).fetchall()
        # inserting by name costs; only a table whose columns are not in the schema's order needs it
        self._by_name = {kind for kind, names in order if kind in KINDS and names != table_schema(kind).names}

    def write_batch(
        self,
        tables: Mapping[str, pa.Table] = {},
        *,
        offsets: Mapping[tuple[str, int], int] = {},
        deadletters: Iterable[DeadLetter] = (),
        findings: Iterable[tuple[float, Finding]] = (),
        incidents: Iterable[Incident] = (),
        engine_state: tuple[float, str] | None = None,
        also: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
    ) -> None:
        """Store one batch atomically: rows of each kind, dead letters, findings, incidents, offsets,
        and, now and then, the detection engine's learnt state (``(saved_at, JSON)``). ``also`` writes
        a caller's own rows in the same transaction (stage 2's outbox)."""
        con = self.con
        con.begin()
        try:
            for kind, table in tables.items():
                if table.num_rows:
                    self._insert_arrow(kind, table)
            self._insert_deadletters(list(deadletters))
            self._insert_findings(list(findings))
            self._upsert_incidents(list(incidents))
            if engine_state is not None:
                con.execute(
                    "INSERT OR REPLACE INTO engine_state VALUES (?, make_timestamp(?), ?)",
                    [self.group, round(engine_state[0] * 1e6), engine_state[1]],
                )
            if offsets:
                items = sorted(offsets.items())
                self._insert_arrow(
                    "consumer_offsets",
                    pa.table(
                        {
                            "grp": pa.array([self.group] * len(items), pa.string()),
                            "topic": pa.array([t for (t, _), _ in items], pa.string()),
                            "partition": pa.array([p for (_, p), _ in items], pa.int32()),
                            "next_offset": pa.array([o for _, o in items], pa.int64()),
                        }
                    ),
                    verb="INSERT OR REPLACE",
                )
            if also is not None:
                also(con)
            con.commit()
        except BaseException:
            con.rollback()
            raise

    def _insert_arrow(self, name: str, table: pa.Table, verb: str = "INSERT") -> None:
        if name in KINDS and table.schema != table_schema(name):
            table = table.cast(table_schema(name))
        # by name where a table upgraded from an older file has its newer columns after ``seq``
        by_name = " BY NAME" if name in self._by_name else ""
        # DuckDB reads the local Arrow table by its name (a replacement scan): no view is registered
        # and dropped in the catalog, which cost 1-2 ms of each insert's fixed ~3 ms
        _fw_batch = table  # read by DuckDB through its name in the SQL
        self.con.execute(f"{verb} INTO {name}{by_name} SELECT * FROM _fw_batch")

    def _insert_deadletters(self, items: list[DeadLetter]) -> None:
        if items:
            self._insert_arrow(
                "deadletters",
                pa.table(
                    {
                        "ts": _timestamps([d.ts for d in items]),
                        "topic": pa.array([d.topic for d in items], pa.string()),
                        "partition": pa.array([d.partition for d in items], pa.int32()),
                        "offset": pa.array([d.offset for d in items], pa.int64()),
                        "key": pa.array([d.key for d in items], pa.string()),
                        "code": pa.array([d.code for d in items], pa.string()),
                        "reason": pa.array([d.reason for d in items], pa.string()),
                        "value": pa.array([d.value for d in items], pa.binary()),
                    }
                ),
            )

    def _insert_findings(self, items: list[tuple[float, Finding]]) -> None:
        if items:
            self._insert_arrow(
                "findings",
                pa.table(
                    {
                        "ts": _timestamps([t for t, _ in items]),
                        "detector": pa.array([f.detector for _, f in items], pa.string()),
                        "symptom": pa.array([f.symptom for _, f in items], pa.string()),
                        "entity": pa.array([f.entity for _, f in items], pa.string()),
                        "id": pa.array([f.id for _, f in items], pa.string()),
                        "first_seen": _timestamps([f.first_seen for _, f in items]),
                        "last_seen": _timestamps([f.last_seen for _, f in items]),
                        "severity": pa.array([f.severity for _, f in items], pa.string()),
                        "cause": pa.array([f.cause for _, f in items], pa.string()),
                        "score": pa.array([float(f.score) for _, f in items], pa.float64()),
                        "evidence": pa.array([_json(list(f.evidence)) for _, f in items], pa.string()),
                    }
                ),
            )

    def _upsert_incidents(self, items: list[Incident]) -> None:
        """Each incident's row, in its last state of the batch (a batch may change one several times)."""
        items = list({i.id: i for i in items}.values())
        if items:
            self._insert_arrow(
                "incidents",
                pa.table(
                    {
                        "id": pa.array([i.id for i in items], pa.string()),
                        "type": pa.array([i.type for i in items], pa.string()),
                        "cause": pa.array([i.cause for i in items], pa.string()),
                        "location_entity": pa.array([i.location["entity"] for i in items], pa.string()),
                        "location_id": pa.array([i.location["id"] for i in items], pa.string()),
                        "severity": pa.array([i.severity for i in items], pa.string()),
                        "first_seen": _timestamps([i.first_seen for i in items]),
                        "detected_at": _timestamps([i.detected_at for i in items]),
                        "resolved_at": _timestamps([i.resolved_at for i in items]),
                        "evidence": pa.array([_json(i.evidence) for i in items], pa.string()),
                        "symptoms": pa.array([list(i.symptoms) for i in items], pa.list_(pa.string())),
                        "runbook": pa.array([i.runbook for i in items], pa.string()),
                        "status": pa.array([i.status for i in items], pa.string()),
                        "forecast": pa.array([_json_or_null(i.forecast) for i in items], pa.string()),
                        "source_offsets": pa.array([_json_or_null(i.source_offsets) for i in items], pa.string()),
                    }
                ),
                verb="INSERT OR REPLACE",
            )

    def offsets(self) -> dict[tuple[str, int], int]:
        """Next offset to read per (topic, partition), as of the last committed batch."""
        rows = self.con.execute(
            'SELECT topic, "partition", next_offset FROM consumer_offsets WHERE grp = ?', [self.group]
        ).fetchall()
        return {(t, p): o for t, p, o in rows}

    def engine_state(self) -> str | None:
        """The detection engine's last saved state (JSON), so baselines survive a restart."""
        row = self.con.execute("SELECT state FROM engine_state WHERE grp = ?", [self.group]).fetchone()
        return None if row is None else row[0]

    def count(self, table: str) -> int:
        return self.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # type: ignore[index]

    def seal(self, before: float) -> int:
        """Move rows older than ``before`` to Parquet segments, so readers can see them while we write."""
        if self.path == ":memory:":
            return 0
        return segments.seal(self.con, self.path, before)

    def checkpoint(self) -> None:
        self.con.execute("CHECKPOINT")

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

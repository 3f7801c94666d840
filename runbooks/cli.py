"""What ``fabricwatch runbook`` needs beyond argument parsing: topology, incident, clock, executor.

Kept here, beside the package, so the CLI module stays a thin layer of argparse.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import duckdb

from fabricwatch.clock import Clock, VirtualClock, WallClock
from fabricwatch.errors import InputError
from fabricwatch.incident import Incident
from fabricwatch.topology import Topology, generate, load

LIVE_WITHIN_S = 600.0  # a database whose newest telemetry is this recent is live: use the wall clock


def topology_from(path: Path | None, gpus: int, rails: int, gpus_per_node: int) -> Topology:
    """A cluster YAML, a capture's header, or the standard supernode the demo generates."""
    if path is None:
        return generate(gpus, rails, gpus_per_node)
    if ".jsonl" in path.name:
        from fabricwatch.replay.capture import open_capture

        return open_capture(path).topology
    return load(path)


def connect(db: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    if not db.exists():
        raise InputError("--db", f"{db}: no such file")
    if read_only:
        from fabricwatch.stream.segments import open_forensic

        try:
            return open_forensic(db).con
        except duckdb.Error as exc:
            raise InputError("--db", f"cannot open {db}: {str(exc).splitlines()[0]}") from None
    try:
        return duckdb.connect(str(db))
    except duckdb.Error as exc:
        why = str(exc).splitlines()[0]
        if "lock" in why.lower():
            why = "another process (a running processor?) holds it; stop it or use `serve` with runbooks enabled"
        raise InputError("--db", f"cannot open {db} for writing: {why}") from None


def incident(con: duckdb.DuckDBPyConnection, ident: str) -> Incident:
    try:
        row = con.execute(
            "SELECT id, type, cause, location_entity, location_id, severity, epoch_us(first_seen) / 1e6, "
            "epoch_us(detected_at) / 1e6, epoch_us(resolved_at) / 1e6, evidence, symptoms, runbook, status "
            "FROM incidents WHERE id = ?",
            [ident],
        ).fetchone()
    except duckdb.Error as exc:
        raise InputError("--db", f"no incidents table: {str(exc).splitlines()[0]}") from None
    if row is None:
        known = [r[0] for r in con.execute("SELECT id FROM incidents ORDER BY id LIMIT 20").fetchall()]
        raise InputError(
            "INCIDENT_ID", f"no incident {ident!r} in the database (there are: {', '.join(known) or 'none'})"
        )
    evidence = json.loads(row[9]) if isinstance(row[9], str) else (row[9] or [])
    return Incident(
        row[0], row[1], row[2], {"entity": row[3], "id": row[4]}, row[5], row[6], row[7], row[8],
        evidence, list(row[10] or []), row[11], row[12],
    )  # fmt: skip


def clock_for(con: duckdb.DuckDBPyConnection) -> Clock:
    """The wall clock for a live database; for a recorded one (a replay, the demo), a clock stopped at
    its newest telemetry, so its incidents are judged as of when they happened."""
    newest = None
    for table in ("port", "gpu"):
        try:
            value = con.execute(f"SELECT epoch_us(max(ts)) / 1e6 FROM {table}").fetchone()[0]  # type: ignore[index]
        except duckdb.Error:
            continue
        if value is not None:
            newest = max(newest or value, value)
    if newest is None or time.time() - newest < LIVE_WITHIN_S:
        return WallClock()
    return VirtualClock(newest)


def who() -> str:
    return os.environ.get("USER") or os.environ.get("LOGNAME") or "cli"


def history(con: duckdb.DuckDBPyConnection, component: str | None) -> list[dict[str, Any]]:
    """Remediations per component (executed act steps, one per incident) and history escalations."""
    from fabricwatch.runbooks.audit import ensure_schema

    with contextlib.suppress(duckdb.Error):  # read-only: the table is there or it is not
        ensure_schema(con)
    where = "WHERE component IS NOT NULL AND outcome = 'executed'"
    params: list[Any] = []
    if component:
        where += " AND split_part(component, ':', 2) = ?"
        params.append(component)
    rows = con.execute(
        "SELECT split_part(component, ':', 2) AS component, runbook, count(DISTINCT incident_id) AS times, "
        "min(ts) AS first, max(ts) AS last, string_agg(DISTINCT incident_id, ' ' ORDER BY incident_id) AS incidents "
        f"FROM runbook_audit {where} AND NOT dry_run GROUP BY 1, 2 ORDER BY 1, 2",
        params,
    ).fetchall()
    out = [
        {"component": c, "runbook": r, "times": n, "first": str(f), "last": str(last), "incidents": inc}
        for c, r, n, f, last, inc in rows
    ]
    rep = "SELECT target, reason FROM runbook_audit WHERE outcome = 'replaced'" + (
        " AND target = ?" if component else ""
    )
    for target, reason in con.execute(rep + " ORDER BY ts", params).fetchall():
        out.append({"component": target, "runbook": "(escalated)", "times": None, "reason": reason})
    return out

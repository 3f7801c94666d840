"""Sealed Parquet segments beside a hot DuckDB file, and the read side that joins them (DESIGN §1).

A DuckDB file has one writer and, while it is open for writing, no reader in another process. So a
long-running processor periodically *seals* what is older than a horizon: those rows are copied to
immutable Parquet files under ``<db>.segments/<table>/`` and deleted from the hot file. Forensic SQL
(:func:`open_forensic`) sees every table as the union of the hot file (when it can be opened) and
its segments; while the processor holds the file, queries see the sealed part, up to one sealing
interval old, and say so.

Crash safety: a segment is written under a temporary name and renamed into place before the hot
rows are deleted; its name carries the cut-off, and at start-up hot rows older than the newest
cut-off (left behind by a crash between the two steps) are deleted, so nothing is counted twice.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import duckdb

from fabricwatch.schema import KINDS

log = logging.getLogger("fabricwatch.segments")

# Append-only tables with a ts column are sealed; incidents (updated in place) are mirrored whole.
SEALED_TABLES = (*KINDS, "findings", "deadletters", "runbook_audit")
MIRRORED_TABLES = ("incidents",)
ALL_TABLES = (*SEALED_TABLES, *MIRRORED_TABLES, "consumer_offsets")


def segments_dir(db: str | Path) -> Path:
    return Path(f"{db}.segments")


def _q(path: str | Path) -> str:
    """A path as an SQL string literal."""
    return "'" + str(path).replace("'", "''") + "'"


def _cutoff_of(path: Path) -> int:
    """``gpu-<cutoff µs>.parquet`` → cutoff."""
    return int(path.stem.rsplit("-", 1)[1])


def sealed_cutoff(db: str | Path, table: str) -> int | None:
    folder = segments_dir(db) / table
    cutoffs = [_cutoff_of(p) for p in folder.glob(f"{table}-*.parquet")] if folder.is_dir() else []
    return max(cutoffs) if cutoffs else None


def seal(con: duckdb.DuckDBPyConnection, db: str | Path, before: float) -> int:
    """Move rows older than ``before`` (epoch s) of every sealed table to Parquet; returns rows moved."""
    cutoff = round(before * 1e6)
    moved = 0
    for table in SEALED_TABLES:
        last = sealed_cutoff(db, table)
        if last is not None and cutoff <= last:
            continue
        where = f"ts < make_timestamp({cutoff})"
        (count,) = con.execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()  # type: ignore[misc]
        if not count:
            continue
        folder = segments_dir(db) / table
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{table}-{cutoff}.parquet"
        tmp = folder / f".{final.name}.tmp"
        con.execute(f"COPY (SELECT * FROM {table} WHERE {where} ORDER BY ts) TO {_q(tmp)} (FORMAT parquet)")
        os.replace(tmp, final)
        con.execute(f"DELETE FROM {table} WHERE {where}")
        moved += count
    for table in MIRRORED_TABLES:
        folder = segments_dir(db) / table
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{table}.parquet.tmp"
        con.execute(f"COPY (SELECT * FROM {table} ORDER BY id) TO {_q(tmp)} (FORMAT parquet)")
        os.replace(tmp, folder / f"{table}.parquet")
    return moved


def drop_sealed_duplicates(con: duckdb.DuckDBPyConnection, db: str | Path) -> int:
    """At start-up: delete hot rows that a segment already holds (a crash between copy and delete)."""
    dropped = 0
    for table in SEALED_TABLES:
        cutoff = sealed_cutoff(db, table)
        if cutoff is not None:
            (n,) = con.execute(  # type: ignore[misc]
                f"SELECT count(*) FROM {table} WHERE ts < make_timestamp({cutoff})"
            ).fetchone()
            if n:
                con.execute(f"DELETE FROM {table} WHERE ts < make_timestamp({cutoff})")
                dropped += n
    return dropped


@dataclass
class Forensic:
    con: duckdb.DuckDBPyConnection
    live: bool  # the hot file is held by a writer: only sealed data is visible
    note: str | None


def open_forensic(db: str | Path) -> Forensic:
    """An in-memory DuckDB whose tables are views over the hot file (read-only) and its segments."""
    con = duckdb.connect()
    live = False
    note = None
    try:
        con.execute(f"ATTACH {_q(db)} AS hot (READ_ONLY)")
        attached = True
    except duckdb.IOException as exc:
        if "lock" not in str(exc).lower():
            raise
        attached = False
        live = True
        note = "the processor holds the file: showing sealed segments only (up to one sealing interval old)"
    seg = segments_dir(db)
    for table in ALL_TABLES:
        parts = []
        if attached:
            parts.append(f"SELECT * FROM hot.{table}")
        if table in SEALED_TABLES and (seg / table).is_dir() and any((seg / table).glob("*.parquet")):
            # by name: segments sealed before a kind gained optional columns lack them (null)
            parts.append(f"SELECT * FROM read_parquet({_q(seg / table / '*.parquet')}, union_by_name = true)")
        elif table in MIRRORED_TABLES and not attached and (seg / table / f"{table}.parquet").exists():
            parts.append(f"SELECT * FROM read_parquet({_q(seg / table / (table + '.parquet'))})")
        if parts:
            con.execute(f"CREATE VIEW {table} AS " + " UNION ALL BY NAME ".join(parts))
    return Forensic(con, live, note)

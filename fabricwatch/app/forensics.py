"""Forensics over a fabricwatch DuckDB file (and its sealed segments): the evidence timeline of an
incident or a link, the worst entities by one measure, and a time range exported to Parquet.

Everything reads through :func:`fabricwatch.stream.segments.open_forensic`, so it works while
``serve`` writes the file (then it sees the sealed segments). Queries are pure SQL over the tables of
DESIGN §5b; timestamps in and out are epoch seconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from fabricwatch.errors import InputError
from fabricwatch.topology import Topology, split_gpu

TOP_BY = ("corruption", "margin", "temperature")
EXPORT_TABLES = ("gpu", "optical", "port", "switch", "module", "findings", "incidents")


@dataclass
class Scope:
    """What a timeline shows: the ports (both ends of a link, their peers) and the GPUs behind NPO ports."""

    ports: list[str] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)

    def add_port(self, port: str) -> None:
        if port not in self.ports:
            self.ports.append(port)
        device = port.rsplit(":p", 1)[0]
        if split_gpu(device) and device not in self.gpus:  # an NPO port: the GPU behind it heats it
            self.gpus.append(device)


def incident(con: duckdb.DuckDBPyConnection, ident: str) -> dict[str, Any]:
    rows = con.execute(
        "SELECT id, type, cause, location_entity, location_id, severity, epoch(first_seen), epoch(detected_at), "
        "epoch(resolved_at), evidence, status FROM incidents WHERE id = ?",
        [ident],
    ).fetchall()
    if not rows:
        raise InputError("ID", f'no incident {ident!r} in this file (try: fabricwatch query "FROM incidents")')
    keys = ("id", "type", "cause", "entity", "location", "severity", "first_seen", "detected_at", "resolved_at")
    out = dict(zip(keys, rows[0][:9], strict=True))
    out["evidence"] = json.loads(rows[0][9]) if rows[0][9] else []
    out["status"] = rows[0][10]
    return out


def scope_of(inc: dict[str, Any], topology: Topology | None) -> Scope:
    """Both ends of the link, the peers of a port, a GPU's NPO ports, and whatever the evidence names."""
    scope = Scope()
    entity, ident = inc["entity"], inc["location"]
    if topology is not None:
        if entity == "link" and ident in topology.link_by_id:
            link = topology.link_by_id[ident]
            scope.add_port(link.a)
            scope.add_port(link.b)
        elif entity == "port" and ident in topology.port_peer:
            scope.add_port(ident)
            scope.add_port(topology.port_peer[ident])
        elif entity == "gpu":
            for port in topology.ports:
                if topology.port_device[port] == ident:
                    scope.add_port(port)
                    scope.add_port(topology.port_peer[port])
    elif entity == "port":
        scope.add_port(ident)
    for e in inc["evidence"]:
        if isinstance(e.get("port"), str):
            scope.add_port(e["port"])
        for key in ("gpu", "device"):
            if isinstance(e.get(key), str) and split_gpu(e[key]) and e[key] not in scope.gpus:
                scope.gpus.append(e[key])
    if entity == "gpu" and ident not in scope.gpus:
        scope.gpus.append(ident)
    return scope


def newest(con: duckdb.DuckDBPyConnection) -> float:
    """The newest telemetry time in the file (what "now" is for a file replayed or copied elsewhere)."""
    parts = [f"SELECT max(epoch(ts)) AS t FROM {t}" for t in ("port", "optical", "gpu") if _has(con, t)]
    value = con.execute(" UNION ALL ".join(parts)).df()["t"].max() if parts else None
    if value is None or pd.isna(value):
        raise InputError("--db", "no telemetry in this file yet")
    return float(value)


def _has(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = ?", [table]).fetchone()[0])


def timeline(con: duckdb.DuckDBPyConnection, scope: Scope, start: float, end: float, bucket_s: float) -> pd.DataFrame:
    """One row per ``bucket_s`` of telemetry, one column per (entity, measure): rx/tx power per lane
    (worst in the bucket), state, pre-FEC BER, CRC errors, module temperature, GPU temperature."""
    frames = []
    args = [start, end, bucket_s]
    window = "epoch(ts) BETWEEN $1 AND $2"
    bucket = "floor(epoch(ts) / $3) * $3"
    if scope.ports and _has(con, "optical"):
        frames.append(con.execute(
            f"SELECT {bucket} AS t, port || ' L' || lane || ' rx dBm' AS col, min(rx_power_dbm) AS v FROM optical "
            f"WHERE {window} AND port IN ({_in(scope.ports)}) GROUP BY ALL UNION ALL "
            f"SELECT {bucket}, port || ' L' || lane || ' tx dBm', min(tx_power_dbm) FROM optical "
            f"WHERE {window} AND port IN ({_in(scope.ports)}) GROUP BY ALL UNION ALL "
            f"SELECT {bucket}, port || ' module °C', max(module_temp_c) FROM optical "
            f"WHERE {window} AND port IN ({_in(scope.ports)}) GROUP BY ALL",
            args,
        ).df())  # fmt: skip
    if scope.ports and _has(con, "port"):
        frames.append(con.execute(
            f"SELECT {bucket} AS t, port || ' up' AS col, min(state) AS v FROM port "
            f"WHERE {window} AND port IN ({_in(scope.ports)}) GROUP BY ALL UNION ALL "
            f"SELECT {bucket}, port || ' BER', max(pre_fec_ber) FROM port "
            f"WHERE {window} AND port IN ({_in(scope.ports)}) GROUP BY ALL UNION ALL "
            f"SELECT {bucket}, port || ' CRC', max(rx_crc_errors_total) - min(rx_crc_errors_total) FROM port "
            f"WHERE {window} AND port IN ({_in(scope.ports)}) GROUP BY ALL",
            args,
        ).df())  # fmt: skip
    if scope.gpus and _has(con, "gpu"):
        frames.append(con.execute(
            f"SELECT {bucket} AS t, device || ' °C' AS col, max(temp_c) AS v FROM gpu "
            f"WHERE {window} AND device IN ({_in(scope.gpus)}) GROUP BY ALL",
            args,
        ).df())  # fmt: skip
    long = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else None
    if long is None:
        return pd.DataFrame()
    wide = long.pivot_table(index="t", columns="col", values="v", aggfunc="first").sort_index()
    return wide[sorted(wide.columns, key=_column_order)]


def _column_order(col: str) -> tuple[str, int, str]:
    entity, _, measure = col.partition(" ")
    return (entity, 0 if measure.startswith("L") else 1, measure)


def _in(values: list[str]) -> str:
    return ", ".join("'" + v.replace("'", "''") + "'" for v in values)


def top(con: duckdb.DuckDBPyConnection, by: str, start: float, end: float, limit: int) -> pd.DataFrame:
    """The worst entities over [start, end]: ports by corruption ratio (CRC errors over frames received,
    frames from bytes / 4096, the RoCEv2 MTU, when the source has no packet counter) or by rx margin to
    the module's own low alarm; GPUs by temperature. Counter increases are max − min over the range
    (a counter that restarted inside it reads low)."""
    if by == "corruption":
        sql = (
            "SELECT port, max(rx_crc_errors_total) - min(rx_crc_errors_total) AS crc_errors, "
            "coalesce(max(rx_packets_total) - min(rx_packets_total), "
            "(max(rx_bytes_total) - min(rx_bytes_total)) / 4096) AS frames, "
            "crc_errors / nullif(frames + crc_errors, 0) AS corruption_ratio FROM port "
            "WHERE epoch(ts) BETWEEN ? AND ? GROUP BY port ORDER BY corruption_ratio DESC NULLS LAST, port LIMIT ?"
        )
    elif by == "margin":
        sql = (
            "WITH alarm AS (SELECT port, arg_max(rx_power_low_alarm_dbm, ts) AS alarm_dbm FROM module GROUP BY port), "
            "worst AS (SELECT port, min(rx_power_dbm) AS rx_dbm FROM optical WHERE epoch(ts) BETWEEN ? AND ? "
            "GROUP BY port) SELECT worst.port, rx_dbm, alarm_dbm, rx_dbm - alarm_dbm AS margin_db FROM worst "
            "JOIN alarm USING (port) ORDER BY margin_db ASC NULLS LAST, port LIMIT ?"
        )
    elif by == "temperature":
        sql = (
            "SELECT device AS gpu, max(temp_c) AS temperature_c, avg(temp_c) AS mean_c FROM gpu "
            "WHERE epoch(ts) BETWEEN ? AND ? GROUP BY device ORDER BY temperature_c DESC NULLS LAST, gpu LIMIT ?"
        )
    else:
        raise InputError("--by", f"must be one of {', '.join(TOP_BY)}")
    return con.execute(sql, [start, end, limit]).df()


def export_parquet(con: duckdb.DuckDBPyConnection, out: Path, start: float, end: float) -> dict[str, int]:
    """Each table's rows with ts (incidents: first_seen) in [start, end] → ``out/<table>.parquet``."""
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for table in EXPORT_TABLES:
        if not _has(con, table):
            continue
        column = "first_seen" if table == "incidents" else "ts"
        query = f"SELECT * FROM {table} WHERE epoch({column}) BETWEEN {float(start)!r} AND {float(end)!r}"
        path = out / f"{table}.parquet"
        con.execute(f"COPY ({query}) TO '{str(path).replace(chr(39), chr(39) * 2)}' (FORMAT parquet)")
        counts[table] = con.execute(
            f"SELECT count(*) FROM read_parquet('{str(path).replace(chr(39), chr(39) * 2)}')"
        ).fetchone()[0]
    return counts


def plot(table: pd.DataFrame, inc: dict[str, Any] | None, path: Path, title: str) -> None:
    """The timeline drawn: optical power per lane, BER, temperatures; the incident's times as lines."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("--plot", "needs matplotlib: pip install 'fabricwatch[plot]'") from None
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    groups = [
        ("optical power (dBm)", [c for c in table.columns if c.endswith("dBm")], False),
        ("pre-FEC BER", [c for c in table.columns if c.endswith(" BER")], True),
        ("temperature (°C)", [c for c in table.columns if c.endswith("°C")], False),
    ]
    groups = [g for g in groups if g[1]]
    fig, axes = plt.subplots(len(groups), 1, figsize=(11, 3.2 * len(groups)), sharex=True, squeeze=False)
    t0 = table.index.min()
    for ax, (label, cols, log) in zip(axes[:, 0], groups, strict=True):
        for col in cols:
            ax.plot(table.index - t0, table[col], label=col, linewidth=1)
        ax.set_ylabel(label)
        if log:
            ax.set_yscale("log")
        if inc is not None:
            for key, style in (("first_seen", "--"), ("detected_at", "-"), ("resolved_at", ":")):
                if inc.get(key) is not None:
                    ax.axvline(inc[key] - t0, color="red", linestyle=style, linewidth=1)
        ax.legend(fontsize=6, ncol=4, loc="best")
    axes[-1, 0].set_xlabel(f"seconds from {pd.Timestamp(t0, unit='s')} UTC")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

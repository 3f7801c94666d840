"""Reading live telemetry for verify conditions, validations and diagnose steps, from DuckDB.

Conditions are evaluated per key (a GPU, a port) over the last ``window_s`` of samples taken after
the action, and hold only when every key satisfies them: a link is clean when both its ends are.
No rows yet is "not known yet", never a pass. Times are epoch seconds from the caller's clock.
"""

from __future__ import annotations

import itertools
import operator
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import duckdb

from fabricwatch.runbooks.model import Condition
from fabricwatch.runbooks.targets import Target

_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}
_KEY = {"gpu": "device", "optical": "port", "port": "port", "switch": "device"}


def as_timestamp(t: float) -> datetime:
    """Epoch seconds → the naive UTC datetime DuckDB's TIMESTAMP columns hold."""
    return datetime.fromtimestamp(t, UTC).replace(tzinfo=None)


def _increase(values: list[float]) -> float:
    """A counter's rise over the window; a reset to 0 counts from 0 (DESIGN §3: counters may reset)."""
    total = 0.0
    for a, b in itertools.pairwise(values):
        total += b - a if b >= a else b
    return total


def aggregate(agg: str, values: list[float]) -> float:
    if agg == "max":
        return max(values)
    if agg == "min":
        return min(values)
    if agg == "mean":
        return sum(values) / len(values)
    if agg == "last":
        return values[-1]
    return _increase(values)


class Telemetry:
    """Conditions and look-ups over one DuckDB connection (the processor's, or a forensic one)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def keys(self, cond: Condition, target: Target) -> tuple[str, list[str]]:
        v = target.values
        if cond.of == "source":
            return "source", [str(v["collector"])] if v.get("collector") else []
        column = _KEY[cond.kind]
        if cond.of == "gpu":
            return column, [str(v["gpu"])] if v.get("gpu") else []
        if cond.of == "gpus":
            return column, list(target.gpus)
        if cond.of == "ports":
            return column, list(target.ports)
        return column, [str(v["switch_port"])] if v.get("switch_port") else []

    def evaluate(self, cond: Condition, target: Target, now: float, since: float) -> tuple[bool | None, float | None]:
        """(holds, worst value): ``None`` when no key has a sample yet in the window."""
        column, keys = self.keys(cond, target)
        if not keys:
            return None, None
        start = max(since, now - cond.window_s)
        rows = self.con.execute(
            f"SELECT {column}, {cond.metric} FROM {cond.kind} WHERE list_contains(?, {column}) "
            f"AND ts > ? AND ts <= ? AND {cond.metric} IS NOT NULL ORDER BY {column}, ts",
            [keys, as_timestamp(start), as_timestamp(now)],
        ).fetchall()
        series: dict[str, list[float]] = defaultdict(list)
        for key, value in rows:
            series[key].append(float(value))
        if not series or (cond.agg == "increase" and any(len(s) < 2 for s in series.values())):
            return None, None
        op = _OPS[cond.op]
        values = {k: aggregate(cond.agg, s) for k, s in series.items()}
        failing = [val for val in values.values() if not op(val, cond.value)]
        holds = not failing and len(values) == len(set(keys))
        worst = failing[0] if failing else next(iter(values.values()))
        return holds, round(worst, 6)

    def power_limit(self, gpu: str) -> float | None:
        row = self.con.execute(
            "SELECT arg_max(power_limit_w, ts) FROM gpu WHERE device = ? AND power_limit_w IS NOT NULL", [gpu]
        ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def query(self, sql: str, params: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
        """A diagnose step's forensic SQL with named parameters; values come back JSON-ready."""
        rel = self.con.execute(sql, params)
        columns = [d[0] for d in rel.description or []]
        rows = [[_plain(x) for x in row] for row in rel.fetchall()]
        return columns, rows


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float):
        return round(value, 6)
    return value

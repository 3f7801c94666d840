"""Recent telemetry kept in memory, from which detection windows are cut.

The processor appends every validated Arrow batch here as well as to DuckDB; detection reads windows
from memory rather than querying the file, so a tick costs a filter and a pandas conversion, and
stays independent of how far storage has been sealed or compacted.
"""

from __future__ import annotations

from collections import deque

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from fabricwatch.records import Window
from fabricwatch.schema import KINDS, table_schema
from fabricwatch.topology import Topology


def _ts_seconds(table: pa.Table) -> pa.Table:
    """The ``ts`` column as float seconds since the epoch, which is what detectors work in."""
    seconds = pc.divide(table.column("ts").cast(pa.int64()).cast(pa.float64()), 1e6)
    return table.set_column(table.schema.get_field_index("ts"), "ts", seconds)


def empty_frame(kind: str) -> pd.DataFrame:
    return _ts_seconds(table_schema(kind).empty_table()).to_pandas()


class WindowBuffer:
    """Per kind, a queue of (newest ts in µs, table) chunks; evicted by age."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._chunks: dict[str, deque[tuple[int, pa.Table]]] = {kind: deque() for kind in KINDS}
        self._modules: pa.Table | None = None
        self._modules_frame: pd.DataFrame | None = None

    def add(self, kind: str, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        newest = pc.max(table.column("ts").cast(pa.int64())).as_py()
        self._chunks[kind].append((newest, table))
        if kind == "module":
            merged = table if self._modules is None else pa.concat_tables([self._modules, table])
            # keep the latest row per port: sort by ts, then take each port's last occurrence
            merged = merged.sort_by([("port", "ascending"), ("ts", "ascending")])
            ports = merged.column("port").to_pylist()
            keep = [i for i in range(len(ports)) if i + 1 == len(ports) or ports[i + 1] != ports[i]]
            self._modules = merged.take(pa.array(keep, pa.int64()))
            self._modules_frame = None

    def evict(self, before: float) -> None:
        """Drop chunks whose newest row is older than ``before`` (epoch seconds)."""
        limit = round(before * 1e6)
        for chunks in self._chunks.values():
            while chunks and chunks[0][0] < limit:
                chunks.popleft()

    def frame(self, kind: str, start: float, end: float) -> pd.DataFrame:
        lo, hi = round(start * 1e6), round(end * 1e6)
        tables = [t for newest, t in self._chunks[kind] if newest >= lo]
        if not tables:
            return empty_frame(kind)
        table = pa.concat_tables(tables)
        ts = table.column("ts").cast(pa.int64())
        table = table.filter(pc.and_(pc.greater_equal(ts, lo), pc.less_equal(ts, hi)))
        if table.num_rows == 0:
            return empty_frame(kind)
        return _ts_seconds(table.sort_by("ts")).to_pandas()

    def modules(self) -> pd.DataFrame:
        if self._modules_frame is None:
            self._modules_frame = (
                empty_frame("module") if self._modules is None else _ts_seconds(self._modules).to_pandas()
            )
        return self._modules_frame

    def window(self, start: float, end: float, source_offsets: dict[str, float] | None = None) -> Window:
        frames = {kind: self.frame(kind, start, end) for kind in KINDS}
        return Window(start, end, frames, self.modules(), self.topology, source_offsets=dict(source_offsets or {}))

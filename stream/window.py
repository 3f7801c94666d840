"""Recent telemetry kept in memory, from which detection windows are cut.

The processor appends every validated Arrow batch here as well as to DuckDB; detection reads windows
from memory rather than querying the file, so a tick stays independent of how far storage has been
sealed or compacted.

A window is every buffered row with start ≤ ts ≤ end, stably sorted by ts (ties in arrival order).
Consecutive windows overlap by most of their span (a 60 s window every 10 s), so each kind keeps its
last cut, sorted: the next one is that cut's tail from the new start, merged with the rows that came
since (or were beyond its end), which are the only rows sorted again. Sorting every row once rather
than once per window it falls in is most of a tick's window cost at 2,048 GPUs (bench/scale.py).

Rows are kept as their sources stamped them; each source's clock correction (stream/sources.py) is
taken out when a window is cut, so every row of a source moves with its current correction and its
rows keep their order whatever the estimate does. Taken out as rows arrived, a correction that
changed put the source's later rows before its earlier ones (the rows from before a fast clock was
first corrected stayed a minute ahead and came back into the windows among the corrected ones: a
link that went down once read as a flap). A kind's last cut is reused only under the same
corrections; a change cuts it afresh.

Each row's ``port``, ``device`` and ``source`` names are numbered as it arrives (fabricwatch/names.py)
and the numbers travel beside the row; a cut hands them to the window's cache, not its frames, so
detectors group a window by integers instead of hashing its names once per window it falls in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from fabricwatch.names import NUMBERS, NameCodes
from fabricwatch.records import Window
from fabricwatch.schema import KINDS, table_schema
from fabricwatch.topology import Topology

NUMBERED = ("port", "device", "source")  # the columns detectors group rows by (detectors/frames.py KEYS)
NUMBER_PREFIX = "__number:"  # a numbered column's numbers, carried beside it until the window is cut


def _ts_seconds(table: pa.Table) -> pa.Table:
    """The ``ts`` column as float seconds since the epoch, which is what detectors work in."""
    seconds = pc.divide(table.column("ts").cast(pa.int64()).cast(pa.float64()), 1e6)
    return table.set_column(table.schema.get_field_index("ts"), "ts", seconds)


def empty_frame(kind: str) -> pd.DataFrame:
    return _ts_seconds(table_schema(kind).empty_table()).to_pandas()


def _ts(table: pa.Table) -> np.ndarray:
    return table.column("ts").cast(pa.int64()).to_numpy()


def _in_range(table: pa.Table, lo: int, hi: int) -> pa.Table:
    ts = table.column("ts").cast(pa.int64())
    return table.filter(pc.and_(pc.greater_equal(ts, lo), pc.less_equal(ts, hi)))


def corrected(table: pa.Table, shifts: dict[str, int]) -> pa.Table:
    """The table with each corrected source's clock offset (µs, ``shifts``) taken out of ``ts``."""
    if not shifts or table.num_rows == 0:
        return table
    names = pa.array(sorted(shifts))
    index = pc.index_in(table.column("source"), value_set=names)
    if index.null_count == len(index):
        return table
    index = pc.fill_null(index, -1).to_numpy(zero_copy_only=False)
    shift = np.array([shifts[n] for n in names.to_pylist()] + [0], dtype=np.int64)[index]
    ts_type = table.schema.field("ts").type
    ts = table.column("ts").cast(pa.int64()).to_numpy() - shift
    return table.set_column(table.schema.get_field_index("ts"), "ts", pa.array(ts, pa.int64()).cast(ts_type))


def shifts_of(corrections: dict[str, float] | None) -> dict[str, int]:
    """Clock corrections (seconds a source is ahead) as µs to take out of its ``ts``."""
    return {name: round(offset * 1e6) for name, offset in (corrections or {}).items() if offset}


def moved_later(shifts: dict[str, int]) -> int:
    """The most µs ``shifts`` move a row later (a slow clock's correction is negative), 0 if none."""
    return max(0, -min(shifts.values(), default=0))


def _sorted(table: pa.Table) -> pa.Table:
    """Stably sorted by ts (ties keep their order); no copy when it already is."""
    ts = _ts(table)
    if len(ts) < 2 or bool((ts[1:] >= ts[:-1]).all()):
        return table
    return table.take(pa.array(np.argsort(ts, kind="stable")))


def _merge(kept: pa.Table, incoming: pa.Table) -> pa.Table:
    """Two sorted tables as one, ``kept``'s rows first among equal ts (they arrived first): only the
    part of ``kept`` that ``incoming`` reaches back into is sorted again."""
    if incoming.num_rows == 0:
        return kept
    split = int(np.searchsorted(_ts(kept), _ts(incoming)[0], side="right"))
    tail = kept.slice(split)
    if tail.num_rows == 0:
        return pa.concat_tables([kept, incoming])
    return pa.concat_tables([kept.slice(0, split), _sorted(pa.concat_tables([tail, incoming]))])


@dataclass
class _Cut:
    """A kind's last window: its bounds (µs), its rows sorted, and the rows seen then but beyond its end,
    all under the clock corrections it was cut with."""

    lo: int
    hi: int
    rows: pa.Table
    beyond: pa.Table | None
    seen: int  # chunks added before it was cut
    shifts: dict[str, int]


class WindowBuffer:
    """Per kind, a queue of (newest ts in µs, table) chunks; evicted by age."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._chunks: dict[str, deque[tuple[int, pa.Table]]] = {kind: deque() for kind in KINDS}
        self._added: dict[str, int] = dict.fromkeys(KINDS, 0)  # chunks ever added, per kind
        self._cuts: dict[str, _Cut] = {}
        self._modules: pa.Table | None = None
        self._modules_frame: tuple[dict[str, int], pd.DataFrame] | None = None
        self._ahead = 0  # µs: the most a correction has moved a row later (a slow clock), for eviction
        self.names = {column: NameCodes() for column in NUMBERED}  # fabricwatch/names.py

    def add(self, kind: str, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if kind != "module":
            for column in NUMBERED:
                if column in table.column_names:
                    table = table.append_column(NUMBER_PREFIX + column, self.names[column].encode(table[column]))
        newest = pc.max(table.column("ts").cast(pa.int64())).as_py()
        self._chunks[kind].append((newest, table))
        self._added[kind] += 1
        if kind == "module":
            merged = table if self._modules is None else pa.concat_tables([self._modules, table])
            # keep the latest row per port: sort by ts, then take each port's last occurrence
            merged = merged.sort_by([("port", "ascending"), ("ts", "ascending")])
            ports = merged.column("port").to_pylist()
            keep = [i for i in range(len(ports)) if i + 1 == len(ports) or ports[i + 1] != ports[i]]
            self._modules = merged.take(pa.array(keep, pa.int64()))
            self._modules_frame = None

    def evict(self, before: float) -> None:
        """Drop chunks whose newest row is older than ``before`` (epoch seconds), as corrected: a slow
        clock's rows are kept for as long as its correction moves them later."""
        limit = round(before * 1e6) - self._ahead
        for chunks in self._chunks.values():
            while chunks and chunks[0][0] < limit:
                chunks.popleft()

    def frame(
        self,
        kind: str,
        start: float,
        end: float,
        shifts: dict[str, int] | None = None,
        numbers: dict[str, tuple[np.ndarray, NameCodes]] | None = None,
    ) -> pd.DataFrame:
        """The rows of ``kind`` in ``[start, end]``; each numbered column's numbers go into ``numbers``
        (by column) rather than into the frame, whose columns are the schema's."""
        table = self._cut(kind, round(start * 1e6), round(end * 1e6), shifts or {})
        if table.num_rows == 0:
            return empty_frame(kind)
        carried = [c for c in table.column_names if c.startswith(NUMBER_PREFIX)]
        if numbers is not None:
            for name in carried:
                column = name.removeprefix(NUMBER_PREFIX)
                numbers[column] = (table[name].to_numpy(), self.names[column])
        return _ts_seconds(table.drop_columns(carried)).to_pandas()

    def _cut(self, kind: str, lo: int, hi: int, shifts: dict[str, int]) -> pa.Table:
        """The rows with lo ≤ ts ≤ hi once ``shifts`` are taken out, stably sorted by ts: from the last
        cut where the window moved forward under the same corrections, else from every chunk."""
        chunks, added, last = self._chunks[kind], self._added[kind], self._cuts.get(kind)
        if (
            last is not None
            and lo >= last.lo
            and hi >= last.hi
            and added - last.seen <= len(chunks)
            and last.shifts == shifts
        ):
            new = [corrected(t, shifts) for _, t in list(chunks)[len(chunks) - (added - last.seen) :]]
            kept = last.rows.slice(int(np.searchsorted(_ts(last.rows), lo)))
            fresh = ([last.beyond] if last.beyond is not None else []) + new
            table = pa.concat_tables(fresh) if fresh else None
            rows = kept if table is None else _merge(kept, _sorted(_in_range(table, lo, hi)))
        else:
            later = moved_later(shifts)  # a chunk's newest row, corrected, is at most this much later
            tables = [t for newest, t in chunks if newest + later >= lo]
            if not tables:
                self._cuts.pop(kind, None)
                return table_schema(kind).empty_table()
            table = corrected(pa.concat_tables(tables), shifts)
            rows = _sorted(_in_range(table, lo, hi))
        beyond = None if table is None else table.filter(pc.greater(table.column("ts").cast(pa.int64()), hi))
        beyond = beyond if beyond is not None and beyond.num_rows else None
        self._cuts[kind] = _Cut(lo, hi, rows, beyond, added, shifts)
        return rows

    def modules(self, shifts: dict[str, int] | None = None) -> pd.DataFrame:
        shifts = shifts or {}
        if self._modules_frame is None or self._modules_frame[0] != shifts:
            frame = (
                empty_frame("module")
                if self._modules is None
                else _ts_seconds(corrected(self._modules, shifts)).to_pandas()
            )
            self._modules_frame = (shifts, frame)
        return self._modules_frame[1]

    def window(
        self,
        start: float,
        end: float,
        source_offsets: dict[str, float] | None = None,
        kinds: Collection[str] | None = None,
    ) -> Window:
        """The window ``[start, end]`` of telemetry time, each source's clock correction
        (``source_offsets``: seconds it is ahead) taken out of its rows; with ``kinds``, only those are
        cut (a step tick's detectors read three kinds), the others are empty frames and keep their
        last cut for the next window."""
        shifts = shifts_of(source_offsets)
        self._ahead = max(self._ahead, moved_later(shifts))
        numbers: dict[str, dict[str, tuple[np.ndarray, NameCodes]]] = {kind: {} for kind in KINDS}
        frames = {
            kind: self.frame(kind, start, end, shifts, numbers[kind]) if kinds is None or kind in kinds
            else empty_frame(kind)
            for kind in KINDS
        }  # fmt: skip
        modules = self.modules(shifts)
        cache = {(NUMBERS, kind): found for kind, found in numbers.items() if found}
        return Window(start, end, frames, modules, self.topology, cache, dict(source_offsets or {}))

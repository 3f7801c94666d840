"""Vectorised per-entity aggregates over a window, computed once per tick and shared by detectors.

A window of a 1024-GPU supernode holds ~300k rows; grouping string keys once per kind and reusing
the integer codes keeps a whole tick of detectors to a few passes over numpy arrays. Everything here
is pure and deterministic: entities come out sorted by key, nulls and missing columns are NaN.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from fabricwatch.names import NUMBERS
from fabricwatch.records import Finding, Window

KEYS: dict[str, tuple[str, ...]] = {
    "gpu": ("device",),
    "optical": ("port", "lane"),
    "port": ("port",),
    "switch": ("device",),
    "module": ("port",),
}
_LANE_SPAN = 64  # lanes are 0..63 (schema), so port code * 64 + lane is unique
# Counter maxima a stuck counter sits at: IBTA PortCounters are 8 bits (LinkDownedCounter), 16 bits
# (SymbolErrorCounter, PortRcvErrors) and 32 bits (PortXmitData) and stick there (REALISM.md; a real
# ConnectX-7 shows link_downed 255); 64 bits for extended counters (2^64 - 1 rounds to 2^64 in float).
SATURATED = np.array([2.0**8 - 1, 2.0**16 - 1, 2.0**32 - 1, float(2**64 - 1)])


class Keyed:
    """The rows of one kind grouped by entity key (``index``, sorted), rows in time order within each.

    Built once per window on the whole window; :meth:`since` gives the recent rows as a view that
    shares the same entity index (an entity without recent rows aggregates to NaN), so detectors can
    compare "now" with the whole window position by position, without joins. A row whose key is null
    (the schema never lets one through) belongs to no entity.

    The keys are factorised once (Arrow-backed strings hash slowly, and iterate one by one more slowly
    still): after that everything is numpy over ``codes``, which are sorted, so an entity's rows are the
    slice ``_starts[e]:_ends[e]`` and per-entity aggregates need no groupby.
    """

    def __init__(
        self,
        frame: pd.DataFrame,
        keys: tuple[str, ...],
        factorized: Callable[[str], tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> None:
        self.frame = frame
        self._factorized = factorized  # a column's codes and keys, shared with the tick's other readers
        self._values: dict[str, np.ndarray] = {}
        self._aggs: dict[tuple[str, str], np.ndarray] = {}
        self._steps: dict[str, Steps] = {}
        self._parent: Keyed | None = None  # set on a view made by since()
        self._take: np.ndarray | None = None  # the parent's rows (positions) this view keeps
        self._src: np.ndarray | None = None  # each row's source as an integer code (grouped order)
        self._names: list[str] | None = None
        self._grid: np.ndarray | None = None  # each row's cell in the (entities x samples) median grid
        self._pair_cache: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        if len(frame) == 0 or any(k not in frame.columns for k in (*keys, "ts")):
            self.rows = np.zeros(0, dtype=np.int64)
            self.codes = np.zeros(0, dtype=np.int64)
            self.ts = np.zeros(0)
            self.index: pd.Index = (
                pd.MultiIndex.from_arrays([[], []], names=list(keys)) if len(keys) > 1 else pd.Index([], name=keys[0])
            )
            self.n = 0
            self._bounds()
            return
        first, uniques = factorized(keys[0]) if factorized else factorize(frame[keys[0]])
        names = pd.Index(uniques, dtype=object)
        if len(keys) == 1:
            codes = first
            self.index = names.rename(keys[0])
            self._names = names.tolist()
        else:
            raw = frame[keys[1]]
            if isinstance(raw.dtype, np.dtype) and raw.dtype.kind in "iu":  # numpy integers: no null to fill
                lane = raw.to_numpy().astype(np.int64, copy=False)
            else:
                lane = pd.to_numeric(raw, errors="coerce").fillna(0).to_numpy(dtype=np.int64)
            if len(lane) and (lane.min() < 0 or lane.max() >= _LANE_SPAN):  # never valid (schema: 0..63)
                lane = np.clip(lane, 0, _LANE_SPAN - 1)
            combined = first * _LANE_SPAN + lane
            # dense re-coding (combined < ports x 64): sorted, and cheaper than hashing again
            present = np.zeros(len(uniques) * _LANE_SPAN, dtype=bool)
            if first.min() >= 0:  # no null key (the schema lets none through): no masks
                present[combined] = True
                grid = present.reshape(len(uniques), _LANE_SPAN)
                width = int(grid[0].sum())
                if grid[:, :width].all() and not grid[:, width:].any():  # every port lanes 0..width-1
                    codes = first * width + lane
                else:
                    codes = (np.cumsum(present) - 1)[combined]
            else:
                combined[first < 0] = -1
                present[combined[first >= 0]] = True
                codes = np.where(first >= 0, (np.cumsum(present) - 1)[combined], -1)
            uniq = np.flatnonzero(present)
            lanes = np.unique(uniq % _LANE_SPAN)
            self.index = pd.MultiIndex(
                levels=[names, pd.Index(lanes)],
                codes=[uniq // _LANE_SPAN, np.searchsorted(lanes, uniq % _LANE_SPAN)],
                names=list(keys),
                verify_integrity=False,
            )
        self.n = len(self.index)
        ts = epoch_seconds(frame["ts"])
        if len(ts) < 2 or bool(np.all(ts[1:] >= ts[:-1])):  # frames come sorted by ts: a stable sort keeps it
            # a stable sort of 16-bit codes is a radix sort, ~10x faster than a merge sort of 64-bit ones
            rows = np.argsort(codes.astype(np.uint16) if self.n <= 1 << 16 else codes, kind="stable")
        else:
            rows = np.lexsort((ts, codes))
        self.rows = rows if first.min() >= 0 else rows[codes[rows] >= 0]  # a null key (never valid): no entity's
        self.codes = codes[self.rows]
        self.ts = ts[self.rows]
        self._bounds()

    def _bounds(self) -> None:
        counts = np.bincount(self.codes, minlength=self.n)
        self._ends = np.cumsum(counts)
        self._starts = self._ends - counts

    def since(self, t: float | np.ndarray) -> Keyed:
        """The rows with ts ≥ ``t`` (one time, or one per entity by position), over the same entities."""
        view = object.__new__(Keyed)
        take = np.flatnonzero(self.ts >= (t if np.isscalar(t) else np.asarray(t)[self.codes]))
        view.frame, view.index, view.n = self.frame, self.index, self.n
        view._parent, view._take = self, take
        view._values, view._aggs, view._steps = {}, {}, {}
        view._src = None
        view._factorized = None
        view._names = self._names
        view._grid = view._pair_cache = None
        view.rows, view.codes, view.ts = self.rows[take], self.codes[take], self.ts[take]
        view._bounds()
        return view

    def __len__(self) -> int:
        return self.n

    @property
    def names(self) -> list[str]:
        """The entity keys as strings, by position (a list: ~30 ns a look-up, 8,192 ports a tick)."""
        if self._names is None:
            self._names = self._parent.names if self._parent is not None else [str(k) for k in self.index]
        return self._names

    def values(self, column: str) -> np.ndarray:
        """The column in grouped order as float64; null and a missing column are NaN."""
        v = self._values.get(column)
        if v is None:
            if self._parent is not None and column in self._parent._values:
                v = self._parent._values[column].take(self._take)
            elif column in self.frame.columns and self.n:
                # a view reads its rows from the frame, not through the whole window's (which may
                # never be needed: most ticks judge only the recent rows of most columns)
                raw = self.frame[column]
                if isinstance(raw.dtype, np.dtype) and raw.dtype.kind in "biuf":  # numpy-backed: no NA to map
                    v = np.asarray(raw.to_numpy(), dtype=np.float64).take(self.rows)
                else:
                    if not pd.api.types.is_numeric_dtype(raw.dtype):
                        raw = pd.to_numeric(raw, errors="coerce")  # e.g. object columns holding None
                    v = raw.to_numpy(dtype=np.float64, na_value=np.nan).take(self.rows)
            else:
                v = np.full(len(self.codes), np.nan)
            self._values[column] = v
        return v

    def derive(self, name: str, values: np.ndarray) -> None:
        """Read per-row ``values`` (grouped order) as a column named ``name``: one derived from other
        columns, which every aggregate (steps, increase, median) then reads as it reads a column."""
        self._values[name] = np.asarray(values, dtype=np.float64)
        self._steps.pop(name, None)

    def has(self, column: str) -> bool:
        return bool(self.n) and not np.isnan(self.values(column)).all()

    def _grouped_median(self, v: np.ndarray) -> np.ndarray | None:
        """Medians through an (entities x samples) matrix padded with NaN: rows sorted, middle picked.
        Several times faster than a groupby; None when the matrix would be far larger than the rows
        (one entity with far more rows than the rest). Uneven counts are fine otherwise: a fleet's
        switches scraped every 30 s beside hosts every 5 s leave most lanes one recent sample and
        some six, a matrix of 5-6 columns. When every entity has as many rows (a steady scrape), the
        grouped rows are the matrix."""
        if not self.n or not len(v):
            return np.full(self.n, np.nan)
        counts = self._ends - self._starts
        width = int(counts.max())
        if width * self.n == len(v):
            grid = v.reshape(self.n, width)
        elif width * self.n > 8 * len(v) + 1024:
            return None
        else:
            if self._grid is None:  # each row's cell: its entity's row, its place among the entity's rows
                self._grid = self.codes * width + (np.arange(len(v)) - self._starts[self.codes])
            grid = np.full(self.n * width, np.nan)
            grid[self._grid] = v
            grid = grid.reshape(self.n, width)
        return row_medians(grid)

    def _agg(self, column: str, how: str) -> np.ndarray:
        key = (column, how)
        out = self._aggs.get(key)
        if out is None:
            v = self.values(column)
            if how == "median":
                out = self._grouped_median(v)
                if out is None:
                    out = pd.Series(v).groupby(self.codes).median().reindex(range(self.n)).to_numpy(np.float64)
            elif how == "last":  # the latest non-null row of each entity (rows are in time order)
                ok = np.flatnonzero(~np.isnan(v))
                out = _last_per_code(self.codes[ok], v[ok], self.n)
            else:  # max, min: NaN skipped (fmax/fmin), NaN for an entity without a value
                out = np.full(self.n, np.nan)
                has = self._ends > self._starts
                if has.any():
                    out[has] = {"max": np.fmax, "min": np.fmin}[how].reduceat(v, self._starts[has])
            self._aggs[key] = out
        return out

    def median(self, column: str) -> np.ndarray:
        return self._agg(column, "median")

    def median_where(self, column: str, keep: np.ndarray) -> np.ndarray:
        """Each entity's median of ``column`` over the rows ``keep`` selects (NaN without one)."""
        v = np.where(keep, self.values(column), np.nan)
        out = self._grouped_median(v)
        if out is None:
            out = pd.Series(v).groupby(self.codes).median().reindex(range(self.n)).to_numpy(np.float64, na_value=np.nan)
        return out

    def max(self, column: str) -> np.ndarray:
        return self._agg(column, "max")

    def noise(self, column: str) -> np.ndarray:
        """Each entity's sample-to-sample noise as a standard deviation: the median absolute step
        between consecutive samples over 0.6745·√2 (a Gaussian's), so a level that steps or ramps once
        in the window does not count as noise; NaN with fewer than two samples."""
        key = (column, "noise")
        out = self._aggs.get(key)
        if out is None:
            v = self.values(column)
            step = np.full(len(v), np.nan)
            if len(v) > 1:
                same = self.codes[1:] == self.codes[:-1]
                step[1:] = np.where(same, np.abs(np.diff(v)), np.nan)
            med = self._grouped_median(step)
            if med is None:
                agg = pd.Series(step).groupby(self.codes).median()
                med = agg.reindex(range(self.n)).to_numpy(dtype=np.float64, na_value=np.nan)
            out = med / (0.6745 * np.sqrt(2.0))
            self._aggs[key] = out
        return out

    def min(self, column: str) -> np.ndarray:
        return self._agg(column, "min")

    def last(self, column: str) -> np.ndarray:
        """The latest non-null value of each entity."""
        return self._agg(column, "last")

    def first_ts(self) -> np.ndarray:
        """The ts of each entity's earliest row (NaN for an entity without rows here)."""
        has = self._ends > self._starts
        out = np.full(self.n, np.nan)
        out[has] = self.ts[self._starts[has]]
        return out

    def last_ts(self) -> np.ndarray:
        """The ts of each entity's latest row (NaN for an entity without rows here)."""
        has = self._ends > self._starts
        out = np.full(self.n, np.nan)
        out[has] = self.ts[self._ends[has] - 1]
        return out

    def mean_gap(self) -> np.ndarray:
        """Each entity's mean time between samples here (NaN with fewer than two): its own cadence."""
        count = self._ends - self._starts
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count >= 2, (self.last_ts() - self.first_ts()) / (count - 1), np.nan)

    def span(self, position: int) -> slice:
        """Where one entity's rows are, oldest first, in grouped order (``ts``, ``values(...)``)."""
        return slice(int(self._starts[position]), int(self._ends[position]))

    def per_row(self, per_entity: np.ndarray) -> np.ndarray:
        """An entity-level array spread over the rows (grouped order)."""
        return np.asarray(per_entity)[self.codes]

    def first_ts_where(self, mask: np.ndarray) -> np.ndarray:
        """Per entity, the earliest ts of a row where ``mask`` (in grouped order) holds; NaN if none."""
        return _first_per_code(self.codes[mask], self.ts[mask], self.n)

    def last_ts_where(self, mask: np.ndarray) -> np.ndarray:
        """Per entity, the latest ts of a row where ``mask`` holds; NaN if none."""
        return _last_per_code(self.codes[mask], self.ts[mask], self.n)

    def peer_positions(self, peer_of: dict[str, str]) -> np.ndarray:
        """For each entity, the position of the entity at the other end of its link (the same lane
        for lanes); -1 where the port has no link or the other end did not report."""
        if not self.n:
            return np.zeros(0, dtype=np.int64)
        if not isinstance(self.index, pd.MultiIndex):
            peers = [peer_of.get(p, "") for p in self.index]
            return self.index.get_indexer(pd.Index(peers, dtype=object))
        ports = pd.Index(self.index.levels[0], dtype=object)
        port_code = np.asarray(self.index.codes[0], dtype=np.int64)
        lane = np.asarray(self.index.levels[1], dtype=np.int64)[np.asarray(self.index.codes[1])]
        peer_code = ports.get_indexer(pd.Index([peer_of.get(p, "") for p in ports], dtype=object))[port_code]
        key = port_code * _LANE_SPAN + lane  # ascending: the index is sorted by (port, lane)
        want = peer_code * _LANE_SPAN + lane
        pos = np.minimum(np.searchsorted(key, want), self.n - 1)
        return np.where((peer_code >= 0) & (key[pos] == want), pos, -1)

    def sources(self) -> np.ndarray:
        """Each row's source as an integer code in grouped order (codes follow source names sorted);
        all 0 when the frame has no ``source`` column."""
        if self._src is None:
            if self._parent is not None:
                self._src = self._parent.sources().take(self._take)
            elif "source" in self.frame.columns and self.n:
                codes = (self._factorized("source") if self._factorized else factorize(self.frame["source"]))[0]
                self._src = codes.take(self.rows)
            else:
                self._src = np.zeros(len(self.codes), dtype=np.int64)
        return self._src

    def _one_source(self, valid: np.ndarray) -> np.ndarray:
        """``valid`` narrowed to one source per entity: the source with the most valid samples here
        (ties: the first by name). Two collectors reporting one port (DESIGN §4b duplicate_source)
        each count from their own agent; interleaving their samples would make bogus steps."""
        multi = self._multi_source_rows()
        pick = multi & valid
        if not pick.any():
            return valid
        src = self.sources()
        n_src = int(src.max()) + 1
        keys, counts = np.unique(self.codes[pick] * n_src + src[pick], return_counts=True)
        entity, source = keys // n_src, keys % n_src
        order = np.lexsort((source, -counts, entity))  # per entity: most samples first, then by name
        first = np.ones(len(order), dtype=bool)
        first[1:] = entity[order][1:] != entity[order][:-1]
        primary = np.full(self.n, -1, dtype=np.int64)
        primary[entity[order][first]] = source[order][first]
        return valid & (~multi | (src == primary[self.codes]))

    def _multi_source_rows(self) -> np.ndarray:
        """Per row: its entity is reported by more than one source in these rows (cached)."""
        hit = self._aggs.get(("__multi_source__", ""))
        if hit is None:
            hit = np.zeros(len(self.codes), dtype=bool)
            # a view's entity can have two sources only if it has them in the whole window
            possible = self._parent is None or self._parent._multi_source_rows().any()
            if possible and len(self.codes) > 1:
                src = self.sources()
                change = (src[1:] != src[:-1]) & (self.codes[1:] == self.codes[:-1])
                if change.any():
                    entities = np.zeros(self.n, dtype=bool)
                    entities[self.codes[1:][change]] = True
                    hit = entities[self.codes]
            self._aggs[("__multi_source__", "")] = hit
        return hit

    def steps(self, column: str) -> Steps:
        """Steps of a ``_total`` counter between consecutive non-null samples of each entity, from one
        source per entity (:meth:`_one_source`). A step is unknown (``step`` NaN, ``unknown`` True)
        when the counter fell (a reset: agent restart, module reset, or a wrap: the step's true size
        cannot be told) or when its later sample sits at a counter maximum (:data:`SATURATED`: a
        stuck counter is neither quiet nor a burst). Null samples are skipped."""
        hit = self._steps.get(column)
        if hit is None:
            v = self.values(column)
            valid = self._one_source(~np.isnan(v))
            every = bool(valid.all())
            c, t, x = (self.codes, self.ts, v) if every else (self.codes[valid], self.ts[valid], v[valid])
            if len(x) < 2:
                empty = np.zeros(0)
                no = np.zeros(0, dtype=bool)
                hit = Steps(np.zeros(0, dtype=np.int64), empty, empty, empty, no, c, no)
            else:
                before, codes, ts, dt = self._pairs() if every else _pairs(c, t)
                d = np.diff(x).take(before)
                fell = d < 0
                bad = fell
                if np.isin(x, SATURATED).any():  # rare: only then look for the later samples at a maximum
                    bad = fell | np.isin(x.take(before + 1), SATURATED)
                hit = Steps(codes, ts, np.where(bad, np.nan, d) if bad.any() else d, dt, fell, c, bad)
            self._steps[column] = hit
        return hit

    def _pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:func:`_pairs` of all these rows, shared by every counter without a null or a second source
        (the usual case: the pairs of consecutive samples are then the same for each)."""
        if self._pair_cache is None:
            self._pair_cache = _pairs(self.codes, self.ts)
        return self._pair_cache

    def first_rate_at_least(self, column: str, per_s: float) -> np.ndarray:
        """Per entity, the ts of the first sample at which counter ``column`` had risen at
        ≥ ``per_s`` a second since the sample before; NaN if it never did."""
        st = self.steps(column)
        with np.errstate(divide="ignore", invalid="ignore"):
            fast = (st.dt > 0) & (st.step / st.dt >= per_s)
        return _first_per_code(st.codes[fast], st.ts[fast], self.n)

    def increase(self, column: str) -> Increase:
        """Increase of a ``_total`` counter per entity over these rows; NaN (unknown) for an entity
        with fewer than two samples or with an unknown step here (reset, wrap or saturation: see
        :meth:`steps`), so that neither a quiet nor a burst is read from a counter we cannot trust."""
        st = self.steps(column)
        shared = self._pair_cache is not None and st.dt is self._pair_cache[3]  # every row, one source
        hit = self._aggs.get(("__samples_span__", "")) if shared else None
        if hit is None:
            samples = np.bincount(st.sampled, minlength=self.n)
            span = np.bincount(st.codes, weights=st.dt, minlength=self.n).astype(np.float64)
            if shared:  # the same for every counter read from all rows: counted once
                self._aggs[("__samples_span__", "")] = (samples, span)
        else:
            samples, span = hit
        inc = np.bincount(st.codes, weights=np.nan_to_num(st.step), minlength=self.n).astype(np.float64)
        if st.unknown.any():
            resets = np.bincount(st.codes[st.reset], minlength=self.n)
            unknown = np.bincount(st.codes[st.unknown], minlength=self.n)
        else:
            resets = unknown = np.zeros(self.n, dtype=np.int64)
        up = st.step > 0
        first_up = _first_per_code(st.codes[up], st.ts[up], self.n)
        return Increase(np.where((samples >= 2) & (unknown == 0), inc, np.nan), span, resets, first_up, unknown)


def row_medians(grid: np.ndarray) -> np.ndarray:
    """The median of each row of a 2-D array, NaN skipped (NaN for a row of NaN only): the middle
    of each row sorted. Rows of up to :data:`_NETWORK_MAX` columns are sorted by a sorting network,
    column against column (a few dozen vector min/max over all rows: several times faster than
    ``np.sort(axis=1)``, whose cost is per row); NaN stands as +inf there and is counted apart."""
    n, width = grid.shape
    if not n or not width:
        return np.full(n, np.nan)
    nan = np.isnan(grid)
    any_nan = bool(nan.any())
    if width <= _NETWORK_MAX:
        cols = list((np.where(nan, np.inf, grid) if any_nan else grid).T.copy())
        for i, j in _network(width):
            lo = np.minimum(cols[i], cols[j])
            np.maximum(cols[i], cols[j], out=cols[j])
            cols[i] = lo
        if not any_nan:
            return (cols[(width - 1) // 2] + cols[width // 2]) / 2
        ordered = np.stack(cols, axis=1)
    else:
        ordered = np.sort(grid, axis=1)  # NaN last
        if not any_nan:
            return (ordered[:, (width - 1) // 2] + ordered[:, width // 2]) / 2
    k = width - nan.sum(axis=1)  # each row's values: the first k of its sorted row
    rows = np.arange(n)
    lo, hi = np.maximum((k - 1) // 2, 0), np.maximum(k // 2, 0)
    return np.where(k > 0, (ordered[rows, lo] + ordered[rows, hi]) / 2, np.nan)


# A network for up to 16 inputs (63 comparators). Measured here on 2026-12-02 over 16,384 rows, it
# beat np.sort(axis=1) at 6, 7, 12 and 13 columns (0.40 against 1.06 ms at 6, 1.8 against 2.8 ms at
# 12); 16 was not measured. Wider rows (1 s scrapes) go to np.sort.
_NETWORK_MAX = 16


@functools.cache
def _network(n: int) -> tuple[tuple[int, int], ...]:
    """Batcher's odd-even merge sort for ``n`` inputs, as (i, j) compare-exchange pairs (i < j); any n
    (tests/detectors/test_keyed_median.py checks every n up to :data:`_NETWORK_MAX` by the 0-1 principle)."""
    pairs: list[tuple[int, int]] = []
    p = 1
    while p < n:
        k = p
        while k >= 1:
            for j in range(k % p, n - k, 2 * k):
                for i in range(min(k, n - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p):
                        pairs.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return tuple(pairs)


def factorize(column: pd.Series, memo: dict[str, Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(column.astype(str), sort=True)``: int64 codes (-1: null) and the sorted keys as an
    object array (looked up one at a time, pandas' Arrow-backed strings are slow). Arrow strings are
    hashed by Arrow's dictionary encoding (about half of pandas' factorize), once per run of equal
    consecutive keys where runs are common: a scrape's rows of one source, or of one port's lanes,
    come together, and comparing neighbours costs a fraction of hashing every row. A column without
    runs (a port frame's ports: one row each per scrape) is encoded whole, without looking for them.
    With ``memo`` (kept by the caller from one tick to the next) the sorted keys of a dictionary equal
    to the last one are reused: a fleet's names are the same from tick to tick."""
    if getattr(column.dtype, "storage", None) == "pyarrow" and len(column) > 1:
        arrow = pa.array(column)
        n = len(arrow)
        heads = None
        probe = min(n - 1, 1024)  # runs or not: the first neighbours tell (either way, the same codes)
        if pc.sum(pc.equal(arrow.slice(1, probe), arrow.slice(0, probe)).fill_null(False)).as_py() * 3 >= probe:
            same = pc.equal(arrow.slice(1), arrow.slice(0, n - 1)).fill_null(False)
            heads = np.flatnonzero(np.r_[True, ~same.to_numpy(zero_copy_only=False)])
            if len(heads) > n // 2:
                heads = None
        values = arrow if heads is None else arrow.take(pa.array(heads))
        if isinstance(values, pa.ChunkedArray):  # a frame from Arrow tables: one dictionary, not one a chunk
            values = values.combine_chunks()
        encoded = pc.dictionary_encode(values)
        last = memo.get("dictionary") if memo is not None else None
        if last is not None and last[0].equals(encoded.dictionary):
            keys, rank = last[1], last[2]
        else:
            # str order, as pandas sorts them: Arrow sorts UTF-8 bytes, which is code point order
            # (Python's), and the keys are unique, so the order is the same as a stable argsort of them
            order = pc.sort_indices(encoded.dictionary).to_numpy()
            keys = np.asarray(encoded.dictionary.take(pa.array(order)).to_pylist(), dtype=object)
            rank = np.empty(len(order) + 1, dtype=np.int64)
            rank[order], rank[-1] = np.arange(len(order)), -1  # a null (index -1) stays -1
            if memo is not None:
                memo["dictionary"] = (encoded.dictionary, keys, rank)
        codes = rank[pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)]
        if heads is not None:
            codes = np.repeat(codes, np.diff(np.r_[heads, n]))
        return codes, keys
    codes, uniques = pd.factorize(column.astype(str), sort=True)
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


class Steps:
    """Consecutive sample pairs of a counter, per entity in time order: ``codes`` (entity), ``ts`` (of
    the later sample), ``step`` (NaN where unknown), ``dt`` seconds between them, ``reset`` (the
    counter fell), ``unknown`` (fell or stuck at a maximum); ``sampled`` holds the entity code of every
    non-null sample used."""

    __slots__ = ("codes", "dt", "reset", "sampled", "step", "ts", "unknown")

    def __init__(self, codes: np.ndarray, ts: np.ndarray, step: np.ndarray, dt: np.ndarray, reset: np.ndarray,
                 sampled: np.ndarray, unknown: np.ndarray | None = None) -> None:  # fmt: skip
        self.codes, self.ts, self.step, self.dt, self.reset, self.sampled = codes, ts, step, dt, reset, sampled
        self.unknown = reset if unknown is None else unknown


def _pairs(codes: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each pair of consecutive samples of an entity (``codes`` sorted, ``ts`` in order within one):
    the earlier sample's position, and the pair's entity, later ts and seconds between them."""
    before = np.flatnonzero(codes[1:] == codes[:-1])
    later = ts.take(before + 1)
    return before, codes.take(before + 1), later, later - ts.take(before)


def first_per_code(codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """The first value of each code in the given order (NaN for a code that does not occur)."""
    return _first_per_code(codes, values, n)


def _first_per_code(codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """The first value of each code in the given order (NaN for a code that does not occur)."""
    out = np.full(n, np.nan)
    if len(codes) and bool(np.all(codes[1:] >= codes[:-1])):  # sorted (grouped order): each run's first
        first = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
        out[codes[first]] = values[first]
    elif len(codes):
        uniq, first = np.unique(codes, return_index=True)
        out[uniq] = values[first]
    return out


def _last_per_code(codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """The last value of each code, ``codes`` sorted (grouped order); NaN for a code that does not occur."""
    out = np.full(n, np.nan)
    if len(codes):
        last = np.flatnonzero(np.r_[codes[1:] != codes[:-1], True])
        out[codes[last]] = values[last]
    return out


class Increase:
    """Per entity: ``total`` increase (NaN with fewer than two samples or an unknown step), ``span``
    seconds covered, ``resets`` seen, ``first_up`` (ts of the first sample that rose; NaN if none) and
    ``unknown`` steps (reset, wrap, saturation)."""

    __slots__ = ("first_up", "resets", "span", "total", "unknown")

    def __init__(self, total: np.ndarray, span: np.ndarray, resets: np.ndarray, first_up: np.ndarray,
                 unknown: np.ndarray | None = None) -> None:  # fmt: skip
        self.total, self.span, self.resets, self.first_up = total, span, resets, first_up
        self.unknown = np.zeros(len(total), dtype=np.int64) if unknown is None else unknown

    def rate(self) -> np.ndarray:
        """Increase per second over the span (NaN where the span is 0)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.span > 0, self.total / self.span, np.nan)


def same_keys(a: pd.Index, b: pd.Index) -> bool:
    """``a`` and ``b`` hold the same keys in the same order, compared by value (a flat Index) or by
    levels and codes (a MultiIndex as :class:`Keyed` builds it, sorted levels)."""
    if len(a) != len(b) or isinstance(a, pd.MultiIndex) != isinstance(b, pd.MultiIndex):
        return False
    if isinstance(a, pd.MultiIndex) and isinstance(b, pd.MultiIndex):
        return a.nlevels == b.nlevels and all(
            np.array_equal(np.asarray(la), np.asarray(lb)) and np.array_equal(ca, cb)
            for la, lb, ca, cb in zip(a.levels, b.levels, a.codes, b.codes, strict=True)
        )
    return bool(np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object)))


def frame_of(window: Window, kind: str) -> pd.DataFrame:
    frame = window.frames.get(kind)
    return frame if frame is not None else pd.DataFrame(columns=["ts", "source", *KEYS[kind]])


def keyed(window: Window, kind: str, since: float | None = None) -> Keyed:
    """The window's rows of ``kind`` grouped by entity (only ts ≥ ``since`` when given); cached."""
    key = ("keyed", kind, since)
    hit = window.cache.get(key)
    if hit is None:
        if since is None:
            hit = Keyed(frame_of(window, kind), KEYS[kind], _factorizer(window, kind))
        else:
            hit = keyed(window, kind).since(since)
        window.cache[key] = hit
    return hit


def peer_positions(window: Window, at: Keyed) -> np.ndarray:
    """``at.peer_positions`` over the topology's links, reused from the last tick for the same entities."""
    memo, key = carried(window), ("peer_positions", tuple(at.index.names))
    last = memo.get(key)
    peer_of = window.topology.port_peer
    if last is not None and last[1] is peer_of and same_keys(last[0], at.index):
        return last[2]
    out = at.peer_positions(peer_of)
    memo[key] = (at.index, peer_of, out)
    return out


def factorized(window: Window, kind: str, column: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`factorize` of one column of the window's frame of ``kind``, once a tick: liveness and
    the grouped views both read each row's source."""
    return _factorizer(window, kind)(column)


def _factorizer(window: Window, kind: str) -> Callable[[str], tuple[np.ndarray, np.ndarray]]:
    """:func:`factorized` for one kind, holding neither the window nor its cache: a Keyed in the
    cache that held them would make a reference cycle, and every tick's frames would then wait for
    the cyclic garbage collector (at 2,048 GPUs scraped every second, a window cut tripled)."""
    done: dict[str, tuple[np.ndarray, np.ndarray]] = window.cache.setdefault(("factorized", kind), {})
    memo = carried(window)
    frame = frame_of(window, kind)
    numbered = window.cache.get((NUMBERS, kind), {})  # names numbered as they arrived (fabricwatch/names.py)

    def get(column: str) -> tuple[np.ndarray, np.ndarray]:
        hit = done.get(column)
        if hit is None:
            if column in numbered:
                numbers, names = numbered[column]
                hit = names.factorize(numbers)
            if hit is None:
                hit = factorize(frame[column], memo.setdefault(("factorized", kind, column), {}))
            done[column] = hit
        return hit

    return get


CARRY = "carried"  # window.cache key of what outlives the tick (:func:`carried`)


def carried(window: Window) -> dict[Any, Any]:
    """Facts derived from one tick's inputs that the next tick may reuse, each stored beside the
    inputs it came from and reused only when they are equal by value (so a hit gives exactly what
    computing afresh would). The stage that owns the detectors hands the same dict to each of its
    windows (:meth:`detectors.stage.Stage1.detect`); a window without one gets an empty dict and
    reuses nothing."""
    return window.cache.setdefault(CARRY, {})


def scrape_interval(window: Window, kind: str) -> float:
    """The data's own scrape interval for ``kind``: the median gap between an entity's samples."""
    key = ("interval", kind)
    if key not in window.cache:
        full = keyed(window, kind)
        gaps = np.diff(full.ts)[full.codes[1:] == full.codes[:-1]] if full.n else np.zeros(0)
        gaps = gaps[gaps > 0]
        window.cache[key] = float(np.median(gaps)) if len(gaps) else float("nan")
    return window.cache[key]


def recent(window: Window, kind: str, recent_s: float) -> Keyed:
    """Rows of the last ``recent_s`` of the window (at least 2.5 scrape intervals, so that a counter
    has two samples even when scraped slowly): what "now" means for gauges and counters."""
    return keyed(window, kind, _recent_start(window, kind, recent_s))


def recent_counters(window: Window, kind: str, recent_s: float) -> Keyed:
    """:func:`recent`, with each entity's span stretched to 2.5 of its *own* scrape intervals where
    that is longer: a counter's rate needs two samples, and one kind mixes cadences (hosts every 5 s,
    leaves every 30 s, spines every 60 s: REALISM.md), so the kind's median interval leaves a slow
    entity one sample, and no rate, in most ticks (issue 9: windows for counter rates hold at least
    two samples of each entity whatever its cadence). Cached."""
    key = ("recent_counters", kind, recent_s)
    hit = window.cache.get(key)
    if hit is None:
        start = _recent_start(window, kind, recent_s)
        full = keyed(window, kind)
        with np.errstate(invalid="ignore"):
            own = window.end - np.minimum(2.5 * full.mean_gap(), window.end - window.start)
            stretched = own < start  # NaN (one sample) compares False
        hit = full.since(np.where(stretched, own, start)) if stretched.any() else recent(window, kind, recent_s)
        window.cache[key] = hit
    return hit


def _recent_start(window: Window, kind: str, recent_s: float) -> float:
    span = recent_s
    interval = scrape_interval(window, kind)
    if np.isfinite(interval):
        span = min(max(span, 2.5 * interval), window.end - window.start)
    return window.end - span


def epoch_seconds(ts: pd.Series) -> np.ndarray:
    """A ts column as float seconds since the epoch (float seconds per the Window contract; a
    datetime column, as DuckDB hands back TIMESTAMPs, is converted rather than misread)."""
    if pd.api.types.is_float_dtype(ts.dtype):
        return ts.to_numpy(dtype=np.float64)
    if pd.api.types.is_datetime64_any_dtype(ts.dtype):
        if getattr(ts.dt, "tz", None) is not None:
            ts = ts.dt.tz_convert("UTC").dt.tz_localize(None)
        return ((ts - pd.Timestamp(0)) / pd.Timedelta(seconds=1)).to_numpy(dtype=np.float64, na_value=np.nan)
    return pd.to_numeric(ts, errors="coerce").to_numpy(dtype=np.float64)


THRESHOLD_COLUMNS = {
    "rx_power_low_alarm_dbm": "dr4_rx_low_alarm_dbm",
    "rx_power_low_warn_dbm": "dr4_rx_low_warn_dbm",
    "tx_power_low_alarm_dbm": "dr4_tx_low_alarm_dbm",
    "tx_power_low_warn_dbm": "dr4_tx_low_warn_dbm",
    "temp_high_alarm_c": "dr4_temp_high_alarm_c",
    "temp_high_warn_c": "dr4_temp_high_warn_c",
    "bias_high_alarm_ma": None,  # bias depends on the laser type: no default, no check without the module's own
    "bias_high_warn_ma": None,
}


def module_thresholds(window: Window, index: pd.Index, config: Any) -> dict[str, np.ndarray]:
    """The module thresholds of each entity of ``index`` (ports, or (port, lane)): the latest the
    port's module reported; where it never did (or sent null), the defaults of its media type
    (``config.media_defaults``, by module column), else the config's 400G-DR4 defaults.
    ``config`` has the ``dr4_*`` fields of :class:`detectors.optical_thresholds.OpticalThresholdsConfig`."""
    reported, media, kinds, spread = _reported_thresholds(window, index)
    by_media: dict[str, dict[str, float]] = getattr(config, "media_defaults", None) or {}
    out = {}
    for column, default_name in THRESHOLD_COLUMNS.items():
        default: Any = getattr(config, default_name) if default_name else np.nan
        if by_media:  # the defaults of the module's media type where the table has them
            table = np.array([by_media.get(str(k), {}).get(column, default) for k in kinds], dtype=np.float64)
            default = table[media]
        per_port = reported[column]
        per_port = np.where(np.isnan(per_port), default, per_port)
        out[column] = per_port[spread]
    return out


def _reported_thresholds(
    window: Window, index: pd.Index
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`module_thresholds` reads of the window's modules, whatever the config: per port of
    ``index`` the thresholds its module last reported (NaN: none), its media code into ``kinds`` (-1:
    no module row, picking the last kind, ""; all 0 without a media column), and each entity's port.
    Cached per window and index: optical_thresholds and optical_trend ask for the same ports."""
    hit = window.cache.get(("module_thresholds", id(index)))
    if hit is not None and hit[0] is index:
        return hit[1]
    mods = window.modules if window.modules is not None else pd.DataFrame()
    last = carried(window).get("module_thresholds")  # the last tick's: the same modules and entities, usually
    if last is not None and same_keys(last[0], index) and last[1].equals(mods):
        window.cache[("module_thresholds", id(index))] = (index, last[2])
        return last[2]
    if isinstance(index, pd.MultiIndex):
        ports, spread = pd.Index(index.levels[0], dtype=object), np.asarray(index.codes[0])
    else:
        ports, spread = pd.Index(index, dtype=object), np.arange(len(index))
    frame = mods
    if len(mods) and "port" in mods.columns:
        if "ts" in mods.columns:
            mods = mods.sort_values("ts", kind="stable")
        latest = mods.drop_duplicates("port", keep="last")
        pos = pd.Index(latest["port"].astype(str), dtype=object).get_indexer(ports)
    else:
        latest, pos = pd.DataFrame(), np.full(len(ports), -1)
    kinds, media = np.array([""], dtype=object), np.zeros(len(ports), dtype=np.int64)
    if "media" in latest.columns:
        codes, kinds = pd.factorize(latest["media"].astype(str))
        media = np.where(pos >= 0, codes[np.maximum(pos, 0)], -1) if len(codes) else media
        kinds = np.append(np.asarray(kinds, dtype=object), "")  # -1 (no module row) picks ""
    reported = {}
    for column in THRESHOLD_COLUMNS:
        per_port = np.full(len(ports), np.nan)
        if column in latest.columns:
            values = pd.to_numeric(latest[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            per_port[pos >= 0] = values[pos[pos >= 0]]
        reported[column] = per_port
    out = (reported, media, kinds, spread)
    window.cache[("module_thresholds", id(index))] = (index, out)
    carried(window)["module_thresholds"] = (index, frame, out)
    return out


def sig(x: Any, digits: int = 4) -> Any:
    """A number rounded to ``digits`` significant digits for evidence (stable JSON); NaN → None."""
    if x is None:
        return None
    if isinstance(x, int | np.integer) and not isinstance(x, bool):
        return int(x)
    x = float(x)
    if not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


def ts_or(x: float, default: float) -> float:
    return float(x) if x is not None and math.isfinite(x) else float(default)


def first_crossing(full: Keyed, column: str, level: np.ndarray, below: bool) -> np.ndarray:
    """Per entity: the earliest ts in ``full`` where ``column`` was below (or at/above) the entity's
    ``level``; NaN when it never was. Gives findings their first_seen."""
    if not full.n:
        return np.full(len(level), np.nan)
    v = full.values(column)
    row_level = full.per_row(level)
    with np.errstate(invalid="ignore"):
        hit = (v < row_level) if below else (v >= row_level)
    return full.first_ts_where(hit)


def lane_findings(
    detector: str,
    symptom: str,
    severity: str,
    at: Keyed,
    mask: np.ndarray,
    metric: str,
    value: np.ndarray,
    first_seen: np.ndarray,
    worst: str = "min",
    reference: tuple[str, np.ndarray] | None = None,
    cause: str | None = None,
) -> list[Finding]:
    """One finding per port from flagged lanes: the worst lane is the evidence, all lanes are listed.

    ``reference`` is (name, per-lane values) shown beside the value, e.g. ("threshold", ...) or
    ("baseline", ...). ``attrs`` carries ``lanes`` (flagged) and ``lanes_total`` (lanes reported).
    """
    flagged = np.flatnonzero(mask)
    if not len(flagged):
        return []
    ports = np.asarray(at.index.get_level_values(0), dtype=object)
    lanes = np.asarray(at.index.get_level_values(1))
    port_code = np.asarray(at.index.codes[0])
    totals = np.bincount(port_code, minlength=len(at.index.levels[0]))  # lanes reported, per port
    last_ts = at.last_ts()
    out: list[Finding] = []
    by_port: dict[str, list[int]] = {}
    for i in flagged:
        by_port.setdefault(str(ports[i]), []).append(int(i))
    for port in sorted(by_port):
        rows = by_port[port]
        pick = min(rows, key=lambda i: value[i]) if worst == "min" else max(rows, key=lambda i: value[i])
        entry: dict[str, Any] = {"metric": metric, "port": port, "lane": int(lanes[pick]), "value": sig(value[pick])}
        if reference is not None:
            entry[reference[0]] = sig(reference[1][pick])
        firsts = [first_seen[i] for i in rows if np.isfinite(first_seen[i])]
        out.append(
            Finding(
                detector=detector,
                symptom=symptom,
                entity="port",
                id=port,
                first_seen=float(min(firsts)) if firsts else float(max(last_ts[i] for i in rows)),
                last_seen=float(max(last_ts[i] for i in rows)),
                severity=severity,
                evidence=(entry,),
                cause=cause,
                score=float(abs(value[pick] - reference[1][pick])) if reference is not None else 1.0,
                attrs={
                    "lanes": sorted(int(lanes[i]) for i in rows),
                    "lanes_total": int(totals[port_code[rows[0]]]),
                    metric: sig(value[pick]),
                },
            )
        )
    return out

"""The window buffer's incremental cut gives exactly the rows, order and types of a cut from scratch."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from fabricwatch.schema import table_schema
from fabricwatch.stream import window as window_module
from fabricwatch.stream.window import WindowBuffer, _ts_seconds, empty_frame
from fabricwatch.topology import generate

SCHEMA = table_schema("switch")


def from_scratch(chunks: list[pa.Table], lo: float, hi: float) -> pd.DataFrame:
    """The definition: every row with lo ≤ ts ≤ hi, stably sorted by ts (ties in arrival order)."""
    lo_us, hi_us = round(lo * 1e6), round(hi * 1e6)
    if not chunks:
        return empty_frame("switch")
    table = pa.concat_tables(chunks)
    ts = table.column("ts").cast(pa.int64())
    table = table.filter(pc.and_(pc.greater_equal(ts, lo_us), pc.less_equal(ts, hi_us)))
    if table.num_rows == 0:
        return empty_frame("switch")
    return _ts_seconds(table.sort_by("ts")).to_pandas()


def chunk(rng: np.random.Generator, now: float, serial: int) -> pa.Table:
    """One ingest segment: most rows near ``now``, some late (a slow or skewed source), some ahead,
    many sharing one ts (one scrape's rows)."""
    n = int(rng.integers(1, 40))
    offsets = rng.choice([0.0, -1.0, -12.0, -45.0, 3.0], size=n, p=[0.6, 0.2, 0.1, 0.05, 0.05])
    ts = ((now + offsets) * 1e6).astype(np.int64)
    return pa.table(
        {
            "ts": pa.array(ts, pa.int64()).cast(pa.timestamp("us")),
            "source": [f"leaf{int(i) % 3}" for i in range(n)],
            "device": [f"leaf{int(i) % 3}" for i in range(n)],
            "asic_temp_c": rng.normal(60, 5, n),
            "fan_min_rpm": pa.nulls(n, pa.float64()),
            "psu_ok": np.ones(n, np.int64),
            "seq": np.arange(serial * 100, serial * 100 + n, dtype=np.int64),
        },
        schema=SCHEMA,
    )


@pytest.mark.parametrize("seed", range(8))
def test_incremental_cut_matches_a_cut_from_scratch(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    merges = []
    merge = window_module._merge
    monkeypatch.setattr(window_module, "_merge", lambda *a: merges.append(1) or merge(*a))
    rng = np.random.default_rng(seed)
    buffer = WindowBuffer(generate(16, 4, 8))
    kept: list[tuple[int, pa.Table]] = []
    now, span = 1_000.0, 60.0
    for tick in range(40):
        for _ in range(int(rng.integers(0, 4))):  # a tick with no data at all happens too
            now += float(rng.uniform(0.5, 4.0))
            table = chunk(rng, now, len(kept))
            buffer.add("switch", table)
            kept.append((pc.max(table.column("ts").cast(pa.int64())).as_py(), table))
        if tick % 7 == 6:  # the span widens (a slower cadence seen) and narrows again
            span = float(rng.choice([30.0, 60.0, 150.0]))
        end = now - float(rng.choice([0.0, 2.0]))
        got = buffer.frame("switch", end - span, end)
        want = from_scratch([t for n, t in kept if n >= round((end - span) * 1e6)], end - span, end)
        pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_exact=True)
        before = end - span - 10.0
        buffer.evict(before)
        while kept and kept[0][0] < round(before * 1e6):  # eviction stops at the first recent chunk
            kept.pop(0)
    assert len(merges) >= 20  # most cuts were incremental: the comparison above tested them


@pytest.mark.parametrize("seed", range(4))
def test_cuts_under_changing_clock_corrections_match_a_cut_from_scratch(seed: int) -> None:
    """Each source's correction is taken out of all its rows at each cut: a change moves the rows that
    were already buffered too, in their order (a correction taken out as rows arrived left the rows
    from before it a minute ahead of the later ones). A cut under other corrections is made afresh."""
    rng = np.random.default_rng(100 + seed)
    buffer = WindowBuffer(generate(16, 4, 8))
    chunks: list[pa.Table] = []
    now, span, corrections = 1_000.0, 60.0, {}
    for tick in range(40):
        for _ in range(int(rng.integers(1, 4))):
            now += float(rng.uniform(0.5, 4.0))
            chunks.append(chunk(rng, now, len(chunks)))
            buffer.add("switch", chunks[-1])
        if tick % 5 == 4:  # leaf1's clock is found 45 s fast, then 12 s slow, then right
            corrections = {"leaf1": float(rng.choice([45.0, -12.0, 0.0]))}
        shifts = window_module.shifts_of(corrections)
        got = buffer.window(now - span, now, corrections, kinds={"switch"}).frames["switch"]
        moved = [window_module.corrected(t, shifts) for t in chunks]
        want = from_scratch(moved, now - span, now)
        pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_exact=True)


def test_windows_carry_each_rows_name_number_beside_the_schemas_columns() -> None:
    """Names are numbered as rows arrive (fabricwatch/names.py): the frame holds the schema's columns
    only, and grouping a window by the numbers gives what hashing its names gives."""
    from fabricwatch.detectors.frames import factorize, keyed
    from fabricwatch.names import NUMBERS

    rng = np.random.default_rng(5)
    buffer = WindowBuffer(generate(16, 4, 8))
    for k in range(30):
        buffer.add("switch", chunk(rng, 1_000.0 + k, k))
    window = buffer.window(1_005.0, 1_030.0, kinds={"switch"})
    frame = window.frames["switch"]
    assert list(frame.columns) == list(empty_frame("switch").columns)
    numbered = window.cache[(NUMBERS, "switch")]
    assert set(numbered) == {"device", "source"}
    for column, (numbers, names) in numbered.items():
        codes, keys = names.factorize(numbers)
        want_codes, want_keys = factorize(frame[column])
        np.testing.assert_array_equal(codes, want_codes)
        assert keys.tolist() == want_keys.tolist()
    plain = keyed(type(window)(window.start, window.end, window.frames, window.modules, window.topology), "switch")
    fast = keyed(window, "switch")
    np.testing.assert_array_equal(fast.codes, plain.codes)
    assert fast.names == plain.names

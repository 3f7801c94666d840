"""Keyed's grouped median (sorted NaN-padded rows, a sorting network for narrow rows) equals pandas'
groupby median exactly."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from fabricwatch.detectors.frames import _NETWORK_MAX, Keyed, _network, row_medians


@pytest.mark.parametrize("seed", range(4))
def test_grouped_median_equals_pandas_with_gaps_ties_and_uneven_counts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    checked = 0
    for _ in range(50):
        rows = int(rng.integers(1, 400))
        entity = rng.integers(0, int(rng.integers(1, 50)), rows)
        frame = pd.DataFrame(
            {"ts": np.sort(rng.uniform(0, 100, rows)), "port": [f"p{e}" for e in entity], "v": rng.normal(size=rows)}
        )
        frame.loc[rng.random(rows) < 0.2, "v"] = np.nan  # nulls: each entity its own count
        frame["v"] = np.round(frame["v"], 1)  # ties
        keyed = Keyed(frame, ("port",))
        got = keyed._grouped_median(keyed.values("v"))
        if got is None:  # one entity with far more rows: the caller falls back to pandas
            continue
        want = pd.Series(keyed.values("v")).groupby(keyed.codes).median().reindex(range(keyed.n)).to_numpy()
        np.testing.assert_array_equal(got, want)
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("n", range(2, _NETWORK_MAX + 1))
def test_the_sorting_network_sorts_every_zero_one_input(n: int) -> None:
    """0-1 principle (Knuth 5.3.4): a comparator network that sorts every 0/1 input sorts every input."""
    bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
    cols = list(bits.T.copy())
    for i, j in _network(n):
        assert i < j
        cols[i], cols[j] = np.minimum(cols[i], cols[j]), np.maximum(cols[i], cols[j])
    np.testing.assert_array_equal(np.stack(cols, axis=1), np.sort(bits, axis=1))


@pytest.mark.parametrize("width", [1, 2, 3, 5, 6, 7, 12, 16, 17, 31])
def test_row_medians_equal_numpy_with_nan_inf_and_ties(width: int) -> None:
    rng = np.random.default_rng(width)
    grid = np.round(rng.normal(size=(500, width)), 1)  # ties
    grid[rng.random(grid.shape) < 0.2] = np.nan
    grid[rng.random(grid.shape) < 0.03] = np.inf
    grid[rng.random(grid.shape) < 0.03] = -np.inf
    grid[:3] = np.nan  # rows without a value
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows
        want = np.nanmedian(grid, axis=1)
    np.testing.assert_array_equal(row_medians(grid), want)
    full = np.where(np.isnan(grid), 0.5, grid)  # no NaN: the middle columns
    with np.errstate(invalid="ignore"):  # inf and -inf in the middle: NaN either way
        np.testing.assert_array_equal(row_medians(full), np.median(full, axis=1))


@pytest.mark.parametrize("lanes", [(0, 1, 2, 3), (0, 1, 2, 3, 5), (1, 2, 3)])
def test_lane_entities_and_medians_equal_pandas_with_regular_and_irregular_lanes(lanes: tuple[int, ...]) -> None:
    """Every port with lanes 0..n-1 takes a shortcut to its codes; a port with a lane missing or
    extra does not. Both give the entities and medians a groupby gives."""
    rng = np.random.default_rng(len(lanes))
    rows = []
    for t in range(6):
        for p in range(5):
            own = (0, 1, 2, 3) if p != 2 else lanes  # port p2's lanes differ in two of the cases
            rows += [{"ts": float(t), "port": f"p{p}", "lane": lane, "v": float(rng.normal())} for lane in own]
    frame = pd.DataFrame(rows).astype({"port": "str"})
    keyed = Keyed(frame, ("port", "lane"))
    want = frame.groupby(["port", "lane"])["v"].median()
    assert list(keyed.index) == list(want.index)
    np.testing.assert_array_equal(keyed.median("v"), want.to_numpy())

"""Keyed's grouped median (sorted NaN-padded rows) equals pandas' groupby median exactly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fabricwatch.detectors.frames import Keyed


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

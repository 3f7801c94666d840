"""frames.factorize (run-wise hashing of Arrow string keys) gives pandas' sorted factorisation exactly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from fabricwatch.detectors.frames import factorize
from fabricwatch.names import NULL, UNNUMBERED, NameCodes

KEYS = np.array(["a", "b", "B", "é", "a1", "leaf0-0:p10", "leaf0-0:p2", "", "node000/gpu5"], dtype=object)


def frames(seed: int) -> list[pd.Series]:
    """Keys in runs of 1-5 (as a scrape's rows come), with a null now and then, in every string storage
    a window may hold: object, pandas' Arrow-backed str, and Arrow tables of several chunks."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(40):
        n = int(rng.integers(0, 40))
        values = list(np.repeat(KEYS[rng.integers(0, len(KEYS), n)], rng.integers(1, 6, n)))
        if values and rng.random() < 0.3:
            values[int(rng.integers(0, len(values)))] = None
        out += [pd.Series(values, dtype=object), pd.Series(values, dtype="str")]
        cut = len(values) // 2
        chunked = pa.table({"k": pa.chunked_array([values[:cut], values[cut:]], type=pa.string())}).to_pandas()
        out.append(chunked["k"])
    return out


@pytest.mark.parametrize("seed", range(3))
def test_factorize_equals_pandas_sorted_factorize(seed: int) -> None:
    for column in frames(seed):
        codes, keys = factorize(column)
        want_codes, want_keys = pd.factorize(column.astype(str), sort=True)
        np.testing.assert_array_equal(codes, want_codes)
        assert codes.dtype == np.int64 and keys.dtype == object
        assert keys.tolist() == list(want_keys)


@pytest.mark.parametrize("seed", range(3))
def test_factorize_without_runs_equals_pandas_sorted_factorize(seed: int) -> None:
    """Keys that rarely repeat their neighbour (a port frame: one row per port a scrape) take the path
    that encodes the column whole; a long column with short runs after a run-free start, the other."""
    rng = np.random.default_rng(seed)
    names = np.array([f"leaf{i % 7}-0:p{i}" for i in range(3000)] + ["é", "B", "b", ""], dtype=object)
    for n in (2, 50, 1500, 6000):
        values = list(names[rng.integers(0, len(names), n)])
        if rng.random() < 0.5:
            values[int(rng.integers(0, n))] = None
        mixed = values + list(np.repeat(names[rng.integers(0, len(names), n)], 3))  # runs after the probe
        for keys in (values, mixed):
            for column in (
                pd.Series(keys, dtype="str"),
                pa.table({"k": pa.chunked_array([keys[: n // 2], keys[n // 2 :]], type=pa.string())}).to_pandas()["k"],
            ):
                codes, uniques = factorize(column)
                want_codes, want_keys = pd.factorize(column.astype(str), sort=True)
                np.testing.assert_array_equal(codes, want_codes)
                assert uniques.tolist() == list(want_keys)


@pytest.mark.parametrize("seed", range(3))
def test_names_numbered_on_arrival_factorize_as_the_window_would(seed: int) -> None:
    """fabricwatch/names.py: numbers given batch by batch, then a window's rows grouped by number, give
    what hashing the window's names gives, whatever names arrived before or in between."""
    names = NameCodes()
    for column in frames(seed):
        values = column.astype(object).where(column.notna(), None).tolist()
        numbers = names.encode(pa.array(values, pa.string())).to_numpy()
        got = names.factorize(numbers)
        assert got is not None
        want_codes, want_keys = factorize(column)
        np.testing.assert_array_equal(got[0], want_codes)
        assert got[1].tolist() == want_keys.tolist()


def test_names_past_the_limit_are_grouped_by_hashing() -> None:
    """A registry full of names numbers no more: a window holding an unnumbered name is hashed."""
    names = NameCodes(limit=2)
    numbers = names.encode(pa.array(["a", "b", None, "c", "a"])).to_numpy()
    assert numbers.tolist() == [0, 1, NULL, UNNUMBERED, 0]
    assert names.factorize(numbers) is None
    codes, keys = names.factorize(numbers[[0, 1, 2, 4]])
    assert codes.tolist() == [0, 1, -1, 0] and keys.tolist() == ["a", "b"]


def test_a_batch_with_the_last_batchs_names_reuses_their_numbers() -> None:
    """Names compared with a recent batch's rather than looked up must still number each name as its own."""
    names = NameCodes()
    first = names.encode(pa.array(["p1", "p2", "p1"])).to_numpy()
    again = names.encode(pa.array(["p1", "p2", "p2"])).to_numpy()
    other = names.encode(pa.array(["p2", "p3", "p3"])).to_numpy()  # as many names, not the same ones
    assert first.tolist() == [0, 1, 0] and again.tolist() == [0, 1, 1] and other.tolist() == [1, 2, 2]
    assert names.factorize(np.r_[first, other])[1].tolist() == ["p1", "p2", "p3"]

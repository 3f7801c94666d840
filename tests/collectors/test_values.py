"""Number reading and unit conversion shared by the parsers."""

from __future__ import annotations

import math

import pytest

from fabricwatch.collectors.values import LOS_DBM, integer, mw_to_dbm, number


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("27 C", 27.0),  # nvidia-smi unit suffix
        ("67.03 W", 67.03),
        ("-14.05 dBm --", -14.05),  # NX-OS alarm flag after the unit
        ("N/A", None),
        ("[Not Supported]", None),  # nvidia-smi's bracketed status
        ("0.0000 mW / -inf dBm", 0.0),  # the first number is the reading
        ("-inf", None),
        ("", None),
        (None, None),
        (True, None),  # a boolean is not a reading
        (float("nan"), None),
    ],
)
def test_number(text, expected):
    assert number(text) == expected


def test_integer_refuses_fractions():
    assert integer("4000") == 4000
    assert integer(12.0) == 12
    assert integer("12.5") is None
    assert integer("N/A") is None


def test_mw_to_dbm_is_exact_and_zero_is_loss_of_light():
    assert mw_to_dbm(1.0) == 0.0
    assert mw_to_dbm(0.5) == pytest.approx(-3.0103, abs=1e-4)
    assert mw_to_dbm(0.0001) == pytest.approx(-40.0)
    assert mw_to_dbm(0.0) == LOS_DBM == -40.0  # a measured zero: below the register's 0.1 µW
    assert mw_to_dbm(None) is None  # not reported: null, never -40
    assert math.isclose(10 ** (mw_to_dbm(0.7456) / 10), 0.7456)

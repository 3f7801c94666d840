"""The univariate streaming detector: no look-ahead, scores in [0, 1], surprises score above routine."""

from __future__ import annotations

import numpy as np
import pytest

from fabricwatch.detectors.series import SeriesConfig, SeriesDetector, log_likelihood, score_series


def _daily(n: int = 2000, seed: int = 7) -> np.ndarray:
    """A noisy 288-sample daily cycle, the shape of most 5-minute operational metrics."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 50 + 10 * np.sin(2 * np.pi * t / 288) + rng.normal(0, 1.0, n)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cut", [1, 9, 300, 777, 1499])
def test_prefix_scores_equal_the_prefix_of_the_scores(cut):
    values = _daily(1500)
    values[1200:1210] += 25  # an anomaly after some cuts, so the state they carry differs
    whole = score_series(values)
    assert np.array_equal(score_series(values[:cut]), whole[:cut])


@pytest.mark.timeout(60)
def test_scores_lie_in_unit_interval_on_awkward_series():
    rng = np.random.default_rng(1)
    series = {
        "flatline": np.full(600, 3.0),
        "square": np.where((np.arange(600) // 50) % 2 == 0, 0.0, 1.0),
        "huge": rng.normal(1e12, 1e9, 600),
        "tiny": rng.normal(0, 1e-12, 600),
        "steps": np.repeat(rng.integers(0, 5, 60), 10).astype(float),
    }
    for name, values in series.items():
        scores = score_series(values)
        assert scores.shape == values.shape, name
        assert np.all((scores >= 0) & (scores <= 1)), name


@pytest.mark.timeout(60)
def test_a_level_shift_scores_above_everything_routine_before_it():
    values = _daily(2000)
    values[1600:] -= 15  # a drop that stays: the kind of fault a fixed threshold tuned to the past misses
    scores = score_series(values)
    routine = scores[400:1600].max()
    assert scores[1600:1620].max() > routine


@pytest.mark.timeout(60)
def test_a_flatline_is_quiet_and_a_spike_after_it_is_an_anomaly():
    values = np.full(800, 10.0)
    values[700] = 11.0
    scores = score_series(values)
    assert scores[:700].max() < 0.05  # log-likelihood of an unremarkable raw score is 0.03
    assert scores[700] == 1.0  # a constant series that changes leaves the range seen so far


def test_log_likelihood_scale():
    assert log_likelihood(0.5) == pytest.approx(0.0301, abs=1e-3)
    assert log_likelihood(1 - 1e-5) == pytest.approx(0.5, abs=1e-6)
    assert log_likelihood(1.0) == 1.0


def test_config_rejects_unknown_keys_and_bad_numbers():
    import msgspec

    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"embed": 0}, SeriesConfig)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"no_such_key": 1}, SeriesConfig)
    assert SeriesDetector(SeriesConfig(embed=4)).config.embed == 4


@pytest.mark.timeout(60)
def test_ring_buffers_wrap_without_changing_the_no_look_ahead_property():
    """Small windows so that every ring buffer (and the periodic re-sum) wraps many times."""
    config = SeriesConfig(gauss_window=16, reference_size=40, calibration=20, long_window=64, learning=32)
    values = _daily(900)
    values[700] += 30
    whole = score_series(values, config)
    assert np.array_equal(score_series(values[:650], config), whole[:650])
    assert np.all((whole >= 0) & (whole <= 1)) and whole[700] == 1.0


def test_snapshot_restore_resumes_the_same_scores():
    import json

    values = _daily(700)
    values[650] -= 20
    whole = score_series(values)
    detector = SeriesDetector()
    first = [detector.update(float(v)) for v in values[:400]]
    state = json.loads(json.dumps(detector.snapshot()))  # survives a JSON round trip
    resumed = SeriesDetector.restore(state)
    rest = [resumed.update(float(v)) for v in values[400:]]
    assert np.array_equal(np.array(first + rest), whole)
    empty = SeriesDetector.restore(json.loads(json.dumps(SeriesDetector().snapshot())))
    assert empty.update(1.0) == SeriesDetector().update(1.0)

"""The simulator's physical building blocks, checked against their definitions."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fabricwatch.collectors.sim import optics
from fabricwatch.collectors.sim.job import TrainingJob
from fabricwatch.collectors.sim.simulator import _Counter, _lane_mean, _lane_min
from fabricwatch.collectors.sim.streams import Streams, _invert_small, poisson
from fabricwatch.collectors.sim.thermal import SW_THERMAL, GpuThermal


def exact_codeword_failure(ber: float) -> float:
    p = 1 - (1 - ber) ** 10
    return sum(math.comb(544, k) * p**k * (1 - p) ** (544 - k) for k in range(16, 545))


@pytest.mark.parametrize("ber", [2e-5, 1e-4, 2.4e-4, 5e-4, 1e-3, 3e-3, 1e-2])
def test_rs544_codeword_failure_matches_the_binomial_tail(ber) -> None:
    assert optics.codeword_failure(np.array([ber]))[0] == pytest.approx(exact_codeword_failure(ber), rel=1e-6)


def test_fec_limit_is_where_uncorrectables_begin() -> None:
    per_second = optics.codeword_failure(np.array([1e-5, 2.4e-4, 5e-4, 1e-3])) * optics.CODEWORDS_PER_S
    assert per_second[0] == 0.0  # far below: nothing
    assert per_second[1] < 1e-3  # at the 2.4e-4 limit: less than one a quarter of an hour
    assert 0.5 < per_second[2] < 50  # just above: a few per second
    assert per_second[3] > 1000  # 1e-3: thousands per second
    assert optics.codeword_failure(np.array([0.3]))[0] == 1.0


def test_waterfall_reaches_the_fec_limit_at_the_lanes_sensitivity() -> None:
    sens = np.array([-9.0, -9.0, -9.0, -9.0])
    ber = optics.waterfall_ber(np.array([-9.0, -8.0, -7.0, 0.0]), sens)
    assert ber[0] == pytest.approx(optics.FEC_LIMIT_BER, rel=1e-6)
    assert 1.0 < np.log10(ber[0] / ber[1]) < 2.5  # ~1.5 decades per dB near the threshold
    assert ber[2] < ber[1] and ber[3] == 0.0  # far above sensitivity only the floor remains


def test_waterfall_skips_no_lane_within_reach_of_the_negligible_q() -> None:
    """Lanes on either side of the q = 9 cut, alone (the shortcut's case) or among far ones: each the
    BER of the formula, 0 where q is 9 or more."""
    sens = -9.0
    cut = sens + 10.0 * math.log10(optics._Q_NEGLIGIBLE / optics.Q_AT_SENSITIVITY)
    for rx in (cut - 1e-9, cut, cut + 1e-9, cut + 1e-5, cut - 0.5, cut + 0.5):
        for lanes in (np.array([rx]), np.array([0.0, rx, 0.0])):
            got = optics.waterfall_ber(lanes, np.full(lanes.size, sens))
            q = optics.Q_AT_SENSITIVITY * np.power(10.0, (lanes - sens) / 10.0)
            want = [0.75 * math.erfc(x / math.sqrt(2.0)) if x < optics._Q_NEGLIGIBLE else 0.0 for x in q.tolist()]
            assert got.tolist() == want


def test_dom_floors_loss_of_light_at_minus_40_dbm() -> None:
    read = optics.dom_reading_dbm(np.array([-60.0, -39.9, -3.0]), np.array([0.05, -0.2, 0.01]))
    assert read.tolist() == [-40.0, -40.0, pytest.approx(-2.99)]


def test_bias_rises_with_temperature_at_constant_power() -> None:
    bias = optics.bias_ma(
        np.array([1.26, 1.26, 1.26]), np.array([40.0, 50.0, 70.0]), np.full(3, 10.0), np.full(3, 0.036)
    )
    assert bias[0] < bias[1] < bias[2]
    assert bias[1] == pytest.approx(10.0 + 1.26 / 0.036)


def test_job_integral_is_exact_and_additive() -> None:
    job = TrainingJob(np.random.default_rng(3))
    whole = job.comm_seconds(0.0, 100 * job.period)
    assert whole == pytest.approx(100 * job.period * job.comm)
    cuts = np.linspace(0.0, 37.3, 17)
    parts = sum(job.comm_seconds(a, b) for a, b in itertools.pairwise(cuts))
    assert parts == pytest.approx(job.comm_seconds(0.0, 37.3), abs=1e-9)
    t = np.arange(0.0, 40.0, 0.001)
    numeric = sum(job.comm_now(x) for x in t) * 0.001
    assert numeric == pytest.approx(job.comm_seconds(0.0, 40.0), abs=0.01)


def test_counters_carry_fractions_exactly() -> None:
    amounts = np.random.default_rng(2).integers(0, 40, (500, 3)) / 8.0  # eighths: exact in binary
    counter = _Counter(np.array([10.0, 0.0, 5.0]))
    increments = sum(counter.add(a) for a in amounts)
    assert counter.value.tolist() == (np.array([10, 0, 5]) + np.floor(amounts.sum(axis=0))).tolist()
    assert increments.tolist() == np.floor(amounts.sum(axis=0)).astype(int).tolist()


def test_lane_mean_and_min_are_numpys_to_the_bit() -> None:
    gen = np.random.default_rng(3)
    for scale in (1e-12, 1e-7, 1.0, 1e6):
        lanes = np.exp(gen.normal(0.0, 4.0, 4 * 5000)) * scale * gen.choice([1.0, -1.0], 4 * 5000)
        assert np.array_equal(_lane_mean(lanes), lanes.reshape(-1, 4).mean(axis=1))
        assert np.array_equal(_lane_min(lanes), lanes.reshape(-1, 4).min(axis=1))


def test_poisson_draws_depend_only_on_each_elements_mean() -> None:
    streams = Streams(9)
    lam = np.array([0.0, 0.5, 3.0, 20.0, 40.0, 1e6])
    other = lam.copy()
    other[2] = 1e4  # change one element's mean
    a = poisson(lam, streams.at(4, "x"))
    b = poisson(other, streams.at(4, "x"))
    assert a[0] == 0
    assert np.array_equal(np.delete(a, 2), np.delete(b, 2))


def _inverted(lam: float, u: float) -> int:
    """The Poisson CDF inverted for one element, term by term (what streams._invert_small vectorises)."""
    p = cdf = math.exp(-lam)
    n = 0
    while u > cdf and n < 200:
        n += 1
        p = p * lam / n
        cdf = cdf + p
    return n


def test_poisson_small_means_are_the_inversion_of_each_element() -> None:
    gen = np.random.default_rng(5)
    lam = np.concatenate([gen.uniform(0.0, 29.9, 3000), gen.exponential(0.01, 500), np.full(50, 12.5)])
    u = gen.random(lam.size)
    u[:40] = 1.0 - 1e-16 * gen.random(40)  # beyond the last partial sum: capped at 200
    got = _invert_small(lam, u)
    assert got.tolist() == [_inverted(a, b) for a, b in zip(lam.tolist(), u.tolist(), strict=True)]
    assert got[:40].max() == 200


@pytest.mark.parametrize("lam", [0.2, 3.0, 25.0, 1000.0])
def test_poisson_moments(lam) -> None:
    x = poisson(np.full(200_000, lam), Streams(1).at(0, "moments"))
    assert x.mean() == pytest.approx(lam, rel=0.02)
    assert x.var() == pytest.approx(lam, rel=0.05)


def test_thermal_throttling_holds_a_hot_gpu_near_the_limit() -> None:
    gpus = GpuThermal(2, 1, np.zeros(2, dtype=np.int64), np.random.default_rng(0))
    coolant = np.array([35.0, 35.0])
    for _ in range(60):
        readings, _ = gpus.step(
            dt=5.0,
            coolant=coolant,
            comm_recent=0.0,
            comm_interval=0.3,
            r_mult=np.ones(2),
            r_extra=np.array([0.0, 30.0 / 600.0]),  # the second GPU runs 30 °C hotter at the same load
            npo_coupling=np.zeros(2),
            noise=np.random.default_rng(1),
        )
    assert readings.temp_c[0] < 80 and not readings.throttle_mask[0] & SW_THERMAL
    assert 85 <= readings.temp_c[1] <= 87 and readings.throttle_mask[1] & SW_THERMAL
    assert readings.power_w[1] < readings.power_w[0] and readings.sm_clock_mhz[1] < readings.sm_clock_mhz[0]

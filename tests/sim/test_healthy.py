"""A healthy 20-minute run of 128 GPUs stays clear of every alarm threshold, yet is not uniform."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fabricwatch.collectors.sim.thermal import HW_SLOWDOWN, HW_THERMAL, SW_THERMAL
from tests.sim.helpers import frames, healthy

MINUTES = 20


@pytest.fixture(scope="module")
def run20() -> dict[str, pd.DataFrame]:
    return frames(healthy(128, MINUTES * 12 + 1, seed=2))


def test_gpus_stay_cool_and_unthrottled(run20) -> None:
    gpu = run20["gpu"]
    assert gpu["temp_c"].max() < 85
    assert not (gpu["throttle_mask"] & (SW_THERMAL | HW_THERMAL | HW_SLOWDOWN)).any()
    assert gpu["xid"].eq(0).all()
    assert gpu.groupby("device")["ecc_dbe_total"].agg(lambda s: s.iloc[-1] - s.iloc[0]).eq(0).all()


def test_optics_stay_inside_their_modules_thresholds(run20) -> None:
    modules = run20["module"].drop_duplicates("port").drop(columns=["ts", "source", "seq"]).set_index("port")
    optical = run20["optical"].join(modules, on="port")
    assert (optical.rx_power_dbm > optical.rx_power_low_warn_dbm).all()
    assert (optical.rx_power_dbm < optical.rx_power_high_alarm_dbm).all()
    assert (optical.tx_power_dbm > optical.tx_power_low_warn_dbm).all()
    assert (optical.bias_ma < optical.bias_high_warn_ma).all()
    assert (optical.module_temp_c < optical.temp_high_warn_c).all()


def test_links_stay_up_and_inside_the_fec(run20) -> None:
    port = run20["port"].sort_values("ts")
    assert port["state"].eq(1).all() and port["pre_fec_ber"].notna().all()
    assert port["pre_fec_ber"].max() <= 1e-5
    grew = port.groupby("port")[["fec_uncorrectable_total", "rx_crc_errors_total", "link_down_total", "tx_drops_total"]]
    assert (grew.last() - grew.first()).eq(0).all().all()


def test_healthy_data_has_spread_and_outliers_that_are_not_faults(run20) -> None:
    gpu, port = run20["gpu"], run20["port"]
    assert gpu.groupby("device")["temp_c"].mean().agg(np.ptp) > 5  # per-GPU thermal spread
    assert (gpu["throttle_mask"] & 0x4).any()  # a few GPUs touch their power cap in compute phases
    ber = port["pre_fec_ber"]
    assert np.log10(ber.max() / ber.min()) > 2  # BER floors span decades across lanes
    assert port["queue_depth_bytes"].max() > 100e3  # microbursts
    ecn = port.groupby("port")["ecn_marked_total"].agg(lambda s: s.iloc[-1] - s.iloc[0])
    assert ecn.gt(0).any() and ecn.max() > 10 * max(ecn.median(), 1)  # a few hot ECMP paths

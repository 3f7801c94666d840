"""Each detector fires on its signature and stays quiet on healthy data (noise, spread, outliers).

One row per scenario: which detector, a comment, how the healthy timeline is edited, and exactly
which (symptom, entity id) findings the detector must report at the last tick. Stateful detectors
are fed every tick from the first, so their baselines are learnt as they would be in a replay.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from fabricwatch import topology
from fabricwatch.detectors.base import detector_class
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.gpu_xid import READINGS, GpuXid
from fabricwatch.records import Finding, Window
from tests.detectors.synth import T0, Timeline

TOPO = topology.generate(128, rails=8, gpus_per_node=8)
GPU = "node002/gpu1"
GPU_PORT = "node002/gpu1:p0"
HOST = TOPO.port_link[GPU_PORT]  # node002/gpu1:p0 <-> leaf1-0:p02
LEAF_PORT = TOPO.port_peer[GPU_PORT]
FAB = TOPO.links[200]  # leaf4-0:p72 <-> spine00:p36
BYTES_PER_S = 400e9 / 8
LOOP0 = TOPO.gpus_of_loop("cl00")


def findings_at(name: str, edit: Callable[[Timeline], None], at: float = 180.0, config: DetectorConfig | None = None,
                packets: bool = True, step: float = 5.0,
                cut: Callable[[Window], Window] = lambda w: w) -> list[Finding]:  # fmt: skip
    """Run detector ``name`` every 10 s up to ``at`` over an edited healthy timeline (scraped every
    ``step`` s, each window passed through ``cut``); the last tick's findings (a detector with a
    stage-2 judge: the judge's, over its samples)."""
    tl = Timeline(TOPO, duration=at, seed=5, packets=packets, step=step)
    edit(tl)
    detector = detector_class(name)(config)
    judge = detector.judge(detector.config) if detector.judge is not None else None
    out: list[Finding] = []
    for t in tl.ticks(10.0, 60.0):
        out = detector.detect(cut(tl.window(t)))
        if judge is not None:
            out = judge.judge(out)
    return out


def healthy(tl: Timeline) -> None:
    """No change: noise, per-device spread and healthy counters only."""


def outliers(tl: Timeline) -> None:
    """Single-sample glitches that are not faults: a 95 °C reading, a -20 dBm lane, a stray BER."""
    tl.spike("gpu", "temp_c", 95.0, at=150, device=GPU)
    tl.spike("optical", "rx_power_dbm", -20.0, at=160, port=LEAF_PORT, lane=1)
    tl.spike("port", "pre_fec_ber", 1e-3, at=170, port=FAB.a)
    tl.spike("optical", "module_temp_c", 90.0, at=165, port=FAB.b)


def gpu_util(tl: Timeline, device: list[str], util: float) -> None:
    tl.put("gpu", "util_pct", util, device=device)


ROWS = [
    # --- gpu_temp: the seeds' ≥ 85 °C rule, on the recent median ------------------------------------
    ("gpu_temp", "healthy fleet around 62 °C", healthy, set()),
    ("gpu_temp", "single 95 °C sample is noise", outliers, set()),
    (
        "gpu_temp",
        "one GPU held at 88 °C",
        lambda tl: tl.put("gpu", "temp_c", 88.0, start=100, device=GPU),
        {("gpu_hot", GPU)},
    ),
    ("gpu_temp", "84 °C is below the limit", lambda tl: tl.put("gpu", "temp_c", 84.0, start=100, device=GPU), set()),
    # --- gpu_peers: hotter than its cooling-loop peers at the same load ------------------------------
    ("gpu_peers", "healthy spread is not an outlier", healthy, set()),
    ("gpu_peers", "single hot sample is noise", outliers, set()),
    (
        "gpu_peers",
        "one GPU 14 °C above its peers",
        lambda tl: tl.shift("gpu", "temp_c", 14.0, start=60, device=GPU),
        {("gpu_hotter_than_peers", GPU)},
    ),
    (
        "gpu_peers",
        "hotter because busier (peers idle at 20 %) is not a fault",
        lambda tl: (gpu_util(tl, [g for g in LOOP0 if g != GPU], 20.0), tl.shift("gpu", "temp_c", 14.0, device=GPU)),
        set(),
    ),
    (
        "gpu_peers",
        "a whole loop hotter moves its own median: not a single-GPU outlier",
        lambda tl: tl.shift("gpu", "temp_c", 14.0, start=60, device=LOOP0),
        set(),
    ),
    # --- cooling_loop: one loop warmer than the others, beyond its usual difference -----------------
    ("cooling_loop", "healthy loops", healthy, set()),
    (
        "cooling_loop",
        "loop cl00 warms 10 °C after the baseline is learnt",
        lambda tl: tl.shift("gpu", "temp_c", 10.0, start=100, ramp=30, device=LOOP0),
        {("cooling_loop_warm", "cl00")},
    ),
    (
        "cooling_loop",
        "every loop warms together (load, room): no loop stands out",
        lambda tl: tl.shift("gpu", "temp_c", 10.0, start=100, ramp=30, device=TOPO.gpus),
        set(),
    ),
    (
        "cooling_loop",
        "loop cl00's job gets busier than the others': more heat is expected",
        lambda tl: (
            gpu_util(tl, TOPO.gpus, 40.0),
            tl.put("gpu", "util_pct", 95.0, start=100, device=LOOP0),
            tl.shift("gpu", "temp_c", 10.0, start=100, ramp=30, device=LOOP0),
        ),
        set(),
    ),
    (
        "cooling_loop",
        "loop cl00 idles, then joins the job and warms to its peers' level: not a failure",
        lambda tl: (
            tl.put("gpu", "util_pct", 0.0, end=100, device=LOOP0),
            tl.shift("gpu", "temp_c", -20.0, device=LOOP0),
            tl.shift("gpu", "temp_c", 20.0, start=100, ramp=60, device=LOOP0),
        ),
        set(),
    ),
    (
        "cooling_loop",
        "loop cl00 idles while the others work: nobody's peer, judged against its own level",
        lambda tl: (tl.put("gpu", "util_pct", 0.0, device=LOOP0), tl.shift("gpu", "temp_c", -20.0, device=LOOP0)),
        set(),
    ),
    (
        "cooling_loop",
        "loop cl00 idles while the others work and warms 10 °C: more than its own level, less what all shared",
        lambda tl: (
            tl.put("gpu", "util_pct", 0.0, device=LOOP0),
            tl.shift("gpu", "temp_c", -20.0, device=LOOP0),
            tl.shift("gpu", "temp_c", 10.0, start=100, ramp=30, device=LOOP0),
        ),
        {("cooling_loop_warm", "cl00")},
    ),
    (
        "cooling_loop",
        "loop cl00 idles while the others work, and the facility water warms every loop 10 °C: shared",
        lambda tl: (
            tl.put("gpu", "util_pct", 0.0, device=LOOP0),
            tl.shift("gpu", "temp_c", -20.0, device=LOOP0),
            tl.shift("gpu", "temp_c", 10.0, start=100, ramp=30, device=TOPO.gpus),
        ),
        set(),
    ),
    (
        "cooling_loop",
        "loop cl00 idles while the others work, then they stop and cool 20 °C: their load stepped",
        lambda tl: (
            tl.put("gpu", "util_pct", 0.0, device=LOOP0),
            tl.shift("gpu", "temp_c", -20.0, device=LOOP0),
            tl.put("gpu", "util_pct", 0.0, start=100, device=[g for g in TOPO.gpus if g not in set(LOOP0)]),
            tl.shift("gpu", "temp_c", -20.0, start=100, ramp=30, device=[g for g in TOPO.gpus if g not in set(LOOP0)]),
        ),
        set(),
    ),
    # --- gpu_xid ------------------------------------------------------------------------------------
    ("gpu_xid", "healthy", healthy, set()),
    (
        "gpu_xid",
        "XID 79, fallen off the bus",
        lambda tl: tl.put("gpu", "xid", 79, start=150, device=GPU),
        {("gpu_xid", GPU)},
    ),
    (
        "gpu_xid",
        "double-bit ECC counter rises",
        lambda tl: tl.count("gpu", "ecc_dbe_total", 0.1, start=150, device=GPU),
        {("gpu_xid", GPU)},
    ),
    # --- optical_thresholds: the module's own thresholds (vendor: warn -6.4, alarm -9.4 dBm) ------
    ("optical_thresholds", "healthy optics", healthy, set()),
    ("optical_thresholds", "one -20 dBm sample, one 90 °C module reading", outliers, set()),
    (
        "optical_thresholds",
        "rx -7.5 dBm on two lanes: under the module's warning (and 8 dB under the far tx)",
        lambda tl: tl.put("optical", "rx_power_dbm", -7.5, start=100, port=LEAF_PORT, lane=[0, 1]),
        {("rx_power_low_warn", LEAF_PORT), ("path_loss_high", LEAF_PORT)},
    ),
    (
        "optical_thresholds",
        "rx -6.1 dBm: under the DR4 default warning but not this module's (path loss still)",
        lambda tl: tl.put("optical", "rx_power_dbm", -6.1, start=100, port=LEAF_PORT),
        {("path_loss_high", LEAF_PORT)},
    ),
    (
        "optical_thresholds",
        "rx -10 dBm: under the module's alarm, and 11 dB of path loss",
        lambda tl: tl.put("optical", "rx_power_dbm", -10.0, start=100, port=LEAF_PORT),
        {("rx_power_low_alarm", LEAF_PORT), ("path_loss_high", LEAF_PORT)},
    ),
    (
        "optical_thresholds",
        "all lanes dark: loss of light, not a low reading",
        lambda tl: tl.put("optical", "rx_power_dbm", -40.0, start=100, port=LEAF_PORT),
        {("loss_of_light", LEAF_PORT)},
    ),
    (
        "optical_thresholds",
        "one transmitter lane dark",
        lambda tl: tl.put("optical", "tx_power_dbm", -40.0, start=100, port=FAB.a, lane=2),
        {("tx_dark", FAB.a)},
    ),
    (
        "optical_thresholds",
        "module at 77 °C: over its warning (75), under its alarm (80)",
        lambda tl: tl.put("optical", "module_temp_c", 77.0, start=100, port=FAB.b),
        {("module_temp_high_warn", FAB.b)},
    ),
    (
        "optical_thresholds",
        "bias over the module's alarm",
        lambda tl: tl.put("optical", "bias_ma", 95.0, start=100, port=FAB.a),
        {("bias_high_alarm", FAB.a)},
    ),
    (
        "optical_thresholds",
        "rx 5 dB down with its far end's tx normal: the path eats the light",
        lambda tl: tl.shift("optical", "rx_power_dbm", -5.0, start=100, port=FAB.b),
        {("path_loss_high", FAB.b)},
    ),
    # --- optical_baseline: against the lane's own past ----------------------------------------------
    ("optical_baseline", "healthy optics", healthy, set()),
    ("optical_baseline", "single-sample glitches", outliers, set()),
    (
        "optical_baseline",
        "rx 3 dB down: contamination before any alarm",
        lambda tl: tl.shift("optical", "rx_power_dbm", -3.0, start=120, port=LEAF_PORT),
        {("rx_power_drop", LEAF_PORT)},
    ),
    (
        "optical_baseline",
        "rx 0.6 dB down is within what one mated connector may lose (0.75 dB): no drop, only a dip against"
        " the lane's measured noise (a hint that rule 6b reads beside corruption, never an incident alone)",
        lambda tl: tl.shift("optical", "rx_power_dbm", -0.6, start=120, port=LEAF_PORT),
        {("rx_power_dip", LEAF_PORT)},
    ),
    (
        "optical_baseline",
        "tx 2 dB down: the laser fades",
        lambda tl: tl.shift("optical", "tx_power_dbm", -2.0, start=120, port=FAB.a),
        {("tx_power_drop", FAB.a)},
    ),
    (
        "optical_baseline",
        "bias +20 %",
        lambda tl: tl.shift("optical", "bias_ma", 9.0, start=120, port=FAB.a),
        {("bias_rise", FAB.a)},
    ),
    (
        "optical_baseline",
        "module 10 °C warmer (a hot GPU next to its NPO engine)",
        lambda tl: tl.shift("optical", "module_temp_c", 10.0, start=120, port=GPU_PORT),
        {("module_temp_rise", GPU_PORT)},
    ),
    # --- pre_fec_ber --------------------------------------------------------------------------------
    ("pre_fec_ber", "healthy 1e-9..1e-6 spread", healthy, set()),
    ("pre_fec_ber", "one 1e-3 sample", outliers, set()),
    (
        "pre_fec_ber",
        "1e-3: beyond the RS(544,514) limit",
        lambda tl: tl.put("port", "pre_fec_ber", 1e-3, start=100, port=FAB.b),
        {("ber_above_limit", FAB.b)},
    ),
    (
        "pre_fec_ber",
        "5e-5: no margin left",
        lambda tl: tl.put("port", "pre_fec_ber", 5e-5, start=100, port=FAB.b),
        {("ber_high", FAB.b)},
    ),
    (
        "pre_fec_ber",
        "1e-9 → 3e-6: a 3000x rise still under the warning",
        lambda tl: (
            tl.put("port", "pre_fec_ber", 1e-9, port=FAB.b),
            tl.put("port", "pre_fec_ber", 3e-6, start=120, port=FAB.b),
        ),
        {("ber_rise", FAB.b)},
    ),
    # --- fec_uncorrectable --------------------------------------------------------------------------
    ("fec_uncorrectable", "healthy: none", healthy, set()),
    (
        "fec_uncorrectable",
        "5 codewords a second",
        lambda tl: tl.count("port", "fec_uncorrectable_total", 5, start=120, port=FAB.b),
        {("fec_uncorrectable", FAB.b)},
    ),
    (
        "fec_uncorrectable",
        "one burst of 5 codewords, then clean: a cable moved, not a corrupting receiver",
        lambda tl: tl.put("port", "fec_uncorrectable_total", 5, start=165, port=FAB.b),
        set(),
    ),
    (
        "fec_uncorrectable",
        "a codeword failing in most intervals: a slow but steady corruption",
        lambda tl: tl.count("port", "fec_uncorrectable_total", 0.25, start=140, port=FAB.b),
        {("fec_uncorrectable", FAB.b)},
    ),
    (
        "fec_uncorrectable",
        "counter reset to 0 by a module reset is not an error",
        lambda tl: (
            tl.put("port", "fec_uncorrectable_total", 7, port=FAB.b),
            tl.put("port", "fec_uncorrectable_total", 0, start=160, port=FAB.b),
        ),
        set(),
    ),
    (
        "fec_uncorrectable",
        "counter reset, then real errors after it",
        lambda tl: (
            tl.put("port", "fec_uncorrectable_total", 7, port=FAB.b),
            tl.put("port", "fec_uncorrectable_total", 0, start=150, port=FAB.b),
            tl.count("port", "fec_uncorrectable_total", 1, start=160, port=FAB.b),
        ),
        {("fec_uncorrectable", FAB.b)},
    ),
    # --- packet_loss: the seeds' ≥ 1 % rule ---------------------------------------------------------
    ("packet_loss", "healthy: no CRC errors", healthy, set()),
    (
        "packet_loss",
        "2 % of frames fail CRC",
        lambda tl: tl.count("port", "rx_crc_errors_total", 0.02 * 0.6 * BYTES_PER_S / 4096, start=100, port=FAB.b),
        {("packet_loss", FAB.b)},
    ),
    (
        "packet_loss",
        "0.5 % is under the rule",
        lambda tl: tl.count("port", "rx_crc_errors_total", 0.005 * 0.6 * BYTES_PER_S / 4096, start=100, port=FAB.b),
        set(),
    ),
    (
        "packet_loss",
        "a few CRC errors on a link are not 1 % of anything",
        lambda tl: tl.count("port", "rx_crc_errors_total", 0.1, start=100, port=FAB.b),
        set(),
    ),
    # --- link_state ---------------------------------------------------------------------------------
    ("link_state", "healthy: all up", healthy, set()),
    (
        "link_state",
        "both ends down since 140 s",
        lambda tl: (
            tl.put("port", "state", 0, start=140, port=[HOST.a, HOST.b]),
            tl.count("port", "link_down_total", 1000, start=140, end=140.001, port=[HOST.a, HOST.b]),
        ),
        {("link_down", HOST.a), ("link_down", HOST.b)},
    ),
    (
        "link_state",
        "one down-up between two scrapes is one event, not a flap",
        lambda tl: tl.count("port", "link_down_total", 1000, start=120, end=120.001, port=HOST.b),
        set(),
    ),
]


def _flaps(tl: Timeline) -> None:
    """Down for 3 s every 40 s; a scrape sees state 0 only sometimes, the counter always."""
    for k in range(60, 180, 40):
        tl.put("port", "state", 0, start=k, end=k + 3, port=HOST.b)
        tl.count("port", "link_down_total", 1000, start=k, end=k + 0.001, port=HOST.b)


ROWS.append(("link_state", "down 3 s every 40 s", _flaps, {("link_flap", HOST.b)}))


@pytest.mark.parametrize(("name", "comment", "edit", "expected"), ROWS, ids=[f"{r[0]}: {r[1]}" for r in ROWS])
def test_detector_rows(name: str, comment: str, edit: Callable[[Timeline], None], expected: set) -> None:
    found = findings_at(name, edit)
    assert {(f.symptom, f.id) for f in found} == expected, comment


@pytest.mark.parametrize(
    ("dropped", "known"),
    [((), True), (("pre_fec_ber",), True), (("pre_fec_ber", "fec_corrected_total"), False)],
)
def test_failed_codewords_say_whether_the_ports_ber_is_known(dropped: tuple[str, ...], known: bool) -> None:
    """The BER column, else the corrected bits (an mlx5 ethtool source), else unknown: correlation calls
    codewords with a known, normal BER error bursts, and never those whose BER it cannot read."""

    def edit(tl: Timeline) -> None:
        tl.count("port", "fec_uncorrectable_total", 5, start=120, port=FAB.b)
        for column in dropped:
            tl.drop_column("port", column)

    (found,) = findings_at("fec_uncorrectable", edit)
    assert found.attrs["ber_known"] is known


def test_missing_packet_counters_fall_back_to_bytes_over_the_roce_mtu() -> None:
    rate = 0.02 * 0.6 * BYTES_PER_S / 4096

    def edit(tl: Timeline) -> None:
        tl.count("port", "rx_crc_errors_total", rate, start=100, port=FAB.b)

    found = findings_at("packet_loss", edit, packets=False)
    assert [(f.symptom, f.id) for f in found] == [("packet_loss", FAB.b)]
    assert found[0].attrs["runbook"] == "reroute"
    assert 0.015 < found[0].attrs["loss_ratio"] < 0.025


def test_gpu_hot_carries_thermal_throttle_evidence_and_escalates() -> None:
    def edit(tl: Timeline) -> None:
        tl.put("gpu", "temp_c", 88.0, start=100, device=GPU)
        tl.put("gpu", "throttle_mask", 0x20 | 0x40, start=100, device=GPU)

    (f,) = findings_at("gpu_temp", edit, at=150)
    assert f.severity == "critical"  # the GPU already slows itself down in hardware
    assert f.attrs["thermal_throttle"] == ["sw_thermal_slowdown", "hw_thermal_slowdown"]
    assert f.attrs["runbook"] == "throttle-gpu"
    assert any(e["metric"] == "throttle_mask" and e["value"] == 0x60 for e in f.evidence)
    assert f.first_seen == pytest.approx(T0 + 100, abs=5)


def test_xid_ignored_by_config_does_not_page() -> None:
    found = findings_at("gpu_xid", lambda tl: tl.put("gpu", "xid", 13, start=150, device=GPU),
                        config=GpuXid.Config(xid_ignore=(13,)))  # fmt: skip
    assert found == []


def blank_gpu(tl: Timeline, start: float, **key: object) -> None:
    """From ``start`` the GPU answers nothing (NVML_ERROR_GPU_IS_LOST): every reading and the XID null."""
    for column in (*READINGS, "xid"):
        tl.put("gpu", column, np.nan, start=start, **key)


def test_lost_gpu_without_xid_column_is_xid_79_from_its_first_blank_row() -> None:
    """nvidia-smi reports no XID: a GPU off the bus is a row of nulls beside GPUs that still read."""
    (f,) = findings_at("gpu_xid", lambda tl: blank_gpu(tl, 152, device=GPU))
    assert (f.symptom, f.id, f.cause, f.severity) == ("gpu_xid", GPU, "gpu_xid", "critical")
    assert f.attrs == {"xid": 79, "lost": True}
    assert f.first_seen == pytest.approx(T0 + 155, abs=0.5)  # the first sample at or after 152 s
    assert f.evidence[0]["metric"] == "readings"


def test_blank_rows_that_are_not_a_lost_gpu_raise_nothing() -> None:
    node = GPU.split("/")[0]
    # the whole collector reads nothing (it cannot read those columns): no GPU stands out
    assert (
        findings_at("gpu_xid", lambda tl: blank_gpu(tl, 150, device=[g for g in TOPO.gpus if TOPO.gpu_node[g] == node]))
        == []
    )
    # one blank row that the GPU recovered from is no longer the latest
    assert findings_at("gpu_xid", lambda tl: blank_gpu(tl, 150, device=GPU) or tl.put("gpu", "temp_c", 50.0,
                       start=170, device=GPU)) == []  # fmt: skip
    # a reported XID is named once, by its code, not again as lost
    (f,) = findings_at("gpu_xid", lambda tl: (blank_gpu(tl, 150, device=GPU),
                                              tl.put("gpu", "xid", 79, start=150, device=GPU)))  # fmt: skip
    assert f.attrs == {"xid": 79}


def test_lane_findings_list_lanes_and_worst_lane_evidence() -> None:
    def edit(tl: Timeline) -> None:
        tl.put("optical", "rx_power_dbm", -7.0, start=100, port=LEAF_PORT, lane=0)
        tl.put("optical", "rx_power_dbm", -8.0, start=100, port=LEAF_PORT, lane=3)

    (f,) = [f for f in findings_at("optical_thresholds", edit) if f.symptom == "rx_power_low_warn"]
    assert f.attrs["lanes"] == [0, 3] and f.attrs["lanes_total"] == 4
    assert f.evidence[0] == {"metric": "rx_power_dbm", "port": LEAF_PORT, "lane": 3, "value": -8.0, "threshold": -6.4}


def test_drop_is_measured_against_the_lanes_own_baseline() -> None:
    def edit(tl: Timeline) -> None:
        tl.shift("optical", "rx_power_dbm", -3.0, start=120, port=LEAF_PORT, lane=2)

    (f,) = findings_at("optical_baseline", edit)
    (e,) = f.evidence
    assert e["lane"] == 2 and e["baseline"] - e["value"] == pytest.approx(3.0, abs=0.4)
    assert f.first_seen == pytest.approx(T0 + 120, abs=5)


def test_slow_scrapes_still_give_counters_two_samples() -> None:
    """Scraped every 20 s, 30 s of "recent" may hold one sample: it stretches to 2.5 intervals."""

    def edit(tl: Timeline) -> None:
        tl.count("port", "fec_uncorrectable_total", 5, start=100, port=FAB.b)

    found = findings_at("fec_uncorrectable", edit, step=20.0)
    assert [(f.symptom, f.id) for f in found] == [("fec_uncorrectable", FAB.b)]


def test_datetime_timestamps_read_as_epoch_seconds() -> None:
    def as_datetime(w: Window) -> Window:
        frames = {k: f.assign(ts=pd.to_datetime(f["ts"], unit="s")) for k, f in w.frames.items()}
        return Window(w.start, w.end, frames, w.modules, w.topology)

    (f,) = findings_at(
        "gpu_temp", lambda tl: tl.put("gpu", "temp_c", 88.0, start=100, device=GPU), at=150, cut=as_datetime
    )
    assert f.first_seen == pytest.approx(T0 + 100, abs=5)


def test_a_fleet_running_at_higher_ber_is_not_all_high() -> None:
    """Another generator's healthy links at ~3e-6 (10x ours): only the port well above the fleet is high."""

    def edit(tl: Timeline) -> None:
        tl.put("port", "pre_fec_ber", lambda ts: 3e-6 * (1 + 0.5 * ((ts * 7) % 1)))
        tl.put("port", "pre_fec_ber", 1e-4, start=100, port=FAB.b)

    assert {(f.symptom, f.id) for f in findings_at("pre_fec_ber", edit)} == {("ber_high", FAB.b)}


def test_path_loss_budget_follows_a_fleet_with_more_loss() -> None:
    """DOM calibration differs by vendor: a fleet reading 4 dB of loss everywhere is not all lossy,
    while a link 4 dB worse than that still is."""

    def edit(tl: Timeline) -> None:
        tl.shift("optical", "rx_power_dbm", -2.5)
        tl.shift("optical", "rx_power_dbm", -4.0, start=100, port=FAB.b)

    assert {(f.symptom, f.id) for f in findings_at("optical_thresholds", edit)} == {
        ("path_loss_high", FAB.b),
        ("rx_power_low_warn", FAB.b),  # -7 dBm: under this module's warning too
    }


def test_module_that_never_reported_is_judged_by_dr4_defaults() -> None:
    def no_modules(w: Window) -> Window:
        return Window(w.start, w.end, w.frames, w.modules.iloc[0:0], w.topology)

    def edit(tl: Timeline) -> None:
        tl.put("optical", "rx_power_dbm", -6.1, start=100, port=LEAF_PORT)

    found = {(f.symptom, f.id) for f in findings_at("optical_thresholds", edit, cut=no_modules)}
    assert ("rx_power_low_warn", LEAF_PORT) in found  # -6.1 is under the DR4 default warning (-5.9)


# --- link_state: ports the topology does not have, and the start of a long down spell --------------


def _without_host_link(w: Window) -> Window:
    """The same telemetry judged against a topology file that lacks the HOST link (a spare port)."""
    topo = topology.Topology(TOPO.name, TOPO.nodes, TOPO.switches, [x for x in TOPO.links if x.id != HOST.id])
    return Window(w.start, w.end, w.frames, w.modules, topo)


def test_a_port_missing_from_the_topology_is_an_inventory_finding_not_a_link_down() -> None:
    def edit(tl: Timeline) -> None:
        tl.put("port", "state", 0, start=60, port=LEAF_PORT)  # a module in a cage with no fibre

    found = findings_at("link_state", edit, cut=_without_host_link)
    assert {(f.symptom, f.id) for f in found} == {
        ("port_not_in_topology", LEAF_PORT),
        ("port_not_in_topology", GPU_PORT),  # up and reporting, but no link of the topology either
    }
    spare = next(f for f in found if f.id == LEAF_PORT)
    assert spare.severity == "warning" and spare.attrs == {"state": 0, "spare": True}


def test_link_down_first_seen_is_the_start_of_the_down_spell_not_of_the_window() -> None:
    def edit(tl: Timeline) -> None:
        tl.put("port", "state", 0, start=60, port=HOST.b)

    (f,) = findings_at("link_state", edit, at=300)  # windows of 60 s: the spell began 4 minutes ago
    assert f.symptom == "link_down" and f.first_seen == pytest.approx(T0 + 60, abs=5)


def test_down_spell_survives_a_restart_and_ends_when_the_port_is_up() -> None:
    tl = Timeline(TOPO, duration=300, seed=5)
    tl.put("port", "state", 0, start=60, end=200, port=HOST.b)
    detector = detector_class("link_state")()
    for t in tl.ticks(10.0, 60.0):
        if t > 150:
            break
        detector.detect(tl.window(t))
    restored = detector_class("link_state")()
    restored.restore(detector.snapshot())
    assert restored.down_since == {HOST.b: pytest.approx(T0 + 60, abs=5)}
    restored.detect(tl.window(230))  # up again since 200 s
    assert HOST.b not in restored.down_since


# --- pfc_storm: the SONiC watchdog's meaning (paused, queued, transmitting none), unknown is no storm ---

NIC = "node001/gpu2:p0"
NIC_LEAF = TOPO.port_peer[NIC]


def _storm(tl: Timeline, partner_sends: float = 0.0) -> None:
    """A NIC pausing its leaf port continuously with nothing behind its pauses; the leaf port holds a
    full queue and sends ``partner_sends`` of its line rate; the leaf pauses four of its uplinks."""
    tl.count("port", "tx_pause_total", 20_000, start=60, port=NIC)
    tl.count("port", "rx_pause_total", 20_000, start=60, port=NIC_LEAF)
    tl.freeze("port", "rx_bytes_total", start=60, per_s=partner_sends * BYTES_PER_S, port=NIC)
    tl.freeze("port", "tx_bytes_total", start=60, per_s=partner_sends * BYTES_PER_S, port=NIC_LEAF)
    tl.freeze("port", "tx_packets_total", start=60, per_s=partner_sends * BYTES_PER_S / 4096, port=NIC_LEAF)
    tl.put("port", "queue_depth_bytes", 3_000_000, start=60, port=NIC_LEAF)
    upstream = [p for p in TOPO.ports_of_device(TOPO.port_device[NIC_LEAF]) if p != NIC_LEAF][16:20]
    tl.count("port", "tx_pause_total", 5000, start=60, port=upstream)
    tl.count("port", "rx_pause_total", 5000, start=60, port=[TOPO.port_peer[p] for p in upstream])


def _symptoms(found: list[Finding]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for x in found:
        out.setdefault(x.symptom, set()).add(x.id)
    return out


def test_pfc_storm_source_is_the_nic_whose_partner_queue_is_held_full_and_silent() -> None:
    found = _symptoms(findings_at("pfc_storm", _storm))
    assert found["pfc_storm_source"] == {NIC}
    assert len(found["pause_upstream"]) == 4  # the leaf pauses its uplinks because its port is held


def test_a_held_queue_that_still_sends_5_percent_is_paused_not_storming() -> None:
    found = _symptoms(findings_at("pfc_storm", lambda tl: _storm(tl, partner_sends=0.05)))
    assert "pfc_storm_source" not in found and NIC in found["pause_upstream"]


def test_no_queue_depth_column_is_unknown_never_a_storm() -> None:
    """OpenConfig gNMI gives no queue depth: the partner's queue cannot be judged, so no storm."""

    def edit(tl: Timeline) -> None:
        _storm(tl)
        tl.drop_column("port", "queue_depth_bytes")

    assert "pfc_storm_source" not in _symptoms(findings_at("pfc_storm", edit))


# --- pfc_storm per priority: the pause time of each lossless priority, where the source counts it ---

PFC_COLUMNS = ("rx_pause_p{}_total", "tx_pause_p{}_total", "rx_pause_duration_p{}_us_total")


def _priorities(tl: Timeline, ports: list[str] | None = None, priorities: tuple[int, ...] = (3, 4)) -> None:
    """The per-priority PFC columns on ``ports`` (every port when None), counting nothing yet; other
    ports leave them null, as a source without them does."""
    key = {} if ports is None else {"port": ports}
    for p in priorities:
        for name in PFC_COLUMNS:
            tl.put("port", name.format(p), 0, **key)


def _held(tl: Timeline, priority: int, share: float, port: str = NIC_LEAF, rate: float = 6000.0) -> None:
    """``port`` receives ``rate`` pauses a second on ``priority`` from its partner, held ``share`` of the time."""
    tl.count("port", f"tx_pause_p{priority}_total", rate, start=60, port=TOPO.port_peer[port])
    tl.count("port", f"rx_pause_p{priority}_total", rate, start=60, port=port)
    tl.count("port", f"rx_pause_duration_p{priority}_us_total", share * 1e6, start=60, port=port)


def _storm_on_4(tl: Timeline) -> None:
    """The NIC storms priority 4 (lossless, none of the job on it): its leaf port is held on 4 all the
    time while RoCE on 3 flows on; the port's traffic, queue and upstream are as healthy."""
    _priorities(tl)
    tl.count("port", "tx_pause_total", 6000, start=60, port=NIC)
    tl.count("port", "rx_pause_total", 6000, start=60, port=NIC_LEAF)
    _held(tl, 4, 1.0)


def _storm_on_3(tl: Timeline) -> None:
    """The storm of _storm (queue full, nothing sent, pauses upstream), counted on RoCE's priority 3."""
    _storm(tl)
    _priorities(tl)
    _held(tl, 3, 1.0, rate=20_000)


def _bursty_idle(tl: Timeline, columns: bool = True) -> None:
    """Healthy all-reduce bursts: the NIC sends brief pauses on 3 (2000 a second, its leaf port held
    8 % of the time) while the leaf port, in a compute phase, has a little queued and sends next to
    nothing. Read on the port alone that is paused, queued and silent; its pause time says otherwise."""
    if columns:
        _priorities(tl)
        _held(tl, 3, 0.08, rate=2000)
    tl.count("port", "tx_pause_total", 2000, start=60, port=NIC)
    tl.count("port", "rx_pause_total", 2000, start=60, port=NIC_LEAF)
    tl.freeze("port", "tx_bytes_total", start=60, port=NIC_LEAF)
    tl.freeze("port", "tx_packets_total", start=60, port=NIC_LEAF)
    tl.put("port", "queue_depth_bytes", 40_000, start=60, port=NIC_LEAF)


def _paused_frac(found: list[Finding]) -> dict:
    (source,) = [f for f in found if f.symptom == "pfc_storm_source"]
    return next(e for e in source.evidence if e["metric"] == "paused_frac")


@pytest.mark.parametrize(
    ("edit", "storm_priority"),
    [
        # a storm on lossless priority 4: the port's traffic flows on (RoCE is on 3), only 4's pause time shows it
        (_storm_on_4, 4),
        # the same storm from a source without per-priority columns: the port reading cannot see it
        (lambda tl: (_storm_on_4(tl), *(tl.drop_column("port", c.format(p)) for p in (3, 4) for c in PFC_COLUMNS)),
         None),
        # a storm on RoCE's priority 3: held all the time, as the port reading also says
        (_storm_on_3, 3),
        # healthy bursty pauses on 3 while the port idles: held 8 % of the time, no storm
        (_bursty_idle, None),
        # ... which the port reading alone (no per-priority columns) would call a storm
        (lambda tl: _bursty_idle(tl, columns=False), "port"),
        # no per-priority columns: today's port judgement (the storm of _storm)
        (_storm, "port"),
        # the columns exist but the partner reports none (null): unknown, never quiet, the port decides
        (lambda tl: (_storm(tl), _priorities(tl, [NIC])), "port"),
        # priority 3 counted and quiet but 4 not counted (mlx5 with PFC on 3 only): 4 unknown, the port decides
        (lambda tl: (_storm(tl), _priorities(tl, priorities=(3,))), "port"),
        # every lossless priority counted and neither held: the pause time decides, no storm on the port's word
        (lambda tl: (_storm(tl), _priorities(tl)), None),
    ],
    ids=["p4", "p4-without-columns", "p3", "bursty", "bursty-port-only", "port", "partner-null", "p4-unknown",
         "all-quiet"],
)  # fmt: skip
def test_pfc_storm_per_priority(edit: Callable[[Timeline], None], storm_priority: int | str | None) -> None:
    found = findings_at("pfc_storm", edit)
    sources = _symptoms(found).get("pfc_storm_source", set())
    if storm_priority is None:
        assert not sources
        return
    assert sources == {NIC}
    held = _paused_frac(found)
    assert held["port"] == NIC_LEAF and held["value"] >= 0.99 and held["threshold"] == 0.99
    if storm_priority == "port":  # judged on the port: no priority named
        assert "priority" not in held
    else:
        assert held["priority"] == storm_priority
        (source,) = [f for f in found if f.symptom == "pfc_storm_source"]
        assert source.attrs["priority"] == storm_priority and source.cause == "pfc_storm"


def test_a_storm_on_3_still_traces_its_upstream_pauses_to_the_nic() -> None:
    found = _symptoms(findings_at("pfc_storm", _storm_on_3))
    assert found["pfc_storm_source"] == {NIC}
    assert len(found["pause_upstream"]) == 4  # the leaf pauses its uplinks because its port is held


def _quiet_lane(sd: float) -> Callable[[Timeline], None]:
    """LEAF_PORT's lanes read -2 dBm with noise ``sd``, then lane 2 steps down 1.5 dB at 120 s."""

    def edit(tl: Timeline) -> None:
        rng = np.random.default_rng(11)
        tl.put("optical", "rx_power_dbm", lambda ts: -2.0 + rng.normal(0.0, sd, len(ts)), port=LEAF_PORT)
        tl.shift("optical", "rx_power_dbm", -1.5, start=120, port=LEAF_PORT, lane=2)

    return edit


def test_a_change_is_judged_against_the_lanes_own_noise() -> None:
    """1.5 dB on a lane that reads within 0.05 dB is a change (the old fixed 2 dB rule missed it); the
    same step on a lane whose DOM wanders by 0.4 dB a sample is not told from its noise."""
    (f,) = findings_at("optical_baseline", _quiet_lane(0.05))
    assert (f.symptom, f.id, f.attrs["lanes"]) == ("rx_power_drop", LEAF_PORT, [2])
    assert findings_at("optical_baseline", _quiet_lane(0.4)) == []


def test_a_replaced_module_starts_both_ends_baselines_afresh() -> None:
    """A new module (new part number) launching 2 dB lower is a new level at both ends, not a fade."""

    def swap(w: Window) -> Window:
        mods = w.modules.copy()
        if w.end >= T0 + 120:
            mods.loc[mods["port"] == FAB.a, ["ts", "part_number"]] = [T0 + 120, "QDD-400G-DR4-B"]
        return Window(w.start, w.end, w.frames, mods, w.topology)

    def edit(tl: Timeline) -> None:
        tl.shift("optical", "tx_power_dbm", -2.0, start=120, port=FAB.a)
        tl.shift("optical", "rx_power_dbm", -2.0, start=120, port=FAB.b)

    assert {(f.symptom, f.id) for f in findings_at("optical_baseline", edit)} == {
        ("tx_power_drop", FAB.a),
        ("rx_power_drop", FAB.b),
    }
    assert findings_at("optical_baseline", edit, cut=swap) == []


def test_a_module_without_thresholds_is_judged_by_its_media_types_defaults() -> None:
    """An SR8 module that reports no thresholds: -7 dBm is under the DR4 default warning (-5.9) but
    within SR8's receive range (IEEE 802.3cm: ≥ -8.4 dBm); -9 dBm is not."""

    def sr8(w: Window) -> Window:
        thresholds = [c for c in w.modules.columns if c.endswith(("_dbm", "_ma", "_c"))]
        mods = w.modules.assign(media="400G-SR8", **dict.fromkeys(thresholds, None))
        return Window(w.start, w.end, w.frames, mods, w.topology)

    def at(level: float) -> set:
        edit = lambda tl: tl.put("optical", "rx_power_dbm", level, start=100, port=LEAF_PORT)  # noqa: E731
        return {f.symptom for f in findings_at("optical_thresholds", edit, cut=sr8) if f.id == LEAF_PORT}

    assert "rx_power_low_warn" not in at(-7.0)
    assert "rx_power_low_warn" in at(-9.0)


def test_a_link_that_retrained_learns_its_new_levels() -> None:
    """The same part number back at another level after the link dropped and retrained (a module
    swapped for an identical part, a connector reseated): new levels, not a fade."""

    def step(tl: Timeline) -> None:
        tl.shift("optical", "tx_power_dbm", -1.4, start=120, port=FAB.a)
        tl.shift("optical", "rx_power_dbm", -1.4, start=120, port=FAB.b)

    def retrained(tl: Timeline) -> None:
        step(tl)
        tl.count("port", "link_down_total", 1000, start=118, end=118.001, port=[FAB.a, FAB.b])

    assert {(f.symptom, f.id) for f in findings_at("optical_baseline", step)} == {
        ("tx_power_drop", FAB.a),
        ("rx_power_drop", FAB.b),
    }
    assert findings_at("optical_baseline", retrained) == []


# --- congestion at burst level: an incast confined to the all-reduce phases ------------------------------

EGRESS = LEAF_PORT  # leaf1-0:p02, towards node002/gpu1


def _phased_incast(tl: Timeline, queue: int = 2_000_000) -> None:
    """From 60 s the port idles at 20 % of line rate, and for 10 s of every 20 s (the all-reduce
    phase) runs at line rate with a standing queue: 60 % on average, under the 90 % of the 30-s rule."""
    tl.freeze("port", "tx_bytes_total", start=60, per_s=0.2 * BYTES_PER_S, port=EGRESS)
    tl.freeze("port", "tx_packets_total", start=60, per_s=0.2 * BYTES_PER_S / 4096, port=EGRESS)
    for k in range(60, 180, 20):
        tl.count("port", "tx_bytes_total", 0.8 * BYTES_PER_S, start=k, end=k + 10, port=EGRESS)
        tl.count("port", "tx_packets_total", 0.8 * BYTES_PER_S / 4096, start=k, end=k + 10, port=EGRESS)
        tl.put("port", "queue_depth_bytes", queue, start=k + 0.1, end=k + 10.1, port=EGRESS)  # sampled in it


def test_an_incast_confined_to_bursts_is_found_burst_by_burst() -> None:
    (found,) = findings_at("congestion", _phased_incast, step=5.0)
    assert (found.symptom, found.id, found.cause) == ("congestion", EGRESS, "incast_hotspot")
    assert found.attrs["tx_util"] < 0.9 and found.attrs["congested_intervals"] >= 2


def test_bursts_at_line_rate_with_microburst_queues_are_healthy() -> None:
    """The same phases with a 600 kB queue (under the high mark) and no ECN: all-reduce, not incast."""
    assert findings_at("congestion", lambda tl: _phased_incast(tl, queue=600_000), step=5.0) == []


# --- congestion where the source has neither queue depth nor ECN marks (OpenConfig gNMI) ------------------


def _saturated_without_queue_or_marks(tl: Timeline, pausing: bool) -> None:
    """From 60 s EGRESS sends at line rate; its leaf reports no queue depth and no ECN marks; with
    ``pausing`` the leaf's uplink FAB-side ports send 9,000 pauses a second (their buffers are full)."""
    tl.freeze("port", "tx_bytes_total", start=60, per_s=0.98 * BYTES_PER_S, port=EGRESS)
    tl.freeze("port", "tx_packets_total", start=60, per_s=0.98 * BYTES_PER_S / 4096, port=EGRESS)
    leaf = TOPO.port_device[EGRESS]
    ports = TOPO.ports_of_device(leaf)
    for column in ("queue_depth_bytes", "ecn_marked_total"):
        tl.put("port", column, np.nan, port=ports)
    if pausing:
        uplinks = [p for p in ports if TOPO.port_link[p].tier != "host"][:2]
        tl.count("port", "tx_pause_total", 9000.0, start=60, port=uplinks)


def test_a_saturated_port_whose_device_pauses_upstream_is_congested_when_its_queue_is_unknown() -> None:
    (found,) = findings_at("congestion", lambda tl: _saturated_without_queue_or_marks(tl, pausing=True))
    assert (found.symptom, found.id, found.cause) == ("congestion", EGRESS, "incast_hotspot")
    assert any(e["metric"] == "device_ports_pausing" and e["value"] == 2 for e in found.evidence)


def test_a_saturated_port_without_pauses_upstream_is_not_congestion_when_its_queue_is_unknown() -> None:
    """Line rate alone is a busy job, not an incast: an unknown queue is never a full one."""
    assert findings_at("congestion", lambda tl: _saturated_without_queue_or_marks(tl, pausing=False)) == []


def test_counter_rates_of_slow_scraped_ports_are_known_in_every_tick() -> None:
    """A leaf scraped every 30 s among hosts scraped every 5 s still has a rate each tick: its
    recent span is 2.5 of its own intervals, while the hosts keep the kind's."""
    from fabricwatch.detectors.frames import recent, recent_counters
    from fabricwatch.detectors.traffic import TrafficConfig, traffic

    tl = Timeline(TOPO, duration=200, seed=5)
    leaf = TOPO.port_device[EGRESS]
    slow = tl.rows("port", port=TOPO.ports_of_device(leaf))
    keep = ~slow | (np.round(tl.frames["port"]["ts"].to_numpy() - T0) % 30 == 0)  # each source has an offset
    tl.frames["port"] = tl.frames["port"][keep].reset_index(drop=True)
    for t in (150.0, 160.0, 170.0):
        w = tl.window(t)
        at = recent_counters(w, "port", 30.0)
        pos = at.index.get_loc(EGRESS)
        host = at.index.get_loc(GPU_PORT)
        assert np.isfinite(traffic(w, 30.0, TrafficConfig()).tx_util[pos])
        assert at.first_ts()[pos] < w.end - 30  # reaches back past the kind's 30-s span
        assert at.first_ts()[host] == recent(w, "port", 30.0).first_ts()[host]  # a host keeps the kind's span


# --- pfc_storm read at the sender: the NIC's own sent-pause time (mlx5 tx_prioP_pause_duration) -----------


def _sender_reads(tl: Timeline, share: float, rate: float) -> None:
    """The NIC sends ``rate`` pauses a second on 3, holding its leaf port ``share`` of the time by its own
    count; the leaf, over OpenConfig gNMI, reports neither queue depth nor per-priority pause columns."""
    tl.put("port", "tx_pause_duration_p3_us_total", 0, port=NIC)
    tl.count("port", "tx_pause_duration_p3_us_total", share * 1e6, start=60, port=NIC)
    tl.count("port", "tx_pause_total", rate, start=60, port=NIC)
    tl.count("port", "rx_pause_total", rate, start=60, port=NIC_LEAF)
    tl.put("port", "queue_depth_bytes", np.nan, port=NIC_LEAF)


def test_a_nic_holding_its_partner_all_the_time_is_the_storm_source_where_the_switch_is_blind() -> None:
    found = findings_at("pfc_storm", lambda tl: _sender_reads(tl, 1.0, 20_000))
    assert _symptoms(found)["pfc_storm_source"] == {NIC}
    held = _paused_frac(found)
    assert (held["port"], held["read_at"], held["priority"]) == (NIC_LEAF, NIC, 3) and held["value"] >= 0.99


def test_a_nic_holding_its_partner_8_percent_of_the_time_is_no_storm() -> None:
    """Healthy all-reduce pauses read at the sender: the switch being blind changes nothing."""
    found = findings_at("pfc_storm", lambda tl: _sender_reads(tl, 0.08, 2000))
    assert "pfc_storm_source" not in _symptoms(found)


def _jittered(share: float) -> Callable[[Timeline], None]:
    """_sender_reads with the NIC's host stamping its scrapes up to 0.3 s off its 5-s period."""

    def edit(tl: Timeline) -> None:
        _sender_reads(tl, share, 20_000 * share)
        f = tl.frames["port"]
        mine = (f["source"] == TOPO.port_device[NIC].split("/")[0]).to_numpy()
        f.loc[mine, "ts"] = f.loc[mine, "ts"] + np.random.default_rng(3).uniform(-0.3, 0.3, int(mine.sum()))
        tl.frames["port"] = f.sort_values("ts", kind="stable").reset_index(drop=True)

    return edit


@pytest.mark.parametrize("at", [150.0, 160.0, 170.0, 180.0])
def test_a_storm_on_a_host_with_jittery_stamps_is_a_storm_every_tick(at: float) -> None:
    """Held all the time, read through stamps 0.3 s off: a single interval reads 88-112 %."""
    assert _symptoms(findings_at("pfc_storm", _jittered(1.0), at=at)).get("pfc_storm_source") == {NIC}


def test_a_priority_held_half_the_time_on_a_host_with_jittery_stamps_is_no_storm() -> None:
    assert "pfc_storm_source" not in _symptoms(findings_at("pfc_storm", _jittered(0.5)))


def _storm_reading_low_then_stopping(tl: Timeline) -> None:
    """A NIC holding its partner all the time from 60 s, read 98.5 % held from 130 s (its stamps
    scatter past their recent spread), still pausing at the same rate; from 160 s it stops pausing."""
    tl.put("port", "tx_pause_duration_p3_us_total", 0, port=NIC)
    tl.count("port", "tx_pause_duration_p3_us_total", 1e6, start=60, end=130, port=NIC)
    tl.count("port", "tx_pause_duration_p3_us_total", 0.985e6, start=130, end=160, port=NIC)
    tl.count("port", "tx_pause_total", 20_000, start=60, end=160, port=NIC)
    tl.count("port", "rx_pause_total", 20_000, start=60, end=160, port=NIC_LEAF)
    tl.put("port", "queue_depth_bytes", np.nan, port=NIC_LEAF)


@pytest.mark.parametrize(("at", "source"), [(150.0, True), (200.0, False)])
def test_a_storm_stays_a_storm_until_its_pauses_stop(at: float, source: bool) -> None:
    """The watchdog's restoration: a storm read at 98.5 % held while still pausing is the same storm
    (read alone, that interval is under the 99 % line); once its pause rate over the recent span is
    under the pausing rate, it is restored."""
    symptoms = _symptoms(findings_at("pfc_storm", _storm_reading_low_then_stopping, at=at))
    assert (symptoms.get("pfc_storm_source") == {NIC}) is source
    fresh = _symptoms(findings_at("pfc_storm", lambda tl: _sender_reads(tl, 0.985, 20_000), at=150.0))
    assert "pfc_storm_source" not in fresh  # never found storming: 98.5 % alone is under the line


def test_a_module_row_with_its_serial_unread_is_no_swap() -> None:
    """A CLI collector's N/A cell in the serial number (DESIGN §4b profile na_fraction) is not a new
    module: the lane's baseline stays, and its fade is still a drop."""

    def unread(w: Window) -> Window:
        mods = w.modules.copy()
        if w.end >= T0 + 130:
            mods.loc[mods["port"] == FAB.a, ["ts", "serial_number"]] = [T0 + 130, None]
        return Window(w.start, w.end, w.frames, mods, w.topology)

    def edit(tl: Timeline) -> None:
        tl.shift("optical", "tx_power_dbm", -2.0, start=120, port=FAB.a)

    assert ("tx_power_drop", FAB.a) in {(f.symptom, f.id) for f in findings_at("optical_baseline", edit, cut=unread)}


def test_a_slow_lane_ramping_down_is_a_drop_not_noise() -> None:
    """A leaf lane scraped every 30 s, first read at 60 s, loses 4 dB over the next minute (a
    contaminating connector): its first window of steps is the ramp, which must not be learnt as the
    lane's noise and hide the drop."""

    def edit(tl: Timeline) -> None:
        f = tl.frames["optical"]
        mine = (f["port"] == LEAF_PORT).to_numpy()
        since = f["ts"].to_numpy() - f.loc[mine, "ts"].min()
        late = since < 45  # it first reports at 60 s: its first noise reading falls in the ramp
        tl.frames["optical"] = f[~(mine & ((np.round(since) % 30 != 0) | late))].reset_index(drop=True)
        tl.shift("optical", "rx_power_dbm", -4.0, start=60, ramp=60, port=LEAF_PORT)

    for at in (150.0, 200.0, 240.0):
        found = {(f.symptom, f.id) for f in findings_at("optical_baseline", edit, at=at)}
        assert ("rx_power_drop", LEAF_PORT) in found, at

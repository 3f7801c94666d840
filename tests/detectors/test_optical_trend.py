"""Prediction (issue 9 item 7): a transmitter fading at 0.5 dB/hour is a warning with a forecast within
20 minutes; the module-temperature and bias moves of coolant drift and job load steps, a module
swap and healthy noise raise nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from fabricwatch.detectors.config import EngineConfig
from fabricwatch.detectors.engine import DetectionEngine
from fabricwatch.detectors.optical_trend import OpticalTrend
from fabricwatch.records import Finding, Window
from fabricwatch.topology import generate
from tests.detectors.synth import MODULE, Timeline, run_engine

TOPO = generate(16, rails=4, gpus_per_node=8)
HOST = TOPO.links[3]  # a GPU port and its leaf port
TX_PORT, RX_PORT = HOST.a, HOST.b
GPU_PORTS = [p for p in TOPO.ports if TOPO.port_device[p] in TOPO.gpu_node]
START = 300.0  # the decline starts 5 minutes in
RUN = START + 1500.0
DB_PER_H = 0.5
TEMPCO_DB_PER_C = -0.02  # a DOM whose tx reading follows the module's temperature a little


def fading(tl: Timeline) -> None:
    """tx falls 0.5 dB/h from START (the far end receives less), bias climbs as the laser ages."""
    ramp = RUN - START
    tl.shift("optical", "tx_power_dbm", -DB_PER_H * ramp / 3600, start=START, ramp=ramp, port=TX_PORT)
    tl.shift("optical", "rx_power_dbm", -DB_PER_H * ramp / 3600, start=START, ramp=ramp, port=RX_PORT)
    tl.shift("optical", "bias_ma", 1.0, start=START, ramp=ramp, port=TX_PORT)


def coolant_drift(tl: Timeline) -> None:
    """Every module warms 6 °C with the facility water; bias climbs, the tx reading follows a little."""
    tl.shift("optical", "module_temp_c", 6.0, start=START, ramp=RUN - START)
    tl.shift("optical", "bias_ma", 3.0, start=START, ramp=RUN - START)
    tl.shift("optical", "tx_power_dbm", 6.0 * TEMPCO_DB_PER_C, start=START, ramp=RUN - START)


def load_steps(tl: Timeline) -> None:
    """The job stops at START and restarts 10 minutes later: the GPUs' engines cool 8 °C and warm back."""
    for start, sign in ((START, -1.0), (START + 600, 1.0)):
        tl.shift("optical", "module_temp_c", sign * 8.0, start=start, ramp=60, port=GPU_PORTS)
        tl.shift("optical", "bias_ma", sign * 4.0, start=start, ramp=60, port=GPU_PORTS)
        tl.shift("optical", "tx_power_dbm", sign * 8.0 * TEMPCO_DB_PER_C, start=start, ramp=60, port=GPU_PORTS)


def module_swap(tl: Timeline) -> None:
    """A new module at START + 300 launches 0.6 dB lower, in spec, with its own part number."""
    at = START + 300
    tl.shift("optical", "tx_power_dbm", -0.6, start=at, port=TX_PORT)
    tl.shift("optical", "rx_power_dbm", -0.6, start=at, port=RX_PORT)
    swapped = tl.modules[tl.modules["port"] == TX_PORT].assign(ts=tl.start + at, part_number="QDD-400G-DR4-B")
    tl.modules = pd.concat([tl.modules, swapped], ignore_index=True)


def same_part_swap(tl: Timeline) -> None:
    """The same part number back 0.6 dB lower: only the link's drop and retrain tell the swap."""
    at = START + 300
    tl.shift("optical", "tx_power_dbm", -0.6, start=at, port=TX_PORT)
    tl.shift("optical", "rx_power_dbm", -0.6, start=at, port=RX_PORT)
    tl.count("port", "link_down_total", 1000, start=at - 2, end=at - 2 + 0.001, port=[TX_PORT, RX_PORT])


def run(edit: Callable[[Timeline], None], seed: int = 3) -> list[tuple[float, Finding]]:
    """Every tick's findings (seconds into the run, finding) of optical_trend over an edited timeline."""
    tl = Timeline(TOPO, duration=RUN, seed=seed)
    edit(tl)
    detector = OpticalTrend()
    out = []
    for t in tl.ticks(10.0, 60.0):
        w = tl.window(t)
        sent = w.modules[w.modules["ts"] <= w.end]  # a module row is known once sent
        out += [(t, f) for f in detector.detect(Window(w.start, w.end, w.frames, sent, w.topology))]
    return out


def test_a_half_db_per_hour_decline_is_a_warning_within_20_minutes_with_its_eta() -> None:
    found = run(fading)
    assert {f.id for _, f in found} == {TX_PORT}  # nothing anywhere else, ever
    first, f = found[0]
    assert START < first <= START + 20 * 60
    assert f.severity == "warning" and f.cause == "laser_degradation" and f.symptom == "tx_power_falling"
    (e,) = f.evidence
    assert e["threshold"] == MODULE["tx_power_low_alarm_dbm"]  # the module's own alarm, not a default
    # 1 dBm or so above a -6.4 dBm alarm at 0.5 dB/h: about 15 hours, well before the -3.4 warning
    expected = (e["value"] - e["threshold"]) / DB_PER_H * 3600
    assert e["eta_s"] == pytest.approx(expected, rel=0.5)
    assert f.attrs["forecast"] == {"metric": "tx_power_dbm", "threshold": e["threshold"], "eta_s": e["eta_s"]}
    late = [f for t, f in found if t > START + 20 * 60]
    assert late and all(f.evidence[0]["slope_db_per_h"] == pytest.approx(-DB_PER_H, rel=0.35) for f in late)


@pytest.mark.parametrize(
    "edit",
    [lambda tl: None, coolant_drift, load_steps, module_swap, same_part_swap],
    ids=["healthy", "coolant", "load", "swap", "same-part-swap"],
)
def test_legitimate_change_raises_no_forecast(edit: Callable[[Timeline], None]) -> None:
    assert run(edit) == []


def test_the_forecast_is_a_warning_incident_on_the_transmitter_and_survives_a_restart() -> None:
    tl = Timeline(TOPO, duration=RUN, seed=4)
    fading(tl)
    config = EngineConfig.only(["optical_trend", "optical_baseline", "optical_thresholds"])
    engine = DetectionEngine(TOPO, config)
    run_engine(engine, tl, until=START + 600)
    restarted = DetectionEngine(TOPO, config)
    restarted.restore(engine.snapshot())
    tail = Timeline(TOPO, duration=RUN, seed=4)
    fading(tail)
    changed = []
    for t in tail.ticks(10.0, START + 610):
        changed += restarted.run(tail.window(t), now=tail.start + t)
    (incident,) = {i.id: i for i in restarted.incidents()}.values()
    assert (incident.cause, incident.severity, incident.location) == (
        "laser_degradation",
        "warning",
        {"entity": "port", "id": TX_PORT},
    )
    assert any("eta_s" in e and e["metric"] == "tx_power_dbm" for e in incident.evidence)
    assert incident.detected_at <= tl.start + START + 20 * 60


def test_a_lanes_first_points_on_the_readings_rounding_staircase_are_no_trend() -> None:
    """Tools print dBm to 0.01 dB: a lane whose first points (one per 30 s) each read one count lower
    lies exactly on a line, which is rounding, not a fading laser (seen on a variant library: a spine
    uplink forecast to fail in 13 hours from its first three minutes of readings). Its readings then
    go on as a healthy lane's."""

    def staircase(tl: Timeline) -> None:
        def level(ts: np.ndarray) -> np.ndarray:  # one count lower in each point's span (ticks 60, 90, ...)
            return np.round(1.27 - 0.01 * np.maximum(np.ceil((ts - tl.start - 60.0) / 30.0), 0), 2)

        tl.put("optical", "tx_power_dbm", level, end=180.0, port=TX_PORT, lane=0)
        tl.put("optical", "module_temp_c", 40.0, end=180.0, port=TX_PORT, lane=0)  # steady: no regressor

    assert run(staircase) == []

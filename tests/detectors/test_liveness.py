"""Liveness: lost scrapes and silent sources are findings; a minute of silence is a collector incident,
and an incident resting on a silent source is ``unknown``, never resolved, until fresh data returns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fabricwatch.detectors.config import EngineConfig
from fabricwatch.detectors.engine import DetectionEngine
from fabricwatch.detectors.liveness import Liveness, _lost
from fabricwatch.topology import generate
from tests.detectors.synth import Timeline, run_engine

pytestmark = pytest.mark.timeout(120)

TOPO = generate(16, rails=4, gpus_per_node=8)


def findings_at(tl: Timeline, ticks: list[float]) -> list[list]:
    d = Liveness()
    return [d.detect(tl.window(t)) for t in ticks]


def test_a_source_silent_a_minute_asks_for_a_collector_incident_with_what_it_reported() -> None:
    tl = Timeline(TOPO, duration=240, seed=1)
    tl.silence("node001", start=100)
    out = findings_at(tl, [90, 100, 110, 120, 130, 170])
    silent = [[f for f in fs if f.symptom == "collector_silent"] for fs in out]
    assert silent[0] == [] and silent[1] == []  # not missed 3 scrapes yet
    (f,) = silent[3]  # 25 s of silence: a finding (warning), not yet an incident
    assert f.entity == "collector" and f.id == "node001" and f.severity == "warning" and not f.attrs["incident"]
    assert "node001/gpu2" in f.attrs["entities"] and "node001/gpu2:p0" in f.attrs["entities"]
    (f,) = silent[5]  # 75 s: an incident of its own
    assert f.attrs["incident"] and f.severity == "major"


def test_a_slow_cadence_is_not_silence() -> None:
    tl = Timeline(TOPO, duration=300, step=60.0, seed=2)
    out = findings_at(tl, [170, 230, 290])
    assert not [f for fs in out for f in fs if f.symptom == "collector_silent"]


@pytest.mark.parametrize(
    ("seq", "lost"),
    [
        ([1, 1, 2, 3, 4], 0),  # rows of one message share its seq
        ([1, 2, 5, 6], 2),  # two scrapes lost
        ([7, 8, 9, 0, 1, 2], 0),  # the agent restarted: a fall, not a loss
        ([1, 3, 0, 2], 2),  # a loss, a restart, a loss
    ],
)
def test_lost_scrapes_count_rises_of_seq_by_more_than_one(seq: list[int], lost: int) -> None:
    assert _lost(pd.DataFrame({"seq": seq})) == lost


def test_a_seq_gap_is_a_finding_of_its_own_and_never_an_incident() -> None:
    tl = Timeline(TOPO, duration=200, seed=3)
    for f in tl.frames.values():  # seq per source and kind: one per sample time
        f["seq"] = np.round((f["ts"] - tl.start) / tl.step).astype(np.int64)
    gpu = tl.frames["gpu"]
    tl.frames["gpu"] = gpu[~((gpu["source"] == "node000") & gpu["seq"].isin([20, 21]))].reset_index(drop=True)
    out = findings_at(tl, [130])[0]
    (gap,) = [f for f in out if f.symptom == "seq_gap"]
    assert (gap.id, gap.attrs["kind"], gap.attrs["lost"], gap.severity) == ("node000", "gpu", 2, "warning")
    engine = DetectionEngine(TOPO, EngineConfig.only(["liveness"]))
    assert run_engine(engine, tl) == []


def test_an_incident_whose_source_goes_silent_is_unknown_and_resolves_only_on_fresh_healthy_data() -> None:
    tl = Timeline(TOPO, duration=900, seed=4)
    tl.put("gpu", "xid", 79, start=60, end=200, device="node001/gpu3")  # its XID clears at the reset ...
    tl.silence("node001", start=200, end=500)  # ... while its collector is silent for 300 s
    engine = DetectionEngine(TOPO, EngineConfig.only(["gpu_xid", "liveness"]))
    states: dict[float, dict[str, str]] = {}
    run_engine(engine, tl, on_tick=lambda t, out: states.__setitem__(t, {i.id: i.status for i in out}))
    incidents = {i.id: i for i in engine.incidents()}
    xid = next(i for i in incidents.values() if i.cause == "gpu_xid")
    collector = next(i for i in incidents.values() if i.location["entity"] == "collector")
    assert collector.location["id"] == "node001" and collector.type == "collector_silent"
    assert collector.runbook == "collector-silent" and collector.status == "resolved"
    assert collector.resolved_at is not None and collector.resolved_at <= tl.start + 510  # back with its data
    became_unknown = [t for t, s in states.items() if s.get(xid.id) == "unknown"]
    assert became_unknown and 200 < became_unknown[0] <= 230  # three missed scrapes: unknown
    # silence is not health: not resolved during the 300 s outage (resolve_after_s is 120 s) ...
    assert xid.resolved_at is not None and xid.resolved_at >= tl.start + 500 + 120
    # ... and resolved on fresh healthy data: 120 s after the source came back
    assert xid.resolved_at <= tl.start + 500 + 120 + 20 and xid.status == "resolved"


def test_an_unknown_incident_fires_again_when_its_source_returns_with_the_fault() -> None:
    tl = Timeline(TOPO, duration=600, seed=5)
    tl.put("gpu", "xid", 79, start=60, device="node001/gpu3")
    tl.silence("node001", start=200, end=300)
    engine = DetectionEngine(TOPO, EngineConfig.only(["gpu_xid", "liveness"]))
    seen: list[tuple[float, str]] = []
    run_engine(engine, tl, on_tick=lambda t, out: seen.extend((t, i.status) for i in out if i.cause == "gpu_xid"))
    statuses = [s for _, s in seen]
    assert statuses == ["firing", "unknown", "firing"]
    (xid,) = [i for i in engine.incidents() if i.cause == "gpu_xid"]
    assert xid.status == "firing" and xid.resolved_at is None
    assert not [e for e in xid.evidence if e.get("metric") == "source_silent"]

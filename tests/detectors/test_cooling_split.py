"""A cooling loop judged against its peers across a split stage 1 (issue 7 item 3).

Two ``Stage1(split=True)`` processors each see half of the fault domains (every other node, every
other switch), so each loop's GPUs are split over both; their findings travel as the findings topic
carries them (JSON) into one ``Stage2``. A loop 8 °C warmer than its peers, below ``gpu_hot_c``, must
become the same cooling_failure incident, from the same ``cooling_loop_warm`` findings, as one engine
over all the data finds.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fabricwatch.detectors.config import EngineConfig
from fabricwatch.detectors.cooling_loop import SAMPLE, CoolingLoop, CoolingLoopConfig
from fabricwatch.detectors.engine import DetectionEngine
from fabricwatch.detectors.stage import CLUSTER_DETECTORS, Stage1, Stage2
from fabricwatch.records import Finding, Window
from fabricwatch.stream.findings import Found, decode, encode, tick_records
from fabricwatch.stream.keys import domain_of
from fabricwatch.topology import generate
from tests.detectors.synth import T0, Timeline

TOPO = generate(128, rails=8, gpus_per_node=8)  # two cooling loops of 8 nodes (64 GPUs) each
LOOP = "cl00"
WARM_C = 8.0  # over loop_excess_c (6) above its learnt excess, under loop_excess_abs_c (12): needs the baseline
DOMAINS = sorted({TOPO.fault_domain(n.name) for n in TOPO.nodes} | set(TOPO.switch_by_name))
HALF = {d: "AB"[i % 2] for i, d in enumerate(DOMAINS)}  # every other node and switch
KEY = {"gpu": "device", "switch": "device", "optical": "port", "port": "port", "module": "port"}


def timeline() -> Timeline:
    """Healthy, then cl00 warms by 8 °C from 150 s over 30 s and stays there (about 70 °C: not hot)."""
    tl = Timeline(TOPO, duration=330, seed=5)
    tl.shift("gpu", "temp_c", WARM_C, start=150, ramp=30, device=TOPO.gpus_of_loop(LOOP))
    return tl


def half(w: Window, name: str) -> Window:
    """What processor ``name`` sees of a window: the rows of its fault domains."""

    def mine(frame: pd.DataFrame, kind: str) -> pd.DataFrame:
        if frame.empty:
            return frame
        keep = frame[KEY[kind]].map(lambda e: HALF[domain_of(TOPO, e)] == name)
        return frame[keep.to_numpy(dtype=bool)].reset_index(drop=True)

    frames = {k: mine(f, k) for k, f in w.frames.items()}
    return Window(w.start, w.end, frames, mine(w.modules, "module"), TOPO)


def over_the_topic(tick: float, found: list[Finding], source: str) -> list[Finding]:
    """A stage-1 tick's findings as stage 2 reads them back from fabricwatch.findings."""
    records = tick_records([(tick, f) for f in found], [tick], source, TOPO)
    return [item.finding for item in map(decode, (r.value for r in records)) if isinstance(item, Found)]


def split_run(tl: Timeline, ticks: list[float], stage2: Stage2) -> list[list[Finding]]:
    """Ticks through processors A and B into ``stage2``; per tick, the findings stage 2 correlated."""
    stage1 = {name: Stage1(TOPO, split=True) for name in "AB"}
    out = []
    for t in ticks:
        w = tl.window(t)
        found = [f for name, s1 in stage1.items() for f in over_the_topic(w.end, s1.detect(half(w, name)), name)]
        stage2.run(found, tl.start + t)
        out.append(stage2.findings)
    return out


def warm(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.symptom == "cooling_loop_warm"]


@pytest.fixture(scope="module")
def tl() -> Timeline:
    return timeline()


@pytest.fixture(scope="module")
def ticks(tl: Timeline) -> list[float]:
    return list(tl.ticks(10.0, 60.0))


@pytest.fixture(scope="module")
def whole(tl: Timeline, ticks: list[float]) -> tuple[DetectionEngine, list[list[Finding]]]:
    engine = DetectionEngine(TOPO)
    per_tick = []
    for t in ticks:
        engine.run(tl.window(t), tl.start + t)
        per_tick.append(engine.findings)
    return engine, per_tick


def test_a_split_stage_1_finds_a_loop_warmer_than_its_peers_as_one_engine_does(tl, ticks, whole) -> None:
    assert not CLUSTER_DETECTORS  # every detector runs in a split stage 1
    engine, whole_findings = whole
    stage2 = Stage2(TOPO)
    split_findings = split_run(tl, ticks, stage2)

    (incident,) = stage2.incidents()
    assert (incident.cause, incident.location) == ("cooling_failure", {"entity": "cooling_loop", "id": LOOP})
    assert incident.status == "firing" and incident.severity == "major"  # warm, not hot
    assert [i.to_dict() for i in stage2.incidents()] == [i.to_dict() for i in engine.incidents()]
    # the same judgement, tick by tick, to the bit: level, peers, baseline, first_seen, last_seen
    assert [warm(fs) for fs in split_findings] == [warm(fs) for fs in whole_findings]
    assert any(warm(fs) for fs in split_findings)
    assert stage2.judges_snapshot() == engine.stage2.judges_snapshot()
    assert stage2.unconsumed == {} and stage2.errors == []
    assert not any(f.symptom == SAMPLE for fs in split_findings for f in fs)  # judged, never correlated


def test_samples_are_transport_and_stage_2_names_the_findings_its_judges_made(tl, ticks) -> None:
    """A split stage 1 publishes its samples but does not store them (``transport``, stream/processor.py);
    what the judge makes of them is in ``Stage2.judged`` each tick, which a live stage 2 stores."""
    assert Stage1(TOPO, split=True).transport == {SAMPLE}
    assert DetectionEngine(TOPO).transport == frozenset()  # one process stores its findings judged

    kept: list[list[Finding]] = []

    class Keeping(Stage2):
        def run(self, findings: list[Finding], now: float):  # type: ignore[override]
            changed = super().run(findings, now)
            kept.append(self.judged)
            return changed

    stage2 = Keeping(TOPO)
    per_tick = split_run(tl, ticks, stage2)
    assert kept == [warm(fs) for fs in per_tick] and any(kept)


def test_each_processor_samples_only_its_half_of_each_loop(tl) -> None:
    w = tl.window(200.0)
    samples = {
        name: {f.id: f for f in Stage1(TOPO, split=True).detect(half(w, name)) if f.symptom == SAMPLE} for name in "AB"
    }
    for loop in ("cl00", "cl01"):
        a, b = samples["A"][loop].attrs["gpus"], samples["B"][loop].attrs["gpus"]
        assert len(a) == len(b) == 32 and sorted(a + b) == TOPO.gpus_of_loop(loop)


def test_stage_2_restored_mid_run_keeps_the_loop_baselines(tl, ticks) -> None:
    """Restarted while the loop warms: with its saved baselines stage 2 still sees the rise; a stage 2
    that starts afresh there learns the warm loop as normal (an 8 °C excess is under loop_excess_abs_c)."""
    cut = ticks.index(170.0)  # 20 s into the warming
    whole = Stage2(TOPO)
    split_run(tl, ticks, whole)

    first = Stage2(TOPO)
    split_run(tl, ticks[:cut], first)
    state = json.loads(json.dumps(first.snapshot()))
    assert set(state["judges"]["cooling_loop"]["excess"]["keys"]) == {"cl00", "cl01"}
    resumed = Stage2(TOPO)
    resumed.restore(state)
    split_run(tl, ticks[cut:], resumed)
    assert [i.to_dict() for i in resumed.incidents()] == [i.to_dict() for i in whole.incidents()]
    assert json.dumps(resumed.snapshot(), sort_keys=True) == json.dumps(whole.snapshot(), sort_keys=True)

    afresh = Stage2(TOPO)
    afresh.tracker.restore(state["tracker"])  # the incidents, not the baselines
    split_run(tl, ticks[cut:], afresh)
    assert afresh.incidents() == []
    assert CoolingLoopConfig().loop_excess_abs_c > WARM_C


def test_a_state_saved_before_the_judge_restores_its_baselines(tl, ticks) -> None:
    """One process used to keep the loop baselines with the stage-1 detector: such a state still
    restores them, now into stage 2's judge."""
    engine = DetectionEngine(TOPO)
    for t in ticks[:6]:
        engine.run(tl.window(t), tl.start + t)
    state = json.loads(json.dumps(engine.snapshot()))
    old = {**state, "detectors": {**state["detectors"], "cooling_loop": state.pop("judges")["cooling_loop"]}}
    again = DetectionEngine(TOPO)
    again.restore(old)
    assert again.stage2.judges_snapshot() == engine.stage2.judges_snapshot()


def test_a_malformed_sample_is_a_judge_error_and_the_rest_is_still_correlated() -> None:
    bad = Finding("cooling_loop", SAMPLE, "cooling_loop", LOOP, 100.0, 110.0, "warning", attrs={"gpus": []})
    xid = Finding("gpu_xid", "gpu_xid", "gpu", "node001/gpu0", 100.0, 110.0, "critical",
                  evidence=({"metric": "xid", "value": 79},), cause="gpu_xid")  # fmt: skip
    stage2 = Stage2(TOPO, EngineConfig(open_after_s=1.0))
    stage2.run([bad, xid], 120.0)
    assert stage2.errors == ["cooling_loop: KeyError: 'end'"]
    assert stage2.findings == [xid] and stage2.unconsumed == {} and stage2.judged == []


def test_a_tick_of_samples_is_about_38_kb_for_1024_gpus() -> None:
    """The figure in detectors/cooling_loop.py: temperatures and utilisation in whole units (as
    nvidia-smi and NVML read them), 60 s scraped every 5 s, each node at its own phase."""
    topo = generate(1024)
    rng = np.random.default_rng(0)
    gpus = np.array(topo.gpus, dtype=object)
    end = T0 + 60.0
    phase = rng.uniform(0.0, 0.9, len(gpus) // 8).round(3).repeat(8)
    ts = ((end - 60.0 + np.arange(0.0, 60.0, 5.0))[:, None] + phase[None, :]).ravel()
    device = np.tile(gpus, len(ts) // len(gpus))
    spread = np.tile(rng.normal(0.0, 2.5, len(gpus)), len(ts) // len(gpus))
    frame = pd.DataFrame({"ts": ts, "source": [d.split("/")[0] for d in device], "device": device,
                          "temp_c": (62 + spread + rng.normal(0, 0.7, len(ts))).round(),
                          "util_pct": np.clip(95 + rng.normal(0, 2, len(ts)), 0, 100).round()})  # fmt: skip
    window = Window(end - 60.0, end, {"gpu": frame.sort_values("ts", kind="stable")}, pd.DataFrame(), topo)
    samples = CoolingLoop().detect(window)
    sizes = [len(encode(end, f, "processor-0")) for f in samples if f.symptom == SAMPLE]
    assert len(sizes) == 16 and max(sizes) < 2600
    assert 36_000 < sum(sizes) < 40_000  # about 37 bytes per GPU, per-loop fields included

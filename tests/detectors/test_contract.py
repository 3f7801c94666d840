"""One contract for every registered detector (STYLE item 9): what the engine relies on.

No input mutation; empty and missing data are fine; the same windows give the same findings;
learnt state round-trips through JSON; findings are well-formed and JSON-able. Each declares the
symptoms it emits (and emits no other), every one of them read by a correlation rule or by its own
stage-2 judge, and carries a frozen config that rejects unknown keys. A judge's findings are held to
the same: well-formed, declared, read by a correlation rule, its state round-tripping through JSON.
"""

from __future__ import annotations

import json
import logging

import msgspec
import numpy as np
import pandas as pd
import pytest

from fabricwatch.detectors.base import DETECTORS, Detector, Judge, detector_class
from fabricwatch.detectors.config import DetectorConfig, EngineConfig
from fabricwatch.detectors.correlate import CONSUMED, Correlator
from fabricwatch.detectors.engine import DetectionEngine
from fabricwatch.detectors.stage import Stage2
from fabricwatch.errors import InputError
from fabricwatch.incident import ENTITIES, SEVERITIES
from fabricwatch.records import Finding, Window
from fabricwatch.schema import KINDS
from fabricwatch.topology import generate
from tests.detectors.synth import Timeline, empty_window

TOPO = generate(128, rails=8, gpus_per_node=8)
NAMES = sorted(DETECTORS)
JUDGED = [n for n in NAMES if detector_class(n).judge is not None]  # detectors with a stage-2 part
FAB = TOPO.links[200]
HOST = TOPO.port_link["node002/gpu1:p0"]


def faulty_timeline() -> Timeline:
    """Something for every detector to find, so the contract is checked on findings, not on []."""
    tl = Timeline(TOPO, duration=240, seed=9)
    tl.shift("gpu", "temp_c", 26.0, start=100, device="node002/gpu1")
    tl.put("gpu", "xid", 48, start=100, device="node003/gpu2")
    tl.shift("gpu", "temp_c", 12.0, start=100, device=TOPO.gpus_of_loop("cl01"))
    tl.shift("optical", "rx_power_dbm", -4.5, start=100, port=HOST.b)
    tl.shift("optical", "module_temp_c", 12.0, start=100, port="node002/gpu1:p0")
    tl.put("port", "pre_fec_ber", 1e-3, start=100, port=FAB.b)
    tl.count("port", "fec_uncorrectable_total", 20, start=100, port=FAB.b)
    tl.count("port", "rx_crc_errors_total", 200_000, start=100, port=FAB.b)  # ~3 % of its frames
    tl.put("port", "state", 0, start=150, port=FAB.a)
    tl.shift("optical", "tx_power_dbm", -3.0, ramp=240, port=TOPO.links[210].a)  # a fading laser
    hot = "leaf3-0:p00"
    tl.count("port", "tx_bytes_total", 0.38 * 50e9, start=100, port=hot)
    tl.put("port", "queue_depth_bytes", 4_000_000, start=100, port=hot)
    tl.count("port", "tx_pause_total", 5000, start=100, port="leaf3-0:p64")
    tl.count("port", "tx_pause_total", 20000, start=100, port="node001/gpu2:p0")
    tl.freeze("port", "rx_bytes_total", start=100, port="node001/gpu2:p0")
    tl.silence("leaf6-0", start=120)  # a collector goes silent (liveness)
    return tl


TIMELINE = faulty_timeline()
TICKS = list(TIMELINE.ticks(10.0, 60.0))


def run(detector: Detector, ticks: list[float] = TICKS) -> list[list[Finding]]:
    return [detector.detect(TIMELINE.window(t)) for t in ticks]


def frozen(w: Window) -> dict[str, pd.DataFrame]:
    return {k: f.copy(deep=True) for k, f in w.frames.items()} | {"modules": w.modules.copy(deep=True)}


@pytest.mark.parametrize("name", NAMES)
def test_finds_something_in_the_faulty_timeline(name: str) -> None:
    """Guards the rest of this suite: every detector has findings to check here."""
    assert any(run(detector_class(name)()))


@pytest.mark.parametrize("name", NAMES)
def test_does_not_mutate_its_input(name: str) -> None:
    detector = detector_class(name)()
    for t in TICKS:
        w = TIMELINE.window(t)
        before = frozen(w)
        detector.detect(w)
        after = frozen(w)
        for kind, frame in before.items():
            pd.testing.assert_frame_equal(after[kind], frame, obj=f"{name} changed {kind} at {t}")


@pytest.mark.parametrize("name", NAMES)
def test_empty_window_is_fine(name: str) -> None:
    assert detector_class(name)().detect(empty_window(TOPO)) == []


@pytest.mark.parametrize("name", NAMES)
def test_missing_kinds_are_fine(name: str) -> None:
    w = TIMELINE.window(200)
    bare = Window(w.start, w.end, {}, pd.DataFrame(), TOPO)
    assert detector_class(name)().detect(bare) == []


@pytest.mark.parametrize("name", NAMES)
def test_missing_value_columns_and_nulls_are_tolerated(name: str) -> None:
    """A source that cannot read a value omits the column or sends null: never a crash."""
    detector = detector_class(name)()
    for t in TICKS:
        w = TIMELINE.window(t)
        frames = {}
        for kind, frame in w.frames.items():
            keys = {"ts", "source", *(c.name for c in KINDS[kind].keys)}
            values = [c for c in frame.columns if c not in keys]
            frame = frame.drop(columns=values[::2])  # every other value column gone
            for column in values[1::2]:
                if column in frame.columns and frame[column].dtype.kind in "fi":
                    frame[column] = frame[column].astype("float64").where(np.arange(len(frame)) % 3 != 0)
            frames[kind] = frame
        found = detector.detect(Window(w.start, w.end, frames, w.modules.iloc[0:0], TOPO))
        assert isinstance(found, list)


@pytest.mark.parametrize("name", NAMES)
def test_same_windows_same_findings(name: str) -> None:
    assert repr(run(detector_class(name)())) == repr(run(detector_class(name)()))


@pytest.mark.parametrize("name", NAMES)
def test_state_round_trips_through_json(name: str) -> None:
    first = detector_class(name)()
    head, tail = TICKS[: len(TICKS) // 2], TICKS[len(TICKS) // 2 :]
    run(first, head)
    state = json.loads(json.dumps(first.snapshot()))
    second = detector_class(name)()
    second.restore(state)
    assert json.dumps(second.snapshot(), sort_keys=True) == json.dumps(first.snapshot(), sort_keys=True)
    assert repr(run(second, tail)) == repr(run(first, tail))


@pytest.mark.parametrize("name", NAMES)
def test_findings_are_well_formed(name: str) -> None:
    detector = detector_class(name)()
    for t, found in zip(TICKS, run(detector), strict=True):
        for f in found:
            assert f.detector == name
            assert f.symptom in detector.emits, f"{name} emits {f.symptom!r} but does not declare it"
            assert f.entity in ENTITIES and f.severity in SEVERITIES and f.id
            assert f.first_seen <= f.last_seen <= TIMELINE.start + t
            assert f.first_seen >= TIMELINE.start + t - 60 - 300  # window (or, for flaps, memory) bounded
            assert np.isfinite(f.score)
            json.dumps([f.evidence, f.attrs])  # JSON-able as stored by the processor
            assert all("metric" in e for e in f.evidence)


@pytest.mark.parametrize("name", NAMES)
def test_every_emitted_symptom_is_consumed_by_a_correlation_rule(name: str) -> None:
    """A symptom no rule reads would never become an incident: declare a rule for it (CONSUMES). A
    detector's samples for its stage-2 judge are read by the judge, whose findings a rule reads."""
    cls = detector_class(name)
    emits = cls.emits
    assert emits, f"{name} declares no symptoms"
    judged = cls.judge.reads if cls.judge is not None else frozenset()
    assert sorted(emits - CONSUMED - judged) == []
    if cls.judge is not None:
        assert cls.judge.name == name and cls.judge.emits and sorted(cls.judge.emits - CONSUMED) == []


def judged(name: str, ticks: list[float] = TICKS, judge: Judge | None = None) -> list[list[Finding]]:
    """The detector's findings per tick through its stage-2 judge, as one process runs them."""
    cls = detector_class(name)
    judge = judge if judge is not None else cls.judge(cls.Config())
    detector = cls()
    return [judge.judge(found) for found in run(detector, ticks)]


@pytest.mark.parametrize("name", JUDGED)
def test_a_judges_findings_are_well_formed(name: str) -> None:
    judge_cls = detector_class(name).judge
    found = judged(name)
    assert any(found)
    for t, fs in zip(TICKS, found, strict=True):
        for f in fs:
            assert f.detector == name and f.symptom in judge_cls.emits
            assert f.entity in ENTITIES and f.severity in SEVERITIES and f.id
            assert f.first_seen <= f.last_seen <= TIMELINE.start + t
            assert f.first_seen >= TIMELINE.start + t - 60
            assert np.isfinite(f.score)
            json.dumps([f.evidence, f.attrs])
            assert all("metric" in e for e in f.evidence)


@pytest.mark.parametrize("name", JUDGED)
def test_a_judges_state_round_trips_through_json(name: str) -> None:
    cls = detector_class(name)
    head, tail = TICKS[: len(TICKS) // 2], TICKS[len(TICKS) // 2 :]
    first = cls.judge(cls.Config())
    judged(name, head, first)
    state = json.loads(json.dumps(first.snapshot()))
    second = cls.judge(cls.Config())
    second.restore(state)
    assert json.dumps(second.snapshot(), sort_keys=True) == json.dumps(first.snapshot(), sort_keys=True)
    assert repr(judged(name, tail, second)) == repr(judged(name, tail, first))


@pytest.mark.parametrize("name", JUDGED)
def test_samples_for_a_judge_are_not_counted_as_unconsumed(name: str) -> None:
    stage2 = Stage2(TOPO)
    for t, found in zip(TICKS, run(detector_class(name)()), strict=True):
        assert any(f.symptom in detector_class(name).judge.reads for f in found)
        stage2.run(found, TIMELINE.start + t)
        assert stage2.unconsumed == {} and stage2.errors == []


@pytest.mark.parametrize("name", NAMES)
def test_config_is_frozen_typed_and_rejects_unknown_keys(name: str) -> None:
    cls = detector_class(name)
    assert issubclass(cls.Config, DetectorConfig) and cls.Config is not DetectorConfig
    config = cls.Config()
    with pytest.raises(AttributeError):
        config.enabled = False  # type: ignore[misc]
    assert msgspec.convert(config.to_dict(), cls.Config) == config
    with pytest.raises(InputError, match=rf"detectors\.{name}\.no_such_threshold: unknown key"):
        EngineConfig.from_dict({"detectors": {name: {"no_such_threshold": 1}}})


class Misspelt(Detector):
    """Emits a symptom no rule reads, as a detector with a typo would."""

    name = "misspelt"
    emits = frozenset({"gpu_hott"})

    def detect(self, window: Window) -> list[Finding]:
        return [
            Finding(detector=self.name, symptom="gpu_hott", entity="gpu", id=g, first_seen=window.end,
                    last_seen=window.end, severity="major")
            for g in ("node000/gpu0", "node000/gpu1")
        ]  # fmt: skip


def test_an_unconsumed_finding_is_counted_and_logged_once(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    monkeypatch.setitem(DETECTORS, "misspelt", f"{__name__}:Misspelt")
    engine = DetectionEngine(TOPO, EngineConfig.only(["misspelt", "gpu_xid"]))
    with caplog.at_level(logging.WARNING, logger="fabricwatch.detectors.correlate"):
        for t in (120, 130, 140):
            changed = engine.run(TIMELINE.window(t), TIMELINE.start + t)
            assert {i.cause for i in changed} <= {"gpu_xid"}  # the misspelt symptom opens nothing
            assert engine.unconsumed == {"gpu_hott": 2}
    warnings = [r.getMessage() for r in caplog.records if "gpu_hott" in r.getMessage()]
    assert len(warnings) == 1 and "misspelt" in warnings[0] and "no correlation rule" in warnings[0]


def test_consumed_symptoms_are_not_counted() -> None:
    correlator = Correlator(TOPO)
    findings = [f for found in run(detector_class("gpu_xid")()) for f in found]
    assert findings
    correlator.correlate(findings)
    assert correlator.unconsumed == {}

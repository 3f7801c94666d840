"""A silent collector in the stored library: its own incident (entity collector), never a false fabric
one; an incident it reported stays open through the silence."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.app.library import load_scenario, run_scenario
from fabricwatch.app.score import score
from fabricwatch.incident import Incident

pytestmark = pytest.mark.timeout(300)
LIB = Path(__file__).resolve().parents[2] / "replay" / "library"


def test_a_collector_silent_90_s_is_one_collector_incident_and_no_false_fabric_incident() -> None:
    result = run_scenario(load_scenario(LIB / "collector-outage.yaml"))
    (inc,) = result.incidents
    assert (inc.type, inc.location, inc.runbook) == ("collector_silent", {"entity": "collector", "id": "node001"},
                                                      "collector-silent")  # fmt: skip
    assert inc.status == "resolved"  # its data came back
    assert result.passed and result.false_incidents == []


def test_an_incident_of_a_silent_source_is_never_resolved_by_the_silence() -> None:
    result = run_scenario(load_scenario(LIB / "collector-outage-during-fault.yaml"))
    assert result.passed
    (thermal,) = [i for i in result.incidents if i.cause == "gpu_thermal"]
    assert thermal.status == "firing" and thermal.resolved_at is None


def test_score_counts_no_collector_incident_as_a_false_alarm() -> None:
    collector = Incident("inc-0001", "collector_silent", "collector_silent", {"entity": "collector", "id": "n1"},
                         "major", 0.0, 60.0)  # fmt: skip
    link = Incident("inc-0002", "link_down", "link_down", {"entity": "link", "id": "L1"}, "critical", 0.0, 60.0)
    assert [i.id for i in score([], [collector, link], 0.0).false_alarms] == ["inc-0002"]


def test_replay_batches_hide_no_timing_the_same_incidents_record_by_record_or_2000_at_a_time() -> None:
    from fabricwatch.replay.run import replay

    capture = LIB / "clock-skew-with-faults.jsonl.gz"  # a clock 60 s fast beside two step faults
    big = replay(capture).incidents
    small = replay(capture, batch_records=3).incidents
    assert [i.to_dict() for i in small] == [i.to_dict() for i in big]
    assert {i.cause for i in big} == {"link_down", "gpu_xid"}

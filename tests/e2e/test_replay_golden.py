"""Golden replays: each case simulates a capture from its fault file, replays it through the whole
pipeline, and must give exactly the incidents in ``expected_incidents.json`` — and, independently of
the golden file, find every injected fault at its place with its cause and raise nothing else.

Set FABRICWATCH_UPDATE_GOLDEN=1 to rewrite the expected files after a reviewed change.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from fabricwatch.app.score import score
from fabricwatch.collectors.sim import simulate_capture
from fabricwatch.faults import load_plan
from fabricwatch.replay.run import incidents_json, replay
from fabricwatch.topology import generate

CASES = sorted(p for p in (Path(__file__).parents[1] / "golden" / "replay").iterdir() if p.is_dir())


def simulate(case: Path, tmp_path: Path) -> Path:
    spec = yaml.safe_load((case / "case.yaml").read_text())
    topo = generate(**spec["topology"])
    plan = load_plan(case / "faults.yaml", topo)
    out = tmp_path / "capture.jsonl.gz"
    simulate_capture(topo, plan, float(spec["duration"]), float(spec["interval"]), out, progress=False)
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_replay(case, tmp_path):
    capture = simulate(case, tmp_path)
    result = replay(capture)
    got = incidents_json(result.incidents)
    expected = case / "expected_incidents.json"
    if os.environ.get("FABRICWATCH_UPDATE_GOLDEN") == "1":
        expected.write_bytes(got)
    assert got.decode() == expected.read_text()

    s = score(result.truth, result.incidents, result.first_ts)
    missed = [(m.fault["cause"], m.incident and m.incident.cause) for m in s.matches if not (m.located and m.cause_ok)]
    assert missed == []
    assert [i.id for i in s.false_alarms] == []
    assert result.errors == [] and result.deadletters == 0


def test_replay_is_byte_identical_across_runs(tmp_path):
    capture = simulate(CASES[0], tmp_path)
    assert incidents_json(replay(capture).incidents) == incidents_json(replay(capture).incidents)

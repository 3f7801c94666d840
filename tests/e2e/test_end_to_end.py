"""End to end on the simulator: the demo's faults found by a replay, and a healthy run that is quiet."""

from __future__ import annotations

from fabricwatch.app.demo import default_faults, run_demo
from fabricwatch.app.score import score
from fabricwatch.cli import main
from fabricwatch.collectors.sim import simulate_capture
from fabricwatch.faults import FaultPlan
from fabricwatch.replay.run import replay
from fabricwatch.topology import generate


def test_the_demos_faults_are_detected_and_located_by_a_replay(tmp_path):
    topo = generate(1024, 8, 8)
    faults = default_faults(topo)
    capture = tmp_path / "demo.jsonl"
    simulate_capture(topo, FaultPlan(7, tuple(faults)), 420.0, 5.0, capture, progress=False)
    result = replay(capture)
    s = score(result.truth, result.incidents, result.first_ts)
    assert [(m.fault["cause"], m.located, m.cause_ok) for m in s.matches] == [
        (f.cause, True, True) for f in sorted(faults, key=lambda f: f.start)
    ]
    assert s.false_alarms == []
    assert all(m.latency_s is not None and 0 < m.latency_s < 150 for m in s.matches)


def test_the_demo_and_a_replay_of_the_same_simulation_give_the_same_incidents(tmp_path):
    """One loop: the demo (simulator → in-memory bus) and replay (capture → CaptureBus) store the same rows
    and raise the same incidents, ids and times included."""
    topo = generate(128, 8, 8)
    faults = default_faults(topo)
    demo = run_demo(topo, faults, duration=360.0, interval=5.0, seed=7, db=tmp_path / "demo.duckdb")
    capture = tmp_path / "demo.jsonl"
    simulate_capture(topo, FaultPlan(7, tuple(faults)), 360.0, 5.0, capture, progress=False)
    replayed = replay(capture)
    assert len(demo.incidents) == 5 and demo.rows == demo.produced_rows == replayed.rows
    assert [i.to_dict() for i in demo.incidents] == [i.to_dict() for i in replayed.incidents]


def test_a_healthy_twenty_minutes_of_128_gpus_gives_no_incident(tmp_path):
    topo = generate(128, 8, 8)
    capture = tmp_path / "healthy.jsonl"
    simulate_capture(topo, FaultPlan(2024, ()), 1200.0, 5.0, capture, progress=False)
    result = replay(capture, db=tmp_path / "healthy.duckdb")
    assert result.incidents == []
    assert result.rows > 600_000 and result.deadletters == 0


def test_demo_command_runs_small_and_reports(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps at 80 columns when not on a terminal
    db = tmp_path / "demo.duckdb"
    code = main(["demo", "--gpus", "128", "--duration", "360", "--db", str(db)])
    out = capsys.readouterr().out
    assert code == 0
    assert "ground truth: 5/5 injected faults found at the right place with the right cause; 0 incidents" in out
    assert db.exists() and f"fabricwatch query --db {db}" in out


def test_the_demo_shapes_its_telemetry_with_the_given_pathologies(tmp_path):
    """Pathologies reach the demo's simulator: a node collector silent for the whole run stores nothing."""
    from fabricwatch.pathologies import parse_pathologies

    topo = generate(64, 8, 8)
    silent = parse_pathologies(
        [{"kind": "collector_outage", "source": "node001", "start": 0, "duration": 600}], topo, "test"
    )
    tidy = run_demo(topo, [], duration=60.0, interval=5.0, seed=7, db=tmp_path / "tidy.duckdb")
    messy = run_demo(topo, [], duration=60.0, interval=5.0, seed=7, db=tmp_path / "messy.duckdb", pathologies=silent)
    assert 0 < messy.rows < tidy.rows and messy.rows == messy.produced_rows


def test_demo_command_is_realistic_by_default_and_names_the_pathologies_it_applies(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    code = main(["demo", "--gpus", "64", "--duration", "60", "--db", str(tmp_path / "d.duckdb")])
    out = capsys.readouterr().out
    assert code == 0, out
    line = next(x for x in out.splitlines() if "shaped like production:" in x)
    for kind in ("clock_skew", "collector_outage", "maintenance", "spare_port"):
        assert kind in line
    code = main(["demo", "--gpus", "64", "--duration", "60", "--tidy", "--db", str(tmp_path / "t.duckdb")])
    out = capsys.readouterr().out
    assert code == 0 and "shaped like production" not in out, out

"""DESIGN §5's optional incident fields: ``forecast`` for a predicted crossing and ``source_offsets``
where a clock offset shaped the evidence; absent (not null) when there is nothing to say, and kept in
the DuckDB incidents table, also in a file made before they existed."""

from __future__ import annotations

import json

import duckdb

from fabricwatch import topology
from fabricwatch.detectors.correlate import Correlator
from fabricwatch.detectors.stage import with_offsets
from fabricwatch.detectors.tracker import IncidentTracker
from fabricwatch.incident import Incident
from fabricwatch.records import Finding, Window
from fabricwatch.stream.store import Store

TOPO = topology.generate(128, rails=8, gpus_per_node=8)
PORT = "node002/gpu1:p0"
LINK = TOPO.port_link[PORT]
FORECAST = {"metric": "tx_power_dbm", "threshold": -5.9, "eta_s": 14400}


def falling(eta_s: int, port: str = PORT) -> Finding:
    forecast = {**FORECAST, "eta_s": eta_s}
    return Finding("optical_trend", "tx_power_falling", "port", port, 100.0, 100.0, "warning",
                   ({"metric": "tx_power_dbm", "port": port, "eta_s": eta_s},), "laser_degradation", 0.5,
                   {"lanes": [0], "lanes_total": 4, "forecast": forecast})  # fmt: skip


def test_a_trend_towards_the_alarm_gives_its_incident_the_soonest_forecast() -> None:
    (d,) = Correlator(TOPO).correlate([falling(20_000), falling(14_400, LINK.b)])
    tracker = IncidentTracker()
    for now in (100.0, 110.0, 120.0):  # a judgement, not a step: it holds for the debounce first
        assert tracker.update([d], now) == []
    (incident,) = tracker.update([d], 130.0)
    assert incident.cause == "laser_degradation" and incident.severity == "warning"
    assert incident.to_dict()["forecast"] == FORECAST


def test_optional_fields_are_absent_not_null_and_survive_a_round_trip() -> None:
    plain = Incident("inc-0001", "link_down", "link_down", {"entity": "link", "id": "L1"}, "critical", 1.0, 2.0)
    assert "forecast" not in plain.to_dict() and "source_offsets" not in plain.to_dict()
    full = Incident("inc-0002", "link_degradation", "laser_degradation", {"entity": "port", "id": PORT},
                    "warning", 1.0, 2.0, forecast=FORECAST, source_offsets={"node002": 60.0})  # fmt: skip
    assert Incident.from_dict(json.loads(json.dumps(full.to_dict()))) == full


def test_a_finding_from_a_corrected_clock_says_so_and_its_incident_too() -> None:
    window = Window(0.0, 60.0, {}, None, TOPO, source_offsets={"node002": 59.8})  # type: ignore[arg-type]
    down = Finding("link_state", "link_down", "port", PORT, 10.0, 50.0, "critical", ({"metric": "state"},))
    other = Finding("link_state", "link_down", "port", "node005/gpu1:p0", 10.0, 50.0, "critical", ())
    noted = with_offsets([down, other], window)
    assert noted[0].attrs == {"source_offsets": {"node002": 59.8}} and noted[1].attrs == {}
    (d,) = [d for d in Correlator(TOPO).correlate(noted) if d.id == LINK.id]
    (incident,) = IncidentTracker().update([d], 60.0)
    assert incident.to_dict()["source_offsets"] == {"node002": 59.8}


def test_the_incidents_table_keeps_them_and_an_older_file_gets_the_columns(tmp_path) -> None:
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute(  # the table as it was before the optional fields were stored
        """CREATE TABLE incidents (
        id VARCHAR PRIMARY KEY, type VARCHAR, cause VARCHAR, location_entity VARCHAR, location_id VARCHAR,
        severity VARCHAR, first_seen TIMESTAMP, detected_at TIMESTAMP, resolved_at TIMESTAMP,
        evidence JSON, symptoms VARCHAR[], runbook VARCHAR, status VARCHAR)"""
    )
    con.close()
    incident = Incident("inc-0001", "link_degradation", "laser_degradation", {"entity": "port", "id": PORT},
                        "warning", 1.0, 2.0, forecast=FORECAST)  # fmt: skip
    with Store(path) as store:
        store.write_batch(incidents=[incident])
        row = store.con.execute("SELECT forecast, source_offsets FROM incidents").fetchone()
    assert json.loads(row[0]) == FORECAST and row[1] is None

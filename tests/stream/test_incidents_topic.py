"""The incidents topic keeps every change of one incident in one partition, in order."""

from __future__ import annotations

import dataclasses

import orjson

from fabricwatch.incident import Incident
from fabricwatch.schema import TOPIC_INCIDENTS
from fabricwatch.stream.incidents import incident_record

PORT = Incident(
    "inc-s2a-0007", "link_degradation", "connector_contamination", {"entity": "port", "id": "leaf0-0:p17"},
    "major", 100.0, 130.0,
)  # fmt: skip


def test_a_refined_location_keeps_the_key() -> None:
    """Opened on a port, refined to its link, then resolved: one key, so one partition and one order."""
    link = dataclasses.replace(PORT, location={"entity": "link", "id": "L00017"}, detected_at=140.0)
    resolved = dataclasses.replace(link, status="resolved", resolved_at=400.0)
    records = [incident_record(i) for i in (PORT, link, resolved)]
    assert {r.key for r in records} == {"inc-s2a-0007"}
    assert {r.topic for r in records} == {TOPIC_INCIDENTS}
    assert [orjson.loads(r.value)["location"]["id"] for r in records] == ["leaf0-0:p17", "L00017", "L00017"]


def test_the_value_is_the_design_json() -> None:
    record = incident_record(PORT)
    assert orjson.loads(record.value) == PORT.to_dict()
    assert record.ts == PORT.detected_at

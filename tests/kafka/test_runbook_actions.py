"""Runbook decisions reach the actions topic on the real broker, keyed by fault domain."""

from __future__ import annotations

import json
import uuid

import pytest

from fabricwatch.runbooks.audit import kafka_publisher
from fabricwatch.stream.kafka import KafkaBus
from fabricwatch.topology import generate
from tests.kafka.test_kafka_bus import drain
from tests.runbooks.support import Rig, incident

pytestmark = pytest.mark.kafka


def test_every_decision_is_published_to_the_actions_topic(kafka_bootstrap: str) -> None:
    topic = f"fabricwatch.actions.test-{uuid.uuid4().hex[:8]}"  # the broker is shared: a topic of our own
    producer = KafkaBus(kafka_bootstrap, partitions=2, topics=[topic])
    producer.ensure_topics()
    topo = generate(128, 8, 8)
    rig = Rig(topo, publish=kafka_publisher(producer, topic))
    rig.executor.run(incident("inc-1", "connector_contamination", "link", "L00128", "clean-connector"))
    producer.flush(30)
    producer.close()
    rows = rig.audit("inc-1")
    reader = KafkaBus(kafka_bootstrap, group_id=f"test-{uuid.uuid4().hex[:8]}", topics=[topic])
    reader.subscribe([topic])
    got = drain(reader, len(rows), timeout_s=60)
    reader.close()
    assert sorted(json.loads(r.value)["outcome"] for r in got) == sorted(o for o, _, _ in rows)
    assert {r.key for r in got} == {"leaf0-0"}
    assert "executed" in {json.loads(r.value)["outcome"] for r in got}

"""Incidents and findings leave the processor on their Kafka topics, in the JSON of DESIGN §5."""

from __future__ import annotations

import json
import threading

import pytest

from fabricwatch.clock import VirtualClock
from fabricwatch.collectors.sim import Simulator
from fabricwatch.faults import Fault
from fabricwatch.schema import TOPIC_FINDINGS, TOPIC_INCIDENTS
from fabricwatch.stream.keys import outgoing_batched
from fabricwatch.topology import generate
from tests.kafka.helpers import wait_until
from tests.kafka.test_kafka_bus import drain

pytestmark = pytest.mark.kafka


def test_an_xid_reaches_the_incidents_and_findings_topics(kafka, tmp_path) -> None:
    from fabricwatch.detectors.engine import DetectionEngine
    from fabricwatch.stream.consume import ProcessingLoop
    from fabricwatch.stream.kafka import KafkaBus
    from fabricwatch.stream.processor import Processor
    from fabricwatch.stream.store import Store

    topo = generate(64, 8, 8)
    sim = Simulator(topo, [Fault("gpu_xid", "node003/gpu1", 30.0, options={"xid": 48})], seed=9, interval=5.0)
    producer = KafkaBus(kafka.bootstrap, partitions=kafka.partitions)
    for _ in range(30):  # 150 s of telemetry
        producer.produce(outgoing_batched(sim.step(), topo))
    producer.flush(30)

    store = Store(tmp_path / "p.duckdb", group=kafka.group)
    processor = Processor(topo, store, clock=VirtualClock(), engine=DetectionEngine(topo))
    loop = ProcessingLoop(KafkaBus(kafka.bootstrap, group_id=kafka.group), processor)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: loop.stats.incidents > 0, 120, "an incident")
    finally:
        stop.set()
        thread.join(30)
        store.close()

    reader = KafkaBus(kafka.bootstrap, group_id=kafka.group + "-read")
    reader.subscribe([TOPIC_INCIDENTS, TOPIC_FINDINGS])
    got = drain(reader, 10**6, timeout_s=10)  # everything on both topics
    reader.close()
    incidents = [json.loads(r.value) for r in got if r.topic == TOPIC_INCIDENTS]
    findings = [json.loads(r.value) for r in got if r.topic == TOPIC_FINDINGS]
    (incident,) = incidents
    assert set(incident) == {"id", "type", "cause", "location", "severity", "first_seen", "detected_at",
                             "resolved_at", "evidence", "symptoms", "runbook", "status"}  # fmt: skip
    assert (incident["cause"], incident["location"]) == ("gpu_xid", {"entity": "gpu", "id": "node003/gpu1"})
    assert any(f["symptom"] == "gpu_xid" and f["id"] == "node003/gpu1" for f in findings)
    # findings travel in their fault domain's partition (the GPU's node); incidents are keyed by their id
    assert {r.key for r in got if r.topic == TOPIC_FINDINGS} == {"node003"}
    assert {r.key for r in got if r.topic == TOPIC_INCIDENTS} == {incident["id"]}
    producer.close()

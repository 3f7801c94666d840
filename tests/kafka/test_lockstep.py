"""The demo's Kafka bus: only this run's records, and a poll is empty only when all are back."""

from __future__ import annotations

import pytest

from fabricwatch.schema import topic_of
from fabricwatch.stream.lockstep import demo_bus
from tests.kafka.helpers import gpu_records, produce_all

pytestmark = pytest.mark.kafka


def test_produce_then_poll_until_empty_returns_exactly_this_steps_records(kafka) -> None:
    produce_all(kafka.bootstrap, gpu_records(500))  # an earlier run's records: not this run's
    bus = demo_bus(kafka.bootstrap, partitions=kafka.partitions)
    bus.subscribe([topic_of("gpu")])
    for step in range(3):  # as fabricwatch.app.demo.run_demo does: produce, flush, poll until empty
        produced = gpu_records(400, first_seq=1000 * (step + 1))
        bus.produce(produced)
        bus.flush()
        got = []
        while records := bus.poll(max_records=150, timeout_s=0.0):
            got += records
        assert sorted(r.value for r in got) == sorted(r.value for r in produced)
    bus.close()


def test_the_demo_through_kafka_finds_what_it_finds_in_memory(kafka, tmp_path) -> None:
    from fabricwatch import topology
    from fabricwatch.app.demo import default_faults, run_demo

    topo = topology.generate(64, 8, 8)
    faults = default_faults(topo)
    runs = {}
    for name, bus in (("memory", None), ("kafka", demo_bus(kafka.bootstrap, partitions=kafka.partitions))):
        result = run_demo(topo, faults, duration=300, interval=10, seed=7, db=tmp_path / f"{name}.duckdb", bus=bus)
        if bus is not None:
            bus.close()
        runs[name] = result
    memory, through_kafka = runs["memory"], runs["kafka"]
    assert memory.incidents  # the comparison means something
    assert (through_kafka.rows, through_kafka.messages) == (memory.rows, memory.messages)
    assert [i.to_dict() for i in through_kafka.incidents] == [i.to_dict() for i in memory.incidents]


def test_demo_command_with_bootstrap(kafka, tmp_path, capsys, monkeypatch) -> None:
    from fabricwatch.cli import main

    monkeypatch.setenv("COLUMNS", "250")
    db = tmp_path / "demo.duckdb"
    argv = ["demo", "--gpus", "64", "--duration", "300", "--interval", "10", "--bootstrap", kafka.bootstrap]
    assert main([*argv, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"through Kafka at {kafka.bootstrap}" in out
    assert "injected faults found at the right place" in out and db.exists()

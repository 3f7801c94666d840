"""The one processing loop over finite buses: the demo's in-memory bus and a capture (replay)."""

from __future__ import annotations

import dataclasses
import re

import orjson
import pytest

from fabricwatch import schema
from fabricwatch.clock import VirtualClock
from fabricwatch.replay.bus import CaptureBus
from fabricwatch.replay.capture import CaptureWriter, open_capture
from fabricwatch.schema import TOPIC_DEADLETTER, TOPIC_INCIDENTS
from fabricwatch.stream.bus import Bus, MemoryBus, Outgoing
from fabricwatch.stream.consume import ProcessingLoop
from fabricwatch.stream.processor import Processor
from fabricwatch.stream.store import Store
from fabricwatch.topology import Topology, generate
from tests.stream.test_processor import T0, RecordingEngine, gpu_message

GPU = schema.topic_of("gpu")
EMPTY = Topology("t", [], [], [])


def produce(bus: Bus, *values: bytes) -> None:
    bus.produce(Outgoing(GPU, "node000", v, T0) for v in values)


@pytest.fixture
def store():
    with Store() as s:
        yield s


def test_drain_stores_commits_and_publishes_dead_letters(store) -> None:
    bus = MemoryBus()
    processor = Processor(EMPTY, store, clock=VirtualClock())
    loop = ProcessingLoop(bus, processor)
    loop.subscribe()
    produce(bus, *(schema.encode(gpu_message(t, t)) for t in range(3)), b"\xc1garbage")
    assert loop.drain() == 4
    s = loop.stats
    assert (s.records, s.rows, s.deadletters, s.skipped) == (4, 6, 1, 0)
    assert store.count("gpu") == 6
    (letter,) = bus.records(TOPIC_DEADLETTER)
    assert letter.key == "node000"
    assert bus.committed([(GPU, 0)]) == {(GPU, 0): 4} == processor.next_offsets
    assert loop.drain() == 0  # nothing more: a finite bus ends the drain
    bus.seek({(GPU, 0): 0})  # delivered again: skipped below the stored offsets, never stored twice
    assert loop.drain() == 4
    assert (loop.stats.records, loop.stats.skipped, store.count("gpu")) == (4, 4, 6)


def test_finish_publishes_the_incidents_of_the_last_ticks(store) -> None:
    bus = MemoryBus()
    loop = ProcessingLoop(bus, Processor(EMPTY, store, clock=VirtualClock(), engine=RecordingEngine()))
    loop.subscribe()
    produce(bus, *(schema.encode(gpu_message(t, t, temp=90.0 if t == 12 else 60.0)) for t in range(13)))
    loop.drain()
    assert bus.records(TOPIC_INCIDENTS) == []  # the tick covering t = 12 is not due yet
    (incident,) = loop.finish()
    (published,) = bus.records(TOPIC_INCIDENTS)
    assert published.key == incident.id and orjson.loads(published.value)["id"] == incident.id == "inc-0001"
    assert loop.stats.incidents == 1


class OpenThenResolve(RecordingEngine):
    """Opens inc-0001 while a hot reading is in the window and resolves it once none is."""

    def run(self, window, now):
        opened, was_open = super().run(window, now), getattr(self, "open", None)
        if opened:
            self.open = opened[0]
            return [] if was_open else opened
        if was_open is not None:
            resolved, self.open = dataclasses.replace(self.open, resolved_at=now), None
            return [resolved]
        return []


def test_an_incident_opened_and_resolved_within_one_batch_is_published_opened_then_resolved(store) -> None:
    bus = MemoryBus()
    engine = OpenThenResolve()
    loop = ProcessingLoop(bus, Processor(EMPTY, store, clock=VirtualClock(), engine=engine), max_records=1000)
    loop.subscribe()
    produce(bus, *(schema.encode(gpu_message(t, t, temp=90.0 if t == 12 else 60.0)) for t in range(60)))
    loop.drain()
    assert loop.stats.batches == 1  # one batch held both changes
    published = [orjson.loads(r.value) for r in bus.records(TOPIC_INCIDENTS)]
    assert [(i["id"], i["resolved_at"] is None) for i in published] == [("inc-0001", True), ("inc-0001", False)]


def write_capture(path, lines: list[tuple[str, schema.Message]]) -> None:
    with CaptureWriter(path, generate(8, 8, 8)) as w:
        for topic, m in lines:
            w.write(topic, m.source, m.ts, m)


def test_a_capture_is_a_finite_bus_in_file_order(tmp_path) -> None:
    path = tmp_path / "c.jsonl"
    messages = [gpu_message(t, t) for t in range(5)]
    write_capture(path, [(GPU, m) for m in messages[:3]] + [("other", messages[3]), (GPU, messages[4])])
    bus = CaptureBus(open_capture(path))
    with pytest.raises(RuntimeError, match="subscribe"):
        bus.poll()
    bus.subscribe([GPU])
    first = bus.poll(max_records=2)
    assert [(r.topic, r.partition, r.offset) for r in first] == [(GPU, 0, 2), (GPU, 0, 3)]  # offset = line number
    rest = bus.poll(max_records=10)
    assert [r.offset for r in rest] == [4, 6]  # line 5 is on a topic not subscribed to
    assert [schema.unpack(schema.decode(r.value)) for r in first + rest] == [messages[i] for i in (0, 1, 2, 4)]
    assert bus.poll() == [] and bus.exhausted
    assert (bus.records_read, bus.first_ts) == (5, T0)


def test_a_capture_bus_seeks_forward_by_line(tmp_path) -> None:
    path = tmp_path / "c.jsonl"
    write_capture(path, [(GPU, gpu_message(t, t)) for t in range(5)])
    bus = CaptureBus(open_capture(path))
    bus.subscribe([GPU])
    bus.seek({(GPU, 0): 5})
    assert [r.offset for r in bus.poll()] == [5, 6]


class LossyBus(MemoryBus):
    """Loses every fifth telemetry record: what a broken bus does to a demo."""

    lost = 0

    def produce(self, records) -> None:
        records = list(records)
        kept = [r for i, r in enumerate(records) if not (r.topic.startswith("fabricwatch.telemetry.") and i % 5 == 4)]
        LossyBus.lost += len(records) - len(kept)
        super().produce(kept)


def test_the_demo_exits_non_zero_when_its_bus_loses_records(tmp_path, capsys, monkeypatch) -> None:
    from fabricwatch.cli import main

    monkeypatch.setattr("fabricwatch.app.demo.MemoryBus", LossyBus)
    monkeypatch.setattr(LossyBus, "lost", 0)
    code = main(["demo", "--gpus", "64", "--duration", "20", "--db", str(tmp_path / "d.duckdb")])
    err = capsys.readouterr().err
    assert code == 1
    found = re.fullmatch(
        r"fabricwatch demo: through the in-memory bus: records lost: the bus delivered ([\d,]+) of the ([\d,]+) "
        r"records produced; ([\d,]+) of ([\d,]+) rows stored\n",
        err,
    )
    assert found, err
    delivered, produced, stored, rows = (int(g.replace(",", "")) for g in found.groups())
    assert LossyBus.lost > 0 and delivered == produced - LossyBus.lost and stored < rows


def test_the_lockstep_bus_gives_up_on_a_broker_that_does_not_answer() -> None:
    import io

    from fabricwatch.stream.kafka import KafkaUnavailable
    from fabricwatch.stream.lockstep import LockstepKafkaBus

    bus = LockstepKafkaBus("127.0.0.1:9", wait_s=1.0, notice=io.StringIO())  # nothing listens on port 9
    try:
        produce(bus, schema.encode(gpu_message(0, 0)))
        with pytest.raises(KafkaUnavailable) as failed:
            bus.flush()
        assert str(failed.value) == "broker 127.0.0.1:9 has not acknowledged 1 records within 1 s"
    finally:
        bus.close(0.2)


class SharedBus(MemoryBus):
    """Another producer on the same topics: one record of its own with every scrape."""

    def produce(self, records) -> None:
        records = list(records)
        if records and records[0].topic.startswith("fabricwatch.telemetry."):
            records.append(Outgoing(GPU, "node999", schema.encode(gpu_message(0, 0)), T0))
        super().produce(records)


def test_the_demo_exits_non_zero_when_another_producer_mixes_records_in(tmp_path, capsys, monkeypatch) -> None:
    from fabricwatch.cli import main

    monkeypatch.setattr("fabricwatch.app.demo.MemoryBus", SharedBus)
    code = main(["demo", "--gpus", "64", "--duration", "20", "--db", str(tmp_path / "d.duckdb")])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(
        "fabricwatch demo: through the in-memory bus: records mixed in from another producer: the bus delivered "
    ), err


@pytest.mark.parametrize("pacing", [True, False])
def test_a_backlog_read_a_partition_at_a_time_makes_no_source_look_silent(tmp_path, pacing) -> None:
    """A processor restarted on a backlog: Kafka hands it one partition's records minutes ahead of the
    others'. Paced or not, it detects what it detects in order (the XID only). Unpaced, the sources of
    the partitions read later were measured against those read first, corrected by 145 to 295 s, and
    looked silent (twelve false collector incidents); a correction now needs a full set of samples
    that agree against a majority of trusted clocks, which arrival order alone never gives."""
    from fabricwatch.collectors.sim import Simulator
    from fabricwatch.detectors.engine import DetectionEngine
    from fabricwatch.faults import Fault
    from fabricwatch.stream.keys import outgoing_batched
    from tests.stream.buses import PartitionAtATimeBus

    topo = generate(64, 8, 8)
    sim = Simulator(topo, [Fault("gpu_xid", "node003/gpu1", 30.0, options={"xid": 48})], seed=9, interval=5.0)
    records = [o for _ in range(60) for o in outgoing_batched(sim.step(), topo)]  # 300 s of telemetry

    def incidents(bus: MemoryBus) -> list:
        bus.produce(records)
        engine = DetectionEngine(topo)
        processor = Processor(topo, Store(), clock=VirtualClock(), engine=engine)
        loop = ProcessingLoop(bus, processor, max_records=500)
        if bus.partitions > 1 and not pacing:
            loop.pacer.limit = lambda stamped: None  # type: ignore[method-assign]
        corrected: set[str] = set()  # every source a window was cut with a clock correction for
        cut = processor.buffer.window

        def window(start, end, source_offsets=None, kinds=None):
            corrected.update(source_offsets or {})
            return cut(start, end, source_offsets, kinds)

        processor.buffer.window = window  # type: ignore[method-assign]
        loop.drain()
        loop.finish()
        assert sum(bus.lag().values()) == 0 and not loop.pacer.held
        assert not corrected  # no clock here is off: arrival order moved none
        return sorted((i.cause, i.location["id"]) for i in engine.incidents())

    in_order = incidents(MemoryBus(1))
    assert in_order == [("gpu_xid", "node003/gpu1")]
    assert incidents(PartitionAtATimeBus(4)) == in_order

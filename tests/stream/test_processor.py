from __future__ import annotations

import pytest

from fabricwatch import schema
from fabricwatch.clock import VirtualClock
from fabricwatch.incident import Incident
from fabricwatch.stream.bus import Record
from fabricwatch.stream.processor import MAX_MESSAGE_BYTES, Processor
from fabricwatch.stream.store import Store

T0 = 1764400000.0


class RecordingEngine:
    """A test double of detectors.engine.DetectionEngine: remembers the windows it was given."""

    window_s = 30.0
    every_s = 10.0
    transport: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.calls: list[tuple[float, float, float, int]] = []
        self.findings = []
        self.errors = []
        self.unconsumed = {}

    def snapshot(self):
        return {"calls": len(self.calls)}

    def restore(self, state):
        pass

    def forget(self, sources):
        self.forgotten = sorted(sources)

    def run(self, window, now):
        gpu = window.frame("gpu")
        self.calls.append((window.start, window.end, now, len(gpu)))
        if len(gpu) and gpu["temp_c"].max() >= 85:
            hot = gpu.loc[gpu["temp_c"].idxmax()]
            return [
                Incident(
                    "inc-0001",
                    "thermal",
                    "gpu_thermal",
                    {"entity": "gpu", "id": hot["device"]},
                    "major",
                    float(hot["ts"]),
                    now,
                    runbook="throttle-gpu",
                )
            ]
        return []


def gpu_message(t: float, seq: int, temp: float = 60.0) -> schema.Message:
    return schema.make(
        "gpu", "node000", T0 + t, seq, {"device": ["node000/gpu0", "node000/gpu1"], "temp_c": [temp, 61.0]}
    )


def rec(value: bytes | schema.Message, offset: int, topic: str = "fabricwatch.telemetry.gpu") -> Record:
    data = value if isinstance(value, bytes) else schema.encode(value)
    return Record(topic, "node000", data, T0, 0, offset)


@pytest.fixture
def store():
    with Store() as s:
        yield s


def test_bad_records_become_dead_letters_and_good_rows_are_all_stored(store):
    p = Processor(schema_topology(), store, clock=VirtualClock())
    bad_value = schema.to_dict(gpu_message(0, 2)) | {"rows": {"device": ["x"], "temp_c": [float("nan")]}}
    records = [
        rec(gpu_message(0, 1), 0),
        rec(b"\xc1garbage", 1),  # undecodable: 0xc1 is never used in MessagePack
        rec(schema.encode({"schema": "fabricwatch.telemetry/v1"}), 2),  # structure
        rec(schema.encode(bad_value), 3),  # a NaN temperature
        rec(gpu_message(0, 3), 4, topic="fabricwatch.telemetry.port"),  # on the wrong topic
        rec(schema.encode(schema.to_dict(gpu_message(0, 4)) | {"kind": "toaster"}), 5),  # unknown kind
        rec(b"\x00" * (MAX_MESSAGE_BYTES + 1), 6),  # too large
        rec(gpu_message(5, 5), 7),
    ]
    result = p.handle(records)
    assert [d.code for d in result.deadletters] == [
        "undecodable",
        "structure",
        "topic_mismatch",
        "schema",
        "too_large",
        "value",
    ]
    assert all(d.reason for d in result.deadletters)
    assert store.count("gpu") == 4
    assert store.count("deadletters") == 6
    assert store.offsets() == {("fabricwatch.telemetry.gpu", 0): 8, ("fabricwatch.telemetry.port", 0): 5}
    assert p.metrics.registry.get_sample_value("fabricwatch_deadlettered_messages_total", {"code": "value"}) == 1


def test_offsets_survive_a_restart(tmp_path):
    path = tmp_path / "fw.duckdb"
    with Store(path) as s:
        Processor(schema_topology(), s, clock=VirtualClock()).handle([rec(gpu_message(0, 1), 41)])
    with Store(path) as s:
        assert Processor(schema_topology(), s, clock=VirtualClock()).next_offsets == {
            ("fabricwatch.telemetry.gpu", 0): 42
        }


def test_ticks_follow_the_watermark_on_a_virtual_clock(store):
    engine = RecordingEngine()
    clock = VirtualClock()
    p = Processor(schema_topology(), store, clock=clock, engine=engine, grace_s=1.0)
    for i, t in enumerate(range(0, 60, 5)):
        p.handle([rec(gpu_message(t, i, temp=90.0 if t >= 40 else 60.0), i)])
    p.finish()
    ends = [c[1] - T0 for c in engine.calls]
    assert ends == [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    # the virtual clock stood at tick + grace when each tick ran: detected_at is reproducible
    assert [c[2] - T0 for c in engine.calls[:-1]] == [11.0, 21.0, 31.0, 41.0, 51.0]
    # a tick sees [end - window_s, end]: the 30 s window holds 7 scrapes of 2 GPUs
    assert engine.calls[3][3] == 14
    assert store.con.execute("SELECT id, status FROM incidents").fetchall() == [("inc-0001", "firing")]
    labels = {
        "id": "inc-0001",
        "type": "thermal",
        "cause": "gpu_thermal",
        "entity": "gpu",
        "location": "node000/gpu0",
        "severity": "major",
        "runbook": "throttle-gpu",
    }
    assert p.metrics.registry.get_sample_value("fabricwatch_incident_firing", labels) == 1


def test_a_failing_engine_does_not_stop_ingest(store):
    class Broken(RecordingEngine):
        def run(self, window, now):
            raise RuntimeError("boom")

    p = Processor(schema_topology(), store, clock=VirtualClock(), engine=Broken())
    for i in range(5):
        p.handle([rec(gpu_message(i * 10, i), i)])
    assert store.count("gpu") == 10
    assert p.metrics.registry.get_sample_value("fabricwatch_errors_total", {"stage": "detect"}) >= 3


def schema_topology():
    from fabricwatch.topology import generate

    return generate(8, 8, 8)


def test_dead_letter_keeps_the_original_bytes(store):
    p = Processor(schema_topology(), store, clock=VirtualClock())
    p.handle([rec(b"not msgpack \xc1", 0)])
    (value,) = store.con.execute("SELECT value FROM deadletters").fetchone()
    assert bytes(value) == b"not msgpack \xc1"


def test_one_batch_spanning_many_ticks_runs_every_tick_from_the_start(store):
    # a replay's first batch can hold minutes of telemetry: detection must still start at its beginning
    engine = RecordingEngine()
    p = Processor(schema_topology(), store, clock=VirtualClock(), engine=engine, grace_s=1.0)
    p.handle([rec(gpu_message(t, i), i) for i, t in enumerate(range(0, 60, 5))])
    assert [c[1] - T0 for c in engine.calls] == [10.0, 20.0, 30.0, 40.0, 50.0]


def test_a_batch_record_is_stored_and_its_one_bad_message_dead_lettered_alone(store):
    p = Processor(schema_topology(), store, clock=VirtualClock())
    bad = gpu_message(5, 2, temp=float("inf"))
    record = Record("fabricwatch.telemetry.gpu", "node000", schema.encode_batch([gpu_message(0, 1), bad]), T0, 0, 0)
    result = p.handle([record])
    assert store.count("gpu") == 2
    (dead,) = result.deadletters
    assert dead.code == "value" and dead.reason.startswith("message 1 of a batch record")
    assert schema.unpack(schema.decode(dead.value)) == bad  # the bad message alone, not the whole record
    assert p.metrics.registry.get_sample_value("fabricwatch_received_messages_total", {"kind": "gpu"}) == 2


def test_a_detector_failing_inside_the_engine_is_counted(store):
    class OneDetectorFails(RecordingEngine):
        def run(self, window, now):
            self.errors = ["gpu_temp: ValueError: bad window"]
            return super().run(window, now)

    p = Processor(schema_topology(), store, clock=VirtualClock(), engine=OneDetectorFails())
    for i in range(4):
        p.handle([rec(gpu_message(i * 10, i), i)])
    assert p.metrics.registry.get_sample_value("fabricwatch_errors_total", {"stage": "detect"}) >= 2
    assert store.count("gpu") == 8


def test_findings_no_rule_reads_are_counted_by_symptom(store):
    class Unread(RecordingEngine):
        def run(self, window, now):
            self.unconsumed = {"gpu_hott": 2}  # a misspelt symptom: no incident, but never silent
            return super().run(window, now)

    p = Processor(schema_topology(), store, clock=VirtualClock(), engine=Unread())
    for i in range(4):
        p.handle([rec(gpu_message(i * 10, i), i)])
    ticks = p.metrics.registry.get_sample_value("fabricwatch_detection_ticks_total")
    assert ticks >= 2
    counted = p.metrics.registry.get_sample_value("fabricwatch_unconsumed_findings_total", {"symptom": "gpu_hott"})
    assert counted == 2 * ticks


def test_detection_state_survives_a_restart(tmp_path):
    from fabricwatch.collectors.sim import Simulator
    from fabricwatch.detectors.engine import DetectionEngine
    from fabricwatch.faults import Fault
    from fabricwatch.topology import generate

    topo = generate(64, 8, 8)
    sim = Simulator(topo, [Fault("gpu_xid", "node002/gpu3", 60.0)], seed=5, interval=5.0)
    db = tmp_path / "fw.duckdb"

    def run(steps: int, offset: int) -> Processor:
        store = Store(db)
        p = Processor(topo, store, clock=VirtualClock(), engine=DetectionEngine(topo), save_state_every_s=60.0)
        for i in range(steps):
            records = [Record(schema.topic_of(m.kind), m.source, schema.encode(m), m.ts, 0, offset + 1000 * i + j)
                       for j, m in enumerate(sim.step())]  # fmt: skip
            p.handle(records)
        return p

    first = run(30, 0)  # 150 s: baselines learnt, the XID incident open
    first.save_state()
    before = first.engine.snapshot()
    assert [i.cause for i in first.engine.incidents()] == ["gpu_xid"]
    first.store.close()
    second = run(0, 10**6)  # a restart: nothing processed yet, everything learnt is back
    assert second.engine.snapshot() == before
    assert [i.id for i in second.engine.incidents()] == [i.id for i in first.engine.incidents()]
    second.store.close()

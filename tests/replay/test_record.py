"""Recording a bus into a capture (replay/record.py) and labelling it: the same rows come back in replay."""

from __future__ import annotations

import gzip
import json

import duckdb
import pytest

from fabricwatch import schema
from fabricwatch.cli import main
from fabricwatch.collectors.sim import Simulator
from fabricwatch.replay.capture import open_capture
from fabricwatch.replay.record import record
from fabricwatch.replay.run import replay
from fabricwatch.stream.bus import MemoryBus, Outgoing
from fabricwatch.topology import generate

TOPO = generate(64, 8, 8)


def _scrapes(steps: int = 6) -> list[schema.Message]:
    sim = Simulator(TOPO, [], seed=3, interval=5.0)
    return [m for _ in range(steps) for m in sim.step()]


def _fill(bus: MemoryBus, messages: list[schema.Message]) -> None:
    """Single messages and batch records (as a collector serving many sources sends) and one bad record."""
    half = len(messages) // 2
    bus.produce(Outgoing(schema.topic_of(m.kind), m.source, schema.encode(m), m.ts) for m in messages[:half])
    by_kind: dict[str, list[schema.Message]] = {}
    for m in messages[half:]:
        by_kind.setdefault(m.kind, []).append(m)
    for kind, ms in by_kind.items():
        bus.produce([Outgoing(schema.topic_of(kind), "batch", schema.encode_batch(ms), ms[0].ts)])
    bus.produce([Outgoing(schema.topic_of("gpu"), "node000", b"\x93not telemetry", 0.0)])


def _rows(db, kind: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cols = ", ".join(c.name for c in schema.KINDS[kind].columns)
        return sorted(con.execute(f"SELECT source, epoch(ts), {cols} FROM {kind}").fetchall(), key=repr)
    finally:
        con.close()


def test_recorded_capture_replays_to_the_same_rows(tmp_path) -> None:
    messages = _scrapes()
    bus = MemoryBus(partitions=4)
    _fill(bus, messages)
    out = tmp_path / "rec.jsonl.gz"
    stats = record(bus, out, TOPO, duration_s=0.2, notes="INC-42: rail 3 slow at 03:10")
    assert stats.messages == len(messages) and stats.undecodable == 1
    assert stats.rows == sum(schema.row_count(m) for m in messages)
    assert stats.reasons[0].startswith("fabricwatch.telemetry.gpu[")

    cap = open_capture(out)
    assert cap.truth is None and cap.extra == {"notes": "INC-42: rail 3 slow at 03:10"}
    assert sum(1 for _ in cap.records()) == len(messages) and cap.errors == []

    # the same messages through the processor directly, and the recorded capture through replay
    direct = MemoryBus(partitions=4)
    _fill(direct, messages)
    replayed = replay(out, db=tmp_path / "replayed.duckdb")
    assert replayed.deadletters == 0 and replayed.rows == stats.rows
    from fabricwatch.clock import VirtualClock
    from fabricwatch.stream.processor import Processor
    from fabricwatch.stream.store import Store

    with Store(tmp_path / "direct.duckdb") as store:
        direct.subscribe([schema.topic_of(k) for k in schema.KINDS])
        Processor(TOPO, store, clock=VirtualClock()).handle(direct.poll())
    for kind in ("gpu", "optical", "port", "module"):
        assert _rows(tmp_path / "replayed.duckdb", kind) == _rows(tmp_path / "direct.duckdb", kind), kind


def test_record_stops_at_max_records_and_keeps_only_the_kinds_asked(tmp_path) -> None:
    bus = MemoryBus()
    messages = _scrapes(2)
    bus.produce(Outgoing(schema.topic_of(m.kind), m.source, schema.encode(m), m.ts) for m in messages)
    gpus = [m for m in messages if m.kind == "gpu"]
    stats = record(bus, tmp_path / "r.jsonl", TOPO, kinds=["gpu"], max_records=len(gpus) - 1)
    assert stats.records == len(gpus) - 1
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == len(gpus) and {json.loads(line)["topic"] for line in lines[1:]} == {
        "fabricwatch.telemetry.gpu"
    }
    with pytest.raises(ValueError, match="unknown kinds"):
        record(MemoryBus(), tmp_path / "x.jsonl", TOPO, kinds=["gpus"], max_records=1)


def _recorded(tmp_path):
    bus = MemoryBus()
    _fill(bus, _scrapes(2))
    path = tmp_path / "rec.jsonl.gz"
    record(bus, path, TOPO, max_records=10_000, duration_s=0.1, notes="keep me")
    return path


def test_capture_label_adds_ground_truth_and_keeps_the_rest(tmp_path, capsys) -> None:
    path = _recorded(tmp_path)
    before = sum(1 for _ in open_capture(path).records())
    link = TOPO.links[3].id
    assert main(["capture", "label", str(path), "--fault", f"{{cause: link_down, link: {link}, start: 5}}"]) == 0
    cap = open_capture(path)
    assert [(f["cause"], f["link"], f["start"]) for f in cap.truth] == [("link_down", link, 5.0)]
    assert cap.extra == {"notes": "keep me"} and sum(1 for _ in cap.records()) == before
    assert main(["capture", "label", str(path), "--fault", "{cause: gpu_xid, gpu: node001/gpu2, start: 0}"]) == 0
    assert [f["cause"] for f in open_capture(path).truth] == ["link_down", "gpu_xid"]
    out = tmp_path / "relabelled.jsonl.gz"
    args = [
        "capture",
        "label",
        str(path),
        "--replace",
        "--out",
        str(out),
        "--fault",
        "{cause: gpu_xid, gpu: node001/gpu3}",
    ]
    assert main(args) == 0
    assert [f["gpu"] for f in open_capture(out).truth] == ["node001/gpu3"]
    assert len(open_capture(path).truth) == 2  # --out left the original alone
    with gzip.open(out) as f:
        assert json.loads(f.readline())["notes"] == "keep me"
    capsys.readouterr()


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("{cause: link_down, link: L99999}", "faults[0]"),
        ("{cause: no_such_cause, link: L00001}", "faults[0]"),
        ("{cause: [", "--fault 1: not YAML"),
    ],
)
def test_capture_label_rejects_a_bad_fault_in_one_line_and_changes_nothing(tmp_path, capsys, fault, said) -> None:
    path = _recorded(tmp_path)
    data = path.read_bytes()
    assert main(["capture", "label", str(path), "--fault", fault]) == 2
    err = capsys.readouterr().err
    assert said in err and err.startswith("fabricwatch capture:")
    assert path.read_bytes() == data and not list(tmp_path.glob("*.labelling*"))


def test_capture_label_needs_a_fault(tmp_path, capsys) -> None:
    path = _recorded(tmp_path)
    assert main(["capture", "label", str(path)]) == 2
    assert "at least one --fault" in capsys.readouterr().err

"""A rebalance of a split deployment: sources whose partitions went to another processor are that
processor's to watch, not silent here (issue 9, liveness in split deployments)."""

from __future__ import annotations

from fabricwatch import schema
from fabricwatch.clock import VirtualClock
from fabricwatch.detectors.stage import Stage1
from fabricwatch.stream.bus import Record
from fabricwatch.stream.processor import Processor
from fabricwatch.stream.store import Store
from fabricwatch.topology import generate

T0 = 1764400000.0
GPU = schema.topic_of("gpu")
TOPOLOGY = generate(16, 8, 8)  # node000 and node001


def gpu(node: str, t: float, seq: int) -> schema.Message:
    devices = [f"{node}/gpu{i}" for i in range(8)]
    return schema.make("gpu", node, T0 + t, seq, {"device": devices, "temp_c": [60.0] * 8})


def run(revoke_at: float | None) -> tuple[Processor, list[str]]:
    """node000 on partition 0 and node001 on partition 1, scraped every 5 s; node001's partition is
    revoked at ``revoke_at`` (None: never, it just stops); 200 s in all."""
    store = Store()
    p = Processor(TOPOLOGY, store, clock=VirtualClock(T0), engine=Stage1(TOPOLOGY, split=True))
    silent: list[str] = []
    offsets = [0, 0]
    for k, t in enumerate(range(0, 200, 5)):
        nodes = ["node000"] if t >= 40 else ["node000", "node001"]
        if revoke_at is not None and t == revoke_at:
            assert p.forget_partitions([(GPU, 1)]) == {"node001"}
        records = []
        for node in nodes:
            part = int(node[-1])
            records.append(Record(GPU, node, schema.encode(gpu(node, t, k)), T0 + t, part, offsets[part]))
            offsets[part] += 1
        result = p.handle(records)
        silent += [f.id for _, f in result.findings if f.symptom == "collector_silent"]
    store.close()
    return p, silent


def test_a_source_whose_partition_was_revoked_is_not_silent_here() -> None:
    p, silent = run(revoke_at=40)
    assert silent == []
    assert "node001" not in p.clocks.sources  # nor does it hold the watermark back
    assert p.watermark is not None and p.watermark >= T0 + 190


def test_a_hand_off_is_forgotten_once_out_of_the_window() -> None:
    p, _ = run(revoke_at=40)
    (liveness,) = [d for d in p.engine.detectors if d.name == "liveness"]
    assert liveness.handed_off == {}  # node001's newest row (t = 35) left the 60 s window long ago


def test_a_source_that_stops_on_a_partition_still_held_is_silent() -> None:
    _, silent = run(revoke_at=None)  # the check above can fail: the same silence, no rebalance
    assert "node001" in silent


def test_a_source_still_read_from_another_partition_is_kept() -> None:
    store = Store()
    p = Processor(TOPOLOGY, store, clock=VirtualClock(T0), engine=Stage1(TOPOLOGY, split=True))
    message = schema.encode(gpu("node000", 0, 0))
    p.handle([Record(GPU, "leaf0", message, T0, 0, 0), Record(GPU, "leaf1", message, T0, 1, 0)])
    assert p.forget_partitions([(GPU, 1)]) == set()  # node000 still arrives on partition 0
    assert "node000" in p.clocks.sources
    store.close()

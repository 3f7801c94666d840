from __future__ import annotations

from fabricwatch.stream.bus import MemoryBus, Outgoing, partition_for


def _produce(bus, topic, n, key="k"):
    bus.produce(Outgoing(topic, key, f"{topic}-{i}".encode(), float(i)) for i in range(n))


def test_poll_returns_produce_order_for_subscribed_topics_only():
    bus = MemoryBus()
    _produce(bus, "a", 2)
    _produce(bus, "b", 2)
    bus.subscribe(["a"])
    assert [r.value for r in bus.poll()] == [b"a-0", b"a-1"]
    assert bus.poll() == []


def test_offsets_count_per_partition_and_seek_rewinds_one_partition_only():
    bus = MemoryBus(partitions=4)
    keys = ["leaf0-0", "leaf1-0", "leaf2-0"]
    for k in keys:
        _produce(bus, "t", 3, key=k)
    bus.subscribe(["t"])
    first = bus.poll()
    assert len(first) == 9
    assert {r.offset for r in first if r.key == "leaf0-0"} <= set(range(9))
    p = partition_for("leaf0-0", 4)
    bus.seek({("t", p): 0})
    again = bus.poll()
    assert again and {r.partition for r in again} == {p}
    assert [r.offset for r in again] == list(range(len(again)))


def test_max_records_and_commit():
    bus = MemoryBus()
    _produce(bus, "t", 5)
    bus.subscribe(["t"])
    assert len(bus.poll(max_records=2)) == 2
    bus.commit({("t", 0): 2})
    assert bus.committed([("t", 0)]) == {("t", 0): 2}
    assert [r.offset for r in bus.poll()] == [2, 3, 4]


def test_partitioning_is_stable():
    assert partition_for("leaf3-1", 12) == partition_for("leaf3-1", 12)
    assert partition_for(None, 12) == 0

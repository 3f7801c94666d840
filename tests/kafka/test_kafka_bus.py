"""KafkaBus against the real broker: produce, poll, commit, seek, assignment hooks, size limits."""

from __future__ import annotations

import io
import time

import pytest

from fabricwatch import schema
from fabricwatch.schema import TOPIC_DEADLETTER, topic_of
from fabricwatch.stream.bus import Outgoing, Record
from fabricwatch.stream.deadletter import deadletter_record, read_deadletter
from fabricwatch.stream.kafka import MAX_MESSAGE_BYTES, KafkaBus
from fabricwatch.stream.keys import outgoing
from tests.kafka.conftest import delete_topics

pytestmark = pytest.mark.kafka
GPU = topic_of("gpu")


def drain(bus: KafkaBus, want: int, timeout_s: float = 30.0) -> list[Record]:
    got: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got += bus.poll(max_records=5000, timeout_s=0.5)
    return got


def records(n: int, keys: int = 7, topic: str = GPU) -> list[Outgoing]:
    return [Outgoing(topic, f"node{i % keys:03d}", f"{i}".encode(), 1764400000.0 + i) for i in range(n)]


def test_records_round_trip_in_key_order_and_commits_resume_the_group(kafka) -> None:
    producer = KafkaBus(kafka.bootstrap, partitions=kafka.partitions)
    producer.produce(records(600))
    producer.flush(30)
    assert (producer.stats.sent, producer.stats.dropped, producer.pending()) == (600, 0, 0)

    assigned: list[list[tuple[str, int]]] = []
    consumer = KafkaBus(kafka.bootstrap, group_id=kafka.group, on_assign=assigned.append)
    consumer.subscribe([GPU])
    got = drain(consumer, 600)
    assert sorted(int(r.value) for r in got) == list(range(600))
    assert sorted(assigned[-1]) == [(GPU, p) for p in range(kafka.partitions)]
    partition_of: dict[str, int] = {}
    for r in got:
        assert partition_of.setdefault(r.key, r.partition) == r.partition  # one key, one partition
    for p in range(kafka.partitions):
        values = [int(r.value) for r in got if r.partition == p]
        assert values == sorted(values)  # produce order kept within a partition
        assert [r.offset for r in got if r.partition == p] == list(range(len(values)))
    # commit only part of what was read: a new member of the group resumes exactly there
    cut = {(GPU, p): 10 for p in range(kafka.partitions)}
    consumer.commit(cut)
    assert consumer.committed(cut) == cut
    consumer.close()
    again = KafkaBus(kafka.bootstrap, group_id=kafka.group)
    again.subscribe([GPU])
    rest = drain(again, 600 - 10 * kafka.partitions)
    assert len(rest) == 600 - 10 * kafka.partitions
    assert min(r.offset for r in rest) == 10
    again.close()
    producer.close()


def test_a_seek_before_assignment_applies_when_the_partition_is_assigned(kafka) -> None:
    producer = KafkaBus(kafka.bootstrap)
    producer.produce(records(200, keys=1))  # one key: one partition
    producer.flush(30)
    producer.close()
    consumer = KafkaBus(kafka.bootstrap, group_id=kafka.group)
    consumer.subscribe([GPU])
    # the partition of that key is unknown here: ask every partition to start at 150
    consumer.seek({(GPU, p): 150 for p in range(kafka.partitions)})
    got = drain(consumer, 50)
    assert [int(r.value) for r in got] == list(range(150, 200))
    assert drain(consumer, 1, timeout_s=1.0) == []
    consumer.close()


def test_assignment_hook_can_seek_to_stored_offsets(kafka) -> None:
    producer = KafkaBus(kafka.bootstrap)
    producer.produce(records(100))
    producer.flush(30)
    producer.close()
    stored = {(GPU, p): 5 for p in range(kafka.partitions)}  # what a store would say
    consumer = KafkaBus(kafka.bootstrap, group_id=kafka.group)
    consumer.on_assign = lambda parts: consumer.seek({tp: stored[tp] for tp in parts if tp in stored})
    consumer.subscribe([GPU])
    got = drain(consumer, 100 - 5 * kafka.partitions)
    assert len(got) == 100 - 5 * kafka.partitions and min(r.offset for r in got) == 5
    assert consumer.lag() == {(GPU, p): 0 for p in range(kafka.partitions)}  # known for every partition, and 0
    consumer.close()


def test_both_ends_of_a_host_link_share_a_partition(kafka, topo128) -> None:
    link = next(lk for lk in topo128.links if lk.tier == "host" and lk.rail == 3)
    node, leaf = link.a.split("/")[0], topo128.port_device[link.b]
    gpu_ports = [f"{node}/gpu{g}:p0" for g in range(8)]
    leaf_ports = topo128.ports_of_device(leaf)
    bus = KafkaBus(kafka.bootstrap)
    for source, ports in ((node, gpu_ports), (leaf, leaf_ports)):
        bus.produce(
            outgoing(
                schema.make("optical", source, 1764400000.0, 1, {"port": ports, "lane": [0] * len(ports)}), topo128
            )
        )
    bus.flush(30)
    bus.close()
    consumer = KafkaBus(kafka.bootstrap, group_id=kafka.group)
    consumer.subscribe([topic_of("optical")])
    got = drain(consumer, 9)  # 8 parts of the node's scrape, one of the leaf's
    partition_of_port = {p: r.partition for r in got for p in schema.decode(r.value).rows["port"]}
    assert partition_of_port[link.a] == partition_of_port[link.b]
    consumer.close()


def test_a_record_over_the_limit_is_refused_and_counted_and_others_still_go(kafka) -> None:
    notice = io.StringIO()
    bus = KafkaBus(kafka.bootstrap, notice=notice)
    five_mb = Outgoing(GPU, "node000", b"\x01" * (5 * 1024 * 1024), time.time())  # under the 8 MiB topic limit
    too_big = Outgoing(GPU, "node000", b"\x02" * (MAX_MESSAGE_BYTES + 2 * 1024 * 1024), time.time())
    bus.produce([*records(10), five_mb, too_big, *records(10)])
    bus.flush(60)
    assert (bus.stats.sent, bus.stats.rejected, bus.stats.dropped) == (21, 1, 0)
    assert notice.getvalue().count("refused") == 1
    # the dead letter of the largest accepted record fits its topic
    consumer = KafkaBus(kafka.bootstrap, group_id=kafka.group)
    consumer.subscribe([GPU])
    got = drain(consumer, 21)
    big = next(r for r in got if len(r.value) == len(five_mb.value))
    bus.produce([deadletter_record(big, "too large to be telemetry", "too_large")])
    bus.flush(60)
    assert bus.stats.sent == 22 and bus.stats.rejected == 1
    consumer.close()
    dl = KafkaBus(kafka.bootstrap, group_id=kafka.group + "-dl")
    dl.subscribe([TOPIC_DEADLETTER])
    (letter,) = [read_deadletter(r.value) for r in drain(dl, 1)]
    assert letter.value == five_mb.value and (letter.topic, letter.offset) == (GPU, big.offset)
    dl.close()
    bus.close()


def test_missing_topics_are_created_with_the_asked_partitions(kafka) -> None:
    from kafka import KafkaAdminClient

    delete_topics(kafka.bootstrap)
    bus = KafkaBus(kafka.bootstrap, partitions=3)
    assert sorted(bus.ensure_topics()) == sorted(schema.ALL_TOPICS)
    assert bus.ensure_topics() == []  # existing topics are left alone
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    described = {t["name"]: t for t in admin.describe_topics(list(schema.ALL_TOPICS))}
    admin.close()
    assert {name: len(t["partitions"]) for name, t in described.items()} == dict.fromkeys(schema.ALL_TOPICS, 3)

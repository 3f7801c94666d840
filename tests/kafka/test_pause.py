"""A partition paused with records already fetched, then resumed, is read to its end (the bus works
around kafka-python 3.0 parking them forever: stream/kafka/consumer.py ``_drop_parked``)."""

from __future__ import annotations

import time

import pytest

from fabricwatch.stream.kafka import KafkaBus
from tests.kafka.test_kafka_bus import GPU, records

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("seek_back", [False, True])
def test_a_partition_paused_mid_fetch_and_resumed_is_read_to_its_end(kafka, seek_back) -> None:
    producer = KafkaBus(kafka.bootstrap, partitions=kafka.partitions)
    producer.produce(records(8_000, keys=64))
    producer.flush(30)
    producer.close()
    bus = KafkaBus(kafka.bootstrap, group_id=kafka.group)
    bus.subscribe([GPU])
    got: dict[tuple[str, int], list[int]] = {}
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:  # a first batch: one partition part read
        for r in bus.poll(max_records=50, timeout_s=0.5):
            got.setdefault((r.topic, r.partition), []).append(r.offset)
    (tp, offsets), *_ = got.items()
    if seek_back:  # the pacer's first design: back to a record already read, then paused
        bus.seek({tp: offsets[-1] - 10})
        offsets = offsets[:-11]
    bus.pause([tp])
    for _ in range(10):
        for r in bus.poll(max_records=50, timeout_s=0.2):
            assert (r.topic, r.partition) != tp, "a paused partition was read"
            got.setdefault((r.topic, r.partition), []).append(r.offset)
    bus.resume([tp])
    got[tp] = offsets
    deadline = time.monotonic() + 60
    while sum(len(v) for v in got.values()) < 8_000 and time.monotonic() < deadline:
        for r in bus.poll(max_records=50, timeout_s=0.5):
            got.setdefault((r.topic, r.partition), []).append(r.offset)
    bus.close()
    assert got[tp] == list(range(len(got[tp])))  # in order, none twice, none skipped
    assert sum(len(v) for v in got.values()) == 8_000

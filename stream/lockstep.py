"""A Kafka bus for drivers that produce and then consume in lock step: ``fabricwatch demo --bootstrap``.

The demo produces one simulated scrape, flushes, and polls until the poll comes back empty, then the
next scrape (fabricwatch.app.demo.run_demo). On Kafka a poll can come back empty while records are still
on their way, and a fresh consumer group would start at the topics' beginning, among earlier runs'
records. This bus fixes both: ``subscribe`` joins a group of its own and waits until it is positioned
at the end of every partition, so only this run's records are read; ``poll`` returns empty only once
every record this bus has had acknowledged has been returned.

Use: ``run_demo(..., bus=demo_bus(bootstrap))`` and ``close()`` the bus afterwards.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from kafka.structs import TopicPartition as KafkaTP

from fabricwatch.stream.bus import Record
from fabricwatch.stream.kafka import KafkaBus, KafkaUnavailable

CATCH_UP_S = 60.0  # a poll waits at most this long for acknowledged records to come back


class LockstepKafkaBus(KafkaBus):
    def __init__(self, bootstrap: str, **kwargs: Any) -> None:
        kwargs.setdefault("group_id", f"fabricwatch-demo-{uuid.uuid4().hex[:12]}")
        kwargs.setdefault("client_id", "fabricwatch-demo")
        # "latest": only this run's records; fetch at once: a lock-step driver waits for every poll
        kwargs.setdefault(
            "consumer_config", {"auto_offset_reset": "latest", "fetch_min_bytes": 1, "fetch_max_wait_ms": 20}
        )
        super().__init__(bootstrap, **kwargs)

    def subscribe(self, topics: Sequence[str]) -> None:
        super().subscribe(topics)
        consumer = self._need_consumer()
        deadline = time.monotonic() + CATCH_UP_S
        while not consumer.assignment():
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"no partitions assigned by {self.bootstrap} within {CATCH_UP_S:.0f} s")
            consumer.poll(timeout_ms=100)
        for tp in consumer.assignment():
            consumer.position(tp)  # resolves "latest" now, before anything of this run is produced

    def poll(self, max_records: int = 10_000, timeout_s: float = 0.0) -> list[Record]:
        deadline = time.monotonic() + max(timeout_s, CATCH_UP_S)
        while True:
            records = super().poll(max_records=max_records, timeout_s=max(timeout_s, 0.05))
            if records or self.caught_up() or time.monotonic() > deadline:
                return records

    def caught_up(self) -> bool:
        """Every acknowledged record of the subscribed topics has been returned by poll."""
        consumer = self._need_consumer()
        assigned = self.assignment()
        with self._cv:
            ends = [(tp, end) for tp, end in self.acked_end.items() if tp in assigned]
        return all(consumer.position(KafkaTP(*tp)) >= end for tp, end in ends)


def demo_bus(bootstrap: str, partitions: int = 12) -> LockstepKafkaBus:
    """The bus ``fabricwatch demo --bootstrap HOST:PORT`` passes to run_demo."""
    return LockstepKafkaBus(bootstrap, partitions=partitions)

"""A Kafka bus for drivers that produce and then consume in lock step: ``fabricwatch demo --bootstrap``.

The demo produces one simulated scrape, flushes, and drains the processing loop (poll until a poll is
empty), then the next scrape (fabricwatch.app.demo.run_demo). On Kafka a poll can come back empty while
records are still on their way, and a fresh consumer group would start at the topics' beginning, among
earlier runs' records. This bus fixes both: ``subscribe`` joins a group of its own and waits until it
is positioned at the end of every partition, so only this run's records are read; ``flush`` returns
once the broker has acknowledged every record; ``poll`` returns empty only once every acknowledged
record has been returned, or is on a partition its caller paused (the pacer holds a partition read
ahead of the others, stream/pacing.py; the drain resumes it once the polls come back empty).

Nothing waits forever: ``flush`` and ``poll`` give up after ``wait_s`` without progress and raise
:class:`KafkaUnavailable` naming the broker and what is missing, so a stuck consumer fails the run in
seconds instead of returning empty polls (and a demo that stored nothing) for minutes. Before that, a
poll that has had nothing for ``REFETCH_S`` while records are unread asks for them again once: it
resumes their partitions and seeks each to where it stands, which drops whatever kafka-python holds of
them (a parked or lost fetch: on a loaded machine its fetcher was seen to stop fetching some
partitions for good, issue 7).

Use: ``run_demo(..., bus=demo_bus(bootstrap))`` and ``close()`` the bus afterwards.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from kafka import errors as kerr
from kafka.structs import TopicPartition as KafkaTP

from fabricwatch.stream.bus import Record, TopicPartition
from fabricwatch.stream.kafka import KafkaBus, KafkaUnavailable

WAIT_S = 30.0  # flush, subscribe and poll give up after this long without progress
POLL_SLICE_S = 0.05  # one consumer poll inside a lock-step poll
POSITION_TIMEOUT_MS = 1_000
REFETCH_S = 5.0  # no record for this long while some are unread: fetch them again from their positions, once


class LockstepKafkaBus(KafkaBus):
    def __init__(self, bootstrap: str, *, wait_s: float = WAIT_S, **kwargs: Any) -> None:
        kwargs.setdefault("group_id", f"fabricwatch-demo-{uuid.uuid4().hex[:12]}")
        kwargs.setdefault("client_id", "fabricwatch-demo")
        # "latest": only this run's records; fetch at once: a lock-step driver waits for every poll
        kwargs.setdefault(
            "consumer_config", {"auto_offset_reset": "latest", "fetch_min_bytes": 1, "fetch_max_wait_ms": 20}
        )
        super().__init__(bootstrap, **kwargs)
        self.wait_s = wait_s
        self._subscribed: set[str] = set()
        self._read: dict[TopicPartition, int] = {}  # the last position seen of each partition
        self._paused: set[TopicPartition] = set()  # paused by the caller: its records are not awaited

    def subscribe(self, topics: Sequence[str]) -> None:
        super().subscribe(topics)
        self._subscribed = set(topics)
        consumer = self._need_consumer()
        deadline = time.monotonic() + self.wait_s
        while not consumer.assignment():
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"no partitions assigned by broker {self.bootstrap} within {self.wait_s:.0f} s")
            consumer.poll(timeout_ms=100)
        for tp in consumer.assignment():  # resolves "latest" now, before anything of this run is produced
            position = consumer.position(tp, timeout_ms=int(max(0.0, deadline - time.monotonic()) * 1000))
            if position is None:
                raise KafkaUnavailable(
                    f"broker {self.bootstrap} gave no end offset for {tp.topic}[{tp.partition}] "
                    f"within {self.wait_s:.0f} s"
                )
            self._read[(tp.topic, tp.partition)] = position

    def flush(self, timeout_s: float | None = None) -> None:
        """Without ``timeout_s`` (the lock-step driver): return once the broker has acknowledged every
        record produced, or raise after ``wait_s``. With it, as KafkaBus: wait up to that long (close)."""
        if timeout_s is not None:
            super().flush(timeout_s)
            return
        deadline = time.monotonic() + self.wait_s
        while self.pending():
            left = deadline - time.monotonic()
            if left <= 0:
                raise KafkaUnavailable(
                    f"broker {self.bootstrap} has not acknowledged {self.pending()} records within {self.wait_s:.0f} s"
                )
            super().flush(min(left, 1.0))

    def poll(self, max_records: int = 10_000, timeout_s: float = 0.0) -> list[Record]:
        """The next records; empty once every acknowledged record of the subscribed topics has been
        returned (then at once, so records another producer keeps sending to the same topics cannot keep a
        drain going). Raises when none comes for ``wait_s`` while some are still unread."""
        started = time.monotonic()
        if not self.awaited():  # all of this run's records are back: stop here, even if others keep coming
            return []
        refetched = False
        while True:
            records = super().poll(max_records=max_records, timeout_s=max(timeout_s, POLL_SLICE_S))
            if records:
                return records
            unread = self.awaited()
            if not unread:
                return []
            idle = time.monotonic() - started
            if idle > REFETCH_S and not refetched:
                refetched = True
                self._refetch(unread)
            if idle > self.wait_s:
                where = ", ".join(f"{t}[{p}]" for t, p in sorted(unread)[:3]) + (" …" if len(unread) > 3 else "")
                raise KafkaUnavailable(
                    f"no record from broker {self.bootstrap} for {idle:.0f} s while {sum(unread.values())} "
                    f"acknowledged records are unread ({where}){self._lost_logs(unread)}"
                )

    def _refetch(self, unread: dict[TopicPartition, int]) -> None:
        """Fetch these partitions again from where they stand (module docstring): resume them (which
        drops records kafka-python parked) and seek each to its position. Partitions still waiting for
        their assignment hook are left to it."""
        settling = getattr(self.receiver, "_to_settle", set())
        mine = [tp for tp in sorted(unread) if tp in self.assignment() and tp not in settling]
        if not mine:
            return
        consumer = self._need_consumer()
        try:
            self.receiver.resume(mine)
            for tp in mine:
                position = consumer.position(KafkaTP(*tp), timeout_ms=POSITION_TIMEOUT_MS)
                if position is not None:
                    consumer.seek(KafkaTP(*tp), position)
        except (kerr.KafkaError, AssertionError, ValueError):  # the next polls, and wait_s, decide
            return

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        partitions = list(partitions)
        super().pause(partitions)
        self._paused.update(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        partitions = list(partitions)
        super().resume(partitions)
        self._paused.difference_update(partitions)

    def awaited(self) -> dict[TopicPartition, int]:
        """The unread records a poll waits for: those of partitions the caller has not paused. Waiting
        for a paused one would wait out ``wait_s`` and fail a healthy run: the pacer resumes it only
        after a poll comes back empty."""
        return {tp: n for tp, n in self.unread().items() if tp not in self._paused}

    def unread(self) -> dict[TopicPartition, int]:
        """Acknowledged records of the subscribed topics not yet returned by poll, per partition (a
        partition not assigned now counts from the last position seen)."""
        consumer = self._need_consumer()
        assigned = self.assignment()
        with self._cv:
            ends = [(tp, end) for tp, end in self.acked_end.items() if tp[0] in self._subscribed]
        out = {}
        for tp, end in ends:
            if tp in assigned:
                try:
                    position = consumer.position(KafkaTP(*tp), timeout_ms=POSITION_TIMEOUT_MS)
                except kerr.KafkaError:
                    position = None
                if position is not None:
                    self._read[tp] = position
            behind = end - self._read.get(tp, 0)
            if behind > 0:
                out[tp] = behind
        return out

    def _lost_logs(self, unread: dict[TopicPartition, int]) -> str:
        """Why records can be acknowledged and never come: the partition's log now ends before them
        (its topic deleted and created again meanwhile, e.g. by another user of the same broker)."""
        try:
            ends = self._need_consumer().end_offsets([KafkaTP(*tp) for tp in unread], timeout_ms=POSITION_TIMEOUT_MS)
        except kerr.KafkaError:
            return ""
        with self._cv:
            short = sum(1 for tp, end in ends.items() if end < self.acked_end.get((tp.topic, tp.partition), 0))
        if not short:
            return ""
        return (
            f"; the log of {short} of these partitions now ends before what the broker acknowledged: "
            "their topics were deleted or truncated while the demo ran"
        )


def demo_bus(bootstrap: str, partitions: int = 12) -> LockstepKafkaBus:
    """The bus ``fabricwatch demo --bootstrap HOST:PORT`` passes to run_demo."""
    return LockstepKafkaBus(bootstrap, partitions=partitions)

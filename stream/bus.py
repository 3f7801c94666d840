"""The bus between collectors and processors, and its embedded in-memory implementation.

The interface is deliberately small (produce a batch, poll a batch, commit) so that the in-memory
bus of the demo and tests, a capture file (replay.bus.CaptureBus) and the Kafka transport are
interchangeable: one processing loop (stream.consume.ProcessingLoop) runs over any of them.
A finite bus (a capture, the demo's in-memory bus once the simulator has produced a step) returns
an empty poll when it has nothing more; a live bus returns one when nothing came within the timeout.
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A record to produce. ``key`` picks the partition (the fault domain, DESIGN §1)."""

    topic: str
    key: str | None
    value: bytes
    ts: float


@dataclass(frozen=True, slots=True)
class Record:
    """A record read from the bus, with where it came from (for offsets and dead letters)."""

    topic: str
    key: str | None
    value: bytes
    ts: float
    partition: int = 0
    offset: int = 0


TopicPartition = tuple[str, int]


class Bus(ABC):
    """Produce batches; a consumer subscribes, polls batches and commits what it has stored.

    ``on_assign``/``on_revoke`` are called when a consumer group moves partitions (Kafka only: a bus
    with one consumer never calls them, it has every partition from the start).
    """

    on_assign: Callable[[list[TopicPartition]], None] | None = None
    on_revoke: Callable[[list[TopicPartition]], None] | None = None
    # polls return records in the order they were produced, across partitions: no partition is ever read
    # ahead of another, so a loop need not pace them (stream/pacing.py)
    in_produce_order: bool = False

    @abstractmethod
    def produce(self, records: Iterable[Outgoing]) -> None: ...

    def flush(self, timeout_s: float | None = None) -> None:  # noqa: B027 - optional hook
        """Block until produced records are delivered (a no-op where delivery is immediate)."""

    @abstractmethod
    def subscribe(self, topics: Sequence[str]) -> None: ...

    @abstractmethod
    def poll(self, max_records: int = 10_000, timeout_s: float = 0.0) -> list[Record]: ...

    @abstractmethod
    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Record that everything before ``offsets[(topic, partition)]`` is done."""

    @abstractmethod
    def seek(self, offsets: dict[TopicPartition, int]) -> None:
        """Continue reading each partition at the given offset (restores from stored offsets)."""

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets (partitions without one are left out)."""
        return {}

    def pause(self, partitions: Iterable[TopicPartition]) -> None:  # noqa: B027 - optional hook
        """Return no record of these partitions until resumed (flow control; ignored where unsupported)."""

    def resume(self, partitions: Iterable[TopicPartition]) -> None:  # noqa: B027 - optional hook
        """Return records of these paused partitions again."""

    def lag(self) -> dict[TopicPartition, int]:
        """Records behind the end of each assigned partition, where the bus knows it."""
        return {}

    def close(self, timeout_s: float = 10.0) -> None:  # noqa: B027 - optional hook
        """Deliver what is buffered (up to ``timeout_s``) and release connections."""


def partition_for(key: str | None, partitions: int) -> int:
    """Stable key → partition (crc32, the same in every process and run)."""
    if partitions <= 1 or key is None:
        return 0
    return zlib.crc32(key.encode()) % partitions


class LocalOffsetsBus(Bus):
    """A bus with no broker to commit to (memory, capture): committed offsets live in a dict."""

    def __init__(self) -> None:
        self.committed_offsets: dict[TopicPartition, int] = {}

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.committed_offsets.update(offsets)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        wanted = set(partitions)
        return {tp: o for tp, o in self.committed_offsets.items() if tp in wanted}


class MemoryBus(LocalOffsetsBus):
    """An in-process bus with Kafka's semantics for one consumer group.

    Records keep produce order; each topic has ``partitions`` partitions with their own offsets; a
    poll returns records in the order they were produced; commit and seek work as in Kafka.
    """

    in_produce_order = True

    def __init__(self, partitions: int = 1) -> None:
        self.partitions = partitions
        self._log: list[Record] = []
        self._next_offset: dict[TopicPartition, int] = {}
        self._position = 0  # index into _log of the next record to consider
        self._topics: set[str] = set()
        self._next_read: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()
        super().__init__()

    def produce(self, records: Iterable[Outgoing]) -> None:
        for r in records:
            p = partition_for(r.key, self.partitions)
            offset = self._next_offset.get((r.topic, p), 0)
            self._next_offset[(r.topic, p)] = offset + 1
            self._log.append(Record(r.topic, r.key, r.value, r.ts, p, offset))

    def subscribe(self, topics: Sequence[str]) -> None:
        self._topics = set(topics)

    def poll(self, max_records: int = 10_000, timeout_s: float = 0.0) -> list[Record]:
        out: list[Record] = []
        log, i = self._log, self._position
        skipped: int | None = None  # the first record of a paused partition: read from there again
        while i < len(log) and len(out) < max_records:
            r = log[i]
            i += 1
            tp = (r.topic, r.partition)
            if r.topic in self._topics and r.offset >= self._next_read.get(tp, 0):
                if tp in self.paused:
                    skipped = i - 1 if skipped is None else skipped
                    continue
                self._next_read[tp] = r.offset + 1
                out.append(r)
        self._position = i if skipped is None else skipped
        return out

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self.paused.update(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self.paused.difference_update(partitions)

    def lag(self) -> dict[TopicPartition, int]:
        return {tp: end - self._next_read.get(tp, 0) for tp, end in self._next_offset.items() if tp[0] in self._topics}

    def seek(self, offsets: dict[TopicPartition, int]) -> None:
        self._next_read.update(offsets)
        self._position = 0

    def pending(self) -> int:
        """Records produced but not yet polled (any topic)."""
        return len(self._log) - self._position

    def records(self, topic: str) -> list[Record]:
        """Everything produced to ``topic`` (for tests and the demo's report)."""
        return [r for r in self._log if r.topic == topic]

    def trim(self) -> None:
        """Forget records already polled, so a long demo does not grow without bound."""
        del self._log[: self._position]
        self._position = 0

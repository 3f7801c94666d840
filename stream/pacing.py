"""Reading a backlog's partitions in step, by the time their records carry.

A consumer that starts on a backlog (a restart, a rebalance, a broker that was away) reads its
partitions at different speeds: Kafka fetches one partition's records well ahead of another's. Time
in fabricwatch is the data's own (watermarks, ticks, silence), so a partition read minutes ahead makes
the sources of the others look late or silent, and closes detection ticks before their rows arrive. The
pacer keeps them together: a record more than ``ahead_s`` past the slowest partition that still has
records to read (or, for one not read yet, past the start of the batch) is not handed on. It waits in
memory with the rest of its partition's batch, the partition is paused (no seek: a consumer's fetch
position never moves back), and both are released once the slowest has caught up, or once no other
partition has a backlog (a partition with nothing more to read never holds the others back). The
slowest partition of a batch always hands on its first record, so reading always moves on. Live,
with no backlog, nothing is ever held; nor on a bus that reads in produce order (memory, a capture).

Records that wait are not stored, so their offsets are not committed: a crash or a revoked partition
loses nothing, the next owner reads them again.

A partition with a backlog that has handed nothing on yet stands, by default, nowhere: the batch's
own start is the floor. A consumer that knows where its input stands (stage 2: the first tick open
when its assignment began, stream/stage2_loop.py) says so with ``unread_at``, and such a partition
stands there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from fabricwatch.stream.bus import Bus, TopicPartition

T = TypeVar("T")
Stamp = Callable[[T], tuple[TopicPartition, float | None]]  # an item's partition and time (None: no time)


class Pacer(Generic[T]):
    def __init__(
        self, bus: Bus, ahead_s: float, stamp: Stamp[T], unread_at: Callable[[], float | None] | None = None
    ) -> None:
        self.bus = bus
        self.ahead_s = ahead_s
        self.stamp = stamp
        self.unread_at = unread_at  # where a partition not read yet stands (None, or returning None: unknown)
        self.held: dict[TopicPartition, float] = {}  # paused partitions -> the time of their first waiting item
        self.waiting: dict[TopicPartition, list[T]] = {}  # their items, in the order read
        self.read: dict[TopicPartition, float] = {}  # the newest time handed on, per partition
        self._released: list[T] = []  # items of resumed partitions, handed on with the next batch

    @property
    def pending(self) -> int:
        """Items released and not yet handed on (a loop keeps going while there are any)."""
        return len(self._released)

    def pace(self, polled: Sequence[T]) -> list[T]:
        """What of the released items and this poll may be handed on now; the rest waits."""
        if self.bus.in_produce_order:
            return list(polled)  # nothing is ever held: no item need be stamped (the replay's hot path)
        batch = [(item, self.stamp(item)) for item in self._released]  # stamped again: rare, after a hold
        self._released = []
        for item in polled:
            stamp = self.stamp(item)  # once per item: a batch message's stamp reads every row
            if stamp[0] in self.held:  # fetched before the pause took effect: behind what already waits
                self.waiting[stamp[0]].append(item)
            else:
                batch.append((item, stamp))
        limit = self.limit([(tp, ts) for _, (tp, ts) in batch if ts is not None])
        keep: list[T] = []
        waits: dict[TopicPartition, list[T]] = {}
        for item, (tp, ts) in batch:
            if tp not in waits and limit is not None and ts is not None and ts > limit:
                waits[tp] = []
                self.held[tp] = ts
            if tp in waits:
                waits[tp].append(item)
                continue
            keep.append(item)
            if ts is not None and ts > self.read.get(tp, -math.inf):
                self.read[tp] = ts
        if waits:
            self.waiting.update(waits)
            self.bus.pause(list(waits))
        return keep

    def limit(self, stamped: Sequence[tuple[TopicPartition, float]]) -> float | None:
        """The newest time this batch may hand on, or None: all of it. ``stamped`` holds each item's
        partition and time, in the order read. A partition of the batch stands at its first item; one
        elsewhere with a backlog at what it last handed on (not read yet: at the start of the batch)."""
        if not stamped:
            return None
        at: dict[TopicPartition, float] = {}
        for tp, ts in stamped:
            at.setdefault(tp, ts)
        elsewhere = self._slowest([tp for tp in self._backlogged() if tp not in at])
        if elsewhere is None and len(at) == 1:
            return None  # one partition and nothing else to read: nobody to keep in step with
        start = min(at.values())
        floor = min(start, elsewhere) if elsewhere is not None and math.isfinite(elsewhere) else start
        limit = floor + self.ahead_s
        return limit if any(ts > limit for _, ts in stamped) else None

    def release_due(self, everything: bool = False) -> None:
        """Resume held partitions the slowest has caught up with, or all once no other has a backlog (or
        with ``everything``: a finite input at its end)."""
        if not self.held:
            return
        slowest = None if everything else self._slowest(self._backlogged())
        due = [tp for tp, ts in self.held.items() if slowest is None or ts <= slowest + self.ahead_s]
        if due:
            self.bus.resume(due)
            for tp in due:
                del self.held[tp]
                self._released += self.waiting.pop(tp)

    def forget(self, partitions: Sequence[TopicPartition] | None = None) -> None:
        """Partitions revoked (or, with None, a new assignment): what waits is dropped, not stored, and
        read again by whoever owns the partition next; a new owner starts unpaused."""
        gone = set(self.held) | set(self.read) if partitions is None else set(partitions)
        for tp in gone:
            self.held.pop(tp, None)
            self.waiting.pop(tp, None)
            self.read.pop(tp, None)
        self._released = [item for item in self._released if self.stamp(item)[0] not in gone]
        if partitions is None:
            self._released = []

    def unread(self) -> list[TopicPartition]:
        """Partitions with a backlog that have handed on nothing yet (their sources may be unknown; none
        on a bus that reads in produce order: no partition is behind)."""
        if self.bus.in_produce_order:
            return []
        return [tp for tp in self._backlogged() if tp not in self.read]

    def _backlogged(self) -> list[TopicPartition]:
        """Partitions with records still to read, less the held ones (a bus that cannot tell: none)."""
        return [tp for tp, n in self.bus.lag().items() if n > 0 and tp not in self.held]

    def _slowest(self, partitions: list[TopicPartition]) -> float | None:
        """The newest time handed on of the slowest of these (one not read yet: ``unread_at``, or -inf
        when that is unknown; None: no partition)."""
        unread = self.unread_at() if self.unread_at is not None else None
        unread = -math.inf if unread is None else unread
        return min((self.read.get(tp, unread) for tp in partitions), default=None)


def drain(step: Callable[[], int], pacer: Pacer) -> int:
    """Run a paced loop's ``step`` until a poll comes back empty and nothing waits (a finite bus at
    its end), releasing what the pacer still holds once the input is over; returns records polled."""
    polled = 0
    while True:
        n = step()
        polled += n
        if n == 0 and not pacer.pending:
            if not pacer.held:
                return polled
            pacer.release_due(everything=True)  # the input is at its end: nothing more to wait for

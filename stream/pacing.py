"""Reading a backlog's partitions in step, by the time their records carry.

A consumer that starts on a backlog (a restart, a rebalance, a broker that was away) reads its
partitions at different speeds: Kafka fetches one partition's records well ahead of another's. Time
in fabricwatch is the data's own (watermarks, ticks, silence), so a partition read minutes ahead makes
the sources of the others look late or silent, and closes ticks before their findings arrive. The
pacer keeps them together: a record more than ``ahead_s`` past the slowest partition that still has
records to read (or, for one not read yet, past the start of the batch) is not handed on; its
partition is sought back to it and paused, and resumed once the slowest has caught up, or once no
other partition has a backlog (a partition with nothing more to read never holds the others back).
Live, with no backlog, nothing is ever held.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fabricwatch.stream.bus import Bus, TopicPartition


class Pacer:
    def __init__(self, bus: Bus, ahead_s: float) -> None:
        self.bus = bus
        self.ahead_s = ahead_s
        self.held: dict[TopicPartition, float] = {}  # paused partitions -> the time of their first held record
        self.read: dict[TopicPartition, float] = {}  # the newest time handed on, per partition

    def _backlogged(self) -> list[TopicPartition]:
        """Partitions with records still to read, less the held ones (a bus that cannot tell: none)."""
        return [tp for tp, n in self.bus.lag().items() if n > 0 and tp not in self.held]

    def _slowest(self, partitions: list[TopicPartition]) -> float | None:
        """The newest time handed on of the slowest of these (-inf: one not read yet; None: no partition)."""
        return min((self.read.get(tp, -math.inf) for tp in partitions), default=None)

    def limit(self, stamped: Sequence[tuple[TopicPartition, float]]) -> float | None:
        """The newest time this batch may hand on, or None: all of it. ``stamped`` holds each record's
        partition and time, in the order read. A partition of the batch stands at its first record (so
        every partition polled moves on, even past a record stamped out of order); one elsewhere with a
        backlog at what it last handed on (not read yet: at the start of the batch). A bus that reads
        in produce order (memory, a capture) is never held."""
        if not stamped or self.bus.in_produce_order:
            return None
        at: dict[TopicPartition, float] = {}
        for tp, ts in stamped:
            at.setdefault(tp, ts)  # the first record, not the earliest: each partition hands on one at least
        elsewhere = self._slowest([tp for tp in self._backlogged() if tp not in at])
        if elsewhere is None and len(at) == 1:
            return None  # one partition and nothing else to read: nobody to keep in step with
        start = min(at.values())
        floor = min(start, elsewhere) if elsewhere is not None and math.isfinite(elsewhere) else start
        limit = floor + self.ahead_s
        return limit if any(ts > limit for _, ts in stamped) else None

    def handed(self, stamped: Sequence[tuple[TopicPartition, float]]) -> None:
        """Note what was handed on."""
        for tp, ts in stamped:
            if ts > self.read.get(tp, -math.inf):
                self.read[tp] = ts

    def hold(self, first_held: dict[TopicPartition, tuple[int, float]]) -> None:
        """Seek each partition back to its first held record (offset, time) and pause it."""
        if first_held:
            self.bus.seek({tp: offset for tp, (offset, _) in first_held.items()})
            self.bus.pause(list(first_held))
            self.held.update({tp: ts for tp, (_, ts) in first_held.items()})

    def release_due(self) -> None:
        """Resume held partitions the slowest has caught up with, or all once no other has a backlog."""
        if not self.held:
            return
        slowest = self._slowest(self._backlogged())
        due = [tp for tp, ts in self.held.items() if slowest is None or ts <= slowest + self.ahead_s]
        if due:
            self.bus.resume(due)
            for tp in due:
                del self.held[tp]

    def forget(self, partitions: Sequence[TopicPartition] | None = None) -> None:
        """Partitions revoked (or, with None, a new assignment): a new owner starts unpaused."""
        for tp in list(self.held) if partitions is None else partitions:
            self.held.pop(tp, None)
            self.read.pop(tp, None)
        if partitions is None:
            self.read.clear()

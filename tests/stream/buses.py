"""Buses for tests of the loops: a backlog read one partition at a time."""

from __future__ import annotations

from fabricwatch.stream.bus import MemoryBus, Record


class PartitionAtATimeBus(MemoryBus):
    """Serves the lowest partition with unread records first, as a fetcher draining one partition's
    backlog before the next does: a restarted stage 2's partitions drift far apart in tick."""

    in_produce_order = False

    def poll(self, max_records: int = 10_000, timeout_s: float = 0.0) -> list[Record]:
        unread = [
            r
            for r in self._log
            if r.topic in self._topics
            and (r.topic, r.partition) not in self.paused
            and r.offset >= self._next_read.get((r.topic, r.partition), 0)
        ]
        out = sorted(unread, key=lambda r: (r.partition, r.offset))[:max_records]
        for r in out:
            self._next_read[(r.topic, r.partition)] = r.offset + 1
        return out

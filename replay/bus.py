"""A capture as a bus: replay is the processing loop over one more source.

``CaptureBus`` reads a capture (DESIGN §6) front to back and hands its records to ``poll`` in file
order, each message in the bytes a producer would have sent (MessagePack, schema.encode's format), so
the processor sees exactly what it sees live. A capture has one partition per topic; a record's
offset is its line number, so a dead letter names the line it came from. ``poll`` returns an empty
list only at the end of the file: the bus is finite, and the loop's ``drain`` stops there.

A capture is read-only: what the loop publishes (dead letters, incidents, findings) is counted by
topic in ``published`` and not kept; replay reads incidents from the engine and everything else from
the store.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

import msgspec

from fabricwatch.replay.capture import Capture, CapturedRecord
from fabricwatch.stream.bus import LocalOffsetsBus, Outgoing, Record, TopicPartition


class CaptureBus(LocalOffsetsBus):
    in_produce_order = True  # file order; a seek only moves forward, so a pacer could not hold records back

    def __init__(self, capture: Capture) -> None:
        self.capture = capture
        self._lines: Iterator[CapturedRecord] = capture.records()
        self._topics: set[str] | None = None
        self._next_read: dict[TopicPartition, int] = {}
        self._encoder = msgspec.msgpack.Encoder()
        self.records_read = 0  # lines read from the file (of any topic)
        self.first_ts: float | None = None  # the earliest record: the run's t=0
        self.exhausted = False
        super().__init__()
        self.published: Counter[str] = Counter()

    def produce(self, records: Iterable[Outgoing]) -> None:
        for r in records:
            self.published[r.topic] += 1

    def subscribe(self, topics: Sequence[str]) -> None:
        self._topics = set(topics)

    def poll(self, max_records: int = 10_000, timeout_s: float = 0.0) -> list[Record]:
        """The next records of the subscribed topics in file order; empty at the end of the capture."""
        if self._topics is None:
            raise RuntimeError("subscribe() first")
        out: list[Record] = []
        while len(out) < max_records:
            rec = next(self._lines, None)
            if rec is None:
                self.exhausted = True
                break
            self.records_read += 1
            if self.first_ts is None or rec.ts < self.first_ts:
                self.first_ts = rec.ts
            if rec.topic not in self._topics or rec.line < self._next_read.get((rec.topic, 0), 0):
                continue
            out.append(Record(rec.topic, rec.key, self._encoder.encode(rec.value), rec.ts, 0, rec.line))
        return out

    def seek(self, offsets: dict[TopicPartition, int]) -> None:
        """Skip the lines of each topic before the given offset (a line number); a file is read once,
        so a seek can only move forward."""
        self._next_read.update(offsets)

    def close(self, timeout_s: float = 10.0) -> None:
        self.capture.close()

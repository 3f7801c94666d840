"""Recording live telemetry from a bus into a capture, so an on-call engineer can keep a real incident.

``fabricwatch record`` subscribes to the telemetry topics with a consumer group of its own (it never
moves a processor's offsets), decodes every record (a message or a batch record of many) and writes
one capture line per message (DESIGN §6), with numeric columns unpacked to plain JSON values so the
capture replays through the same validation as any other. A record that cannot be decoded is not
telemetry: it is counted and its reason kept (the processor dead-letters the same record), and the
good records around it are still written.

The capture has no ground truth (``truth`` is absent until ``fabricwatch capture label`` adds it) and a
``notes`` field for the engineer. Recording stops after ``duration_s`` of wall time, after
``max_records``, or on Ctrl-C; the file is closed properly in every case, so a gzip capture is whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fabricwatch import schema
from fabricwatch.replay.capture import CaptureWriter
from fabricwatch.stream.bus import Bus
from fabricwatch.topology import Topology

POLL_S = 0.5  # one poll waits at most this long, so a stop is noticed within half a second
MAX_REASONS = 20  # undecodable records whose reason is kept for the summary


@dataclass
class RecordStats:
    records: int = 0  # bus records read
    messages: int = 0  # capture lines written (a batch record holds many messages)
    rows: int = 0
    undecodable: int = 0
    reasons: list[str] = field(default_factory=list)  # the first MAX_REASONS, "topic[partition]@offset: why"
    first_ts: float | None = None
    last_ts: float | None = None


def record(
    bus: Bus,
    out: str | Path,
    topology: Topology,
    *,
    kinds: Sequence[str] = tuple(schema.KINDS),
    duration_s: float | None = None,
    max_records: int | None = None,
    notes: str | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    progress: Callable[[RecordStats], None] | None = None,
) -> RecordStats:
    """Read ``kinds`` from ``bus`` into the capture ``out`` until a limit or Ctrl-C; returns what it read.

    ``bus`` must be new (not yet subscribed); it is subscribed here. A finite bus that runs dry ends the
    recording only through a limit, as a live one does: at least one of ``duration_s`` and
    ``max_records`` should be given unless Ctrl-C is the plan.
    """
    unknown = [k for k in kinds if k not in schema.KINDS]
    if unknown:
        raise ValueError(f"unknown kinds {unknown} (known: {', '.join(schema.KINDS)})")
    stats = RecordStats()
    extra = {"notes": notes} if notes else {}
    bus.subscribe([schema.topic_of(k) for k in kinds])
    deadline = None if duration_s is None else monotonic() + duration_s
    with CaptureWriter(out, topology, truth=None, extra=extra) as writer:
        try:
            while (deadline is None or monotonic() < deadline) and (max_records is None or stats.records < max_records):
                wait = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - monotonic()))
                limit = 10_000 if max_records is None else max_records - stats.records
                for r in bus.poll(max_records=limit, timeout_s=wait):
                    stats.records += 1
                    try:
                        messages = schema.record_messages(r.value)
                    except schema.SchemaError as exc:
                        stats.undecodable += 1
                        if len(stats.reasons) < MAX_REASONS:
                            stats.reasons.append(f"{r.topic}[{r.partition}]@{r.offset}: {exc}")
                        continue
                    for m in messages:
                        m = schema.unpack(m)
                        writer.write(r.topic, r.key, m.ts, m)
                        stats.messages += 1
                        stats.rows += schema.row_count(m)
                        stats.first_ts = m.ts if stats.first_ts is None else min(stats.first_ts, m.ts)
                        stats.last_ts = m.ts if stats.last_ts is None else max(stats.last_ts, m.ts)
                if progress is not None:
                    progress(stats)
        except KeyboardInterrupt:
            pass  # the engineer has what they need: close the file whole
    return stats

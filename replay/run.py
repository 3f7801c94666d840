"""Replay: the whole processing and detection path over a capture, on a virtual clock, no sleeping.

The capture's records are fed to the same :class:`~stream.processor.Processor` the live service
uses, through the same bytes encoding, in file order and in fixed-size batches; the clock moves only
with the data. Two replays of one capture therefore give the same incidents, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from fabricwatch.clock import VirtualClock
from fabricwatch.errors import InputError
from fabricwatch.incident import Incident
from fabricwatch.replay.capture import Capture, open_capture
from fabricwatch.stream.bus import Record
from fabricwatch.stream.metrics import PipelineMetrics
from fabricwatch.stream.processor import Processor
from fabricwatch.stream.store import Store

BATCH_RECORDS = 2000


@dataclass
class ReplayResult:
    incidents: list[Incident]
    records: int
    rows: int
    deadletters: int
    errors: list[InputError] = field(default_factory=list)
    truth: list[dict] | None = None
    first_ts: float | None = None  # the earliest record: the run's t=0, where fault start times count from


def replay(
    capture: str | Path | Capture,
    *,
    db: str | Path = ":memory:",
    engine_factory: Callable | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> ReplayResult:
    """Replay a capture; ``progress(records, watermark)`` is called after every batch."""
    from fabricwatch.detectors.engine import DetectionEngine

    cap = capture if isinstance(capture, Capture) else open_capture(capture)
    engine = (engine_factory or DetectionEngine)(cap.topology)
    clock = VirtualClock()
    with Store(db) as store:
        processor = Processor(cap.topology, store, clock=clock, engine=engine, metrics=PipelineMetrics())
        encoder = msgspec.msgpack.Encoder()
        batch: list[Record] = []
        records = rows = deadletters = 0
        first_ts: float | None = None

        def flush() -> None:
            nonlocal rows, deadletters
            result = processor.handle(batch)
            rows += result.rows
            deadletters += len(result.deadletters)
            batch.clear()
            if progress is not None:
                progress(records, processor.watermark or 0.0)

        for rec in cap.records():
            records += 1
            if first_ts is None or rec.ts < first_ts:
                first_ts = rec.ts
            batch.append(Record(rec.topic, rec.key, encoder.encode(rec.value), rec.ts, 0, rec.line))
            if len(batch) >= BATCH_RECORDS:
                flush()
        if batch:
            flush()
        processor.finish()
        incidents = sorted(engine.incidents(), key=lambda i: i.id)
        store.write_batch(incidents=incidents)
    return ReplayResult(incidents, records, rows, deadletters, cap.errors, cap.truth, first_ts)


def incidents_json(incidents: list[Incident]) -> bytes:
    """The ``--incidents-out`` file: a JSON array, one object per incident, stable formatting."""
    return msgspec.json.format(msgspec.json.encode([i.to_dict() for i in incidents]), indent=2) + b"\n"

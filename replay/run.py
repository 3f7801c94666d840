"""Replay: the processing loop over a capture, on a virtual clock, no sleeping.

The capture is a bus (replay.bus.CaptureBus) and the loop is the live one (stream.consume.ProcessingLoop)
with the live processor: records in the bytes a producer sends, in file order, in fixed-size batches;
the clock moves only with the data. The batch size hides no timing fault: the processor runs each tick
where the watermark over sources passes it inside a batch, as live (stream/processor.py). Two replays
of one capture therefore give the same incidents, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from fabricwatch.clock import VirtualClock
from fabricwatch.errors import InputError
from fabricwatch.incident import Incident
from fabricwatch.replay.bus import CaptureBus
from fabricwatch.replay.capture import Capture, open_capture
from fabricwatch.stream.consume import LoopStats, ProcessingLoop
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
    batch_records: int = BATCH_RECORDS,
) -> ReplayResult:
    """Replay a capture; ``progress(records, watermark)`` is called after every batch."""
    from fabricwatch.detectors.engine import DetectionEngine

    cap = capture if isinstance(capture, Capture) else open_capture(capture)
    engine = (engine_factory or DetectionEngine)(cap.topology)
    bus = CaptureBus(cap)
    with Store(db) as store:
        processor = Processor(cap.topology, store, clock=VirtualClock(), engine=engine, metrics=PipelineMetrics())

        def on_batch(_: LoopStats) -> None:
            if progress is not None:
                progress(bus.records_read, processor.watermark or 0.0)

        loop = ProcessingLoop(bus, processor, max_records=batch_records, poll_timeout_s=0.0, on_batch=on_batch)
        try:
            loop.drain()
            loop.finish()
        finally:
            bus.close()
        incidents = sorted(engine.incidents(), key=lambda i: i.id)
        store.write_batch(incidents=incidents)
    s = loop.stats
    return ReplayResult(incidents, bus.records_read, s.rows, s.deadletters, cap.errors, cap.truth, bus.first_ts)


def incidents_json(incidents: list[Incident]) -> bytes:
    """The ``--incidents-out`` file: a JSON array, one object per incident, stable formatting."""
    return msgspec.json.format(msgspec.json.encode([i.to_dict() for i in incidents]), indent=2) + b"\n"

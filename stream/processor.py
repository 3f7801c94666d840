"""The processor: records from the bus → validated rows in DuckDB → detection ticks → incidents.

It is the same object live (Kafka, wall clock), in the demo (in-memory bus) and in replay (virtual
clock): only the edges passed in differ. It never dies on input: a record that cannot be decoded or
breaks the schema becomes a :class:`~stream.store.DeadLetter` with its reason, stored in the same
transaction as the good rows and the offsets they came from.

Detection runs on a grid of telemetry time: the tick for time T covers ``[T - window_s, T]`` (longer
for slow streams: two samples of each, see ``window_span``) and runs
once the watermark over sources has passed ``T + grace_s``. The watermark is not the newest ``ts``
seen: it is the slowest live source's promise, after each source's clock offset is estimated and
corrected (stream/sources.py), so one fast clock cannot run detection ahead of everyone else's data,
and a silent source holds it back for ``lateness_s`` at most. A virtual clock is moved to
``T + grace_s`` before the tick, which is when a live processor would have run it; that makes
replayed ``detected_at`` exact and repeatable.

Rows are stored and buffered as their sources stamped them (forensic SQL sees the raw ``ts``); the
windows that detection reads have each source's significant clock offset, as estimated when the
window is cut, taken out of all its rows (stream/window.py).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from fabricwatch import schema
from fabricwatch.clock import Clock
from fabricwatch.incident import Incident
from fabricwatch.records import DeadLetter, Finding, Window
from fabricwatch.schema import SchemaError
from fabricwatch.stream.bus import Record
from fabricwatch.stream.metrics import PipelineMetrics
from fabricwatch.stream.sources import SourceClocks
from fabricwatch.stream.store import Store
from fabricwatch.stream.window import WindowBuffer, corrected, shifts_of
from fabricwatch.topology import Topology

log = logging.getLogger("fabricwatch.processor")

Decoded = schema.Message | schema.MessageBatch | DeadLetter  # a record's message, or the dead letter it is

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
# A window stretches for slow streams up to this many window_s (5 min at 60 s): REALISM.md has
# switches scraped every 30-60 s; a source slower than two minutes is judged on one sample a window.
MAX_WINDOW_FACTOR = 5.0


class Engine(Protocol):
    """What the processor needs of a detection engine (fabricwatch.detectors.engine.DetectionEngine)."""

    @property
    def window_s(self) -> float: ...

    @property
    def every_s(self) -> float: ...

    findings: list[Finding]  # the last tick's findings
    transport: frozenset[str]  # symptoms of findings that are only summaries for stage 2: published, not stored
    errors: list[str]  # the last tick's detector failures, "name: error" (never fatal)
    unconsumed: dict[str, int]  # the last tick's findings no correlation rule reads, per symptom

    def run(self, window: Window, now: float) -> list[Incident]: ...

    def snapshot(self) -> dict[str, Any]: ...

    def forget(self, sources: Mapping[str, float]) -> None: ...  # source -> newest ts read here

    def restore(self, state: dict[str, Any]) -> None: ...


@dataclass(slots=True)
class HandleResult:
    deadletters: list[DeadLetter] = field(default_factory=list)
    # every change in this call, tick by tick (one opened and resolved in it: both, in order)
    incidents: list[Incident] = field(default_factory=list)
    findings: list[tuple[float, Finding]] = field(default_factory=list)  # (tick time, finding) of its ticks
    ticks: list[float] = field(default_factory=list)  # the detection ticks run (telemetry time)
    # a split stage 1's step ticks (EngineConfig.step_tick) and their findings, for stage 2's step ticks
    step_findings: list[tuple[float, Finding]] = field(default_factory=list)
    step_ticks: list[float] = field(default_factory=list)
    rows: int = 0


class Processor:
    def __init__(
        self,
        topology: Topology,
        store: Store,
        *,
        clock: Clock,
        engine: Engine | None = None,
        metrics: PipelineMetrics | None = None,
        grace_s: float = 1.0,
        lateness_s: float = 30.0,
        on_incident: Callable[[Incident], None] | None = None,
        save_state_every_s: float | None = None,
    ) -> None:
        self.topology = topology
        self.store = store
        self.clock = clock
        self.engine = engine
        self.metrics = metrics or PipelineMetrics()
        self.grace_s = grace_s
        self.on_incident = on_incident
        self.buffer = WindowBuffer(topology)
        # clock corrections finer than a tick are not made: see stream/sources.py
        self.clocks = SourceClocks(lateness_s, engine.every_s if engine is not None else 0.0)
        self.next_offsets: dict[tuple[str, int], int] = dict(store.offsets())
        self.watermark: float | None = None  # the watermark over sources (stream/sources.py)
        self.newest: float | None = None  # the newest corrected ts seen
        self.earliest: float | None = None  # the first telemetry seen: detection's grid starts here
        self._next_tick: float | None = None
        self._step_done: float | None = None  # the last step tick run (or passed over), telemetry time
        self._firing_labels: dict[str, tuple[str, ...]] = {}
        self.rows_stored = 0
        self._partition_sources: dict[tuple[str, int], set[str]] = {}  # the sources read from each partition
        # Baselines and open incidents survive a restart: the engine's state is saved with a tick's
        # findings every ``save_state_every_s`` of telemetry time and restored here (STYLE item 5).
        self.save_state_every_s = save_state_every_s
        self._state_saved_at: float | None = None
        if engine is not None and save_state_every_s is not None:
            self._restore_engine()

    # --- ingest ---------------------------------------------------------------------------------

    def decode(self, r: Record) -> Decoded:
        """One record's message, or the dead letter it becomes."""
        deadletters: list[DeadLetter] = []
        message = self._decode(r, deadletters)
        return deadletters[0] if message is None else message

    def stamp(self, message: Decoded) -> float | None:
        """The earliest telemetry time a message holds, each source's clock offset taken out (None: no
        telemetry in it)."""
        if isinstance(message, DeadLetter):
            return None
        if isinstance(message, schema.MessageBatch):
            stamps = zip(message.source, message.ts, strict=True)
            return min((ts - self.clocks.offset(source) for source, ts in stamps), default=None)
        return message.ts - self.clocks.offset(message.source)

    def handle(
        self,
        records: Sequence[Record],
        decoded: Sequence[Decoded] | None = None,
    ) -> HandleResult:
        """Validate and store one polled batch, running every detection tick as soon as it becomes due.

        Records are taken in arrival order; when the watermark over sources passes a tick, the records
        before that point are stored and the tick runs before the rest of the batch is looked at, as a
        live processor polling record by record would: the size of a batch (a replay reads 2,000
        records at a time) changes neither which rows a tick sees nor when it runs. ``decoded`` holds
        each record's :meth:`decode`, where the caller has it already."""
        result = HandleResult()
        offsets = dict(self.next_offsets)
        items: list[tuple[schema.Message | schema.MessageBatch, Record]] = []
        deadletters: list[DeadLetter] = []
        size = 0
        for i, r in enumerate(records):
            tp = (r.topic, r.partition)
            if r.offset + 1 > offsets.get(tp, 0):
                offsets[tp] = r.offset + 1
            size += len(r.value)
            message = self.decode(r) if decoded is None else decoded[i]
            if isinstance(message, DeadLetter):
                deadletters.append(message)
            else:
                items.append((message, r))
                seen = self._partition_sources.setdefault(tp, set())
                if isinstance(message, schema.MessageBatch):
                    seen.update(message.source)
                else:
                    seen.add(message.source)
                self._observe(message)
                if self._tick_due():
                    self._ingest(items, deadletters, dict(offsets), result)
                    items, deadletters = [], []
        self.metrics.received_bytes.inc(size)
        if items or deadletters or offsets != self.next_offsets:
            self._ingest(items, deadletters, offsets, result)
        return result

    def forget_partitions(self, partitions: Collection[tuple[str, int]]) -> set[str]:
        """These partitions went to another processor (a rebalance): the sources read only from them
        are that processor's now, so their clocks stop holding the watermark back and detectors drop
        what they keep of them (a source silent here is not silent). Returns those sources."""
        revoked = {tp: self._partition_sources.pop(tp) for tp in partitions if tp in self._partition_sources}
        kept = set().union(*self._partition_sources.values())
        gone = set().union(*revoked.values()) - kept
        if gone:
            newest = {s: self.clocks.sources[s].latest for s in gone if s in self.clocks.sources}
            self.clocks.forget(gone)
            if self.engine is not None:
                self.engine.forget({s: t for s, t in newest.items() if t is not None})
        return gone

    def _tick_due(self) -> bool:
        if self.engine is None or self.earliest is None:
            return False
        every = self.engine.every_s
        tick = self._next_tick if self._next_tick is not None else math.floor(self.earliest / every) * every + every
        steps = self._step_done is not None and getattr(self.engine, "step_kinds", None)
        if steps and tick - every / 2 > self._step_done:
            tick -= every / 2  # the step tick before it comes first
        watermark = self.clocks.watermark()
        return watermark is not None and watermark >= tick + self.grace_s

    def _ingest(
        self,
        items: list[tuple[schema.Message | schema.MessageBatch, Record]],
        deadletters: list[DeadLetter],
        offsets: dict[tuple[str, int], int],
        result: HandleResult,
    ) -> None:
        """Store one segment of a batch (rows, dead letters, offsets: one transaction), then run the
        ticks that became due."""
        by_kind: dict[str, list[tuple[schema.Message | schema.MessageBatch, Record]]] = defaultdict(list)
        for message, r in items:
            by_kind[message.kind].append((message, r))
        tables: dict[str, pa.Table] = {}
        rows = 0
        for kind, kind_items in sorted(by_kind.items()):
            messages = sum(len(m.counts) if isinstance(m, schema.MessageBatch) else 1 for m, _ in kind_items)
            self.metrics.received.labels(kind).inc(messages)
            batch = schema.to_table(kind, [m for m, _ in kind_items])
            for i, exc in batch.rejected:
                deadletters.append(_deadletter(kind_items[i][1], exc))
            if batch.unknown_columns:
                self.metrics.unknown_columns.inc(batch.unknown_columns)
            tables[kind] = batch.table
            rows += batch.table.num_rows

        try:
            self.store.write_batch(tables, offsets=offsets, deadletters=deadletters)
        except Exception:
            self.metrics.errors.labels("store").inc()
            raise  # storage failing is fatal for this batch: the caller must not commit its offsets
        self.next_offsets = offsets
        self.rows_stored += rows
        result.rows += rows
        result.deadletters += deadletters
        for d in deadletters:
            self.metrics.deadlettered.labels(d.code).inc()
        shifts = shifts_of(self.clocks.corrections())
        for kind, table in tables.items():
            self.metrics.stored_rows.labels(kind).inc(table.num_rows)
            if self.engine is not None:  # only detection reads windows; ingest-only keeps nothing
                self.buffer.add(kind, table)  # as stamped: corrections are taken out at each cut
            table = corrected(table, shifts)
            if table.num_rows:
                span = pc.min_max(table.column("ts").cast(pa.int64()))
                oldest, newest = span["min"].as_py() / 1e6, span["max"].as_py() / 1e6
                if self.newest is None or newest > self.newest:
                    self.newest = newest
                if self.earliest is None or oldest < self.earliest:
                    self.earliest = oldest
        watermark = self.clocks.watermark()
        if watermark is not None and (self.watermark is None or watermark > self.watermark):
            self.watermark = watermark
        if self.watermark is not None:
            self.metrics.watermark.set(self.watermark)
        for source, offset in self.clocks.offsets().items():
            self.metrics.clock_offset.labels(source).set(offset)
        result.incidents += self._run_due(final=False, result=result)

    def _observe(self, message: schema.Message | schema.MessageBatch) -> None:
        stamps = (
            zip(message.source, message.ts, strict=True)
            if isinstance(message, schema.MessageBatch)
            else ([(message.source, message.ts)])
        )
        for source, ts in stamps:
            self.clocks.observe(source, message.kind, ts)
            corrected = ts - self.clocks.offset(source)
            if self.engine is not None and (self.earliest is None or corrected < self.earliest):
                self.earliest = corrected  # detection's grid starts at the first telemetry seen

    def _decode(self, r: Record, deadletters: list[DeadLetter]) -> schema.Message | schema.MessageBatch | None:
        if len(r.value) > MAX_MESSAGE_BYTES:
            reason = f"{len(r.value)} bytes, over the {MAX_MESSAGE_BYTES} a message may have"
            deadletters.append(_deadletter(r, SchemaError(reason, "too_large")))
            return None
        try:
            message = schema.decode_record(r.value)
        except SchemaError as exc:
            deadletters.append(_deadletter(r, exc))
            return None
        if r.topic.startswith(schema.TOPIC_PREFIX) and r.topic != schema.topic_of(message.kind):
            exc = SchemaError(f"a {message.kind!r} message on topic {r.topic}", "topic_mismatch")
            deadletters.append(_deadletter(r, exc))
            return None
        return message

    # --- detection ------------------------------------------------------------------------------

    def finish(self) -> list[Incident]:
        """End of input: run the ticks up to and including the watermark (replay, shutdown)."""
        return self._run_due(final=True)

    def _run_due(self, final: bool, result: HandleResult | None = None) -> list[Incident]:
        """Run the ticks that are due, in time order: the grid of ``every_s`` and, halfway between two
        of its ticks, a step tick when the engine has step detectors (``step_kinds``). At the end of
        input (``final``) a step tick runs only before a tick that runs too: a last look of the step
        detectors alone, with no full tick after it, would open what no full tick ever saw."""
        if self.engine is None or self.watermark is None:
            return []
        every = self.engine.every_s
        if self._next_tick is None:
            assert self.earliest is not None
            self._next_tick = math.floor(self.earliest / every) * every + every
            self._step_done = self._next_tick - every / 2  # the first step tick follows the first tick
        steps = bool(getattr(self.engine, "step_kinds", None))
        newest = self.newest if self.newest is not None else self.watermark
        changed: list[Incident] = []  # tick by tick, in id order within a tick
        while True:
            tick = self._next_tick
            due = tick <= newest + every - 1e-9 if final else self.watermark >= tick + self.grace_s
            half = tick - every / 2
            if steps and (self._step_done is None or half > self._step_done):
                if not due if final else self.watermark < half + self.grace_s:
                    break
                changed += sorted(self._step_tick(half, result), key=lambda i: i.id)
                self._step_done = half
                continue
            if not due:
                break
            changed += sorted(self._tick(tick, result.findings if result is not None else None), key=lambda i: i.id)
            if result is not None:
                result.ticks.append(tick)
            self._next_tick = tick + every
        return changed

    def _step_tick(self, tick: float, result: HandleResult | None) -> list[Incident]:
        """A step tick at ``tick``: the engine's step detectors over a window of their kinds only
        (detectors/stage.py). Its incidents are stored and published as a tick's; its findings are not
        stored (the next tick's findings hold them), a split stage 1 publishes them for stage 2's step
        tick."""
        assert self.engine is not None
        engine: Any = self.engine
        self.clock.advance_to(tick + self.grace_s)
        now = self.clock.now()
        span = self.window_span()
        window = self.buffer.window(tick - span, tick, self.clocks.corrections(), kinds=engine.step_kinds)
        try:
            changed: list[Incident] = engine.run_step(window, now)
        except Exception:
            self.metrics.errors.labels("detect").inc()
            log.exception("step tick at %.0f failed; the next tick runs as usual", tick)
            return []
        for error in self.engine.errors:
            self.metrics.errors.labels("detect").inc()
            log.warning("step tick at %.0f: detector %s", tick, error)
        if result is not None:
            result.step_findings += [(tick, f) for f in getattr(engine, "step_findings", ())]
            result.step_ticks.append(tick)
        if changed:
            self.store.write_batch(incidents=changed)
        for incident in changed:
            self._publish(incident)
        return changed

    def _tick(self, tick: float, found: list[tuple[float, Finding]] | None = None) -> list[Incident]:
        assert self.engine is not None
        self.clock.advance_to(tick + self.grace_s)
        now = self.clock.now()
        span = self.window_span()
        window = self.buffer.window(tick - span, tick, self.clocks.corrections())
        started = time.perf_counter()
        try:
            changed = self.engine.run(window, now)
        except Exception:
            self.metrics.errors.labels("detect").inc()
            log.exception("detection tick at %.0f failed; telemetry is stored, detection continues", tick)
            return []
        finally:
            self.metrics.ticks.inc()
            self.metrics.tick_seconds.observe(time.perf_counter() - started)
            self.buffer.evict(tick - span - self.engine.every_s)
        for symptom, count in self.engine.unconsumed.items():  # logged once by the correlator
            self.metrics.unconsumed.labels(symptom).inc(count)
        for error in self.engine.errors:  # one detector failing; the others ran
            self.metrics.errors.labels("detect").inc()
            log.warning("detection tick at %.0f: detector %s", tick, error)
        findings = [(now, f) for f in self.engine.findings]
        transport = self.engine.transport
        stored = [(t, f) for t, f in findings if f.symptom not in transport] if transport else findings
        state = None
        every = self.save_state_every_s
        if every is not None and (self._state_saved_at is None or tick - self._state_saved_at >= every):
            state = self._engine_state(now)
            self._state_saved_at = tick
        self.store.write_batch(findings=stored, incidents=changed, engine_state=state)
        if found is not None:  # published with the tick's telemetry time: one grid for every processor
            found += [(tick, f) for _, f in findings]
        for incident in changed:
            self._publish(incident)
        return changed

    def window_span(self) -> float:
        """The history a tick reads: ``window_s``, stretched to 2.5 of the slowest stream's scrape
        intervals so that a counter rate has two samples of every entity whatever its cadence (a
        switch polled every 60 s gets 150 s), at most :data:`MAX_WINDOW_FACTOR` × ``window_s``."""
        assert self.engine is not None
        base = self.engine.window_s
        return min(max(base, 2.5 * self.clocks.slowest_cadence()), MAX_WINDOW_FACTOR * base)

    def save_state(self) -> None:
        """Save the engine's state now (on shutdown), whatever the schedule."""
        if self.engine is not None and self.save_state_every_s is not None:
            state = self._engine_state(self.clock.now())
            if state is not None:
                self.store.write_batch(engine_state=state)

    def _engine_state(self, now: float) -> tuple[float, str] | None:
        assert self.engine is not None
        try:
            return now, json.dumps(self.engine.snapshot(), sort_keys=True, separators=(",", ":"))
        except Exception:  # housekeeping: never stop detection for it
            self.metrics.errors.labels("store").inc()
            log.exception("saving the detection engine's state failed")
            return None

    def _restore_engine(self) -> None:
        state = self.store.engine_state()
        if state is None or self.engine is None:
            return
        try:
            self.engine.restore(json.loads(state))
        except Exception as exc:  # a state from another version: start learning afresh, say so
            log.warning("detection state in %s not restored (%s); baselines are learnt again", self.store.path, exc)
            return
        log.info("detection state restored from %s", self.store.path)

    def _publish(self, incident: Incident) -> None:
        labels = (
            incident.id,
            incident.type,
            incident.cause,
            incident.location["entity"],
            incident.location["id"],
            incident.severity,
            incident.runbook or "",
        )
        previous = self._firing_labels.pop(incident.id, None)
        if previous is None:
            self.metrics.incidents_opened.labels(incident.type, incident.cause).inc()
        else:
            self.metrics.incident_firing.remove(*previous)
        if incident.status == "firing":
            self.metrics.incident_firing.labels(*labels).set(1)
            self._firing_labels[incident.id] = labels
        if self.on_incident is not None:
            try:
                self.on_incident(incident)
            except Exception:
                self.metrics.errors.labels("publish").inc()
                log.exception("publishing incident %s failed", incident.id)


def _deadletter(r: Record, exc: SchemaError) -> DeadLetter:
    """The record's own bytes, or, for one bad message inside a batch record, that message alone."""
    value = r.value if exc.message is None else schema.encode(exc.message)
    return DeadLetter(r.topic, r.partition, r.offset, r.key, value, str(exc), exc.code, r.ts)

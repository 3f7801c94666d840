"""The processing loop: the one loop that drives a processor, live, in the demo and in replay.

One iteration (``step``): poll a batch → skip what the store already holds → ``Processor.handle``
(rows, dead letters and the next offsets in ONE DuckDB transaction) → dead letters, changed incidents
and findings to their topics → commit the same offsets to the bus (so lag is visible to standard tools).
The bus is anything behind the :class:`~stream.bus.Bus` interface: Kafka live (``run`` until ``stop``),
the demo's in-memory or lock-step Kafka bus (``drain`` after each simulated scrape), a capture in replay
(``drain`` once: replay.bus.CaptureBus). ``finish`` runs the ticks left at the end of finite input.

Exactly once in effect. The store's offsets are the truth for its own file; the group's committed
offsets are the truth across processors (each processor keeps its own file, DESIGN §1). On every
assignment each partition is sought to the larger of the two: after a crash between store and commit
the store is ahead (its rows are not read twice); when a partition comes back after another member
processed it, the commit is ahead (that member's rows are not read again). A record below the store's
offset is skipped even if the consumer delivers it. What this cannot prevent: a processor killed
between storing a batch and committing it, whose partitions then move to *another* processor, has
that one batch in both files (a crash on one machine followed by a move; a restart in place is exact).

Stopping (``stop`` set, e.g. by SIGTERM): the loop finishes the batch in hand (stored and committed,
since it only polls after the previous batch is both), stops polling, delivers dead letters for up to
``close_timeout_s`` and closes; a batch is at most ``max_records`` records, so this takes seconds.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

from fabricwatch.incident import Incident
from fabricwatch.schema import TELEMETRY_TOPICS
from fabricwatch.stream.bus import Bus, Record, TopicPartition
from fabricwatch.stream.deadletter import from_stored
from fabricwatch.stream.findings import finding_record, tick_records
from fabricwatch.stream.incidents import incident_record
from fabricwatch.stream.pacing import Pacer, drain
from fabricwatch.stream.processor import Decoded, Processor

log = logging.getLogger("fabricwatch.consume")

LAG_EVERY_S = 5.0
LOOP_STAGES = ("poll", "process", "publish", "commit", "seal")


@dataclass
class LoopStats:
    batches: int = 0
    records: int = 0
    skipped: int = 0  # delivered again below the stored offset, not stored twice
    rows: int = 0
    deadletters: int = 0
    incidents: int = 0
    last_poll: float = 0.0  # monotonic time of the last poll (for /healthz)
    assigned: int = 0  # partitions assigned now
    joined: bool = False  # the group gave this member its partitions at least once (for /readyz)


def _stage_counter(registry: CollectorRegistry) -> Counter:
    """Seconds spent per stage of the loop: poll (when it returned records), process (decode, validate,
    store: Processor.handle), publish (dead letters, incidents), commit (to Kafka)."""
    counter = Counter(
        "fabricwatch_loop_seconds_total", "Seconds the processing loop spent per stage", ["stage"], registry=registry
    )
    for stage in LOOP_STAGES:
        counter.labels(stage)
    return counter


class ProcessingLoop:
    """Runs ``processor`` on ``bus``: until ``stop`` is set (``run``), or until a poll is empty (``drain``)."""

    def __init__(
        self,
        bus: Bus,
        processor: Processor,
        *,
        topics: Sequence[str] = TELEMETRY_TOPICS,
        max_records: int = 10_000,
        poll_timeout_s: float = 0.5,
        close_timeout_s: float = 5.0,
        on_batch: Callable[[LoopStats], None] | None = None,
        seal_every_s: float = 0.0,
        seal_horizon_s: float = 300.0,
        tick_marks: str | None = None,
    ) -> None:
        self.bus = bus
        self.tick_marks = tick_marks  # stage 1 of a split deployment: this processor's name in tick marks
        self.processor = processor
        self.topics = list(topics)
        self._subscribed = False
        self.max_records = max_records
        self.poll_timeout_s = poll_timeout_s
        self.close_timeout_s = close_timeout_s
        self.on_batch = on_batch
        self.seal_every_s = seal_every_s
        self.seal_horizon_s = seal_horizon_s
        self._sealed_at = time.monotonic()
        self.stats = LoopStats()
        self.metrics = processor.metrics
        self.stage_seconds = _stage_counter(self.metrics.registry)
        self._lag_at = 0.0
        # a backlog's partitions are read within half the sources' lateness of each other, in telemetry
        # time (a Kafka record's own time is the broker's): stream/pacing.py
        self.pacer: Pacer[tuple[Record, Decoded]] = Pacer(bus, processor.clocks.lateness_s / 2, self._stamp)
        bus.on_assign = self._assigned
        bus.on_revoke = self._revoked

    # --- rebalance hooks ---------------------------------------------------------------------------

    def _assigned(self, partitions: list[TopicPartition]) -> None:
        stored = self.processor.next_offsets
        try:
            committed = self.bus.committed(partitions)
        except Exception as exc:  # the coordinator moving: the stored offsets alone still avoid duplicates
            log.warning("reading committed offsets failed (%s); seeking to stored offsets only", exc)
            committed = {}
        seeks = {}
        for tp in partitions:
            candidates = [o for o in (stored.get(tp), committed.get(tp)) if o is not None]
            if candidates:
                seeks[tp] = max(candidates)
        if seeks:
            self.bus.seek(seeks)
        # The store ahead of Kafka (a crash between the two): tell Kafka, so lag and the group agree.
        behind = {tp: o for tp, o in seeks.items() if committed.get(tp, -1) < o}
        if behind:
            self.bus.commit(behind)
        self.pacer.forget()
        self.stats.assigned = len(partitions)
        self.stats.joined = True
        log.info("assigned %d partitions, %d sought to stored/committed offsets", len(partitions), len(seeks))

    def _revoked(self, partitions: list[TopicPartition]) -> None:
        # Nothing to store: every polled batch was stored and committed before the next poll.
        self.pacer.forget(partitions)
        gone = self.processor.forget_partitions(partitions)
        if gone:
            log.info("revoked: %d sources now read by another processor", len(gone))
        self.stats.assigned = 0
        for topic, partition in partitions:
            with contextlib.suppress(KeyError):
                self.metrics.lag.remove(topic, str(partition))

    # --- the loop ----------------------------------------------------------------------------------

    def subscribe(self) -> None:
        """Subscribe the bus to the telemetry topics (once; ``run`` and ``drain`` call it)."""
        if not self._subscribed:
            self.bus.subscribe(self.topics)
            self._subscribed = True

    def step(self, timeout_s: float | None = None) -> int:
        """Poll one batch and handle it; returns the number of records polled (0: nothing came)."""
        self.subscribe()
        self.stats.last_poll = started = time.monotonic()
        wait = self.poll_timeout_s if timeout_s is None else timeout_s
        self.pacer.release_due()
        records = self.bus.poll(max_records=self.max_records, timeout_s=0.0 if self.pacer.pending else wait)
        if records:
            self.stage_seconds.labels("poll").inc(time.monotonic() - started)  # idle waits are not work
        items = self.pacer.pace([(r, self.processor.decode(r)) for r in records])
        if items:
            self.handle([r for r, _ in items], [m for _, m in items])
        elif not records:
            self._seal()  # idle: what the last batches stored still gets sealed on time
        return len(records)

    def _stamp(self, item: tuple[Record, Decoded]) -> tuple[TopicPartition, float | None]:
        r, message = item
        return (r.topic, r.partition), self.processor.stamp(message)

    def drain(self) -> int:
        """Handle batches until a poll comes back empty (a finite or lock-step bus has nothing more);
        returns the number of records polled."""
        return drain(self.step, self.pacer)

    def run(self, stop: threading.Event) -> LoopStats:
        """The live loop: poll and handle until ``stop`` is set, then close the bus."""
        try:
            while not stop.is_set():
                self.step()
                self._update_lag()
        finally:
            self.bus.close(self.close_timeout_s)
        return self.stats

    def finish(self) -> list[Incident]:
        """End of finite input: run the detection ticks still due and publish the incidents they changed."""
        incidents = self.processor.finish()
        if incidents:
            self.bus.produce(incident_record(i) for i in incidents)
        self.stats.incidents += len(incidents)
        return incidents

    def handle(self, records: list[Record], decoded: list[Decoded] | None = None) -> None:
        """Store one polled batch exactly once, publish its dead letters and incidents, commit."""
        stored = self.processor.next_offsets
        is_fresh = [r.offset >= stored.get((r.topic, r.partition), 0) for r in records]
        fresh = [r for r, f in zip(records, is_fresh, strict=True) if f]
        self.stats.skipped += len(records) - len(fresh)
        if not fresh:
            return
        if decoded is not None:
            decoded = [m for m, f in zip(decoded, is_fresh, strict=True) if f]
        seconds = self.stage_seconds
        started = time.monotonic()
        result = self.processor.handle(fresh, decoded)  # raises if storing failed: then nothing is committed
        handled = time.monotonic()
        seconds.labels("process").inc(handled - started)
        out = [from_stored(d) for d in result.deadletters]
        out += [incident_record(i) for i in result.incidents]
        if self.tick_marks is None:
            out += [finding_record(t, f, topology=self.processor.topology) for t, f in result.findings]
        else:
            topology = self.processor.topology
            ticks = tick_records(result.findings, result.ticks, self.tick_marks, topology)
            if result.step_ticks:  # stage 2's step ticks (EngineConfig.step_tick), in time order with the
                # ticks: a source's marks share a partition, so stage 2 reads them in the order they ran
                ticks += tick_records(result.step_findings, result.step_ticks, self.tick_marks, topology, step=True)
                ticks.sort(key=lambda o: o.ts)  # stable: a tick's findings stay before its mark
            out += ticks
        if out:
            self.bus.produce(out)
        published = time.monotonic()
        seconds.labels("publish").inc(published - handled)
        touched = {(r.topic, r.partition) for r in fresh}
        self.bus.commit({tp: self.processor.next_offsets[tp] for tp in touched})
        seconds.labels("commit").inc(time.monotonic() - published)
        self._seal()
        s = self.stats
        s.batches += 1
        s.records += len(fresh)
        s.rows += result.rows
        s.deadletters += len(result.deadletters)
        s.incidents += len(result.incidents)
        if self.on_batch is not None:
            self.on_batch(s)

    def _seal(self) -> None:
        """Every ``seal_every_s``, move telemetry older than the horizon to Parquet segments, so forensic
        SQL can read it while this process holds the DuckDB file (stream/segments.py)."""
        watermark = self.processor.watermark
        if not self.seal_every_s or watermark is None or time.monotonic() - self._sealed_at < self.seal_every_s:
            return
        started = self._sealed_at = time.monotonic()
        try:
            moved = self.processor.store.seal(watermark - self.seal_horizon_s)
        except Exception:  # sealing is housekeeping: a failure must not stop ingest
            self.metrics.errors.labels("store").inc()
            log.exception("sealing old rows to Parquet failed; the rows stay in the DuckDB file")
            return
        self.stage_seconds.labels("seal").inc(time.monotonic() - started)
        if moved:
            log.info("sealed %d rows older than %.0f to Parquet", moved, watermark - self.seal_horizon_s)

    def _update_lag(self) -> None:
        now = time.monotonic()
        if now - self._lag_at < LAG_EVERY_S:
            return
        self._lag_at = now
        try:
            lag = self.bus.lag()
        except Exception as exc:
            log.debug("lag unavailable: %s", exc)
            return
        for (topic, partition), behind in lag.items():
            self.metrics.lag.labels(topic, str(partition)).set(behind)

"""Stage 2 live: every partition of ``fabricwatch.findings`` → correlation → incidents, exactly once.

One iteration (``step``): poll a batch → pace it (stream/pacing.py) → skip what the store already
covers → feed the :class:`Joiner` → close the ticks that are due → store, in ONE DuckDB transaction,
the changed incidents, the findings its judges made (no stage 1 has them), the next offsets, the
joiner's whole state (tracker, buffered findings, the incident id counter) and every change of the
batch, in order, in an outbox → produce the outbox to ``fabricwatch.incidents``, wait for the broker's
acknowledgement, delete what was delivered → commit the offsets to Kafka.

Every change is published, in order. A batch that closes many ticks (stage 2 catching up after a
restart) publishes each tick's changes as the ticks one at a time would: an incident that opened and
resolved within the batch is published opened, then resolved. The incidents table keeps each
incident's last state.

Exactly once. After ``kill -9`` the store says which findings its state has seen (offsets sought on
every assignment), so none is counted twice or lost, and the id counter in the same state never hands
out an id again. An incident stored but not acknowledged is still in the outbox: at start, the outbox
is compared with what the incidents topic already holds (``delivered``) and only the missing ones are
produced, so a crash between producing and deleting does not publish twice.

One stage 2 per consumer group: it must see every findings partition (a second member would take
half of them). Several stage 2s, each with its own group, instance name and file, correlate the same
findings independently with distinct incident ids (``inc-<instance>-0001``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
from prometheus_client import CollectorRegistry, Counter, Gauge

from fabricwatch.incident import Incident
from fabricwatch.records import DeadLetter
from fabricwatch.schema import TOPIC_FINDINGS, TOPIC_INCIDENTS
from fabricwatch.stream.bus import Bus, Outgoing, Record, TopicPartition
from fabricwatch.stream.deadletter import from_stored
from fabricwatch.stream.findings import FindingError, Found, TickMark, decode
from fabricwatch.stream.incidents import incident_record
from fabricwatch.stream.kafka import KafkaBus, KafkaUnavailable
from fabricwatch.stream.pacing import Pacer, drain
from fabricwatch.stream.stage2 import Joiner
from fabricwatch.stream.store import Store

log = logging.getLogger("fabricwatch.correlate")

OUTBOX_DDL = "CREATE TABLE IF NOT EXISTS incident_outbox (seq BIGINT PRIMARY KEY, key VARCHAR, value BLOB)"
DELIVERY_TIMEOUT_S = 30.0


class Stage2Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        self.findings = Counter("fabricwatch_stage2_findings_total", "Findings read by stage 2", registry=r)
        self.late = Counter("fabricwatch_stage2_late_findings_total", "Findings after their tick closed", registry=r)
        self.deadlettered = Counter("fabricwatch_stage2_deadletters_total", "Unreadable findings records", registry=r)
        self.ticks = Counter("fabricwatch_stage2_ticks_total", "Correlation ticks closed", registry=r)
        self.incidents = Counter("fabricwatch_stage2_incident_changes_total", "Incident changes stored", registry=r)
        self.watermark = Gauge("fabricwatch_stage2_watermark_seconds", "Newest tick marked by stage 1", registry=r)
        self.outbox = Gauge("fabricwatch_stage2_outbox", "Incident changes stored, not yet acknowledged", registry=r)
        self.held = Gauge("fabricwatch_stage2_held_partitions", "Partitions paused for the others", registry=r)


@dataclass
class Stage2Stats:
    batches: int = 0
    records: int = 0
    skipped: int = 0
    incidents: int = 0  # incident changes stored (an incident changed in two ticks of a batch: two)
    published: int = 0  # incident changes acknowledged by the bus
    last_poll: float = 0.0
    assigned: int = 0
    joined: bool = False


class CorrelateLoop:
    """Runs ``joiner`` over ``bus`` (subscribed to the findings topic) with ``store`` as its memory.

    ``delivered`` lists the values already on the incidents topic; it is asked once, at start, and only
    when the outbox holds something (a crash after storing incidents).
    """

    def __init__(
        self,
        bus: Bus,
        store: Store,
        joiner: Joiner,
        *,
        delivered: Callable[[], set[bytes]],
        unacknowledged: Callable[[], int] = lambda: 0,
        metrics: Stage2Metrics | None = None,
        max_records: int = 10_000,
        poll_timeout_s: float = 0.5,
        close_timeout_s: float = 5.0,
        on_incident: Callable[[Incident], None] | None = None,
    ) -> None:
        self.bus = bus
        self.store = store
        self.joiner = joiner
        self.delivered = delivered
        self.unacknowledged = unacknowledged
        self.metrics = metrics or Stage2Metrics()
        self.max_records = max_records
        self.poll_timeout_s = poll_timeout_s
        self.close_timeout_s = close_timeout_s
        self.on_incident = on_incident
        self.stats = Stage2Stats()
        store.con.execute(OUTBOX_DDL)
        self.next_offsets: dict[TopicPartition, int] = dict(store.offsets())
        state = store.engine_state()
        if state is not None:
            joiner.restore(json.loads(state))  # a state this version cannot read fails the start loudly
            log.info("stage 2 state restored from %s: %d ticks closed", store.path, joiner.ticks)
        self._handed = 0  # outbox rows up to this seq are with the bus
        self._started = False
        # A restarted stage 2 reads its partitions' backlogs at different speeds; a partition read far
        # ahead would move the joiner's watermark past ``stall_s`` and close ticks whose findings still
        # wait in the others (dropped as late). So partitions are read within half of ``stall_s`` of
        # each other, by tick (stream/pacing.py). One not read yet stands where the assignment began:
        # the first tick then open (restored), or the first tick read. Not the first tick open now: the
        # joiner knows only the sources it has read, so it would close ticks on the others' marks alone
        # and move that partition's floor with them; the sources whose marks wait there never held it.
        self._unread_from: float | None = joiner.next_tick
        self.pacer: Pacer[tuple[Record, Item]] = Pacer(bus, joiner.stall_s / 2, _stamp, unread_at=self.unread_from)
        if isinstance(bus, KafkaBus):
            bus.on_assign = self._assigned
            bus.on_revoke = self._revoked

    # --- rebalance hooks -----------------------------------------------------------------------------

    def _assigned(self, partitions: list[TopicPartition]) -> None:
        seeks = {tp: self.next_offsets[tp] for tp in partitions if tp in self.next_offsets}
        if seeks:
            self.bus.seek(seeks)
        self.stats.assigned = len(partitions)
        self.stats.joined = True
        self.pacer.forget()  # what waits is read again from the stored offsets; a new assignment starts unpaused
        self._unread_from = self.joiner.next_tick
        log.info("assigned %d findings partitions, %d sought to stored offsets", len(partitions), len(seeks))

    def _revoked(self, partitions: list[TopicPartition]) -> None:
        self.stats.assigned = 0
        self.pacer.forget(partitions)  # not stored, so not committed: the next owner reads it again

    def unread_from(self) -> float | None:
        """Where a partition with a backlog that has handed on nothing yet stands (None: unknown)."""
        return self._unread_from

    @property
    def held(self) -> dict[TopicPartition, float]:
        """Partitions paused for the others -> the tick of their first waiting item."""
        return self.pacer.held

    # --- the loop --------------------------------------------------------------------------------------

    def start(self) -> None:
        """Subscribe, seek to the stored offsets and publish what a crash left in the outbox (once;
        ``run`` and ``drain`` call it)."""
        if self._started:
            return
        self._started = True
        self.bus.subscribe([TOPIC_FINDINGS])
        if self.next_offsets:
            self.bus.seek(dict(self.next_offsets))  # Kafka: applied as each partition is assigned
        self.recover()

    def step(self, timeout_s: float | None = None) -> int:
        """Poll one batch, pace it and handle what may go on now; the number of records polled."""
        self.start()
        self.stats.last_poll = time.monotonic()
        self.pacer.release_due()
        wait = self.poll_timeout_s if timeout_s is None else timeout_s
        records = self.bus.poll(max_records=self.max_records, timeout_s=0.0 if self.pacer.pending else wait)
        items = self.pacer.pace([(r, _decoded(r)) for r in records])
        self.metrics.held.set(len(self.pacer.held))
        if items:
            self.handle([r for r, _ in items], [item for _, item in items])
        return len(records)

    def drain(self) -> int:
        """Steps until a poll comes back empty and nothing waits (a finite bus at its end); records polled."""
        return drain(lambda: self.step(0.0), self.pacer)

    def run(self, stop: threading.Event) -> Stage2Stats:
        try:
            self.start()
            while not stop.is_set():
                self.step()
        finally:
            if isinstance(self.bus, KafkaBus):
                self.bus.close(self.close_timeout_s)
            else:
                self.bus.close()
        return self.stats

    def recover(self) -> None:
        """Publish what a crash left in the outbox, less what the incidents topic already holds."""
        rows = self._outbox()
        if not rows:
            return
        there = self.delivered()
        missing = [(seq, key, value) for seq, key, value in rows if value not in there]
        log.info("outbox: %d incident changes stored before a stop, %d not yet published", len(rows), len(missing))
        self._hand(missing)
        self._handed = rows[-1][0]
        self._settle()

    def handle(self, records: list[Record], decoded: list[Item] | None = None) -> None:
        """Fold one batch (as paced: :meth:`step`) into the joiner; store and publish every incident
        change it made, in order. ``decoded`` holds each record's :func:`_decoded`, where the caller
        has it already."""
        items = list(zip(records, decoded if decoded is not None else map(_decoded, records), strict=True))
        fresh = [(r, item) for r, item in items if r.offset >= self.next_offsets.get((r.topic, r.partition), 0)]
        self.stats.skipped += len(items) - len(fresh)
        if not fresh:
            return
        offsets = dict(self.next_offsets)
        deadletters: list[DeadLetter] = []
        ticks_before = self.joiner.ticks
        for r, item in fresh:
            tp = (r.topic, r.partition)
            offsets[tp] = max(offsets.get(tp, 0), r.offset + 1)
            if isinstance(item, FindingError):
                why = str(item)
                deadletters.append(DeadLetter(r.topic, r.partition, r.offset, r.key, r.value, why, "schema", r.ts))
                continue
            late = self.joiner.late
            self.joiner.add(item)
            self.metrics.late.inc(self.joiner.late - late)
            self.metrics.findings.inc(0 if isinstance(item, TickMark) else 1)
        if self._unread_from is None:
            self._unread_from = min((i.ts for _, i in fresh if not isinstance(i, FindingError)), default=None)
        # while a partition with a backlog is unread, its sources may be unknown to the joiner: no tick
        # it may hold findings of closes (it is read next: the pacer holds the others)
        until = self._unread_from if self.pacer.unread() else None
        changed = self.joiner.close_due(until)  # every change, in order: an incident may be in it more than once
        state = json.dumps(self.joiner.snapshot(), sort_keys=True, separators=(",", ":"))
        outgoing = [incident_record(i) for i in changed]
        saved_at = self.joiner.watermark or 0.0
        self.store.write_batch(
            offsets=offsets,
            deadletters=deadletters,
            findings=self.joiner.take_judged(),
            incidents=changed,
            engine_state=(saved_at, state),
            also=lambda con: _to_outbox(con, outgoing),
        )
        self.next_offsets = offsets
        self.metrics.ticks.inc(self.joiner.ticks - ticks_before)
        self.metrics.incidents.inc(len(changed))
        self.metrics.deadlettered.inc(len(deadletters))
        if self.joiner.watermark is not None:
            self.metrics.watermark.set(self.joiner.watermark)
        if deadletters:
            self.bus.produce([from_stored(d) for d in deadletters])
        if outgoing or self._handed:
            self._hand([row for row in self._outbox() if row[0] > self._handed])
            self._settle()
        for incident in changed:
            if self.on_incident is not None:
                self.on_incident(incident)
        self.bus.commit({tp: offsets[tp] for tp in {(r.topic, r.partition) for r, _ in fresh}})
        s = self.stats
        s.batches += 1
        s.records += len(fresh)
        s.incidents += len(changed)

    def release_due(self) -> None:
        """Resume held partitions the others have caught up with (``step`` does it before each poll)."""
        self.pacer.release_due()
        self.metrics.held.set(len(self.pacer.held))

    # --- the outbox ------------------------------------------------------------------------------------

    def _outbox(self) -> list[tuple[int, str | None, bytes]]:
        rows = self.store.con.execute("SELECT seq, key, value FROM incident_outbox ORDER BY seq").fetchall()
        self.metrics.outbox.set(len(rows))
        return [(int(seq), key, bytes(value)) for seq, key, value in rows]

    def _hand(self, rows: list[tuple[int, str | None, bytes]]) -> None:
        """Give outbox rows to the bus (each row once per run: the bus retries delivery itself)."""
        if rows:
            self.bus.produce(Outgoing(TOPIC_INCIDENTS, key, value, time.time()) for _, key, value in rows)
            self._handed = max(self._handed, rows[-1][0])
            self.stats.published += len(rows)

    def _settle(self) -> None:
        """Wait (bounded) for the bus to acknowledge what it was given; then those rows leave the outbox.
        Rows not acknowledged stay, and are settled after a later batch or at the next start."""
        if not self._handed:
            return
        self.bus.flush(DELIVERY_TIMEOUT_S)
        waiting = self.unacknowledged()
        if waiting:
            log.warning("%d incident changes not acknowledged within %.0f s; kept in the outbox", waiting,
                        DELIVERY_TIMEOUT_S)  # fmt: skip
            return
        self.store.con.execute("DELETE FROM incident_outbox WHERE seq <= ?", [self._handed])
        self._handed = 0
        self.metrics.outbox.set(0)


Item = Found | TickMark | FindingError  # a findings record read: what it holds, or why it is unreadable


def _decoded(r: Record) -> Item:
    try:
        return decode(r.value)
    except FindingError as exc:
        return exc


def _stamp(item: tuple[Record, Item]) -> tuple[TopicPartition, float | None]:
    """A record's partition and tick, for the pacer (an unreadable one has none)."""
    r, found = item
    return (r.topic, r.partition), None if isinstance(found, FindingError) else found.ts


def _to_outbox(con: duckdb.DuckDBPyConnection, outgoing: list[Outgoing]) -> None:
    if not outgoing:
        return
    (top,) = con.execute("SELECT coalesce(max(seq), 0) FROM incident_outbox").fetchone()  # type: ignore[misc]
    con.executemany(
        "INSERT INTO incident_outbox VALUES (?, ?, ?)",
        [(top + 1 + i, o.key, o.value) for i, o in enumerate(outgoing)],
    )


def topic_values(bootstrap: str, topic: str, timeout_s: float = 60.0) -> set[bytes]:
    """Every value on ``topic`` now (read from the beginning to the end offsets seen at the start);
    :class:`KafkaUnavailable` if that takes longer than ``timeout_s``. For the outbox check at start:
    the incidents topic is low volume."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTP
    from kafka import errors as kerr

    deadline = time.monotonic() + timeout_s
    try:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    except (kerr.KafkaError, OSError) as exc:
        raise KafkaUnavailable(f"broker {bootstrap} cannot be reached ({exc})") from None
    try:
        # the topic exists (subscribing created it): until the metadata lists it, what it holds is unknown
        while topic not in consumer.topics() or not consumer.partitions_for_topic(topic):
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"{bootstrap} did not list topic {topic} within {timeout_s:.0f} s")
            time.sleep(0.2)
        tps = [KafkaTP(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        out: set[bytes] = set()
        while any(consumer.position(tp) < end[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"reading {topic} on {bootstrap} to its end took over {timeout_s:.0f} s")
            for records in consumer.poll(timeout_ms=500).values():
                out.update(r.value for r in records if r.value is not None)
        return out
    finally:
        consumer.close()

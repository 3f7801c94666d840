"""The Kafka transport: :class:`KafkaBus`, the bus interface on kafka-python (≥ 3.0, crc32c extra).

Producing never blocks and never crashes the collector. ``produce`` puts records into a bounded buffer
that a background thread hands to kafka-python's producer. ``buffer_max`` bounds every record not yet
acknowledged by the broker, including the ones the producer holds (at most ``inflight_max``, and at
most a tenth of the buffer: those are pinned, so the bound drops the oldest of the rest first, each
counted in ``stats.dropped``); memory stays bounded however long the broker is away. When the broker
cannot be reached at start one line says so on stderr and the thread retries with exponential
backoff (0.5 s doubling to 5 s: a returning broker is used within seconds, and a retry costs one TCP
connect). When a running broker goes away the producer retries likewise, records whose delivery timed
out go back to the front of the buffer, and one line says when nothing is acknowledged for 10 s and
one when delivery resumes. kafka-python's own log lines (an ERROR per failed reconnect) are silenced
unless the application configured the ``kafka`` logger itself.

Producer settings: ``acks=all`` with the idempotent producer (no duplicates from its own retries),
``linger_ms`` 20 and ``batch_size`` 512 KiB (a 1024-GPU supernode's scrape is about 2,500 records of
~1 KB, 3 MB, each interval: large batches, and a short linger that adds little to end-to-end lag),
compression ``DEFAULT_COMPRESSION`` = zstd (measured: see the table at its definition).

Topics (schema.ALL_TOPICS) are created when missing with ``partitions`` and ``replication``, a
per-topic ``max.message.bytes`` of ``max_message_bytes`` (8 MiB; the dead-letter topic 1 MiB more so
that the dead letter of the largest accepted message fits) and ``message.timestamp.type=LogAppendTime``:
telemetry carries its own ``ts``, and broker time keeps retention and the broker's future-timestamp
check working for replays of old or simulated data. ``Record.ts`` of a consumed record is therefore
the time the broker appended it (this is what end-to-end lag is measured from).

Consuming: one consumer in group ``group_id``, manual commits only, ``auto_offset_reset=earliest``.
``on_assign(partitions)`` is called after every assignment, in the thread that polls, before any
record of those partitions is returned (they stay paused until it returns), so it may read committed
offsets and seek; seeks asked for before a partition was assigned are applied first. kafka-python 3
runs rebalance listeners on its IO thread, where blocking client calls are refused, hence the pause.
``on_revoke(partitions)`` is called (on that IO thread: it must not block on the client) before
partitions are taken away.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import errors as kerr
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KafkaTP

from fabricwatch.schema import ALL_TOPICS, TOPIC_DEADLETTER
from fabricwatch.stream.bus import Bus, Outgoing, Record, TopicPartition
from fabricwatch.stream.deadletter import deadletter_record
from fabricwatch.stream.keys import outgoing, split_by_fault_domain

__all__ = [
    "DEFAULT_COMPRESSION",
    "KafkaBus",
    "KafkaUnavailable",
    "ProducerStats",
    "deadletter_record",
    "ensure_topics",
    "outgoing",
    "split_by_fault_domain",
]

log = logging.getLogger("fabricwatch.kafka")

# Measured with bench/kafka_throughput.py --compression (1024-GPU supernode scrapes, 10 s, medians of 3):
#   codec   produce rec/s  on broker  bare consume rec/s
#   none        6,843      22.3 MB (1.0x)   171,249
#   gzip        4,607       5.3 MB (4.2x)    91,186
#   snappy     10,465       7.6 MB (2.9x)   146,433
#   lz4         9,910       7.4 MB (2.9x)   229,827
#   zstd       10,869       4.9 MB (4.5x)   139,597
# zstd: the smallest log and network traffic, a produce rate as high as any, and a consume rate far
# above what the processor needs (it stores ~25k records/s at 10 supernodes).
DEFAULT_COMPRESSION: str | None = "zstd"
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
DEADLETTER_EXTRA_BYTES = 1024 * 1024
LINGER_MS = 20
BATCH_SIZE = 512 * 1024
INFLIGHT_MAX = 5_000  # records handed to kafka-python at once (~25 MB of large scrapes)
INFLIGHT_SHARE = 10  # at most 1/10 of the buffer: in-flight records are pinned (the oldest), the rest drop oldest-first
BACKOFF_START_S, BACKOFF_MAX_S = 0.5, 5.0  # a returning broker is used within 5 s; retries stay cheap
CONNECT_TIMEOUT_MS = 5_000
DELIVERY_TIMEOUT_MS = 60_000
FLUSH_STALL_S = 2.0  # flush() without a timeout gives up after this long without an acknowledgement
STALL_S = 10.0  # no acknowledgement for this long while records wait: say the broker is away


def quiet_client_logs() -> None:
    """Silence kafka-python's per-reconnect ERROR lines unless someone set the ``kafka`` logger's level:
    the bus says what matters in one line each (unreachable, failing, resumed)."""
    client = logging.getLogger("kafka")
    if client.level == logging.NOTSET:
        client.setLevel(logging.CRITICAL)


class KafkaUnavailable(RuntimeError):
    """The broker cannot be reached (one line: which broker and why)."""


@dataclass
class ProducerStats:
    """Counters of the producer path (exported as metrics by the commands that produce)."""

    buffered: int = 0  # records in the buffer, waiting to be sent
    inflight: int = 0  # records handed to kafka-python, not yet acknowledged
    sent: int = 0  # acknowledged by the broker (acks=all)
    dropped: int = 0  # dropped from a full buffer, oldest first
    rejected: int = 0  # refused for good (record too large, bad topic): counted, logged once per reason
    requeued: int = 0  # delivery timed out; put back at the front of the buffer
    reasons: dict[str, int] = field(default_factory=dict)  # rejected by reason


def topic_configs(topic: str, max_message_bytes: int = MAX_MESSAGE_BYTES) -> dict[str, str]:
    limit = max_message_bytes + (DEADLETTER_EXTRA_BYTES if topic == TOPIC_DEADLETTER else 0)
    return {"max.message.bytes": str(limit), "message.timestamp.type": "LogAppendTime"}


def ensure_topics(
    admin: KafkaAdminClient,
    topics: Sequence[str] = ALL_TOPICS,
    partitions: int = 12,
    replication: int = 1,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
) -> list[str]:
    """Create the topics that are missing; returns those it created (existing ones are left as they are)."""
    existing = set(admin.list_topics())
    missing = [t for t in topics if t not in existing]
    if not missing:
        return []
    spec = {
        t: {
            "num_partitions": partitions,
            "replication_factor": replication,
            "configs": topic_configs(t, max_message_bytes),
        }
        for t in missing
    }
    result = admin.create_topics(spec, raise_errors=False, wait_for_metadata=False)
    created = []
    for entry in result.get("topics", []):
        code = entry.get("error_code", 0)
        if code == 0:
            created.append(entry["name"])
        elif code != kerr.TopicAlreadyExistsError.errno:  # another process won the race: fine
            raise KafkaUnavailable(f"cannot create topic {entry['name']}: {entry.get('error_message') or code}")
    if created:
        admin.wait_for_topics(created, timeout_ms=30_000)
    return created


class _Listener(ConsumerRebalanceListener):
    def __init__(self, bus: KafkaBus) -> None:
        self.bus = bus

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.bus._revoked([(tp.topic, tp.partition) for tp in revoked])

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.bus._assigned([(tp.topic, tp.partition) for tp in assigned])


class KafkaBus(Bus):
    """The bus on a Kafka cluster. Producer and consumer are created on first use.

    ``bootstrap``: ``host:port[,host:port...]``. ``group_id``: the consumer group (needed to consume).
    ``buffer_max``: records kept while the broker cannot take them. ``partitions``/``replication``: for
    topics created at start. ``compression``: none, gzip, snappy, lz4 or zstd (kafka-python codecs).
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "fabricwatch",
        group_id: str | None = None,
        buffer_max: int = 100_000,
        partitions: int = 12,
        replication: int = 1,
        compression: str | None = DEFAULT_COMPRESSION,
        linger_ms: int = LINGER_MS,
        batch_size: int = BATCH_SIZE,
        inflight_max: int = INFLIGHT_MAX,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        topics: Sequence[str] = ALL_TOPICS,
        on_assign: Callable[[list[TopicPartition]], None] | None = None,
        on_revoke: Callable[[list[TopicPartition]], None] | None = None,
        notice: TextIO | None = None,
        consumer_config: dict[str, Any] | None = None,
    ) -> None:
        if buffer_max < 1:
            raise ValueError("buffer_max must be at least 1")
        quiet_client_logs()
        if compression in ("none", ""):
            compression = None
        if compression not in (None, "gzip", "snappy", "lz4", "zstd"):
            raise ValueError(f"compression {compression!r}: use none, gzip, snappy, lz4 or zstd")
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.group_id = group_id
        self.buffer_max = buffer_max
        self.partitions = partitions
        self.replication = replication
        self.compression = compression
        self.linger_ms = linger_ms
        self.batch_size = batch_size
        self.inflight_max = max(1, min(inflight_max, buffer_max // INFLIGHT_SHARE))
        self.max_message_bytes = max_message_bytes
        self.topics = tuple(topics)
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self._notice = notice if notice is not None else sys.stderr
        self.poll_failures = 0
        self._poll_down = False
        self._consumer_config = consumer_config or {}
        self.stats = ProducerStats()
        self.acked_end: dict[TopicPartition, int] = {}  # next offset after the last acknowledged record
        # producer side
        self._buffer: collections.deque[Outgoing] = collections.deque()
        self._cv = threading.Condition()
        self._producer: KafkaProducer | None = None
        self._sender: threading.Thread | None = None
        self._closing = False
        self._failing = False  # delivery is failing: said once, until it resumes
        self._down = False  # the last connection attempt failed
        self._last_progress = time.monotonic()  # last acknowledgement, or when records began to wait
        self._topics_ready = False
        # consumer side
        self._consumer: KafkaConsumer | None = None
        self._pending_seeks: dict[TopicPartition, int] = {}
        self._to_settle: set[TopicPartition] = set()  # assigned, paused until on_assign ran
        self._settle_empty = False  # an assignment of no partitions, still to be told to on_assign
        self.commit_failures = 0

    # --- producing ---------------------------------------------------------------------------------

    def produce(self, records: Iterable[Outgoing]) -> None:
        """Queue records for the broker; returns at once. A full buffer drops its oldest records."""
        with self._cv:
            buf = self._buffer
            buf.extend(records)
            over = len(buf) + self.stats.inflight - self.buffer_max
            if over > 0:
                over = min(over, len(buf))
                for _ in range(over):
                    buf.popleft()
                self.stats.dropped += over
            self.stats.buffered = len(buf)
            self._cv.notify_all()
        if self._sender is None:
            self._start_sender()

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait for the broker to acknowledge what is buffered.

        With ``timeout_s`` wait up to that long. Without, wait only while delivery makes progress: at
        once when the broker cannot be reached, and after FLUSH_STALL_S without an acknowledgement, so
        a collector that flushes after every scrape keeps scraping (into the buffer) during an outage.
        """
        if self._sender is None:
            return
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cv:
            while self._buffer or self.stats.inflight:
                now = time.monotonic()
                if deadline is None:
                    if self._down or (self.stats.inflight and now - self._last_progress > FLUSH_STALL_S):
                        return
                elif now >= deadline:
                    return
                self._cv.wait(timeout=0.1 if deadline is None else min(deadline - now, 0.1))

    def pending(self) -> int:
        """Records not yet acknowledged (buffered + in flight)."""
        with self._cv:
            return len(self._buffer) + self.stats.inflight

    def ensure_topics(self) -> list[str]:
        """Create the missing topics now (raises :class:`KafkaUnavailable` if the broker cannot be reached)."""
        admin = self._admin()
        try:
            created = ensure_topics(admin, self.topics, self.partitions, self.replication, self.max_message_bytes)
        finally:
            admin.close()
        self._topics_ready = True
        return created

    def _admin(self) -> KafkaAdminClient:
        reachable(self.bootstrap)
        try:
            return KafkaAdminClient(
                bootstrap_servers=self.bootstrap,
                client_id=f"{self.client_id}-admin",
                request_timeout_ms=30_000,
                bootstrap_timeout_ms=CONNECT_TIMEOUT_MS,
            )
        except (kerr.KafkaError, OSError, ValueError) as exc:
            raise KafkaUnavailable(f"broker {self.bootstrap} cannot be reached ({_why(exc)})") from None

    def _start_sender(self) -> None:
        with self._cv:
            if self._sender is not None:
                return
            self._sender = threading.Thread(target=self._send_loop, name="fabricwatch-kafka-sender", daemon=True)
            self._sender.start()

    def _connect(self) -> KafkaProducer:
        reachable(self.bootstrap)
        if not self._topics_ready:
            try:
                self.ensure_topics()
            except kerr.KafkaError as exc:
                raise KafkaUnavailable(f"cannot create topics on {self.bootstrap} ({_why(exc)})") from None
        try:
            return KafkaProducer(
                bootstrap_servers=self.bootstrap,
                client_id=self.client_id,
                acks="all",
                enable_idempotence=True,
                compression_type=self.compression,
                linger_ms=self.linger_ms,
                batch_size=self.batch_size,
                max_request_size=self.max_message_bytes + DEADLETTER_EXTRA_BYTES,
                delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
                max_block_ms=CONNECT_TIMEOUT_MS,
                bootstrap_timeout_ms=CONNECT_TIMEOUT_MS,
                reconnect_backoff_ms=int(BACKOFF_START_S * 1000),
                reconnect_backoff_max_ms=int(BACKOFF_MAX_S * 1000),
                allow_auto_create_topics=False,
            )
        except (kerr.KafkaError, OSError) as exc:
            raise KafkaUnavailable(f"broker {self.bootstrap} cannot be reached ({_why(exc)})") from None

    def _say(self, line: str) -> None:
        log.info(line)
        with contextlib.suppress(OSError, ValueError):
            print(f"kafka: {line}", file=self._notice, flush=True)

    def _send_loop(self) -> None:
        backoff = BACKOFF_START_S
        down_since: float | None = None
        while True:
            with self._cv:
                while not self._closing and (not self._buffer or self.stats.inflight >= self.inflight_max):
                    self._cv.wait(timeout=1.0)
                    self._check_stall()
                if self._closing:
                    return
            if self._producer is None:
                try:
                    self._producer = self._connect()
                except KafkaUnavailable as exc:
                    with self._cv:
                        self._down = True
                        self._cv.notify_all()
                    if down_since is None:
                        down_since = time.monotonic()
                        self._say(
                            f"{exc}; buffering up to {self.buffer_max} records (oldest dropped first) "
                            f"and retrying every {BACKOFF_START_S:g}-{BACKOFF_MAX_S:g} s"
                        )
                    with self._cv:
                        self._cv.wait_for(lambda: self._closing, timeout=backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX_S)
                    continue
                self._down = False
                if down_since is not None:
                    self._say(
                        f"connected to {self.bootstrap} after {time.monotonic() - down_since:.0f} s; "
                        f"sending {len(self._buffer)} buffered records ({self.stats.dropped} dropped so far)"
                    )
                    down_since = None
                backoff = BACKOFF_START_S
            self._hand_over()

    def _check_stall(self) -> None:
        """Say once when the broker has acknowledged nothing for STALL_S while records wait."""
        if self.stats.inflight == 0 or self._failing:
            return
        idle = time.monotonic() - self._last_progress
        if idle >= STALL_S:
            self._failing = True
            self._say(
                f"broker {self.bootstrap} has acknowledged nothing for {idle:.0f} s "
                f"({self.stats.inflight + len(self._buffer)} records pending); buffering and retrying"
            )

    def _hand_over(self) -> None:
        """Move records from the buffer to the producer while the in-flight window has room."""
        producer = self._producer
        assert producer is not None
        while True:
            with self._cv:
                if not self._buffer or self.stats.inflight >= self.inflight_max:
                    return
                record = self._buffer.popleft()
                if self.stats.inflight == 0:
                    self._last_progress = time.monotonic()
                self.stats.inflight += 1
                self.stats.buffered = len(self._buffer)
            try:
                future = producer.send(
                    record.topic,
                    value=record.value,
                    key=record.key.encode() if record.key is not None else None,
                    timestamp_ms=int(record.ts * 1000),
                )
            except kerr.KafkaError as exc:
                if not (exc.retriable or isinstance(exc, kerr.KafkaTimeoutError)):
                    self._rejected(exc)  # e.g. larger than max_request_size: it would never go
                    continue
                # No metadata for the topic within max_block_ms: the broker is away. Keep the record.
                self._requeue(record, exc)
                with self._cv:
                    self._cv.wait_for(lambda: self._closing, timeout=BACKOFF_START_S)
                return
            except Exception as exc:  # a bad record must never stop the sender thread
                self._rejected(exc)
                continue
            future.add_callback(self._delivered)
            future.add_errback(self._failed, record)

    def _delivered(self, metadata: Any) -> None:
        tp = (metadata.topic, metadata.partition)
        with self._cv:
            if metadata.offset + 1 > self.acked_end.get(tp, 0):
                self.acked_end[tp] = metadata.offset + 1
            self.stats.inflight -= 1
            self.stats.sent += 1
            self._last_progress = time.monotonic()
            failing, self._failing = self._failing, False
            self._cv.notify_all()
        if failing:
            self._say(f"delivery to {self.bootstrap} resumed ({self.pending()} records still pending)")

    def _failed(self, record: Outgoing, exc: BaseException) -> None:
        if isinstance(exc, kerr.KafkaError) and (exc.retriable or isinstance(exc, kerr.KafkaTimeoutError)):
            self._requeue(record, exc)
        else:
            self._rejected(exc)

    def _requeue(self, record: Outgoing, exc: BaseException) -> None:
        with self._cv:
            self.stats.inflight -= 1
            self.stats.requeued += 1
            if len(self._buffer) + self.stats.inflight < self.buffer_max:
                self._buffer.appendleft(record)
            else:
                self.stats.dropped += 1
            self.stats.buffered = len(self._buffer)
            first, self._failing = not self._failing, True
            self._cv.notify_all()
        if first:
            self._say(f"delivery to {self.bootstrap} failing ({_why(exc)}); buffering and retrying")

    def _rejected(self, exc: BaseException) -> None:
        reason = _why(exc)
        with self._cv:
            self.stats.inflight -= 1
            self.stats.rejected += 1
            first = reason not in self.stats.reasons
            self.stats.reasons[reason] = self.stats.reasons.get(reason, 0) + 1
            self._cv.notify_all()
        if first:
            self._say(f"a record was refused and dropped: {reason} (counted; said once per reason)")

    # --- consuming ---------------------------------------------------------------------------------

    def subscribe(self, topics: Sequence[str]) -> None:
        if self.group_id is None:
            raise ValueError("KafkaBus needs a group_id to consume")
        if not self._topics_ready:
            self.ensure_topics()
        if self._consumer is None:
            config: dict[str, Any] = {
                "bootstrap_servers": self.bootstrap,
                "client_id": self.client_id,
                "group_id": self.group_id,
                "enable_auto_commit": False,
                "auto_offset_reset": "earliest",
                "max_poll_records": 10_000,
                "max_partition_fetch_bytes": 4 * 1024 * 1024,
                # Wait for 1 MiB or 250 ms: batches of a quarter second or more, not a store transaction
                # per handful of records (at one supernode the processor's CPU fell from 29 % to 22 % of a core).
                "fetch_min_bytes": 1024 * 1024,
                "fetch_max_wait_ms": 250,
                "session_timeout_ms": 10_000,
                "heartbeat_interval_ms": 1_000,
                "bootstrap_timeout_ms": CONNECT_TIMEOUT_MS,
                "reconnect_backoff_ms": int(BACKOFF_START_S * 1000),
                "reconnect_backoff_max_ms": int(BACKOFF_MAX_S * 1000),
                "allow_auto_create_topics": False,
            }
            config.update(self._consumer_config)
            try:
                self._consumer = KafkaConsumer(**config)
            except (kerr.KafkaError, OSError) as exc:
                raise KafkaUnavailable(f"broker {self.bootstrap} cannot be reached ({_why(exc)})") from None
        for topic in topics:  # metadata first: a group joined without it assigns nothing, then rebalances
            self._consumer.partitions_for_topic(topic)
        self._consumer.subscribe(list(topics), listener=_Listener(self))

    def poll(self, max_records: int = 10_000, timeout_s: float = 0.0) -> list[Record]:
        """The next records; while the broker is away an empty list (said once, counted), never a raise:
        kafka-python's consumer reconnects by itself, so the caller just polls again."""
        consumer = self._need_consumer()
        try:
            batches = consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except kerr.KafkaError as exc:
            if not _transient(exc):
                raise
            self.poll_failures += 1
            if not self._poll_down:
                self._say(f"cannot fetch from {self.bootstrap} ({_why(exc)}); retrying")
                self._poll_down = True
            time.sleep(min(max(timeout_s, 0.1), BACKOFF_MAX_S))
            return []
        if self._poll_down:
            self._say(f"fetching from {self.bootstrap} again")
            self._poll_down = False
        if self._to_settle or self._settle_empty:
            self._settle()
        out: list[Record] = []
        for tp, records in batches.items():
            topic, partition = tp.topic, tp.partition
            out.extend(
                Record(
                    topic,
                    r.key.decode("utf-8", "replace") if r.key is not None else None,
                    r.value if r.value is not None else b"",
                    r.timestamp / 1000.0,
                    partition,
                    r.offset,
                )
                for r in records
            )
        return out

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit to Kafka (synchronously). A commit refused after a rebalance is counted, not raised:
        the offsets that count are the ones stored with the rows."""
        if not offsets:
            return
        consumer = self._need_consumer()
        try:
            consumer.commit({KafkaTP(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()})
        except (kerr.CommitFailedError, kerr.RebalanceInProgressError, kerr.IllegalStateError) as exc:
            self.commit_failures += 1
            log.warning("commit refused (%s); the stored offsets remain authoritative", _why(exc))
        except kerr.KafkaError as exc:
            if not _transient(exc):
                raise
            self.commit_failures += 1
            log.warning("commit failed, broker away (%s); the stored offsets remain authoritative", _why(exc))

    def seek(self, offsets: dict[TopicPartition, int]) -> None:
        """Seek assigned partitions now; others when they are assigned (once)."""
        consumer = self._need_consumer()
        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        for tp, offset in offsets.items():
            if tp in assigned:
                consumer.seek(KafkaTP(*tp), offset)
                self._pending_seeks.pop(tp, None)
            else:
                self._pending_seeks[tp] = offset

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets (partitions without one are left out)."""
        consumer = self._need_consumer()
        out = {}
        for t, p in partitions:
            offset = consumer.committed(KafkaTP(t, p))
            if offset is not None:
                out[(t, p)] = offset
        return out

    def assignment(self) -> set[TopicPartition]:
        consumer = self._need_consumer()
        return {(tp.topic, tp.partition) for tp in consumer.assignment()}

    def positions(self, timeout_s: float = 10.0) -> dict[TopicPartition, int]:
        """The next offset of every assigned partition, resolving a reset policy ("latest") now, so records
        produced after this call are the first this consumer reads."""
        consumer = self._need_consumer()
        return {
            (tp.topic, tp.partition): consumer.position(tp, timeout_ms=int(timeout_s * 1000))
            for tp in consumer.assignment()
        }

    def lag(self) -> dict[TopicPartition, int]:
        """Records behind the end of each assigned partition (from the last fetch; unknown ones left out)."""
        consumer = self._need_consumer()
        out = {}
        for tp in consumer.assignment():
            high = consumer.highwater(tp)
            if high is None:
                continue
            try:
                position = consumer.position(tp, timeout_ms=1000)
            except kerr.KafkaError:
                continue
            if position is not None:
                out[(tp.topic, tp.partition)] = max(0, high - position)
        return out

    def _need_consumer(self) -> KafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("subscribe() first")
        return self._consumer

    def _assigned(self, partitions: list[TopicPartition]) -> None:
        """Rebalance listener (kafka-python's IO thread: nothing here may block on the client).

        Seeks asked for before the assignment apply now. With an ``on_assign`` hook the new partitions
        are paused, and the hook runs in the polling thread when ``poll`` returns (it may then read
        committed offsets and seek); they are resumed after it, so no record of theirs is returned
        before the hook has positioned them."""
        consumer = self._need_consumer()
        for tp in partitions:
            offset = self._pending_seeks.pop(tp, None)
            if offset is not None:
                consumer.seek(KafkaTP(*tp), offset)
        if self.on_assign is not None and partitions:
            consumer.pause(*(KafkaTP(*tp) for tp in partitions))
            self._to_settle.update(partitions)
        elif self.on_assign is not None:
            self._settle_empty = True

    def _settle(self) -> None:
        """Run ``on_assign`` for partitions assigned during the last poll, then resume them."""
        consumer = self._need_consumer()
        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        partitions = sorted(tp for tp in self._to_settle if tp in assigned)
        self._to_settle.clear()
        self._settle_empty = False
        assert self.on_assign is not None
        try:
            self.on_assign(partitions)
        finally:
            if partitions:
                consumer.resume(*(KafkaTP(*tp) for tp in partitions))

    def _revoked(self, partitions: list[TopicPartition]) -> None:
        """Rebalance listener (IO thread, must not block): ``on_revoke`` sees the partitions going away."""
        self._to_settle.difference_update(partitions)
        if self.on_revoke is not None:
            self.on_revoke(partitions)

    # --- closing -----------------------------------------------------------------------------------

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is buffered (up to ``timeout_s``), then close producer and consumer.

        Records still undelivered then are counted in ``stats.dropped`` (and said in one line)."""
        deadline = time.monotonic() + timeout_s
        if self._sender is not None:
            self.flush(timeout_s)
            with self._cv:
                self._closing = True
                self._cv.notify_all()
            self._sender.join(max(0.1, deadline - time.monotonic()))
        if self._producer is not None:
            self._producer.close(timeout=max(0.1, deadline - time.monotonic()))
            self._producer = None
        with self._cv:
            lost = len(self._buffer) + self.stats.inflight
            self._buffer.clear()
            self.stats.dropped += lost
            self.stats.buffered = self.stats.inflight = 0
        if lost:
            self._say(f"closed with {lost} records undelivered to {self.bootstrap} (counted as dropped)")
        if self._consumer is not None:
            self._consumer.close(autocommit=False, timeout_ms=int(max(0.1, deadline - time.monotonic()) * 1000))
            self._consumer = None


def reachable(bootstrap: str, timeout_s: float = 2.0) -> None:
    """Raise :class:`KafkaUnavailable` at once when no bootstrap address accepts a TCP connection.

    kafka-python would wait its whole bootstrap timeout to say the same; this makes the first
    "cannot be reached" line and every retry quick.
    """
    problems = []
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=timeout_s):
                return
        except ValueError:
            problems.append(f"{address.strip()!r} is not host:port")
        except OSError as exc:
            problems.append(f"{address.strip()}: {exc.strerror or exc}")
    raise KafkaUnavailable(f"broker {bootstrap} cannot be reached ({'; '.join(problems)})")


def _transient(exc: BaseException) -> bool:
    """A broker or coordinator away for now (the client reconnects), not a bug or a bad request."""
    return bool(getattr(exc, "retriable", False)) or isinstance(exc, kerr.NoBrokersAvailable)


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text and not text.startswith(name) else text or name

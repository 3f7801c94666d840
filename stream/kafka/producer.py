"""The producing half of the Kafka bus: a bounded buffer that a background thread hands to kafka-python.

Producing never blocks and never crashes the collector. ``produce`` puts records into a bounded buffer
that a background thread hands to kafka-python's producer. ``buffer_max`` bounds every record not yet
acknowledged by the broker, including the ones the producer holds (at most ``inflight_max``, and at
most a tenth of the buffer: those are pinned, so the bound drops the oldest of the rest first, each
counted in ``stats.dropped``); memory stays bounded however long the broker is away. When the broker
cannot be reached at start one line says so on stderr and the thread retries with exponential
backoff (0.5 s doubling to 5 s: a returning broker is used within seconds, and a retry costs one TCP
connect). When a running broker goes away the producer retries likewise, records whose delivery timed
out go back to the front of the buffer, and one line says when nothing is acknowledged for 10 s and
one when delivery resumes.

Producer settings: ``acks=all`` with the idempotent producer (no duplicates from its own retries),
``linger_ms`` 20 and ``batch_size`` 512 KiB (a 1024-GPU supernode's scrape is about 2,500 records of
~1 KB, 3 MB, each interval: large batches, and a short linger that adds little to end-to-end lag),
compression ``DEFAULT_COMPRESSION`` = zstd (measured: see the table at its definition).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from kafka import KafkaProducer
from kafka import errors as kerr

from fabricwatch.stream.bus import Outgoing, TopicPartition
from fabricwatch.stream.kafka.admin import DEADLETTER_EXTRA_BYTES, TopicAdmin
from fabricwatch.stream.kafka.errors import (
    BACKOFF_MAX_S,
    BACKOFF_START_S,
    CONNECT_TIMEOUT_MS,
    KafkaUnavailable,
    reachable,
    say,
    why,
)

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
LINGER_MS = 20
BATCH_SIZE = 512 * 1024
INFLIGHT_MAX = 5_000  # records handed to kafka-python at once (~25 MB of large scrapes)
INFLIGHT_SHARE = 10  # at most 1/10 of the buffer: in-flight records are pinned (the oldest), the rest drop oldest-first
DELIVERY_TIMEOUT_MS = 60_000
FLUSH_STALL_S = 2.0  # flush() without a timeout gives up after this long without an acknowledgement
STALL_S = 10.0  # no acknowledgement for this long while records wait: say the broker is away


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


class KafkaSender:
    """Buffer, sender thread and kafka-python producer (created on the first ``produce``).

    ``lock`` guards the buffer, ``stats`` and ``acked_end`` and is notified whenever they change.
    """

    def __init__(
        self,
        admin: TopicAdmin,
        *,
        client_id: str,
        buffer_max: int,
        compression: str | None,
        linger_ms: int,
        batch_size: int,
        inflight_max: int,
        notice: TextIO,
    ) -> None:
        if buffer_max < 1:
            raise ValueError("buffer_max must be at least 1")
        if compression in ("none", ""):
            compression = None
        if compression not in (None, "gzip", "snappy", "lz4", "zstd"):
            raise ValueError(f"compression {compression!r}: use none, gzip, snappy, lz4 or zstd")
        self.admin = admin
        self.bootstrap = admin.bootstrap
        self.client_id = client_id
        self.buffer_max = buffer_max
        self.compression = compression
        self.linger_ms = linger_ms
        self.batch_size = batch_size
        self.inflight_max = max(1, min(inflight_max, buffer_max // INFLIGHT_SHARE))
        self.notice = notice
        self.stats = ProducerStats()
        self.acked_end: dict[TopicPartition, int] = {}  # next offset after the last acknowledged record
        self.lock = threading.Condition()
        self._buffer: collections.deque[Outgoing] = collections.deque()
        self._producer: KafkaProducer | None = None
        self._sender: threading.Thread | None = None
        self._closing = False
        self._failing = False  # delivery is failing: said once, until it resumes
        self._down = False  # the last connection attempt failed
        self._last_progress = time.monotonic()  # last acknowledgement, or when records began to wait

    def produce(self, records: Iterable[Outgoing]) -> None:
        """Queue records for the broker; returns at once. A full buffer drops its oldest records."""
        with self.lock:
            buf = self._buffer
            buf.extend(records)
            over = len(buf) + self.stats.inflight - self.buffer_max
            if over > 0:
                over = min(over, len(buf))
                for _ in range(over):
                    buf.popleft()
                self.stats.dropped += over
            self.stats.buffered = len(buf)
            self.lock.notify_all()
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
        with self.lock:
            while self._buffer or self.stats.inflight:
                now = time.monotonic()
                if deadline is None:
                    if self._down or (self.stats.inflight and now - self._last_progress > FLUSH_STALL_S):
                        return
                elif now >= deadline:
                    return
                self.lock.wait(timeout=0.1 if deadline is None else min(deadline - now, 0.1))

    def pending(self) -> int:
        """Records not yet acknowledged (buffered + in flight)."""
        with self.lock:
            return len(self._buffer) + self.stats.inflight

    def close(self, deadline: float) -> None:
        """Deliver what is buffered until ``deadline`` (time.monotonic), then close the producer.

        Records still undelivered then are counted in ``stats.dropped`` (and said in one line)."""
        if self._sender is not None:
            self.flush(deadline - time.monotonic())
            with self.lock:
                self._closing = True
                self.lock.notify_all()
            self._sender.join(max(0.1, deadline - time.monotonic()))
        if self._producer is not None:
            self._producer.close(timeout=max(0.1, deadline - time.monotonic()))
            self._producer = None
        with self.lock:
            lost = len(self._buffer) + self.stats.inflight
            self._buffer.clear()
            self.stats.dropped += lost
            self.stats.buffered = self.stats.inflight = 0
        if lost:
            self._say(f"closed with {lost} records undelivered to {self.bootstrap} (counted as dropped)")

    # --- the sender thread -------------------------------------------------------------------------

    def _start_sender(self) -> None:
        with self.lock:
            if self._sender is not None:
                return
            self._sender = threading.Thread(target=self._send_loop, name="fabricwatch-kafka-sender", daemon=True)
            self._sender.start()

    def _connect(self) -> KafkaProducer:
        reachable(self.bootstrap)
        if not self.admin.ready:
            try:
                self.admin.ensure()
            except kerr.KafkaError as exc:
                raise KafkaUnavailable(f"cannot create topics on {self.bootstrap} ({why(exc)})") from None
        try:
            return KafkaProducer(
                bootstrap_servers=self.bootstrap,
                client_id=self.client_id,
                acks="all",
                enable_idempotence=True,
                compression_type=self.compression,
                linger_ms=self.linger_ms,
                batch_size=self.batch_size,
                max_request_size=self.admin.max_message_bytes + DEADLETTER_EXTRA_BYTES,
                delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
                max_block_ms=CONNECT_TIMEOUT_MS,
                bootstrap_timeout_ms=CONNECT_TIMEOUT_MS,
                reconnect_backoff_ms=int(BACKOFF_START_S * 1000),
                reconnect_backoff_max_ms=int(BACKOFF_MAX_S * 1000),
                allow_auto_create_topics=False,
            )
        except (kerr.KafkaError, OSError) as exc:
            raise KafkaUnavailable(f"broker {self.bootstrap} cannot be reached ({why(exc)})") from None

    def _say(self, line: str) -> None:
        say(self.notice, line)

    def _send_loop(self) -> None:
        backoff = BACKOFF_START_S
        down_since: float | None = None
        while True:
            with self.lock:
                while not self._closing and (not self._buffer or self.stats.inflight >= self.inflight_max):
                    self.lock.wait(timeout=1.0)
                    self._check_stall()
                if self._closing:
                    return
            if self._producer is None:
                try:
                    self._producer = self._connect()
                except KafkaUnavailable as exc:
                    with self.lock:
                        self._down = True
                        self.lock.notify_all()
                    if down_since is None:
                        down_since = time.monotonic()
                        self._say(
                            f"{exc}; buffering up to {self.buffer_max} records (oldest dropped first) "
                            f"and retrying every {BACKOFF_START_S:g}-{BACKOFF_MAX_S:g} s"
                        )
                    with self.lock:
                        self.lock.wait_for(lambda: self._closing, timeout=backoff)
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
            with self.lock:
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
                with self.lock:
                    self.lock.wait_for(lambda: self._closing, timeout=BACKOFF_START_S)
                return
            except Exception as exc:  # a bad record must never stop the sender thread
                self._rejected(exc)
                continue
            future.add_callback(self._delivered)
            future.add_errback(self._failed, record)

    def _delivered(self, metadata: Any) -> None:
        tp = (metadata.topic, metadata.partition)
        with self.lock:
            if metadata.offset + 1 > self.acked_end.get(tp, 0):
                self.acked_end[tp] = metadata.offset + 1
            self.stats.inflight -= 1
            self.stats.sent += 1
            self._last_progress = time.monotonic()
            failing, self._failing = self._failing, False
            self.lock.notify_all()
        if failing:
            self._say(f"delivery to {self.bootstrap} resumed ({self.pending()} records still pending)")

    def _failed(self, record: Outgoing, exc: BaseException) -> None:
        if isinstance(exc, kerr.KafkaError) and (exc.retriable or isinstance(exc, kerr.KafkaTimeoutError)):
            self._requeue(record, exc)
        else:
            self._rejected(exc)

    def _requeue(self, record: Outgoing, exc: BaseException) -> None:
        with self.lock:
            self.stats.inflight -= 1
            self.stats.requeued += 1
            if len(self._buffer) + self.stats.inflight < self.buffer_max:
                self._buffer.appendleft(record)
            else:
                self.stats.dropped += 1
            self.stats.buffered = len(self._buffer)
            first, self._failing = not self._failing, True
            self.lock.notify_all()
        if first:
            self._say(f"delivery to {self.bootstrap} failing ({why(exc)}); buffering and retrying")

    def _rejected(self, exc: BaseException) -> None:
        reason = why(exc)
        with self.lock:
            self.stats.inflight -= 1
            self.stats.rejected += 1
            first = reason not in self.stats.reasons
            self.stats.reasons[reason] = self.stats.reasons.get(reason, 0) + 1
            self.lock.notify_all()
        if first:
            self._say(f"a record was refused and dropped: {reason} (counted; said once per reason)")

"""The Kafka transport: :class:`KafkaBus`, the bus interface on kafka-python (≥ 3.0, crc32c extra).

It composes a producing half (:mod:`~fabricwatch.stream.kafka.producer`: never blocks, bounded buffer,
retries while the broker is away) and a consuming half (:mod:`~fabricwatch.stream.kafka.consumer`:
group consumer, manual commits, ``on_assign`` before any record of a new partition), which share one
:class:`~fabricwatch.stream.kafka.admin.TopicAdmin` (the topics are created when missing, before the
first produce or subscribe). kafka-python's own log lines (an ERROR per failed
reconnect) are silenced unless the application configured the ``kafka`` logger itself.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from kafka import KafkaConsumer

from fabricwatch.schema import ALL_TOPICS
from fabricwatch.stream.bus import Bus, Outgoing, Record, TopicPartition
from fabricwatch.stream.kafka.admin import MAX_MESSAGE_BYTES, TopicAdmin
from fabricwatch.stream.kafka.consumer import KafkaReceiver
from fabricwatch.stream.kafka.errors import quiet_client_logs
from fabricwatch.stream.kafka.producer import (
    BATCH_SIZE,
    DEFAULT_COMPRESSION,
    INFLIGHT_MAX,
    LINGER_MS,
    KafkaSender,
    ProducerStats,
)

Hook = Callable[[list[TopicPartition]], None]


def _setting(part: str, name: str) -> property:
    """A read-only setting of the bus, kept once: on the part that uses it."""
    return property(lambda bus: getattr(getattr(bus, part), name), doc=f"``{part}.{name}``")


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
        on_assign: Hook | None = None,
        on_revoke: Hook | None = None,
        notice: TextIO | None = None,
        consumer_config: dict[str, Any] | None = None,
    ) -> None:
        quiet_client_logs()
        notice = notice if notice is not None else sys.stderr
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.group_id = group_id
        self.admin = TopicAdmin(
            bootstrap,
            client_id=client_id,
            topics=topics,
            partitions=partitions,
            replication=replication,
            max_message_bytes=max_message_bytes,
        )
        self.sender = KafkaSender(
            self.admin,
            client_id=client_id,
            buffer_max=buffer_max,
            compression=compression,
            linger_ms=linger_ms,
            batch_size=batch_size,
            inflight_max=inflight_max,
            notice=notice,
        )
        self.receiver = KafkaReceiver(
            self.admin,
            client_id=client_id,
            group_id=group_id,
            notice=notice,
            consumer_config=consumer_config,
            on_assign=on_assign,
            on_revoke=on_revoke,
        )

    topics = _setting("admin", "topics")
    partitions = _setting("admin", "partitions")
    replication = _setting("admin", "replication")
    max_message_bytes = _setting("admin", "max_message_bytes")
    buffer_max = _setting("sender", "buffer_max")
    compression = _setting("sender", "compression")
    linger_ms = _setting("sender", "linger_ms")
    batch_size = _setting("sender", "batch_size")
    inflight_max = _setting("sender", "inflight_max")

    # --- producing ---------------------------------------------------------------------------------

    def produce(self, records: Iterable[Outgoing]) -> None:
        """Queue records for the broker; returns at once. A full buffer drops its oldest records."""
        self.sender.produce(records)

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait for the broker to acknowledge what is buffered (see :meth:`KafkaSender.flush`)."""
        self.sender.flush(timeout_s)

    def pending(self) -> int:
        """Records not yet acknowledged (buffered + in flight)."""
        return self.sender.pending()

    @property
    def stats(self) -> ProducerStats:
        return self.sender.stats

    @property
    def acked_end(self) -> dict[TopicPartition, int]:
        """Next offset after the last acknowledged record, per partition (read it holding ``_cv``)."""
        return self.sender.acked_end

    @property
    def _cv(self) -> threading.Condition:
        """The producer's lock, for subclasses that read ``acked_end`` (stream/lockstep.py)."""
        return self.sender.lock

    def ensure_topics(self) -> list[str]:
        """Create the missing topics now (raises :class:`KafkaUnavailable` if the broker cannot be reached)."""
        return self.admin.ensure()

    # --- consuming ---------------------------------------------------------------------------------

    @property
    def on_assign(self) -> Hook | None:
        return self.receiver.on_assign

    @on_assign.setter
    def on_assign(self, hook: Hook | None) -> None:
        self.receiver.on_assign = hook

    @property
    def on_revoke(self) -> Hook | None:
        return self.receiver.on_revoke

    @on_revoke.setter
    def on_revoke(self, hook: Hook | None) -> None:
        self.receiver.on_revoke = hook

    @property
    def poll_failures(self) -> int:
        return self.receiver.poll_failures

    @property
    def commit_failures(self) -> int:
        return self.receiver.commit_failures

    def subscribe(self, topics: Sequence[str]) -> None:
        self.receiver.subscribe(topics)

    def poll(self, max_records: int = 10_000, timeout_s: float = 0.0) -> list[Record]:
        """The next records; while the broker is away an empty list (said once, counted), never a raise."""
        return self.receiver.poll(max_records, timeout_s)

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit to Kafka (synchronously); a refused commit is counted, not raised."""
        self.receiver.commit(offsets)

    def seek(self, offsets: dict[TopicPartition, int]) -> None:
        """Seek assigned partitions now; others when they are assigned (once)."""
        self.receiver.seek(offsets)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets (partitions without one are left out)."""
        return self.receiver.committed(partitions)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self.receiver.pause(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self.receiver.resume(partitions)

    def assignment(self) -> set[TopicPartition]:
        return self.receiver.assignment()

    def positions(self, timeout_s: float = 10.0) -> dict[TopicPartition, int]:
        """The next offset of every assigned partition, resolved now (see KafkaReceiver.positions)."""
        return self.receiver.positions(timeout_s)

    def lag(self) -> dict[TopicPartition, int]:
        """Records behind the end of each assigned partition (from the last fetch; unknown ones left out)."""
        return self.receiver.lag()

    def _need_consumer(self) -> KafkaConsumer:
        """The kafka-python consumer, for subclasses that position it themselves (stream/lockstep.py)."""
        return self.receiver.client()

    # --- closing -----------------------------------------------------------------------------------

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is buffered (up to ``timeout_s``), then close producer and consumer.

        Records still undelivered then are counted in ``stats.dropped`` (and said in one line)."""
        deadline = time.monotonic() + timeout_s
        self.sender.close(deadline)
        self.receiver.close(deadline)

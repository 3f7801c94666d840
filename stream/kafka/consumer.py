"""The consuming half of the Kafka bus: one consumer in a group, manual commits, positioned on assignment.

One consumer in group ``group_id``, manual commits only, ``auto_offset_reset=earliest``.
``on_assign(partitions)`` is called after every assignment, in the thread that polls, before any
record of those partitions is returned (they stay paused until it returns), so it may read committed
offsets and seek; seeks asked for before a partition was assigned are applied first. kafka-python 3
runs rebalance listeners on its IO thread, where blocking client calls are refused, hence the pause.
``on_revoke(partitions)`` is called (on that IO thread: it must not block on the client) before
partitions are taken away.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from kafka import KafkaConsumer
from kafka import errors as kerr
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KafkaTP

from fabricwatch.stream.bus import Record, TopicPartition
from fabricwatch.stream.kafka.admin import TopicAdmin
from fabricwatch.stream.kafka.errors import (
    BACKOFF_MAX_S,
    BACKOFF_START_S,
    CONNECT_TIMEOUT_MS,
    KafkaUnavailable,
    log,
    say,
    transient,
    why,
)


class _Listener(ConsumerRebalanceListener):
    def __init__(self, receiver: KafkaReceiver) -> None:
        self.receiver = receiver

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.receiver._revoked([(tp.topic, tp.partition) for tp in revoked])

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.receiver._assigned([(tp.topic, tp.partition) for tp in assigned])


class KafkaReceiver:
    """The group consumer (created by ``subscribe``) and its rebalance handling.

    ``consumer_config`` overrides the kafka-python consumer settings chosen here.
    """

    def __init__(
        self,
        admin: TopicAdmin,
        *,
        client_id: str,
        group_id: str | None,
        notice: TextIO,
        consumer_config: dict[str, Any] | None = None,
        on_assign: Callable[[list[TopicPartition]], None] | None = None,
        on_revoke: Callable[[list[TopicPartition]], None] | None = None,
    ) -> None:
        self.admin = admin
        self.bootstrap = admin.bootstrap
        self.client_id = client_id
        self.group_id = group_id
        self.notice = notice
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.poll_failures = 0
        self.commit_failures = 0
        self._poll_down = False
        self._consumer_config = consumer_config or {}
        self._consumer: KafkaConsumer | None = None
        self._pending_seeks: dict[TopicPartition, int] = {}
        self._to_settle: set[TopicPartition] = set()  # assigned, paused until on_assign ran
        self._settle_empty = False  # an assignment of no partitions, still to be told to on_assign

    def subscribe(self, topics: Sequence[str]) -> None:
        if self.group_id is None:
            raise ValueError("KafkaBus needs a group_id to consume")
        if not self.admin.ready:
            self.admin.ensure()
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
                raise KafkaUnavailable(f"broker {self.bootstrap} cannot be reached ({why(exc)})") from None
        for topic in topics:  # metadata first: a group joined without it assigns nothing, then rebalances
            self._consumer.partitions_for_topic(topic)
        self._consumer.subscribe(list(topics), listener=_Listener(self))

    def poll(self, max_records: int = 10_000, timeout_s: float = 0.0) -> list[Record]:
        """The next records; while the broker is away an empty list (said once, counted), never a raise:
        kafka-python's consumer reconnects by itself, so the caller just polls again."""
        consumer = self.client()
        try:
            batches = consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except kerr.KafkaError as exc:
            if not transient(exc):
                raise
            self.poll_failures += 1
            if not self._poll_down:
                self._say(f"cannot fetch from {self.bootstrap} ({why(exc)}); retrying")
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
        consumer = self.client()
        try:
            consumer.commit({KafkaTP(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()})
        except (kerr.CommitFailedError, kerr.RebalanceInProgressError, kerr.IllegalStateError) as exc:
            self.commit_failures += 1
            log.warning("commit refused (%s); the stored offsets remain authoritative", why(exc))
        except kerr.KafkaError as exc:
            if not transient(exc):
                raise
            self.commit_failures += 1
            log.warning("commit failed, broker away (%s); the stored offsets remain authoritative", why(exc))

    def seek(self, offsets: dict[TopicPartition, int]) -> None:
        """Seek assigned partitions now; others when they are assigned (once)."""
        consumer = self.client()
        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        for tp, offset in offsets.items():
            if tp in assigned:
                consumer.seek(KafkaTP(*tp), offset)
                self._pending_seeks.pop(tp, None)
            else:
                self._pending_seeks[tp] = offset

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets (partitions without one are left out)."""
        consumer = self.client()
        out = {}
        for t, p in partitions:
            offset = consumer.committed(KafkaTP(t, p))
            if offset is not None:
                out[(t, p)] = offset
        return out

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Fetch nothing more of these assigned partitions until resumed (kafka-python's pause)."""
        consumer = self.client()
        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        mine = [KafkaTP(*tp) for tp in partitions if tp in assigned]
        if mine:
            consumer.pause(*mine)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        consumer = self.client()
        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        mine = [KafkaTP(*tp) for tp in partitions if tp in assigned and tp not in self._to_settle]
        if mine:
            consumer.resume(*mine)
            _drop_parked(consumer, mine)

    def assignment(self) -> set[TopicPartition]:
        consumer = self.client()
        return {(tp.topic, tp.partition) for tp in consumer.assignment()}

    def positions(self, timeout_s: float = 10.0) -> dict[TopicPartition, int]:
        """The next offset of every assigned partition, resolving a reset policy ("latest") now, so records
        produced after this call are the first this consumer reads."""
        consumer = self.client()
        ms = int(timeout_s * 1000)
        return {(tp.topic, tp.partition): consumer.position(tp, timeout_ms=ms) for tp in consumer.assignment()}

    def lag(self) -> dict[TopicPartition, int]:
        """Records behind the end of each assigned partition (from the last fetch; unknown ones left out)."""
        consumer = self.client()
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

    def client(self) -> KafkaConsumer:
        """The kafka-python consumer (for subclasses of the bus that position it themselves)."""
        if self._consumer is None:
            raise RuntimeError("subscribe() first")
        return self._consumer

    def _assigned(self, partitions: list[TopicPartition]) -> None:
        """Rebalance listener (kafka-python's IO thread: nothing here may block on the client).

        Seeks asked for before the assignment apply now. With an ``on_assign`` hook the new partitions
        are paused, and the hook runs in the polling thread when ``poll`` returns (it may then read
        committed offsets and seek); they are resumed after it, so no record of theirs is returned
        before the hook has positioned them."""
        consumer = self.client()
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
        consumer = self.client()
        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        partitions = sorted(tp for tp in self._to_settle if tp in assigned)
        self._to_settle.clear()
        self._settle_empty = False
        assert self.on_assign is not None
        try:
            self.on_assign(partitions)
        finally:
            if partitions:
                resumed = [KafkaTP(*tp) for tp in partitions]
                consumer.resume(*resumed)
                _drop_parked(consumer, resumed)

    def _revoked(self, partitions: list[TopicPartition]) -> None:
        """Rebalance listener (IO thread, must not block): ``on_revoke`` sees the partitions going away."""
        self._to_settle.difference_update(partitions)
        if self.on_revoke is not None:
            self.on_revoke(partitions)

    def close(self, deadline: float) -> None:
        """Close the consumer (without committing), waiting until ``deadline`` (time.monotonic) at most."""
        if self._consumer is not None:
            self._consumer.close(autocommit=False, timeout_ms=int(max(0.1, deadline - time.monotonic()) * 1000))
            self._consumer = None

    def _say(self, line: str) -> None:
        say(self.notice, line)


def _drop_parked(consumer: KafkaConsumer, partitions: list[KafkaTP]) -> None:
    """Drop what kafka-python parked for resumed partitions, so they are fetched again.

    kafka-python 3.0 keeps records fetched for a partition that is then paused (its port of KAFKA-7548,
    dpkp/kafka-python#2981) and skips the partition in every later fetch while they are parked; they
    go back in line only on a poll that starts with no partition half-read, which on a busy backlog may
    never come: a paused and resumed partition was then never read again (tests/kafka/test_pause.py).
    Dropping them costs one fetch: the position never moved past them, so the next fetch reads them
    again. Private attributes, looked up defensively: a version without them has nothing to drop.
    """
    fetcher = getattr(consumer, "_fetcher", None)
    for name in ("_paused_partition_records", "_paused_completed_fetches"):
        parked = getattr(fetcher, name, None)
        if not isinstance(parked, dict):
            continue
        for tp in partitions:
            dropped = parked.pop(tp, None)
            if dropped is not None and hasattr(dropped, "drain"):
                dropped.drain()

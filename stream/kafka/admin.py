"""Topic administration for the Kafka bus: the topics are created when missing, with their configs.

Topics (schema.ALL_TOPICS) are created with ``partitions`` and ``replication``, a per-topic
``max.message.bytes`` of ``max_message_bytes`` (8 MiB; the dead-letter topic 1 MiB more so that the
dead letter of the largest accepted message fits) and ``message.timestamp.type=LogAppendTime``:
telemetry carries its own ``ts``, and broker time keeps retention and the broker's future-timestamp
check working for replays of old or simulated data. ``Record.ts`` of a consumed record is therefore
the time the broker appended it (this is what end-to-end lag is measured from). Existing topics are
left as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from kafka import KafkaAdminClient
from kafka import errors as kerr

from fabricwatch.schema import ALL_TOPICS, TOPIC_DEADLETTER
from fabricwatch.stream.kafka.errors import CONNECT_TIMEOUT_MS, KafkaUnavailable, reachable, why

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
DEADLETTER_EXTRA_BYTES = 1024 * 1024


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


class TopicAdmin:
    """The bus's topics and their settings; ``ready`` once they have been ensured (producer and consumer
    each ensure them before first use, whichever comes first)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str,
        topics: Sequence[str],
        partitions: int,
        replication: int,
        max_message_bytes: int,
    ) -> None:
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.topics = tuple(topics)
        self.partitions = partitions
        self.replication = replication
        self.max_message_bytes = max_message_bytes
        self.ready = False

    def ensure(self) -> list[str]:
        """Create the missing topics now (raises :class:`KafkaUnavailable` if the broker cannot be reached)."""
        admin = self.client()
        try:
            created = ensure_topics(admin, self.topics, self.partitions, self.replication, self.max_message_bytes)
        finally:
            admin.close()
        self.ready = True
        return created

    def client(self) -> KafkaAdminClient:
        reachable(self.bootstrap)
        try:
            return KafkaAdminClient(
                bootstrap_servers=self.bootstrap,
                client_id=f"{self.client_id}-admin",
                request_timeout_ms=30_000,
                bootstrap_timeout_ms=CONNECT_TIMEOUT_MS,
            )
        except (kerr.KafkaError, OSError, ValueError) as exc:
            raise KafkaUnavailable(f"broker {self.bootstrap} cannot be reached ({why(exc)})") from None

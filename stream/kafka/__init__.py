"""The Kafka transport, one module per job: ``bus`` (:class:`KafkaBus`, composing the others),
``producer`` (buffered, never-blocking produce), ``consumer`` (group consumer and rebalance handling),
``admin`` (topics and their configs) and ``errors`` (broker trouble and how it is said)."""

from fabricwatch.stream.kafka.admin import MAX_MESSAGE_BYTES, ensure_topics
from fabricwatch.stream.kafka.bus import KafkaBus
from fabricwatch.stream.kafka.errors import KafkaUnavailable
from fabricwatch.stream.kafka.producer import DEFAULT_COMPRESSION, ProducerStats

__all__ = [
    "DEFAULT_COMPRESSION",
    "MAX_MESSAGE_BYTES",
    "KafkaBus",
    "KafkaUnavailable",
    "ProducerStats",
    "ensure_topics",
]

"""Dead letters on the bus: a record the processor cannot use, kept whole with where it came from and why.

A dead letter is an envelope, not Kafka headers, so that it means the same on every bus (the
in-memory bus has no headers), survives any tool that copies values between topics, and needs one
decoder to read. The envelope is MessagePack (like telemetry) with these fields:

    schema     "fabricwatch.deadletter/v1"
    topic, partition, offset   where the original was read (offset = its own offset, not the next)
    key        the original key (str or null)
    ts         the original record's timestamp (seconds)
    code       the reason's class (stream.metrics.DEADLETTER_CODES; "" when not known)
    reason     why it was rejected, one line (at most 1000 characters)
    value      the original bytes, unchanged (MessagePack bin)

It is produced to ``fabricwatch.deadletter`` with the original key, so the dead letters of one fault
domain stay in one partition beside each other. The processor also stores its dead letters in the
``deadletters`` table (stream.store); :func:`from_stored` turns one of those into the bus record.
"""

from __future__ import annotations

import msgspec

from fabricwatch.records import DeadLetter
from fabricwatch.schema import TOPIC_DEADLETTER
from fabricwatch.stream.bus import Outgoing, Record

DEADLETTER_SCHEMA = "fabricwatch.deadletter/v1"
REASON_MAX = 1000


class _Envelope(msgspec.Struct, frozen=True):
    schema: str
    topic: str
    partition: int
    offset: int
    key: str | None
    ts: float
    code: str
    reason: str
    value: bytes


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(_Envelope)


def one_line(reason: str) -> str:
    """A reason as one line of bounded length (reasons can quote bad input)."""
    text = " ".join(reason.split())
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


def deadletter_record(original: Record, reason: str, code: str = "") -> Outgoing:
    """The dead letter of ``original`` for the dead-letter topic."""
    letter = _Envelope(
        DEADLETTER_SCHEMA,
        original.topic,
        original.partition,
        original.offset,
        original.key,
        original.ts,
        code,
        one_line(reason),
        original.value,
    )
    return Outgoing(TOPIC_DEADLETTER, original.key, _ENCODER.encode(letter), original.ts)


def from_stored(d: DeadLetter) -> Outgoing:
    """The bus record of a dead letter the processor stored."""
    return deadletter_record(Record(d.topic, d.key, d.value, d.ts, d.partition, d.offset), d.reason, d.code)


def read_deadletter(value: bytes) -> DeadLetter:
    """Bytes from the dead-letter topic → :class:`DeadLetter` (raises ``ValueError`` if not one)."""
    try:
        letter = _DECODER.decode(value)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"not a dead letter: {exc}") from None
    if letter.schema != DEADLETTER_SCHEMA:
        raise ValueError(f"not a dead letter: schema {letter.schema!r}")
    return DeadLetter(
        letter.topic, letter.partition, letter.offset, letter.key, letter.value, letter.reason, letter.code, letter.ts
    )

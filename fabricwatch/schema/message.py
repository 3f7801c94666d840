"""One telemetry message: its struct, how one is made and converted, and the check of its header.

One message is one scrape of one source, columnar: ``rows`` maps column names to lists of one
length. The header check covers everything but the values of value columns, which are checked as
arrays across many messages at once (fabricwatch.schema.validate).
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from fabricwatch.schema.spec import KINDS, MAX_ROWS, SCHEMA, TS_MAX, TS_MIN, KindSpec


class SchemaError(ValueError):
    """A message that breaks the schema; ``str()`` is the reason stored with the dead letter and
    ``code`` one of stream.metrics.DEADLETTER_CODES (undecodable, structure, schema, value)."""

    def __init__(self, reason: str, code: str = "schema") -> None:
        super().__init__(reason)
        self.code = code
        self.message: Message | None = None  # set when the rejected message came inside a batch record


class Message(msgspec.Struct, array_like=False):
    """A decoded telemetry message. ``rows`` is columnar: column name → list of values."""

    schema: str
    kind: str
    source: str
    ts: float
    seq: int
    rows: dict[str, list[Any] | bytes]  # bytes: a packed numeric column (fabricwatch.schema.encoding)


def make(kind: str, source: str, ts: float, seq: int, rows: dict[str, list[Any]]) -> Message:
    return Message(SCHEMA, kind, source, float(ts), seq, rows)


def from_dict(value: Any) -> Message:
    """A JSON-decoded message (from a capture) → :class:`Message`, checked like ``decode``."""
    try:
        message = msgspec.convert(value, Message)
    except msgspec.ValidationError as exc:
        raise SchemaError(f"wrong structure: {exc}", "structure") from None
    check_header(message)
    return message


def to_dict(message: Message) -> dict[str, Any]:
    return msgspec.structs.asdict(message)


def check_header(m: Message) -> KindSpec:
    """Checks everything but the values of value columns; returns the kind's spec."""
    if m.schema != SCHEMA:
        raise SchemaError(f"schema is {m.schema!r}, expected {SCHEMA!r}")
    spec = KINDS.get(m.kind)
    if spec is None:
        raise SchemaError(f"unknown kind {m.kind!r} (known: {', '.join(KINDS)})")
    if not m.source or len(m.source) > 256:
        raise SchemaError("source must be a non-empty string of at most 256 characters")
    if not (math.isfinite(m.ts) and TS_MIN < m.ts < TS_MAX):
        raise SchemaError(f"ts {m.ts!r} is not seconds since the epoch")
    if m.seq < 0:
        raise SchemaError(f"seq {m.seq} is negative")
    n = row_count(m)  # every column's length is checked against this in to_table, as arrays
    if n > MAX_ROWS:
        raise SchemaError(f"{n} rows, more than the {MAX_ROWS} a message may hold")
    for key in spec.keys:
        if n and key.name not in m.rows:
            raise SchemaError(f"key column {key.name!r} missing")
    return spec


def _length(values: list[Any] | bytes) -> int:
    return len(values) // 8 if isinstance(values, bytes) else len(values)


def row_count(m: Message) -> int:
    for values in m.rows.values():
        return _length(values)
    return 0

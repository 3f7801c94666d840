"""Bus encoding of telemetry messages (bench/encoding.py measures it): single messages and batch records.

MessagePack through msgspec, with each numeric column *packed* as one little-endian binary array
(float64, null = NaN; int64, null = -2**63) instead of a list of numbers. Lists of Python numbers cost
~40 ns a value to decode and again to turn into Arrow; a packed column decodes as one bytes object and
becomes an Arrow array without touching each value, which is what lets ingest keep up with DuckDB.
Plain lists (and JSON) are accepted just the same, so any producer that follows DESIGN §3 literally
works. Captures stay JSON Lines with plain lists.

Decoding checks structure and headers only; values are checked later, as arrays (fabricwatch.schema.validate).
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from fabricwatch.schema.message import Message, SchemaError, check_header, row_count
from fabricwatch.schema.spec import KINDS, MAX_ROWS, SCHEMA, TS_MAX, TS_MIN, Column, KindSpec

BATCH_SCHEMA = "fabricwatch.batch/v1"


class MessageBatch(msgspec.Struct, array_like=True):
    """Several messages of one kind in one bus record, columnar (a bus encoding, not a new schema).

    A collector that serves many sources (a gateway, the simulator) sends, per scrape, one record per
    bus key instead of one per message: the per-record cost of Kafka and of decoding is paid once for
    dozens of messages. ``source``, ``ts``, ``seq`` and ``counts`` (rows per message) hold one entry per
    message; ``rows`` holds the messages' rows one after another. It travels as a MessagePack array, a
    single message as a map, so a reader tells them apart by the first byte.
    """

    schema: str
    kind: str
    source: list[str]
    ts: list[float]
    seq: list[int]
    counts: list[int]
    rows: dict[str, list[Any] | bytes]


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Message)
_BATCH_DECODER = msgspec.msgpack.Decoder(MessageBatch)
_JSON_DECODER = msgspec.json.Decoder(Message)
_MSGPACK_ARRAY_FIRST = {*range(0x90, 0xA0), 0xDC, 0xDD}
INT_NULL = -(2**63)
PACKED_DTYPE = {"float": np.dtype("<f8"), "int": np.dtype("<i8")}


def encode(message: Message | dict[str, Any]) -> bytes:
    """A message → bus bytes, numeric columns packed (values that cannot be packed stay a list)."""
    m = message if isinstance(message, Message) else None
    kind = m.kind if m is not None else message.get("kind")  # type: ignore[union-attr]
    rows = m.rows if m is not None else message.get("rows")  # type: ignore[union-attr]
    spec = KINDS.get(kind) if isinstance(kind, str) else None
    if spec is None or not isinstance(rows, dict):
        return _ENCODER.encode(message)
    packed = {name: _pack(spec.column(name), values) for name, values in rows.items()}
    if m is not None:
        return _ENCODER.encode(Message(m.schema, m.kind, m.source, m.ts, m.seq, packed))
    return _ENCODER.encode({**message, "rows": packed})  # type: ignore[dict-item]


def _pack(col: Column | None, values: Any) -> Any:
    """A numeric column as packed bytes, when that is exact; anything doubtful stays as it is, for
    the validator to judge (a string, a bool, NaN, a float in an integer column, an overflow)."""
    if col is None or col.type == "str" or not isinstance(values, list) or not values:
        return values
    nulls = values.count(None)
    try:
        arr = np.array(values if not nulls else [v for v in values if v is not None])
    except (ValueError, TypeError, OverflowError):
        return values
    kind = arr.dtype.kind
    if col.type == "int":
        if kind != "i" or (arr == INT_NULL).any():
            return values
    elif kind not in "if" or (kind == "f" and np.isnan(arr).any()):
        return values
    dtype = PACKED_DTYPE[col.type]
    if not nulls:
        return arr.astype(dtype, copy=False).tobytes()
    out = np.full(len(values), np.nan if col.type == "float" else INT_NULL, dtype=dtype)
    out[[i for i, v in enumerate(values) if v is not None]] = arr
    return out.tobytes()


def unpack(message: Message) -> Message:
    """A decoded message with every column as a plain list (for JSON output and inspection)."""
    rows: dict[str, list[Any] | bytes] = {}
    for name, values in message.rows.items():
        col = KINDS[message.kind].column(name) if message.kind in KINDS else None
        rows[name] = unpack_column(col, values) if isinstance(values, bytes) else values
    return Message(message.schema, message.kind, message.source, message.ts, message.seq, rows)


def unpack_column(col: Column | None, data: bytes) -> list[Any]:
    """A packed column → a plain list, null where it holds NaN (float) or INT_NULL (int)."""
    if col is None or col.type == "str":
        raise SchemaError(f"column {col.name if col else '?'!r} is packed but holds strings", "structure")
    arr = np.frombuffer(data, dtype=PACKED_DTYPE[col.type])
    nulls = np.isnan(arr) if col.type == "float" else arr == INT_NULL
    return [None if null else v for v, null in zip(arr.tolist(), nulls.tolist(), strict=True)]


def decode(data: bytes) -> Message:
    """Bytes from the bus → a structurally checked :class:`Message` (values are checked later).

    MessagePack is what fabricwatch produces; a JSON object is accepted too, so a third-party producer
    can publish the JSON form of DESIGN §3 as is. The two never overlap: a MessagePack map never
    starts with ``{`` (that byte alone would be the integer 123).
    """
    try:
        message = (_JSON_DECODER if data[:1] == b"{" else _DECODER).decode(data)
    except msgspec.ValidationError as exc:
        raise SchemaError(f"wrong structure: {exc}", "structure") from None
    except msgspec.DecodeError as exc:
        raise SchemaError(f"undecodable: {exc}", "undecodable") from None
    check_header(message)
    return message


def encode_batch(messages: list[Message]) -> bytes:
    """Messages of one kind → one bus record (one message stays a plain message)."""
    if len(messages) == 1:
        return encode(messages[0])
    kind = messages[0].kind
    spec = KINDS[kind]
    counts = [row_count(m) for m in messages]
    names = [c.name for c in spec.columns if any(c.name in m.rows for m in messages)]
    rows: dict[str, list[Any] | bytes] = {}
    for name in names:
        values: list[Any] = []
        for m, n in zip(messages, counts, strict=True):
            column = m.rows.get(name)
            if column is None:
                values.extend([None] * n)
            else:
                values.extend(unpack_column(spec.column(name), column) if isinstance(column, bytes) else column)
        rows[name] = _pack(spec.column(name), values)
    batch = MessageBatch(
        BATCH_SCHEMA, kind, [m.source for m in messages], [m.ts for m in messages], [m.seq for m in messages],
        counts, rows,
    )  # fmt: skip
    return _ENCODER.encode(batch)


def decode_record(data: bytes) -> Message | MessageBatch:
    """A bus record → one message (:func:`decode`) or a batch of them, structurally checked."""
    if not data or data[0] not in _MSGPACK_ARRAY_FIRST:
        return decode(data)
    try:
        batch = _BATCH_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise SchemaError(f"wrong structure: {exc}", "structure") from None
    except msgspec.DecodeError as exc:
        raise SchemaError(f"undecodable: {exc}", "undecodable") from None
    check_batch_header(batch)
    return batch


def check_batch_header(b: MessageBatch) -> KindSpec:
    if b.schema != BATCH_SCHEMA:
        raise SchemaError(f"schema is {b.schema!r}, expected {BATCH_SCHEMA!r}")
    spec = KINDS.get(b.kind)
    if spec is None:
        raise SchemaError(f"unknown kind {b.kind!r} (known: {', '.join(KINDS)})")
    n = len(b.counts)
    if not n or not (len(b.source) == len(b.ts) == len(b.seq) == n):
        raise SchemaError("a batch needs source, ts, seq and counts for each of its messages", "structure")
    if not all(b.source) or max(map(len, b.source)) > 256:
        raise SchemaError("every source must be a non-empty string of at most 256 characters")
    ts = np.array(b.ts, dtype=np.float64)
    if not (np.isfinite(ts).all() and (ts > TS_MIN).all() and (ts < TS_MAX).all()):
        raise SchemaError("a ts is not seconds since the epoch")
    if min(b.seq) < 0 or min(b.counts) < 0:
        raise SchemaError("seq and counts must be ≥ 0")
    if sum(b.counts) > MAX_ROWS:
        raise SchemaError(f"{sum(b.counts)} rows, more than the {MAX_ROWS} a record may hold")
    for key in spec.keys:
        if sum(b.counts) and key.name not in b.rows:
            raise SchemaError(f"key column {key.name!r} missing")
    return spec


def explode(b: MessageBatch) -> list[Message]:
    """A batch → its messages (packed columns stay packed), to judge them one by one."""
    out, start = [], 0
    for source, ts, seq, n in zip(b.source, b.ts, b.seq, b.counts, strict=True):
        rows = {
            name: values[8 * start : 8 * (start + n)] if isinstance(values, bytes) else values[start : start + n]
            for name, values in b.rows.items()
        }
        out.append(Message(SCHEMA, b.kind, source, ts, seq, rows))
        start += n
    return out


def record_messages(data: bytes) -> list[Message]:
    """The messages in a bus record (a message or a batch), for inspection and tests."""
    record = decode_record(data)
    return explode(record) if isinstance(record, MessageBatch) else [record]


def record_rows(data: bytes) -> int:
    """Rows in a bus record (a message or a batch)."""
    record = decode_record(data)
    return sum(record.counts) if isinstance(record, MessageBatch) else row_count(record)

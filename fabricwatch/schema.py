"""Telemetry schema ``fabricwatch.telemetry/v1`` (DESIGN §3): column specs, validation, bus encoding.

One message is one scrape of one source, columnar. Validation works on a batch of messages of one
kind at once: the columns of all messages are joined and checked as Arrow/numpy arrays, and only a
message that fails is set aside with its reason, so good messages beside it are never lost.

Rules a message must meet (anything else is a precise :class:`SchemaError` reason):

* ``schema`` is ``fabricwatch.telemetry/v1``; ``kind`` is one of :data:`KINDS`; ``source`` a non-empty
  string; ``ts`` finite seconds since the epoch; ``seq`` an integer ≥ 0;
* ``rows`` maps column names to lists of one length; key columns are present and never null;
* a value column may be missing or hold ``null`` (a source that cannot read a value says so);
* numbers are finite and inside the column's physical range (a 10^300 °C GPU is a bug, not data);
  counters (``_total``) are integers ≥ 0; columns the schema does not know are ignored and counted.

Bus encoding (bench/encoding.py measures it): MessagePack through msgspec, with each numeric column
*packed* as one little-endian binary array (float64, null = NaN; int64, null = -2**63) instead of a
list of numbers. Lists of Python numbers cost ~40 ns a value to decode and again to turn into Arrow;
a packed column decodes as one bytes object and becomes an Arrow array without touching each value,
which is what lets ingest keep up with DuckDB. Plain lists (and JSON) are accepted just the same, so
any producer that follows DESIGN §3 literally works. Captures stay JSON Lines with plain lists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

SCHEMA = "fabricwatch.telemetry/v1"
TS_MIN, TS_MAX = 0.0, 4102444800.0  # the epoch .. 2100-01-01
MAX_ROWS = 1_000_000
COUNTER_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str  # "str", "float", "int"
    low: float = -math.inf
    high: float = math.inf

    @property
    def arrow_type(self) -> pa.DataType:
        return {"str": pa.string(), "float": pa.float64(), "int": pa.int64()}[self.type]

    @property
    def duckdb_type(self) -> str:
        return {"str": "VARCHAR", "float": "DOUBLE", "int": "BIGINT"}[self.type]


def _counter(name: str) -> Column:
    return Column(name, "int", 0, COUNTER_MAX)


@dataclass(frozen=True, slots=True)
class KindSpec:
    kind: str
    keys: tuple[Column, ...]
    values: tuple[Column, ...]

    @property
    def columns(self) -> tuple[Column, ...]:
        return self.keys + self.values

    @property
    def topic(self) -> str:
        return topic_of(self.kind)

    def column(self, name: str) -> Column | None:
        return _COLUMN_BY_NAME[self.kind].get(name)


DBM = (-60.0, 20.0)  # loss of light reads about -40 dBm; no module transmits over +20 dBm
TEMP = (-60.0, 200.0)

KINDS: dict[str, KindSpec] = {
    spec.kind: spec
    for spec in (
        KindSpec(
            "gpu",
            (Column("device", "str"),),
            (
                Column("util_pct", "float", 0, 100),
                Column("mem_util_pct", "float", 0, 100),
                Column("temp_c", "float", *TEMP),
                Column("mem_temp_c", "float", *TEMP),
                Column("power_w", "float", 0, 10_000),
                Column("power_limit_w", "float", 0, 10_000),
                Column("sm_clock_mhz", "float", 0, 100_000),
                Column("throttle_mask", "int", 0, COUNTER_MAX),
                Column("xid", "int", 0, 2**31 - 1),
                _counter("ecc_dbe_total"),
                _counter("pcie_replay_total"),
            ),
        ),
        KindSpec(
            "optical",
            (Column("port", "str"), Column("lane", "int", 0, 63)),
            (
                Column("tx_power_dbm", "float", *DBM),
                Column("rx_power_dbm", "float", *DBM),
                Column("bias_ma", "float", 0, 1000),
                Column("module_temp_c", "float", *TEMP),
                Column("voltage_v", "float", 0, 20),
            ),
        ),
        KindSpec(
            "port",
            (Column("port", "str"),),
            (
                Column("state", "int", 0, 1),
                Column("speed_gbps", "float", 0, 10_000),
                _counter("rx_bytes_total"),
                _counter("tx_bytes_total"),
                _counter("rx_crc_errors_total"),
                _counter("symbol_errors_total"),
                _counter("fec_corrected_total"),
                _counter("fec_uncorrectable_total"),
                Column("pre_fec_ber", "float", 0, 1),
                _counter("link_down_total"),
                _counter("rx_pause_total"),
                _counter("tx_pause_total"),
                _counter("ecn_marked_total"),
                _counter("tx_drops_total"),
                Column("queue_depth_bytes", "int", 0, 2**40),
                # Extensions (optional): frame counters, so loss can be a ratio of frames.
                _counter("rx_packets_total"),
                _counter("tx_packets_total"),
            ),
        ),
        KindSpec(
            "switch",
            (Column("device", "str"),),
            (
                Column("asic_temp_c", "float", *TEMP),
                Column("fan_min_rpm", "float", 0, 1_000_000),
                Column("psu_ok", "int", 0, 1),
            ),
        ),
        KindSpec(
            "module",
            (Column("port", "str"),),
            (
                Column("media", "str"),
                Column("vendor", "str"),
                Column("part_number", "str"),
                Column("lanes", "int", 1, 64),
                Column("rx_power_low_alarm_dbm", "float", *DBM),
                Column("rx_power_low_warn_dbm", "float", *DBM),
                Column("rx_power_high_alarm_dbm", "float", *DBM),
                Column("tx_power_low_alarm_dbm", "float", *DBM),
                Column("tx_power_low_warn_dbm", "float", *DBM),
                Column("bias_high_alarm_ma", "float", 0, 1000),
                Column("bias_high_warn_ma", "float", 0, 1000),
                Column("temp_high_alarm_c", "float", *TEMP),
                Column("temp_high_warn_c", "float", *TEMP),
            ),
        ),
    )
}

_COLUMN_BY_NAME = {kind: {c.name: c for c in spec.columns} for kind, spec in KINDS.items()}

TOPIC_PREFIX = "fabricwatch.telemetry."
TOPIC_FINDINGS = "fabricwatch.findings"
TOPIC_INCIDENTS = "fabricwatch.incidents"
TOPIC_DEADLETTER = "fabricwatch.deadletter"


def topic_of(kind: str) -> str:
    return TOPIC_PREFIX + kind


TELEMETRY_TOPICS = tuple(topic_of(k) for k in KINDS)
ALL_TOPICS = (*TELEMETRY_TOPICS, TOPIC_FINDINGS, TOPIC_INCIDENTS, TOPIC_DEADLETTER)


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
    rows: dict[str, list[Any] | bytes]  # bytes: a packed numeric column (see the module docstring)


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
_PACKED_DTYPE = {"float": np.dtype("<f8"), "int": np.dtype("<i8")}


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
    dtype = _PACKED_DTYPE[col.type]
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
        rows[name] = _unpacked(col, values) if isinstance(values, bytes) else values
    return Message(message.schema, message.kind, message.source, message.ts, message.seq, rows)


def _unpacked(col: Column | None, data: bytes) -> list[Any]:
    if col is None or col.type == "str":
        raise SchemaError(f"column {col.name if col else '?'!r} is packed but holds strings", "structure")
    arr = np.frombuffer(data, dtype=_PACKED_DTYPE[col.type])
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
                values.extend(_unpacked(spec.column(name), column) if isinstance(column, bytes) else column)
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


def from_dict(value: Any) -> Message:
    """A JSON-decoded message (from a capture) → :class:`Message`, checked like :func:`decode`."""
    try:
        message = msgspec.convert(value, Message)
    except msgspec.ValidationError as exc:
        raise SchemaError(f"wrong structure: {exc}", "structure") from None
    check_header(message)
    return message


def to_dict(message: Message) -> dict[str, Any]:
    return msgspec.structs.asdict(message)


def make(kind: str, source: str, ts: float, seq: int, rows: dict[str, list[Any]]) -> Message:
    return Message(SCHEMA, kind, source, float(ts), seq, rows)


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


# --- batch validation into Arrow ----------------------------------------------------------------


def _column_array(col: Column, values: list[Any]) -> pa.Array:
    """Values of one column → a typed Arrow array; raises SchemaError naming the first bad value."""
    try:
        if col.type == "str":
            return pa.array(values, pa.string())
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise SchemaError(f"column {col.name!r}: {_first_bad(col, values) or exc}", "value") from None
    t = arr.type
    if pa.types.is_null(t):
        return pa.nulls(len(arr), col.arrow_type)
    if col.type == "float" and (pa.types.is_integer(t) or pa.types.is_floating(t)):
        return arr.cast(pa.float64())
    if col.type == "int" and pa.types.is_integer(t):
        if pa.types.is_unsigned_integer(t):
            raise SchemaError(f"column {col.name!r}: value above {COUNTER_MAX}", "value")
        return arr
    if col.type == "int" and pa.types.is_floating(t):
        x = arr.to_numpy(zero_copy_only=False)
        bad = np.isfinite(x) & (x != np.round(x))
        if bad.any():
            raise SchemaError(f"column {col.name!r}: {float(x[bad][0])!r} is not an integer", "value")
        if (np.abs(x[np.isfinite(x)]) >= 2.0**63).any():
            raise SchemaError(f"column {col.name!r}: value out of range", "value")
        if np.isnan(x).any() and arr.null_count != np.isnan(x).sum():
            raise SchemaError(f"column {col.name!r}: NaN is not a number; send null", "value")
        return arr.cast(pa.int64(), safe=False)
    raise SchemaError(f"column {col.name!r}: {_first_bad(col, values) or f'values of type {t}'}", "value")


def _first_bad(col: Column, values: list[Any]) -> str | None:
    for i, v in enumerate(values):
        if v is None:
            continue
        ok = isinstance(v, str) if col.type == "str" else isinstance(v, int | float) and not isinstance(v, bool)
        if not ok:
            return f"row {i}: {v!r} is a {type(v).__name__}, expected {col.type}"
    return None


def _range_violation(col: Column, arr: pa.Array) -> np.ndarray | None:
    """Boolean mask of rows whose value is NaN/inf or outside the column's range; None if all good."""
    if col.type == "str":
        return None
    x = arr.to_numpy(zero_copy_only=False)
    if col.type == "int":
        valid = ~np.asarray(arr.is_null(), dtype=bool) if arr.null_count else None
        x = x.astype(np.float64) if x.dtype != np.float64 else x
        bad = (x < col.low) | (x > col.high)
        if valid is not None:
            bad &= valid
    else:
        nulls = np.asarray(arr.is_null(), dtype=bool) if arr.null_count else np.zeros(len(x), dtype=bool)
        with np.errstate(invalid="ignore"):
            bad = ~nulls & (~np.isfinite(x) | (x < col.low) | (x > col.high))
    return bad if bad.any() else None


@dataclass(slots=True)
class Batch:
    """Validated rows of one kind as an Arrow table, and the messages that were set aside."""

    kind: str
    table: pa.Table
    rejected: list[tuple[int, SchemaError]]  # (index into the input list, why)
    unknown_columns: int = 0


def table_schema(kind: str) -> pa.Schema:
    spec = KINDS[kind]
    fields = [pa.field("ts", pa.timestamp("us")), pa.field("source", pa.string())]
    fields += [pa.field(c.name, c.arrow_type) for c in spec.columns]
    fields.append(pa.field("seq", pa.int64()))
    return pa.schema(fields)


def to_table(kind: str, messages: list[Message | MessageBatch]) -> Batch:
    """Validate messages (or batches) of one kind, headers already checked, into one Arrow table.

    Columns are joined across messages and checked as arrays; when anything fails, the messages are
    checked one by one so that only the bad ones are rejected (the slow path is for bad batches only).
    A rejected message from inside a batch comes with ``error.message`` set to that message.
    """
    spec = KINDS[kind]
    try:
        table, unknown = _build(spec, messages)
        return Batch(kind, table, [], unknown)
    except SchemaError:
        pass
    good_tables, rejected, unknown = [], [], 0
    for i, part in enumerate(messages):
        try:
            t, u = _build(spec, [part])
        except SchemaError as exc:
            if not isinstance(part, MessageBatch):
                rejected.append((i, exc))
                continue
            parts = explode(part)
            inner = to_table(kind, parts)  # type: ignore[arg-type]
            for j, error in inner.rejected:
                error.message = parts[j]
                error.args = (f"message {j} of a batch record: {error}",)
                rejected.append((i, error))
            t, u = inner.table, inner.unknown_columns
        good_tables.append(t)
        unknown += u
    table = pa.concat_tables(good_tables) if good_tables else table_schema(kind).empty_table()
    return Batch(kind, table, rejected, unknown)


class _RowError(SchemaError):
    def __init__(self, message_index: int, reason: str, code: str = "value") -> None:
        super().__init__(reason, code)
        self.message_index = message_index


def _build(spec: KindSpec, messages: list[Message | MessageBatch]) -> tuple[pa.Table, int]:
    """One table from many parts (a message, or a batch of them); errors name the part."""
    rows_of = [m.rows for m in messages]
    sources: list[str] = []
    stamps: list[float] = []
    seqs: list[int] = []
    per_message: list[int] = []  # rows of each message
    counts: list[int] = []  # rows of each part
    for m in messages:
        if isinstance(m, MessageBatch):
            sources += m.source
            stamps += m.ts
            seqs += m.seq
            per_message += m.counts
            counts.append(sum(m.counts))
        else:
            n = row_count(m)
            sources.append(m.source)
            stamps.append(m.ts)
            seqs.append(m.seq)
            per_message.append(n)
            counts.append(n)
    known = _COLUMN_BY_NAME[spec.kind].keys()
    unknown = sum(map(len, (r.keys() - known for r in rows_of)))
    ts = np.repeat(np.array(stamps, dtype=np.float64), per_message)
    arrays: dict[str, pa.Array] = {
        "ts": pa.array(np.round(ts * 1e6).astype("int64"), pa.int64()).cast(pa.timestamp("us")),
        "source": pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(len(sources), dtype=np.int32), per_message)),
            pa.array(sources, pa.string()),
        ).cast(pa.string()),
    }
    counts_arr = np.array(counts, dtype=np.int64)
    for col in spec.columns:
        columns = [r.get(col.name) for r in rows_of]
        types = set(map(type, columns))
        _check_lengths(col, columns, types, counts_arr)
        if col.type != "str" and types <= _PACKED_TYPES:
            arr = _packed_array(col, columns, counts, has_nulls=type(None) in types)
        else:
            if col.type == "str" and bytes in types:
                raise _RowError(
                    types_index(columns, bytes), f"column {col.name!r}: packed bytes in a string column", "structure"
                )
            values: list[Any] = []
            for column, n in zip(columns, counts, strict=True):
                if column is None:
                    values.extend([None] * n)
                else:
                    values.extend(_unpacked(col, column) if isinstance(column, bytes) else column)
            arr = _column_array(col, values)
        is_key = col in spec.keys
        if is_key and arr.null_count:
            first = int(np.argmax(np.asarray(arr.is_null(), dtype=bool)))
            raise _RowError(_message_of(first, counts), f"key column {col.name!r} has a null")
        bad = _range_violation(col, arr)
        if bad is not None:
            first = int(np.argmax(bad))
            mi = _message_of(first, counts)
            row = first - sum(counts[:mi])
            value = arr[first].as_py()
            raise _RowError(mi, f"column {col.name!r} row {row}: {value!r} outside [{col.low:g}, {col.high:g}]")
        arrays[col.name] = arr
    arrays["seq"] = pa.array(np.repeat(np.array(seqs, dtype=np.int64), per_message))
    return pa.Table.from_arrays(list(arrays.values()), schema=table_schema(spec.kind)), unknown


_PACKED_TYPES = {bytes, type(None)}


def _values_in(column: Any, rows: int) -> int:
    """How many values a column holds (-1 for packed bytes that are not whole 8-byte values)."""
    if column is None:
        return rows
    if type(column) is bytes:
        return len(column) // 8 if not len(column) % 8 else -1
    return len(column)


def _check_lengths(col: Column, columns: list[Any], types: set[type], counts: np.ndarray) -> None:
    """Every message's column has as many values as its rows (8 bytes a value when packed)."""
    if len(types) == 1 and type(None) not in types:
        lens = np.fromiter(map(len, columns), np.int64, len(columns))
        if bytes in types:
            torn = lens % 8 != 0
            lens //= 8
            lens[torn] = -1
    else:
        lens = np.array([_values_in(c, n) for c, n in zip(columns, counts.tolist(), strict=True)], dtype=np.int64)
    bad = np.flatnonzero(lens != counts)
    if len(bad):
        i = int(bad[0])
        got = "a torn packed column" if lens[i] < 0 else f"{lens[i]} values"
        raise _RowError(i, f"column {col.name!r} has {got}, the message has {counts[i]} rows", "structure")


def types_index(columns: list[Any], wanted: type) -> int:
    return next(i for i, c in enumerate(columns) if type(c) is wanted)


def _packed_array(col: Column, columns: list[bytes | None], counts: list[int], has_nulls: bool) -> pa.Array:
    """Packed columns of many messages → one Arrow array, without touching each value in Python."""
    dtype = _PACKED_DTYPE[col.type]
    if has_nulls:
        null = np.array([np.nan if col.type == "float" else INT_NULL], dtype=dtype).tobytes()
        data = b"".join(c if c is not None else null * n for c, n in zip(columns, counts, strict=True))
    else:
        data = b"".join(columns)  # type: ignore[arg-type]
    arr = np.frombuffer(data, dtype=dtype)
    if col.type == "float":
        return pa.array(arr, type=pa.float64(), from_pandas=True)
    mask = arr == INT_NULL
    return pa.array(arr, type=pa.int64(), mask=mask if mask.any() else None)


def _message_of(row: int, counts: list[int]) -> int:
    return int(np.searchsorted(np.cumsum(counts), row, side="right"))


def table_to_messages(kind: str, table: pa.Table) -> list[Message]:
    """Stored rows back into messages (one per ts/source/seq), for round-trip checks and exports."""
    spec = KINDS[kind]
    groups: dict[tuple[float, str, int], dict[str, list[Any]]] = {}
    ts_us = table.column("ts").cast(pa.int64()).to_pylist()
    records = table.drop_columns(["ts"]).to_pylist()
    for t, record in zip(ts_us, records, strict=True):
        rows = groups.setdefault((t / 1e6, record["source"], record["seq"]), {c.name: [] for c in spec.columns})
        for c in spec.columns:
            rows[c.name].append(record[c.name])
    return [make(kind, source, ts, seq, rows) for (ts, source, seq), rows in sorted(groups.items())]

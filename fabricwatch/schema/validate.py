"""Validation of decoded messages into Arrow: one table per kind, and the messages set aside.

Validation works on a batch of messages of one kind at once: the columns of all messages are joined
and checked as Arrow/numpy arrays, and only a message that fails is set aside with its reason, so good
messages beside it are never lost.

Rules a message must meet (anything else is a precise :class:`SchemaError` reason):

* ``schema`` is ``fabricwatch.telemetry/v1``; ``kind`` is one of :data:`KINDS`; ``source`` a non-empty
  string; ``ts`` finite seconds since the epoch; ``seq`` an integer ≥ 0;
* ``rows`` maps column names to lists of one length; key columns are present and never null;
* a value column may be missing or hold ``null`` (a source that cannot read a value says so);
* numbers are finite and inside the column's physical range (a 10^300 °C GPU is a bug, not data);
  counters (``_total``) are integers ≥ 0; columns the schema does not know are ignored and counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from fabricwatch.schema.encoding import INT_NULL, PACKED_DTYPE, MessageBatch, explode, unpack_column
from fabricwatch.schema.message import Message, SchemaError, make, row_count
from fabricwatch.schema.spec import COLUMN_BY_NAME, COUNTER_MAX, KINDS, Column, KindSpec


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
    known = COLUMN_BY_NAME[spec.kind].keys()
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
                    values.extend(unpack_column(col, column) if isinstance(column, bytes) else column)
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
    dtype = PACKED_DTYPE[col.type]
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

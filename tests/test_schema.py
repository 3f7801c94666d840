from __future__ import annotations

import math

import duckdb
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricwatch import schema
from fabricwatch.schema import KINDS, SchemaError


def _value(col: schema.Column):
    if col.type == "str":
        return st.text(min_size=1, max_size=12)
    lo = max(col.low, -1e12)
    hi = min(col.high, 2**62)
    if col.type == "int":
        return st.integers(int(lo), int(hi))
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


@st.composite
def messages(draw, kind: str | None = None):
    kind = kind or draw(st.sampled_from(sorted(KINDS)))
    spec = KINDS[kind]
    n = draw(st.integers(0, 6))
    rows = {}
    for col in spec.columns:
        if col in spec.keys:
            rows[col.name] = draw(st.lists(_value(col), min_size=n, max_size=n))
        elif draw(st.booleans()):
            rows[col.name] = draw(st.lists(st.one_of(st.none(), _value(col)), min_size=n, max_size=n))
    ts = draw(st.floats(1.0e9, 2.0e9, allow_nan=False))
    return schema.make(kind, draw(st.text(min_size=1, max_size=10)), ts, draw(st.integers(0, 2**40)), rows)


@given(messages())
def test_bytes_round_trip(m):
    decoded = schema.decode(schema.encode(m))
    assert schema.unpack(decoded) == m
    # and through Arrow: packed or not, the same table
    assert schema.to_table(m.kind, [decoded]).table.equals(schema.to_table(m.kind, [m]).table)


def test_numeric_columns_travel_packed_and_doubtful_values_as_lists():
    m = _gpu(temp_c=[60.5, None], ecc_dbe_total=[3, None], xid=[0, 79])
    packed = msgspec.msgpack.decode(schema.encode(m))["rows"]
    assert isinstance(packed["temp_c"], bytes) and isinstance(packed["ecc_dbe_total"], bytes)
    assert packed["device"] == ["node000/gpu0", "node000/gpu1"]
    assert schema.unpack(schema.decode(schema.encode(m))) == m
    # a NaN, a string or a fraction in a counter is not packed: the validator sees and rejects it
    for bad in ({"temp_c": [float("nan"), 1.0]}, {"temp_c": ["hot", 1.0]}, {"ecc_dbe_total": [1.5, 2]}):
        raw = msgspec.msgpack.decode(schema.encode(_gpu(**bad)))["rows"]
        assert isinstance(raw[next(iter(bad))], list)
        assert schema.to_table("gpu", [schema.decode(schema.encode(_gpu(**bad)))]).rejected


def _full(m: schema.Message) -> schema.Message:
    """The message as storage returns it: every column present, missing ones as nulls."""
    n = schema.row_count(m)
    rows = {c.name: list(m.rows.get(c.name, [None] * n)) for c in KINDS[m.kind].columns}
    return schema.make(m.kind, m.source, round(m.ts * 1e6) / 1e6, m.seq, rows)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages())
def test_duckdb_round_trip(m):
    batch = schema.to_table(m.kind, [m])
    assert batch.rejected == []
    con = duckdb.connect()
    con.register("batch", batch.table)
    con.execute("CREATE TABLE t AS SELECT * FROM batch")
    back = schema.table_to_messages(m.kind, con.sql("SELECT * FROM t").to_arrow_table())
    if schema.row_count(m) == 0:
        assert back == []
        return
    assert len(back) == 1
    got, want = back[0], _full(m)
    assert (got.kind, got.source, got.seq) == (want.kind, want.source, want.seq)
    assert math.isclose(got.ts, want.ts, abs_tol=1e-6)
    assert got.rows == want.rows


def _gpu(source="node000", **cols):
    rows = {"device": [f"{source}/gpu0", f"{source}/gpu1"], "temp_c": [60.0, 61.0]} | cols
    return schema.make("gpu", source, 1764400000.0, 1, rows)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        # a temperature no GPU can have
        (_gpu(temp_c=[1e300, 50.0]), "'temp_c' row 0: 1e+300 outside"),
        # NaN is never data: a source that cannot read sends null
        (_gpu(temp_c=[float("nan"), 50.0]), "'temp_c' row 0: nan outside"),
        # a string where a number belongs
        (_gpu(temp_c=["hot", 50.0]), "'hot' is a str, expected float"),
        # a counter must be an integer
        (_gpu(ecc_dbe_total=[1.5, 0]), "is not an integer"),
        # a negative counter
        (_gpu(ecc_dbe_total=[-1, 0]), "'ecc_dbe_total' row 0: -1 outside"),
        # a key that is null
        (_gpu(device=["node000/gpu0", None]), "key column 'device' has a null"),
    ],
)
def test_bad_values_are_rejected_with_reason_and_good_messages_kept(message, reason):
    good = _gpu("node001")
    batch = schema.to_table("gpu", [good, message, good])
    assert [i for i, _ in batch.rejected] == [1]
    assert reason in str(batch.rejected[0][1])
    assert batch.table.num_rows == 4


@pytest.mark.parametrize(
    ("patch", "reason"),
    [
        ({"schema": "fabricwatch.telemetry/v0"}, "schema is"),
        ({"kind": "toaster"}, "unknown kind 'toaster'"),
        ({"ts": float("inf")}, "not seconds since the epoch"),
        ({"source": ""}, "source must be"),
        ({"seq": -1}, "seq -1 is negative"),
        ({"rows": {"temp_c": [1.0]}}, "key column 'device' missing"),
    ],
)
def test_header_problems(patch, reason):
    value = schema.to_dict(_gpu()) | patch
    with pytest.raises(SchemaError, match=reason):
        schema.decode(schema.encode(value))


@pytest.mark.parametrize(
    ("data", "reason"),
    [(b"\xc1\x00garbage", "undecodable"), (schema.encode({"kind": "gpu"}), "wrong structure"), (b"", "undecodable")],
)
def test_undecodable_bytes(data, reason):
    with pytest.raises(SchemaError, match=reason):
        schema.decode(data)


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        ({"device": ["a", "b"], "temp_c": [1.0]}, "column 'temp_c' has 1 values, the message has 2 rows"),
        ({"device": ["a", "b"], "temp_c": b"\x00" * 12}, "column 'temp_c' has a torn packed column"),
        ({"device": b"\x00" * 16}, "packed bytes in a string column"),
    ],
)
def test_columns_of_different_lengths_are_rejected(rows, reason):
    bad = schema.make("gpu", "node9", 1764400000.0, 1, rows)
    batch = schema.to_table("gpu", [_gpu(), bad, _gpu("node001")])
    assert [(i, e.code) for i, e in batch.rejected] == [(1, "structure")]
    assert reason in str(batch.rejected[0][1]) and batch.table.num_rows == 4


def test_unknown_columns_are_counted_not_stored():
    batch = schema.to_table("gpu", [_gpu(colour=["red", "blue"])])
    assert batch.unknown_columns == 1
    assert "colour" not in batch.table.column_names


def test_integral_floats_are_accepted_as_counters():
    batch = schema.to_table("gpu", [_gpu(ecc_dbe_total=[3.0, None])])
    assert batch.table.column("ecc_dbe_total").to_pylist() == [3, None]


def test_json_messages_from_other_producers_are_accepted():
    m = _gpu()
    data = msgspec.json.encode(m)
    assert data[:1] == b"{"
    assert schema.decode(data) == m
    with pytest.raises(SchemaError, match="undecodable"):
        schema.decode(b'{"schema": ')


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(KINDS)).flatmap(lambda kind: st.lists(messages(kind), min_size=1, max_size=5)))
def test_a_batch_record_stores_exactly_what_its_messages_would(ms):
    record = schema.decode_record(schema.encode_batch(ms))
    assert schema.record_rows(schema.encode_batch(ms)) == sum(schema.row_count(m) for m in ms)
    got, want = schema.to_table(ms[0].kind, [record]), schema.to_table(ms[0].kind, ms)
    assert got.rejected == [] and got.table.equals(want.table)
    if len(ms) > 1:
        assert [schema.unpack(m) for m in schema.explode(record)] == [_full_columns(m, record) for m in ms]


def _full_columns(m: schema.Message, record: schema.MessageBatch) -> schema.Message:
    """A message as a batch gives it back: every column any message of the batch had, nulls filled in."""
    n = schema.row_count(m)
    rows = {name: list(m.rows.get(name, [None] * n)) for name in record.rows}
    return schema.make(m.kind, m.source, m.ts, m.seq, rows)


def test_a_bad_message_inside_a_batch_is_set_aside_alone():
    good, bad = _gpu("node001"), _gpu("node002", temp_c=[1e300, 50.0])
    record = schema.decode_record(schema.encode_batch([good, bad, _gpu("node003")]))
    assert isinstance(record, schema.MessageBatch)
    result = schema.to_table("gpu", [_gpu(), record])
    assert result.table.num_rows == 6
    ((index, error),) = result.rejected
    assert index == 1 and error.code == "value" and "message 1 of a batch record" in str(error)
    assert error.message.source == "node002"


@pytest.mark.parametrize(
    ("patch", "reason"),
    [
        ({"counts": []}, "for each of its messages"),
        ({"source": ["a"], "ts": [1.7e9, 1.7e9]}, "for each of its messages"),
        ({"ts": [float("nan"), 1.7e9]}, "not seconds since the epoch"),
        ({"kind": "toaster"}, "unknown kind"),
        ({"schema": "fabricwatch.batch/v0"}, "schema is"),
    ],
)
def test_bad_batch_headers(patch, reason):
    raw = msgspec.msgpack.decode(schema.encode_batch([_gpu("a"), _gpu("b")]))
    fields = ["schema", "kind", "source", "ts", "seq", "counts", "rows"]
    value = dict(zip(fields, raw, strict=True)) | patch
    with pytest.raises(SchemaError, match=reason):
        schema.decode_record(msgspec.msgpack.encode([value[f] for f in fields]))

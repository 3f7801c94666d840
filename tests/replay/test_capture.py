from __future__ import annotations

import gzip

import pytest

from fabricwatch import schema
from fabricwatch.errors import InputError
from fabricwatch.replay.capture import CaptureWriter, open_capture
from fabricwatch.topology import generate

T0 = 1764400000.0


def _write(path, n=5, truth=None):
    topo = generate(8, 8, 8)
    with CaptureWriter(path, topo, truth) as w:
        for i in range(n):
            m = schema.make("gpu", "node000", T0 + i, i, {"device": ["node000/gpu0"], "temp_c": [60.0 + i]})
            w.write(schema.topic_of("gpu"), "node000", m.ts, m)
    return topo


@pytest.mark.parametrize("name", ["c.jsonl", "c.jsonl.gz"])
def test_round_trip(tmp_path, name):
    topo = _write(tmp_path / name, truth=[{"cause": "link_down", "link": "L00000", "start": 0.0}])
    cap = open_capture(tmp_path / name)
    assert cap.topology.to_dict() == topo.to_dict()
    assert cap.truth == [{"cause": "link_down", "link": "L00000", "start": 0.0}]
    records = list(cap.records())
    assert [r.line for r in records] == [2, 3, 4, 5, 6]
    assert schema.from_dict(records[2].value).rows["temp_c"] == [62.0]
    assert cap.errors == []


def test_malformed_lines_are_reported_and_skipped(tmp_path):
    path = tmp_path / "c.jsonl"
    _write(path)
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(3, b'{"topic": "x", "ts": "yesterday", "value": {}}\n')  # wrong type: line 4
    lines.insert(5, b"{not json\n")  # line 6
    path.write_bytes(b"".join(lines))
    cap = open_capture(path)
    assert len(list(cap.records())) == 5
    assert [e.place for e in cap.errors] == [f"{path}:4", f"{path}:6"]


def test_truncated_gzip_keeps_what_was_read(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    _write(path, n=2000)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    cap = open_capture(path)
    got = list(cap.records())
    assert 0 < len(got) < 2000
    assert len(cap.errors) == 1
    assert "truncated" in str(cap.errors[0]) or "ends early" in str(cap.errors[0])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "header is not JSON"),
        (b'{"capture": "something/v9"}\n', "not a fabricwatch capture"),
        (b'{"capture": "fabricwatch/v1", "topology": {"nodes": 3}}\n', "must be a list"),
        (b"\x1f\x8b\x08garbage", "header is not JSON"),
    ],
)
def test_bad_headers_name_line_one(tmp_path, content, message):
    path = tmp_path / "c.jsonl"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message) as err:
        open_capture(path)
    assert err.value.place.startswith(f"{path}:1")


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        open_capture(tmp_path / "nope.jsonl")


def test_gzip_is_really_gzip(tmp_path):
    _write(tmp_path / "c.jsonl.gz")
    with gzip.open(tmp_path / "c.jsonl.gz") as f:
        assert b'"capture":"fabricwatch/v1"' in f.readline()

"""Dead-letter envelopes: the original bytes, where they came from, and why."""

from __future__ import annotations

import pytest

from fabricwatch.records import DeadLetter
from fabricwatch.schema import TOPIC_DEADLETTER
from fabricwatch.stream.bus import Record
from fabricwatch.stream.deadletter import REASON_MAX, deadletter_record, from_stored, read_deadletter

ORIGINAL = Record("fabricwatch.telemetry.gpu", "node007", b"\x00\xffnot msgpack\x93", 1764400000.5, 5, 12345)


def test_the_envelope_keeps_the_original_and_its_place() -> None:
    out = deadletter_record(ORIGINAL, "undecodable: truncated", "undecodable")
    assert (out.topic, out.key, out.ts) == (TOPIC_DEADLETTER, "node007", ORIGINAL.ts)
    letter = read_deadletter(out.value)
    assert letter.value == ORIGINAL.value  # byte for byte
    assert (letter.topic, letter.partition, letter.offset, letter.key) == (ORIGINAL.topic, 5, 12345, "node007")
    assert (letter.code, letter.reason, letter.ts) == ("undecodable", "undecodable: truncated", ORIGINAL.ts)


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (
            "column 'temp_c' row 3:\n1e300 outside [-60, 200]",
            "column 'temp_c' row 3: 1e300 outside [-60, 200]",
        ),  # one line
        ("x" * 5000, "x" * (REASON_MAX - 1) + "…"),  # bounded: reasons may quote bad input
    ],
)
def test_reasons_are_one_bounded_line(reason: str, expected: str) -> None:
    assert read_deadletter(deadletter_record(ORIGINAL, reason).value).reason == expected


def test_a_stored_dead_letter_becomes_the_same_envelope() -> None:
    stored = DeadLetter("fabricwatch.telemetry.port", 2, 99, None, b"{}", "wrong structure", "structure", 1.5)
    letter = read_deadletter(from_stored(stored).value)
    assert (letter.topic, letter.partition, letter.offset, letter.key, letter.value) == (
        stored.topic,
        2,
        99,
        None,
        b"{}",
    )
    assert (letter.code, letter.reason) == ("structure", "wrong structure")


@pytest.mark.parametrize("value", [b"", b"\xc1", b"\x81\xa6schema\xa3bad"])
def test_anything_else_is_not_a_dead_letter(value: bytes) -> None:
    with pytest.raises(ValueError, match="not a dead letter"):
        read_deadletter(value)

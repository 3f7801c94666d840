"""Golden folders: every case under tests/golden/<source>/<case>/ is parsed and compared row for row.

A case holds its input (a file, or a folder for sysfs), ``case.yaml`` (``args``: extra command-line
options; ``input``: the input's name when the folder holds more than one entry; ``empty``: why a real
output maps to no row; ``error``: the message a real failure output must give) and ``expected.jsonl``
(what ``fabricwatch parse`` must print). Regenerate after a reviewed parser change with
``FABRICWATCH_UPDATE_GOLDEN=1 pytest tests/collectors/test_golden.py`` and read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest
import yaml

from fabricwatch import schema
from fabricwatch.collectors.base import SOURCES
from tests.collectors.conftest import jsonl
from tests.conftest import GOLDEN

TS = "1764400000"
NOT_INPUT = {"case.yaml", "expected.jsonl"}
CASES = sorted(p.parent for p in GOLDEN.glob("*/*/case.yaml") if p.parent.parent.name in SOURCES)


def case_input(case: Path, spec: dict) -> Path:
    if "input" in spec:
        return case / spec["input"]
    entries = [p for p in case.iterdir() if p.name not in NOT_INPUT]
    assert len(entries) == 1, f"{case}: name the input in case.yaml (found {entries})"
    return entries[0]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name}" for c in CASES])
def test_golden_case(case: Path, fw) -> None:
    spec = yaml.safe_load((case / "case.yaml").read_text()) or {}
    args = ["parse", "--source", case.parent.name, str(case_input(case, spec)), "--ts", TS, *spec.get("args", [])]
    code, out, err = fw(*args)
    if spec.get("error"):  # a real failure output: one clear line, exit 2, no rows
        assert (code, out) == (2, b""), err
        assert spec["error"] in err and len(err.strip().splitlines()) == 1, err
        return
    assert code == 0, err
    got = jsonl(out)
    expected_path = case / "expected.jsonl"
    if os.environ.get("FABRICWATCH_UPDATE_GOLDEN"):
        expected_path.write_bytes(out)
    assert got == jsonl(expected_path.read_bytes())
    # every message is valid telemetry: the batch validation rejects nothing
    for message in got:
        m = schema.from_dict(message)
        assert schema.to_table(m.kind, [m]).rejected == []


def test_every_case_has_rows() -> None:
    """A case makes rows unless its case.yaml says why it maps nothing (``empty: reason``)."""
    for case in CASES:
        spec = yaml.safe_load((case / "case.yaml").read_text()) or {}
        if spec.get("error"):
            continue
        lines = [msgspec.json.decode(line) for line in (case / "expected.jsonl").read_bytes().splitlines()]
        if spec.get("empty"):
            assert lines == [], case
        else:
            assert lines and all(schema.row_count(schema.from_dict(m)) > 0 for m in lines), case

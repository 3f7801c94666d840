"""``fabricwatch detect-series``: score a ``timestamp,value`` CSV with the univariate streaming detector.

Writes ``timestamp,value,anomaly_score`` (score in [0, 1]) row by row as it reads, so it can sit at the
end of a pipe and so that the score of a row never depends on a later one (the NAB rules; bench/nab.py
scores the output on that benchmark). A timestamp is ISO 8601 (``2015-09-08 11:39:00``) or epoch seconds;
it is copied through as written. The first bad row (no header, a value that is not a finite number, a
timestamp that does not parse) stops the run with one line naming ``file:line`` and exit status 2; the
rows before it are already written.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from fabricwatch.detectors.series import SeriesDetector
from fabricwatch.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "detect-series",
        help="score a timestamp,value CSV for anomalies, streaming (no look-ahead)",
        description="Read timestamp,value rows (a header line first) and write timestamp,value,anomaly_score, "
        "the score in [0, 1] computed from that row and the rows before it only.",
    )
    p.add_argument("csv", type=Path, metavar="CSV", help="input: a header 'timestamp,value', then one row per sample")
    p.add_argument("--out", type=Path, metavar="CSV", help="output file (default: standard output)")
    p.set_defaults(run=run)


def _check_timestamp(text: str, place: str) -> None:
    try:
        float(text)
        return
    except ValueError:
        pass
    try:
        datetime.fromisoformat(text)
    except ValueError:
        raise InputError(place, f"timestamp {text!r} is neither ISO 8601 nor epoch seconds") from None


def read_rows(f: TextIO, name: str) -> Iterator[tuple[str, str, float]]:
    """``(timestamp text, value text, value)`` per data row; InputError naming ``name:line`` on the first bad one.

    The header is checked at once (before any output is opened); data rows are read lazily.
    """
    reader = csv.reader(f)
    header = next(reader, None)
    if header is None or [h.strip().lower() for h in header[:2]] != ["timestamp", "value"]:
        raise InputError(f"{name}:1", "expected the header 'timestamp,value'")
    return _data_rows(reader, name)


def _data_rows(reader: Any, name: str) -> Iterator[tuple[str, str, float]]:
    for row in reader:
        place = f"{name}:{reader.line_num}"
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) < 2:
            raise InputError(place, "expected two columns, timestamp and value")
        ts, text = row[0].strip(), row[1].strip()
        _check_timestamp(ts, place)
        try:
            value = float(text)
        except ValueError:
            raise InputError(place, f"value {text!r} is not a number") from None
        if not math.isfinite(value):
            raise InputError(place, f"value {text!r} is not a finite number")
        yield ts, text, value


def run(args: argparse.Namespace) -> int:
    if not args.csv.is_file():
        raise InputError(str(args.csv), "no such file")
    detector = SeriesDetector()
    with contextlib.ExitStack() as stack:
        f = stack.enter_context(args.csv.open(newline="", encoding="utf-8"))
        try:
            rows = read_rows(f, args.csv.name)
            out = stack.enter_context(args.out.open("w", newline="")) if args.out else sys.stdout
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(["timestamp", "value", "anomaly_score"])
            for ts, text, value in rows:
                writer.writerow([ts, text, f"{detector.update(value):.6f}"])
        except UnicodeDecodeError as exc:
            raise InputError(args.csv.name, f"not UTF-8 text ({exc.reason})") from None
    return 0

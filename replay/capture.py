"""Capture files (DESIGN §6): JSON Lines, gzip when the name ends in ``.gz``.

Line 1 is the header ``{"capture": "fabricwatch/v1", "topology": {...}, "truth": [...]}``; every other
line is one bus message ``{"topic", "key", "ts", "value"}``. Reading is forgiving: a bad line is
reported with its file and line number and skipped, a truncated file ends the stream with an error,
and every good line is still delivered.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec

from fabricwatch.errors import InputError
from fabricwatch.schema import Message
from fabricwatch.topology import Topology

CAPTURE_FORMAT = "fabricwatch/v1"


class _Line(msgspec.Struct):
    topic: str
    ts: float
    value: dict[str, Any]
    key: str | None = None


_ENCODER = msgspec.json.Encoder()
_LINE = msgspec.json.Decoder(_Line)
_ANY = msgspec.json.Decoder()


def _open(path: Path, mode: str, compresslevel: int = 3) -> IO[bytes]:
    if path.suffix == ".gz":
        if "w" in mode:  # mtime 0: the same capture gives the same bytes (the stored library stays unchanged)
            return gzip.GzipFile(path, mode + "b", compresslevel=compresslevel, mtime=0)
        return gzip.open(path, mode + "b")
    return open(path, mode + "b")


class CaptureWriter:
    """Writes a capture; use as a context manager."""

    def __init__(
        self,
        path: str | Path,
        topology: Topology,
        truth: list[dict[str, Any]] | None = None,
        extra: dict[str, Any] | None = None,
        compresslevel: int = 3,
    ) -> None:
        """``extra``: more header fields (``notes`` of a recorded capture), kept by cut, filter and label.
        ``compresslevel`` (gzip): 3 writes fast; the stored library uses 9."""
        self.path = Path(path)
        try:
            self._file = _open(self.path, "w", compresslevel)
        except OSError as exc:
            raise InputError(str(path), f"cannot write: {exc.strerror or exc}") from None
        header: dict[str, Any] = {**(extra or {}), "capture": CAPTURE_FORMAT, "topology": topology.to_dict()}
        if truth is not None:
            header["truth"] = truth
        self._file.write(_ENCODER.encode(header) + b"\n")
        self.lines = 1

    def write(self, topic: str, key: str | None, ts: float, value: Message | dict[str, Any]) -> None:
        self._file.write(_ENCODER.encode({"topic": topic, "key": key, "ts": ts, "value": value}) + b"\n")
        self.lines += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(slots=True)
class CapturedRecord:
    line: int
    topic: str
    key: str | None
    ts: float
    value: dict[str, Any]


@dataclass
class Capture:
    """An open capture: its header, and an iterator over its records that collects errors."""

    path: Path
    topology: Topology
    truth: list[dict[str, Any]] | None
    header: dict[str, Any]
    errors: list[InputError] = field(default_factory=list)
    _file: IO[bytes] | None = None

    @property
    def extra(self) -> dict[str, Any]:
        """Header fields beyond the format, topology and truth (for example ``notes``)."""
        return {k: v for k, v in self.header.items() if k not in ("capture", "topology", "truth")}

    def records(self) -> Iterator[CapturedRecord]:
        assert self._file is not None
        line_no = 1
        try:
            for raw in self._file:
                line_no += 1
                if not raw.strip():
                    continue
                try:
                    line = _LINE.decode(raw)
                except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                    what = "truncated line" if not raw.endswith(b"\n") else f"malformed record: {exc}"
                    self.errors.append(InputError(f"{self.path}:{line_no}", what))
                    continue
                yield CapturedRecord(line_no, line.topic, line.key, line.ts, line.value)
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
            reason = "file ends early (truncated gzip)" if isinstance(exc, EOFError) else f"unreadable: {exc}"
            self.errors.append(InputError(f"{self.path}:{line_no + 1}", f"{reason}; {line_no - 1} lines read"))
        finally:
            self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def open_capture(path: str | Path) -> Capture:
    """Open a capture and check its header; raises InputError naming the file and line 1."""
    path = Path(path)
    place = f"{path}:1"
    try:
        f = _open(path, "r")
        first = f.readline()
    except FileNotFoundError:
        raise InputError(str(path), "no such file") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(place, f"unreadable capture header: {exc}") from None
    try:
        header = _ANY.decode(first)
    except msgspec.DecodeError as exc:
        f.close()
        raise InputError(place, f"header is not JSON: {exc}") from None
    if not isinstance(header, dict) or header.get("capture") != CAPTURE_FORMAT:
        f.close()
        found = header.get("capture") if isinstance(header, dict) else type(header).__name__
        raise InputError(place, f'not a fabricwatch capture (header "capture" is {found!r}, want {CAPTURE_FORMAT!r})')
    try:
        topology = Topology.from_dict(header.get("topology"), place=f"{place} topology")
    except InputError:
        f.close()
        raise
    truth = header.get("truth")
    if truth is not None and not isinstance(truth, list):
        f.close()
        raise InputError(place, "'truth' must be a list of faults")
    return Capture(path, topology, truth, header, _file=f)

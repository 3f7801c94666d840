"""The collect loop: scrape a source on a clock, number and send its messages, count what failed.

Time comes from an injected clock and waiting from an injected ``sleep`` (the wall clock and
``time.sleep`` in production, a virtual clock in tests), so a test runs an hour of scrapes at once.
Scrapes keep a fixed grid (start + k·interval); a scrape that overruns skips the ticks it missed
rather than bunching up. ``seq`` rises by one per message of each (source, kind), DESIGN §3.

A failed scrape never stops the loop: it is counted by reason (fetch.REASONS), and one line on stderr
names the source and what went wrong; the same error again is not repeated on every scrape (it is
reported when it changes, and once when the source recovers). Messages the schema would reject are
not sent (a dead letter downstream helps no one) and count as "invalid". Module rows (identity and
thresholds, DESIGN §3) are sent when they change and every ``module_every_s``, not on every scrape.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TextIO

import msgspec

from fabricwatch import schema
from fabricwatch.clock import Clock
from fabricwatch.collectors.base import Source
from fabricwatch.collectors.fetch import PartialScrape, ScrapeError
from fabricwatch.errors import InputError
from fabricwatch.schema import Message
from fabricwatch.stream.bus import Bus
from fabricwatch.stream.keys import outgoing_batched

if TYPE_CHECKING:
    from fabricwatch.topology import Topology


class Sink(Protocol):
    def send(self, messages: list[Message]) -> None: ...


class BusSink:
    """Produces a scrape's messages to ``fabricwatch.telemetry.<kind>`` keyed by fault domain (stream.keys:
    by source without a ``topology``; one record per kind and key), then flushes."""

    def __init__(self, bus: Bus, topology: Topology | None = None) -> None:
        self.bus = bus
        self.topology = topology

    def send(self, messages: list[Message]) -> None:
        records = outgoing_batched(messages, self.topology)
        if records:
            self.bus.produce(records)
            self.bus.flush()


class JsonLinesSink:
    """One message per line in the schema's JSON form (what ``fabricwatch parse`` prints)."""

    def __init__(self, stream: object) -> None:
        self.stream = stream  # a binary stream
        self._encoder = msgspec.json.Encoder()

    def send(self, messages: list[Message]) -> None:
        for m in messages:
            self.stream.write(self._encoder.encode(m) + b"\n")  # type: ignore[attr-defined]
        self.stream.flush()  # type: ignore[attr-defined]


class ScrapeObserver(Protocol):
    def scraped(self, source: str, messages: list[Message], failure: str | None) -> None: ...


@dataclass
class RunStats:
    scrapes: int = 0
    failed: dict[str, int] = field(default_factory=dict)  # reason -> count
    messages: int = 0


class Runner:
    def __init__(
        self,
        source: Source,
        sink: Sink,
        clock: Clock,
        sleep: Callable[[float], None],
        *,
        name: str,
        interval_s: float,
        duration_s: float | None = None,
        module_every_s: float = 300.0,
        observer: ScrapeObserver | None = None,
        log: TextIO | None = None,
    ) -> None:
        self.source, self.sink, self.clock, self.sleep = source, sink, clock, sleep
        self.name = name
        self.interval_s = interval_s
        self.duration_s = duration_s
        self.module_every_s = module_every_s
        self.observer = observer
        self.log = log or sys.stderr
        self.stats = RunStats()
        self._seq: dict[tuple[str, str], int] = {}
        self._module_sent: dict[str, tuple[float, dict]] = {}
        self._last_error: str | None = None
        self._repeats = 0

    # --- the loop ---------------------------------------------------------------------------------

    def run(self) -> RunStats:
        start = self.clock.now()
        k = 0
        while True:
            self.scrape_once(self.clock.now())
            k += 1
            now = self.clock.now()
            if start + k * self.interval_s <= now:  # overran: skip the ticks already missed
                k = math.floor((now - start) / self.interval_s) + 1
            next_t = start + k * self.interval_s
            if self.duration_s is not None and next_t >= start + self.duration_s:
                return self.stats
            self.sleep(max(0.0, next_t - self.clock.now()))

    def scrape_once(self, now: float) -> list[Message]:
        """One scrape: read, filter, number, validate, send. Returns what was sent."""
        self.stats.scrapes += 1
        failure: InputError | Exception | None = None
        reason: str | None = None
        try:
            messages = self.source.scrape(now)
        except PartialScrape as exc:
            messages, failure, reason = exc.messages, exc, exc.reason
        except ScrapeError as exc:
            messages, failure, reason = [], exc, exc.reason
        except InputError as exc:
            messages, failure, reason = [], exc, "unparseable"
        except Exception as exc:  # a bug in a parser must not stop a 3 a.m. collector
            messages, failure, reason = [], exc, "error"
        messages, invalid = self._validate(self._throttle_modules(messages, now))
        if invalid and failure is None:
            failure, reason = InputError(self.name, invalid), "invalid"
        for m in messages:
            key = (m.source, m.kind)
            m.seq = self._seq.get(key, -1) + 1
            self._seq[key] = m.seq
        if messages:
            self.sink.send(messages)
            self.stats.messages += len(messages)
        if reason is not None:
            self.stats.failed[reason] = self.stats.failed.get(reason, 0) + 1
        self._report(failure, reason)
        if self.observer is not None:
            self.observer.scraped(self.name, messages, reason)
        return messages

    # --- helpers ----------------------------------------------------------------------------------

    def _throttle_modules(self, messages: Iterable[Message], now: float) -> list[Message]:
        out = []
        for m in messages:
            if m.kind == "module":
                last = self._module_sent.get(m.source)
                if last is not None and last[1] == m.rows and now - last[0] < self.module_every_s:
                    continue
                self._module_sent[m.source] = (now, m.rows)
            out.append(m)
        return out

    def _validate(self, messages: list[Message]) -> tuple[list[Message], str | None]:
        good, problems = [], []
        for m in messages:
            try:
                schema.check_header(m)
                rejected = schema.to_table(m.kind, [m]).rejected
            except schema.SchemaError as exc:
                rejected = [(0, str(exc))]
            if rejected:
                problems.append(f"{m.kind} message not sent: {rejected[0][1]}")
            else:
                good.append(m)
        return good, ("; ".join(problems) if problems else None)

    def _report(self, failure: BaseException | None, reason: str | None) -> None:
        if failure is None:
            if self._last_error is not None:
                extra = f" ({self._repeats} more failed scrapes since)" if self._repeats else ""
                print(f"fabricwatch collect: {self.name}: scraping again{extra}", file=self.log)
            self._last_error, self._repeats = None, 0
            return
        text = str(failure) if isinstance(failure, InputError) else f"{type(failure).__name__}: {failure}"
        if not text.startswith(self.name):
            text = f"{self.name}: {text}"
        if text == self._last_error:
            self._repeats += 1
            return
        if self._repeats:
            print(f"fabricwatch collect: ({self._repeats} more failed scrapes as above)", file=self.log)
        print(f"fabricwatch collect: {text} [{reason}]", file=self.log, flush=True)
        self._last_error, self._repeats = text, 0

"""Change tickets from a file that change management writes, re-read while the service runs.

A switch down whose outage begins inside one of its change tickets is planned: held, never paged
(detectors/correlate.py). Tickets in the engine config are fixed at start, but maintenance is filed
all day, so stage 2 (``serve``'s ``tickets: FILE``, ``fabricwatch correlate --tickets FILE``) also
reads them from a file and re-reads it when it changes, without a restart. The file is a YAML list::

    - {switch: leaf03, start: 2026-12-01T22:00:00Z, end: 2026-12-01T22:45:00Z}
    - {switch: spine01, start: 1796162400, end: 1796164200}   # epoch seconds

A time without a zone is UTC (YAML 1.1's timestamp type says so). A file that cannot be read at start
fails the start with its file and line; one that turns bad later is logged once with its file and
line and the tickets read last stay in force: a half-written file never cancels a planned window.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fabricwatch import yamlconf
from fabricwatch.detectors.config import MaintenanceWindow
from fabricwatch.errors import InputError

log = logging.getLogger("fabricwatch.tickets")

RELOAD_EVERY_S = 5.0  # how often the file is looked at: a ticket filed minutes ahead is in force in time


def read(path: Path) -> list[MaintenanceWindow]:
    """The tickets of the file; an InputError names the file and line of the first problem."""
    data = yamlconf.load(path)
    if data is None:
        return []  # an empty file: no tickets
    if not isinstance(data, list):
        raise InputError(str(path), "must be a list of tickets (- {switch: ..., start: ..., end: ...})")
    out = []
    for item in data:
        if isinstance(item, dict):  # freshly loaded: its times become epoch seconds in place
            for key in ("start", "end"):
                if isinstance(item.get(key), dt.datetime | dt.date):
                    item[key] = _epoch(item[key])
        out.append(yamlconf.convert(item, MaintenanceWindow, str(path)))  # names the item's line
    return out


def _epoch(when: dt.date) -> float:
    if not isinstance(when, dt.datetime):
        when = dt.datetime(when.year, when.month, when.day)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


class TicketsFile:
    """A tickets file and what was read from it last; :meth:`changed` re-reads it when it changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tickets = read(path)  # a bad file at start is the caller's error
        self._seen = self._stamp()

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def changed(self) -> list[MaintenanceWindow] | None:
        """The tickets, if the file changed since it was last read; None if unchanged, or if it is now
        unreadable (logged once per change of the file; the tickets read last stay)."""
        stamp = self._stamp()
        if stamp == self._seen:
            return None
        self._seen = stamp
        try:
            tickets = read(self.path)
        except InputError as exc:
            log.error("change tickets not reloaded, the %d read before stay: %s", len(self.tickets), exc)
            return None
        log.info("change tickets: %d from %s (were %d)", len(tickets), self.path, len(self.tickets))
        self.tickets = tickets
        return tickets


def watch(
    tickets: TicketsFile,
    apply: Callable[[list[MaintenanceWindow]], Any],
    stop: threading.Event,
    every_s: float = RELOAD_EVERY_S,
) -> threading.Thread:
    """A daemon thread that hands ``apply`` the file's tickets each time it changes, until ``stop``."""

    def loop() -> None:
        while not stop.wait(every_s):
            new = tickets.changed()
            if new is not None:
                apply(new)

    thread = threading.Thread(target=loop, name="fabricwatch-tickets", daemon=True)
    thread.start()
    return thread

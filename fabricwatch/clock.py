"""Clocks: detection reads time from one of these, never from ``time.time()``.

A replay runs on a :class:`VirtualClock` that follows the telemetry, so the same capture gives the
same incidents on every run; a live service runs on :class:`WallClock`.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def advance_to(self, t: float) -> None:
        """Move to ``t`` if that is later (a virtual clock follows the data; a wall clock ignores it)."""
        ...


class WallClock:
    """The host's clock; only services at the edge of the system use it."""

    def now(self) -> float:
        return time.time()

    def advance_to(self, t: float) -> None:
        """Real time moves by itself."""


class VirtualClock:
    """A clock that moves only when told to, and never backwards."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        if t > self._now:
            self._now = float(t)

"""Stage 2's clock: findings from every processor, joined per tick, handed to correlation in tick order.

Each stage-1 processor ("source") runs detection on a grid of telemetry time and, after each tick
``T``, publishes that tick's findings and a tick mark saying how many it published
(stream/findings.py). Findings are keyed by entity, so they arrive over many partitions in any order.
Stage 2 closes tick ``T`` (runs correlation and the incident tracker over every finding of ticks
≤ ``T``, at ``now = T + grace_s``) once

* every active source has marked a tick ≥ ``T``, and
* for every mark of tick ``T``, all the findings it announced have arrived;

or, bounded lateness, once the newest mark is more than ``stall_s`` past ``T``. A source whose newest
mark is more than ``stall_s`` behind the newest of all is quiet (stopped, or its partitions moved to
another processor) and not waited for. A finding of a tick already closed is late: counted, dropped.
A source is known from its first mark, even one of a tick already closed (a processor that starts
behind the others), and waited for from the next open tick on.

Step ticks (``EngineConfig.step_tick``): a stage 1 also runs its step detectors halfway between two
ticks and publishes their findings and mark flagged ``step`` (stream/findings.py). Stage 2 closes a
step tick ``t`` the same way (every active source has marked ``t`` or later; every step mark of ``t``
has its findings) before the tick after it, and hands its findings to the engine's ``run_step``, which
opens step incidents only. A source that runs no step ticks sends no step mark and is waited for by
none. A step finding after its step tick closed, or after the tick after it, is late.

Nothing here reads a wall clock: the same findings and marks, in any interleaving of partitions
that keeps each source within ``stall_s`` of the others, give the same incidents byte for byte.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from fabricwatch.errors import InputError
from fabricwatch.incident import Incident
from fabricwatch.records import Finding
from fabricwatch.stream.findings import Found, TickMark, encode, from_json, to_json

log = logging.getLogger("fabricwatch.stage2")

STATE_VERSION = 1


class Correlating(Protocol):
    """What stage 2 needs of correlation (fabricwatch.detectors.stage.Stage2)."""

    @property
    def every_s(self) -> float: ...

    def run(self, findings: list[Finding], now: float) -> list[Incident]: ...

    def snapshot(self) -> dict[str, Any]: ...

    def restore(self, state: dict[str, Any]) -> None: ...


class Joiner:
    """Buffers findings per tick and closes ticks in order (see the module docstring).

    Its state, saved on every batch, holds only what is still open: a closed tick's findings and
    counts leave it (:meth:`_close`), and so does a quiet source (:meth:`close_due`), so it does not
    grow with the months a stage 2 runs. The engine bounds its own (``Stage2(prune=True)``)."""

    def __init__(self, engine: Correlating, *, grace_s: float = 1.0, stall_s: float = 300.0) -> None:
        if not stall_s > 0:
            raise InputError("stall", "must be a number of seconds > 0")
        self.engine = engine
        self.grace_s = grace_s
        self.stall_s = stall_s
        self._found: dict[float, dict[bytes, Finding]] = {}  # tick -> its findings, de-duplicated by content
        self._received: dict[tuple[str, float], int] = {}  # (source, tick) -> findings arrived
        self._expected: dict[tuple[str, float], int] = {}  # (source, tick) -> findings its mark announced
        self.latest: dict[str, float] = {}  # source -> its newest tick mark
        self.next_tick: float | None = None  # the first tick not yet closed
        self.late = 0  # findings that came after their tick was closed
        self.ticks = 0  # ticks closed
        self._judged: list[tuple[float, Finding]] = []  # (now, finding) its judges made: :meth:`take_judged`
        # step ticks: their findings, counts and marks as the ticks' above; the newest step tick closed
        self._step_found: dict[float, dict[bytes, Finding]] = {}
        self._step_received: dict[tuple[str, float], int] = {}
        self._step_expected: dict[tuple[str, float], int] = {}
        self.step_closed: float | None = None

    @property
    def watermark(self) -> float | None:
        """The newest tick any source has marked: stage 2's notion of now."""
        return max(self.latest.values()) if self.latest else None

    def add(self, item: Found | TickMark) -> None:
        if isinstance(item, TickMark) and item.source not in self.latest:
            # A source's first mark makes it known, even of a tick already closed: a processor that
            # started a tick behind the others had each of its marks dropped as late, so it never
            # became known, no tick waited for it, and all its findings came late (bench/scale.py).
            self.latest[item.source] = item.ts
        if item.step:
            self._add_step(item)
            return
        if self.next_tick is not None and item.ts < self.next_tick:
            if isinstance(item, Found):
                self.late += 1
                log.warning("late finding %s %s of tick %.0f (closed up to %.0f): dropped",
                            item.finding.symptom, item.finding.id, item.ts, self.next_tick)  # fmt: skip
            return
        self._file(item, self._found, self._received, self._expected)

    def _add_step(self, item: Found | TickMark) -> None:
        """A step tick's finding or mark (see the module docstring)."""
        closed = self.step_closed is not None and item.ts <= self.step_closed
        if closed or (self.next_tick is not None and item.ts < self.next_tick - self.engine.every_s):
            if isinstance(item, Found):
                self.late += 1
                log.warning("late step finding %s %s of step tick %.0f: dropped",
                            item.finding.symptom, item.finding.id, item.ts)  # fmt: skip
            return
        self._file(item, self._step_found, self._step_received, self._step_expected)

    def _file(
        self,
        item: Found | TickMark,
        found: dict[float, dict[bytes, Finding]],
        received: dict[tuple[str, float], int],
        expected: dict[tuple[str, float], int],
    ) -> None:
        """Keep a tick's (or a step tick's) finding or mark in its tables."""
        if isinstance(item, TickMark):
            self.latest[item.source] = max(self.latest.get(item.source, item.ts), item.ts)
            expected[(item.source, item.ts)] = item.findings
            return
        found.setdefault(item.ts, {})[encode(item.ts, item.finding)] = item.finding
        if item.source is not None:
            key = (item.source, item.ts)
            received[key] = received.get(key, 0) + 1

    def close_due(self, until: float | None = None) -> list[Incident]:
        """Close every tick before ``until`` (None: any) that is complete (or past ``stall_s``): a caller
        that knows findings of unknown sources may wait from ``until`` on (stage 2 with a partition not
        read yet) says so. Returns every change of an incident they made,
        in the order a tick at a time would give them: tick by tick, by id within a tick. An incident that
        opens and resolves in the ticks of one call (stage 2 catching up) is in it twice, opened, then
        resolved: what is published does not depend on how many ticks one batch closes."""
        newest = self.watermark
        if newest is None:
            return []
        # A quiet source is waited for by no tick until it marks again, which adds it back (``add``),
        # and is never the newest: forgetting it changes nothing, and sources that come and go (a
        # processor's default name holds its host's, which a pod gets anew at each restart) do not
        # pile up in the state.
        for source in [s for s, t in self.latest.items() if t < newest - self.stall_s]:
            del self.latest[source]
        if self.next_tick is None:
            full = [*self._found, *(t for _, t in self._expected)]
            if not full and (self._step_found or self._step_expected):
                return []  # only step ticks so far: the grid starts with a tick's (a step tick's is off it)
            self.next_tick = min(full, default=newest)
        changes: list[Incident] = []
        while True:
            step = min([*self._step_found, *(t for _, t in self._step_expected)], default=None)
            if step is not None and step < self.next_tick:  # the step tick before the next tick comes first
                if until is not None and step >= until:
                    break
                if not self._complete(step, newest, step=True) and newest - step <= self.stall_s:
                    break
                changes += sorted(self._close_step(step), key=lambda i: i.id)
                continue
            if until is not None and self.next_tick >= until:
                break
            tick = self.next_tick
            if tick > newest or (not self._complete(tick, newest) and newest - tick <= self.stall_s):
                break
            changes += sorted(self._close(tick), key=lambda i: i.id)
            self.next_tick = tick + self.engine.every_s
        return changes

    def _complete(self, tick: float, newest: float, step: bool = False) -> bool:
        active = {s for s, t in self.latest.items() if t >= newest - self.stall_s}
        if any(self.latest[s] < tick for s in active):
            return False
        received, expected = (self._step_received, self._step_expected) if step else (self._received, self._expected)
        return all(received.get((s, t), 0) >= n for (s, t), n in expected.items() if t == tick and s in active)

    def _close_step(self, tick: float) -> list[Incident]:
        """Close step tick ``tick``: its findings, in :meth:`_close`'s order, to the engine's ``run_step``."""
        found = self._step_found.pop(tick, {})
        items = sorted(((f.entity, f.id, f.symptom, f.detector), key, f) for key, f in found.items())
        for table in (self._step_received, self._step_expected):
            for key in [k for k in table if k[1] <= tick]:
                del table[key]
        self.step_closed = tick
        run = getattr(self.engine, "run_step", None)
        if run is None or not items:
            return []
        return run([f for _, _, f in items], tick + self.grace_s)

    def _close(self, tick: float) -> list[Incident]:
        items: list[tuple[tuple, bytes, Finding]] = []
        for t in sorted(t for t in self._found if t <= tick):
            items += [((f.entity, f.id, f.symptom, f.detector), key, f) for key, f in self._found.pop(t).items()]
        # one order whatever the arrival (the correlator's, then content): it breaks ties by input order
        findings = [f for _, _, f in sorted(items, key=lambda i: (i[0], i[1]))]
        for table in (self._received, self._expected):
            for key in [k for k in table if k[1] <= tick]:
                del table[key]
        self.ticks += 1
        changed = self.engine.run(findings, tick + self.grace_s)
        self._judged += [(tick + self.grace_s, f) for f in getattr(self.engine, "judged", ())]
        for error in getattr(self.engine, "errors", ()):  # a judge failing (Stage2.errors); the rest ran
            log.warning("stage 2 tick %.0f: judge %s", tick, error)
        return changed

    def take_judged(self) -> list[tuple[float, Finding]]:
        """The findings the engine's judges made (``Stage2.judged``: a loop warmer than its peers) in the
        ticks closed since the last call, each with its tick's ``now``; stage 2 stores them, as one
        process stores its findings: no stage 1 has them. Not state: taken with each batch."""
        out, self._judged = self._judged, []
        return out

    # --- state (stored with the offsets it covers) ----------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "engine": self.engine.snapshot(),
            "found": [[t, [to_json(t, f) for _, f in sorted(fs.items())]] for t, fs in sorted(self._found.items())],
            "received": [[s, t, n] for (s, t), n in sorted(self._received.items())],
            "expected": [[s, t, n] for (s, t), n in sorted(self._expected.items())],
            "latest": dict(sorted(self.latest.items())),
            "next_tick": self.next_tick,
            "late": self.late,
            "ticks": self.ticks,
            "step_found": [
                [t, [to_json(t, f) for _, f in sorted(fs.items())]] for t, fs in sorted(self._step_found.items())
            ],
            "step_received": [[s, t, n] for (s, t), n in sorted(self._step_received.items())],
            "step_expected": [[s, t, n] for (s, t), n in sorted(self._step_expected.items())],
            "step_closed": self.step_closed,
        }

    def restore(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise InputError("stage 2 state", f"expected a version {STATE_VERSION} stage 2 state")
        self.engine.restore(state["engine"])
        self._found = {}
        for t, findings in state["found"]:
            for d in findings:
                tick, f = from_json(d)
                self._found.setdefault(float(t), {})[encode(tick, f)] = f
        self._received = {(s, float(t)): int(n) for s, t, n in state["received"]}
        self._expected = {(s, float(t)): int(n) for s, t, n in state["expected"]}
        self.latest = {s: float(t) for s, t in state["latest"].items()}
        self.next_tick = None if state["next_tick"] is None else float(state["next_tick"])
        self.late = int(state["late"])
        self.ticks = int(state["ticks"])
        self._step_found = {}  # a state from before step ticks has none of the step_* keys
        for t, findings in state.get("step_found", []):
            for d in findings:
                tick, f = from_json(d)
                self._step_found.setdefault(float(t), {})[encode(tick, f)] = f
        self._step_received = {(s, float(t)): int(n) for s, t, n in state.get("step_received", [])}
        self._step_expected = {(s, float(t)): int(n) for s, t, n in state.get("step_expected", [])}
        closed = state.get("step_closed")
        self.step_closed = None if closed is None else float(closed)

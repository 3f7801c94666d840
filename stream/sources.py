"""What the processor knows of each source: its clock offset, its cadence, and the watermark over them.

A message's ``ts`` is stamped by its source's clock, which may be off by seconds or minutes
(REALISM.md, Collectors). Detection must not advance on the newest ``ts`` seen, or one fast clock runs
every tick ahead of the other sources' data and blinds it. So, per source, in arrival order:

* Offset. When a message arrives, the reference time is where the other live sources' clocks agree
  (Marzullo's intersection, the selection step of NTP, RFC 5905 §11.2.1). Each source with a known
  cadence whose clock reads right (its estimate within its own scrape interval) says that now lies
  between its latest ``ts`` and that stamp plus its cadence, as its next scrape has not arrived yet;
  the reference is the middle of the narrowest span that most of those intervals share, so a minority
  of skewed sources cannot move it. The median of the latest stamps, used before, stalled between the
  scrapes of slow sources: with switches scraped every 30 or 60 s it froze for their whole interval
  while a host's stamps moved on, and a host 60 s fast read anywhere from 58 to 83 s.
  - A clock that reads off is no reference, corrected or not: corrected, it is only as good as its own
    estimate (two hosts measured against each other's corrections pulled each other by ten seconds);
    uncorrected (off by less than a tick, below), a host 8 s fast moved another's reference by 8 s.
  - Live: its latest ``ts`` within ``lateness_s`` (the watermark's bound on lateness) of the middle
    source's. A silent source's frozen stamp must not count: with half the fleet silent (two sources,
    one silent) the reference would fall ever further behind the live sources, whose offsets would
    then grow without end and pull their stamps back.
  - A source is not measured while no other is live (against itself it reads its own gap plus its own
    correction), nor while no majority agrees (two sources a minute apart: nothing tells which is
    right); its offset stays.
  - The offset is the median of the source's last :data:`OFFSET_SAMPLES` (``ts`` − reference), one
    per scrape (its first message: the others of a scrape only repeat its phase, and measuring them
    doubled this bookkeeping's cost), reported from :data:`MIN_SAMPLES` on. The middle of the agreed
    span is as likely early as late, so no bias is taken out (the median source's own estimate was,
    when the reference was the median of stamps that lag; in a small fleet that source is a switch
    whose polls are stamped seconds late, and it added 3 to 10 s to a host 60 s fast).
  - Resolution: a sample is good to about the source's own scrape interval (its stamp's phase) or the
    width of the span the others agree on, whichever is larger (medians over its samples), and never
    finer than detection's tick (``min_resolution_s``): a clock off by less moves its rows by at most a
    tick, which the windows' recent span (three ticks) absorbs.
  - An estimate is applied only when it exceeds two resolutions; below that, ``ts`` is trusted. (The
    bound was two of the fleet's median intervals: 60 s in a small fleet whose median source is a
    switch scraped every 30 s, exactly the skew of a host 60 s fast.)
  - Hysteresis: the applied offset changes only on a full set of samples that agree to half that
    bound; it is then dropped only when the estimate falls under half the bound, and moved only when
    the estimate leaves it by more than half the bound, as arrival order cannot tell smaller moves
    from noise. The processor takes a source's applied offset out of all its buffered rows when it
    cuts a window (stream/window.py), so a change moves every row of the source together and their
    order holds; but its detectors then see its events move, once or twice (a host 8 s fast, corrected
    at 10 s and then not, read one link-down as a flap; a host 60 s fast, corrected by 72 s on its
    first samples and by 59 s a minute later, read one link-down twice), so changes must be rare.
  - The estimate is exported (``offsets``) for ``fabricwatch_source_clock_offset_seconds``.
* Cadence. The median gap between the source's distinct ``ts`` (per kind; the source's fastest kind,
  module messages excluded, as they are sent on change and every few minutes).
* Watermark. Each live stream (a source's kind: its own topic, delivered on its own) promises its
  data up to its corrected latest ``ts`` plus its interval (its next scrape is not due before then);
  the watermark is the least of these promises over the live streams: detection waits for the
  slowest source. A source whose promise lags the reference by
  more than ``lateness_s`` is late or silent and no longer holds detection back (liveness findings
  report it: detectors/liveness.py).

Pure bookkeeping over what arrived, no wall clock: the same arrival order gives the same offsets and
watermark, live and in replay.
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field

OFFSET_SAMPLES = 9  # median of the last 9 scrapes: one late or early stamp (jitter) cannot move it
MIN_SAMPLES = 3  # a source's offset is not reported on fewer scrapes than this
# Marzullo's search tries up to this many intervals left out before it gives up (and the source is not
# measured at that arrival): a bound on its cost, O(n²) in what it leaves out. Beyond it, more than 16
# of the fleet's sources disagree with the rest at once, and no reference is worth a sample then.
MAX_LEFT_OUT = 16
INTERVAL_SAMPLES = 9
NO_CADENCE_KINDS = frozenset({"module"})  # sent at start, on change and every few minutes (DESIGN §3)


@dataclass
class SourceState:
    samples: deque[float] = field(default_factory=lambda: deque(maxlen=OFFSET_SAMPLES))
    widths: deque[float] = field(default_factory=lambda: deque(maxlen=OFFSET_SAMPLES))  # of their spans
    last_raw: dict[str, float] = field(default_factory=dict)  # kind -> newest raw ts
    gaps: dict[str, deque[float]] = field(default_factory=dict)  # kind -> recent gaps between distinct ts
    offset: float = 0.0  # applied correction (0 until significant)
    estimate: float = 0.0  # median of (ts - reference) at arrival: the offset, exported whether applied or not
    latest: float | None = None  # newest corrected ts over every kind
    cadence: float | None = None  # the fastest kind's median gap (None: fewer than two distinct ts)
    cadences: dict[str, float] = field(default_factory=dict)  # kind -> its median gap
    newest: float = 0.0  # newest raw ts over its kinds, modules aside (modules only: theirs)
    promises: dict[str, tuple[float, str, str]] = field(default_factory=dict)  # kind -> its watermark entry
    span: tuple[float, float] | None = None  # its entry among the intervals: (latest, latest + cadence)

    def resolution(self, floor: float) -> float:
        """How finely its samples can place its clock, never finer than ``floor`` (module docstring);
        0 until it has a cadence and a sample."""
        if self.cadence is None or not self.widths:
            return 0.0
        return max(self.cadence, _median(self.widths), floor)

    def _recount(self) -> None:
        self.cadences = {k: statistics.median(g) for k, g in self.gaps.items() if g and k not in NO_CADENCE_KINDS}
        self.cadence = min(self.cadences.values()) if self.cadences else None


def _middle(ordered: list[float], lo: int) -> float | None:
    """The median of ``ordered[lo:]`` (sorted), without copying the slice; None when it is empty."""
    n = len(ordered) - lo
    if n <= 0:
        return None
    mid = lo + n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _median(values: deque[float]) -> float:
    """statistics.median, without its generality (a few hundred thousand calls a minute at scale)."""
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


class SourceClocks:
    """Per-source offsets, cadences and the watermark over sources (see the module docstring)."""

    def __init__(self, lateness_s: float = 30.0, min_resolution_s: float = 0.0) -> None:
        # How long detection waits for a source whose data is overdue before it runs without it: the
        # bound on lateness. 30 s is the engine's default recent_s, the span detectors judge "now" over.
        self.lateness_s = lateness_s
        self.min_resolution_s = min_resolution_s  # detection's tick: finer corrections are not made
        self.sources: dict[str, SourceState] = {}
        self._latest: list[float] = []  # every source's latest, sorted: the reference is its middle
        # the intervals now lies in, one per source with a cadence (its latest, latest + cadence): the
        # starts and the ends, each sorted, for Marzullo's intersection (_agreement)
        self._starts: list[float] = []
        self._ends: list[float] = []
        self._wm: float | None = None
        self._wm_holder: str | None = None  # the source holding the watermark back
        self._wm_stale = True
        self._observed = 0
        # every stream's (promise, source, kind), sorted: the watermark is the first at or past the
        # reference less the lateness, found by bisection rather than a pass over every stream
        self._promises: list[tuple[float, str, str]] = []

    # --- arrivals ------------------------------------------------------------------------------------

    def reference(self) -> float | None:
        """The median of every source's latest corrected ``ts``, silent ones too: what the watermark
        judges lateness against."""
        return _middle(self._latest, 0)

    def _live_from(self) -> int | None:
        """Where the live sources start in the sorted latest stamps; None before any."""
        n = len(self._latest)
        return bisect.bisect_left(self._latest, self._latest[n // 2] - self.lateness_s) if n else None

    def _reference_for(self, state: SourceState, own: tuple[float, float] | None) -> tuple[float, float] | None:
        """The clock reference to measure this source against: where the other live sources agree now
        is (:meth:`_agreement`). Live: within ``lateness_s`` of the middle source's latest (the upper
        middle of an even count, so that with half the fleet silent the bound moves with the live half,
        not with the mean of both halves); the sources past it are the head of the sorted latest
        stamps, found by bisection. With two sources, a clock more than ``lateness_s`` behind the other
        reads as silent until its first estimate is applied: stamps alone cannot tell the two apart.

        None when no other source is live: a source alone in the reference measures only its own
        scrape gap plus its own correction, a loop that would drive its offset without bound. None too
        when no majority agrees. Its offset then stays as last estimated. ``own`` is the source's
        interval from its previous message: a vote (between one other source and a third that
        disagree, it tells which of them is right), never part of the span, so a source's correction
        cannot feed back into its own reference."""
        lo = self._live_from()
        if lo is None:
            return None
        cutoff = self._latest[lo]
        live_self = state.latest is not None and state.latest >= cutoff
        if len(self._latest) - lo <= live_self:
            return None
        return self._agreement(cutoff, own)

    def _agreement(self, cutoff: float, own: tuple[float, float] | None) -> tuple[float, float] | None:
        """Marzullo's intersection over the other live intervals: the middle and width of the narrowest
        span that all but the fewest of them share, where they and ``own`` (a vote) are a majority of
        the live sources (two sources that disagree have none: nothing tells which of them is right);
        None when no span is, within :data:`MAX_LEFT_OUT` left out. Leaving ``k`` starts and ``j``
        ends out, the span is from the ``k+1``-th latest start to the ``j+1``-th earliest end: O(1)
        on the sorted lists. Intervals that ended before ``cutoff`` are silent sources' and are not
        counted."""
        starts, ends = self._starts, self._ends
        first_end = bisect.bisect_left(ends, cutoff)
        n = min(len(starts) - bisect.bisect_left(starts, cutoff), len(ends) - first_end)
        for left_out in range(min(n, MAX_LEFT_OUT + 1)):
            best: tuple[int, float, float, float] | None = None  # (-votes, width, lo, hi)
            for k in range(left_out + 1):
                lo, hi = starts[-1 - k], ends[first_end + left_out - k]
                if lo > hi:
                    continue
                votes = n - left_out + (own is not None and own[0] <= hi and lo <= own[1])
                candidate = (-votes, hi - lo, lo, hi)
                if best is None or candidate < best:
                    best = candidate
            if best is not None:
                if 2 * -best[0] <= n + (own is not None):
                    return None  # the widest agreement is no majority: leaving more out cannot be one
                return (best[2] + best[3]) / 2, best[1]
        return None

    def observe(self, source: str, kind: str, ts: float) -> None:
        """One message's arrival (in arrival order)."""
        state = self.sources.get(source)
        if state is None:
            state = self.sources[source] = SourceState()
            self._wm_stale = True
        # a new scrape is measured; its other messages (kinds) only repeat its phase
        scrape = kind not in NO_CADENCE_KINDS and ts > state.newest
        if scrape:
            own = state.span
            self._unspan(state)
            agreed = self._reference_for(state, own)
            if agreed is not None:
                state.samples.append(ts - agreed[0])
                state.widths.append(agreed[1])
                if len(state.samples) >= MIN_SAMPLES:
                    state.estimate = _median(state.samples)
        prev = state.last_raw.get(kind)
        moved = prev is None or ts > prev
        if moved:
            if prev is not None:
                state.gaps.setdefault(kind, deque(maxlen=INTERVAL_SAMPLES)).append(ts - prev)
                state._recount()
            state.last_raw[kind] = ts
            raws = [t for k, t in state.last_raw.items() if k not in NO_CADENCE_KINDS] or list(state.last_raw.values())
            state.newest = max(raws)
        self._observed += 1
        if source == self._wm_holder or self._wm_holder is None or self._observed % max(16, len(self.sources)) == 0:
            self._wm_stale = True
        offset = state.offset
        self._settle(state)
        if scrape and state.cadence is not None and abs(state.estimate) <= state.cadence:  # else no reference
            self._span(state)
        if moved or state.offset != offset:
            self._repromise(source, state)

    def _settle(self, state: SourceState) -> None:
        """Apply the estimate when it is larger than arrival order can resolve, with hysteresis (see
        the module docstring); update ``latest``."""
        bound, estimate, samples = 2.0 * state.resolution(self.min_resolution_s), state.estimate, state.samples
        if not bound:
            state.offset = 0.0
        # the correction changes only on a full set of samples that agree (to half the bound)
        elif len(samples) == OFFSET_SAMPLES and max(samples) - min(samples) <= bound / 2:
            if not state.offset:
                state.offset = estimate if abs(estimate) > bound else 0.0
            elif abs(estimate) < bound / 2:
                state.offset = 0.0
            elif abs(estimate - state.offset) > bound / 2:
                state.offset = estimate
        latest = state.newest - state.offset
        if latest != state.latest:
            if state.latest is not None:
                del self._latest[bisect.bisect_left(self._latest, state.latest)]
            bisect.insort(self._latest, latest)
            state.latest = latest

    def _span(self, state: SourceState) -> None:
        """File the source's interval (latest, latest + cadence) among the intervals."""
        assert state.latest is not None and state.cadence is not None and state.span is None
        state.span = (state.latest, state.latest + state.cadence)
        bisect.insort(self._starts, state.span[0])
        bisect.insort(self._ends, state.span[1])

    def _unspan(self, state: SourceState) -> None:
        if state.span is not None:
            del self._starts[bisect.bisect_left(self._starts, state.span[0])]
            del self._ends[bisect.bisect_left(self._ends, state.span[1])]
            state.span = None

    def forget(self, sources: Collection[str]) -> None:
        """Drop these sources (their partitions went to another processor): they neither hold the
        watermark back nor count in the fleet's reference from now on."""
        for name in sources:
            state = self.sources.pop(name, None)
            if state is None:
                continue
            if state.latest is not None:
                del self._latest[bisect.bisect_left(self._latest, state.latest)]
            self._unspan(state)
            for entry in state.promises.values():
                del self._promises[bisect.bisect_left(self._promises, entry)]
            if name == self._wm_holder:
                self._wm_holder = None
            self._wm_stale = True

    def _repromise(self, name: str, state: SourceState) -> None:
        """Re-file the source's streams: each promises its data up to its corrected latest ts plus
        its cadence (a kind without one yet promises its latest)."""
        for kind, last in state.last_raw.items():
            if kind in NO_CADENCE_KINDS:
                continue
            entry = (last - state.offset + state.cadences.get(kind, 0.0), name, kind)
            old = state.promises.get(kind)
            if old == entry:
                continue
            if old is not None:
                del self._promises[bisect.bisect_left(self._promises, old)]
            bisect.insort(self._promises, entry)
            state.promises[kind] = entry

    def slowest_cadence(self) -> float:
        """The longest scrape interval of any stream (source and kind), modules aside; 0 until known."""
        return max((c for s in self.sources.values() for c in s.cadences.values()), default=0.0)

    # --- views ---------------------------------------------------------------------------------------

    def offset(self, source: str) -> float:
        state = self.sources.get(source)
        return state.offset if state is not None else 0.0

    def offsets(self) -> dict[str, float]:
        """Every source's estimated clock offset (seconds its clock is ahead), applied or not."""
        return {name: s.estimate for name, s in sorted(self.sources.items())}

    def corrections(self) -> dict[str, float]:
        """The offsets applied to each source's ``ts`` (only significant ones)."""
        return {name: s.offset for name, s in sorted(self.sources.items()) if s.offset}

    def watermark(self) -> float | None:
        """The least promise (latest + interval) of the live sources; None before any data.

        Cached: a message moves the watermark only when it comes from the source holding it back, or
        when the reference moves that source past the lateness bound, so it is recounted then (and every
        few dozen messages), not on every message of a large fleet."""
        if not self._wm_stale and self._wm_holder is not None:
            ref = self.reference()
            # the holder fell past the lateness bound: it is overdue and no longer waited for
            self._wm_stale = ref is not None and self._wm is not None and self._wm < ref - self.lateness_s
        if self._wm_stale:
            self._wm, self._wm_holder = self._count_watermark()
            self._wm_stale = False
        return self._wm

    def _count_watermark(self) -> tuple[float | None, str | None]:
        ref = self.reference()
        if ref is None:
            return None, None
        # each kind is its own stream (topic): its own promise; the least not overdue holds detection
        at = bisect.bisect_left(self._promises, (ref - self.lateness_s,))
        if at == len(self._promises):
            return ref, None
        promise, name, _ = self._promises[at]
        return promise, name

    def newest(self) -> float | None:
        latest = [s.latest for s in self.sources.values() if s.latest is not None]
        return max(latest) if latest else None

"""Time over sources: a fast clock is estimated, exported and taken out; detection advances on the
slowest live source, and a silent one holds it back for the bounded lateness only."""

from __future__ import annotations

import numpy as np
import pytest

from fabricwatch import schema
from fabricwatch.clock import VirtualClock
from fabricwatch.stream.processor import Processor
from fabricwatch.stream.sources import SourceClocks
from fabricwatch.stream.store import Store
from tests.stream.test_processor import T0, RecordingEngine, rec, schema_topology

pytestmark = pytest.mark.timeout(120)


def scrape(clocks: SourceClocks, t: float, offsets: dict[str, float], skip: tuple[str, ...] = ()) -> None:
    for source, offset in sorted(offsets.items()):
        if source not in skip:
            clocks.observe(source, "gpu", T0 + t + offset)


def test_a_fast_clock_is_estimated_against_the_median_of_sources() -> None:
    clocks = SourceClocks()
    fleet = {"n0": 0.0, "n1": 0.2, "n2": 0.4, "fast": 60.0}
    for t in range(0, 120, 5):
        scrape(clocks, t, fleet)
    offsets = clocks.offsets()
    assert 55.0 <= offsets["fast"] <= 65.0
    assert all(abs(offsets[s]) < 5.0 for s in ("n0", "n1", "n2"))
    assert set(clocks.corrections()) == {"fast"}  # only an offset beyond two scrape intervals is applied
    # the watermark is the slowest live source's next scrape, not the fast clock's newest stamp
    # to within the arrival phase: the fast clock is read first in each round, when the others' stamps
    # are a scrape old, and the middle of their intervals is half a scrape from now
    assert clocks.watermark() == pytest.approx(T0 + 115 + 5, abs=2.5)


def test_a_silent_source_holds_the_watermark_back_for_the_lateness_bound_only() -> None:
    clocks = SourceClocks(lateness_s=30.0)
    fleet = {"n0": 0.0, "n1": 0.0, "n2": 0.0}
    for t in range(0, 60, 5):
        scrape(clocks, t, fleet)
    for t in range(60, 80, 5):
        scrape(clocks, t, fleet, skip=("n2",))
    assert clocks.watermark() == pytest.approx(T0 + 60, abs=0.01)  # n2's next scrape (60) has not come: wait
    for t in range(80, 130, 5):
        scrape(clocks, t, fleet, skip=("n2",))
    assert clocks.watermark() == pytest.approx(T0 + 130, abs=0.01)  # n2 is past the bound: no longer waited for


def test_a_silent_holder_is_dropped_at_the_first_message_past_the_bound_in_a_small_fleet() -> None:
    """Three sources, one silent: the watermark is recounted as soon as the reference moves the holder
    past the bound, not only every 16 messages (8 scrapes of the two left, 30 s late here)."""
    clocks = SourceClocks(lateness_s=30.0)
    fleet = {"n0": 0.0, "n1": 0.0, "n2": 0.0}
    for t in range(0, 60, 5):
        scrape(clocks, t, fleet)
    marks = {}
    for t in range(60, 200, 5):
        scrape(clocks, t, fleet, skip=("n2",))
        marks[t] = clocks.watermark()
    # n2 promised 60; the reference, the middle of (t, t, 55), passes 60 + 30 once t > 90
    assert {t for t, w in marks.items() if w == pytest.approx(T0 + 60, abs=0.01)} == set(range(60, 95, 5))
    assert all(marks[t] == pytest.approx(T0 + t + 5, abs=0.01) for t in range(95, 200, 5))


def test_a_silent_source_does_not_drag_the_clock_reference_of_a_two_source_fleet() -> None:
    """Two sources, one silent for ten minutes: the reference was the median of both latest stamps, a
    mean that fell ever further behind, so the live source read ever faster (275 s after ten minutes)
    and its stamps were pulled back. Counting only live sources, its offset stays within a scrape."""
    clocks = SourceClocks(lateness_s=30.0)
    fleet = {"live": 0.0, "silent": 0.0}
    for t in range(0, 60, 5):
        scrape(clocks, t, fleet)
    held = []
    for t in range(60, 660, 5):
        scrape(clocks, t, fleet, skip=("silent",))
        assert abs(clocks.offsets()["live"]) <= 5.0 + 2.5  # a scrape interval plus the arrival phase
        assert clocks.offset("live") == 0.0  # never applied: its stamps are trusted
        held.append(clocks.watermark() == pytest.approx(T0 + 60, abs=0.01))
    # the silent source still holds detection back at first (its next scrape, 60, is due), then not,
    # and the watermark follows the live source's own stamps (today's drift left it minutes behind)
    assert held[0] and not held[-1]
    assert clocks.watermark() == pytest.approx(T0 + 655 + 5, abs=0.01)
    # it comes back: both are measured again, and neither reads off
    for t in range(660, 780, 5):
        scrape(clocks, t, fleet)
    assert all(abs(o) <= 5.0 for o in clocks.offsets().values())
    assert clocks.corrections() == {}


def test_a_skewed_pair_is_not_corrected_as_nothing_tells_which_is_right() -> None:
    """Two sources 60 s apart: nothing tells which clock is right. The median of both used to split
    the difference and move each by half a minute, so both were wrong; with no majority neither is
    corrected, and when one falls silent the other still has nothing to be measured against."""
    clocks = SourceClocks(lateness_s=30.0)
    fleet = {"a": 60.0, "b": 0.0}
    for t in range(0, 300, 5):
        scrape(clocks, t, fleet)
    assert clocks.offsets() == {"a": 0.0, "b": 0.0} and clocks.corrections() == {}
    for t in range(300, 900, 5):
        scrape(clocks, t, fleet, skip=("b",))
    assert clocks.corrections() == {}
    # a third source that agrees with b tells: a is the fast one
    fleet["c"] = 0.1
    for t in range(900, 1020, 5):
        scrape(clocks, t, fleet)
    assert set(clocks.corrections()) == {"a"} and 55.0 <= clocks.corrections()["a"] <= 65.0


def test_a_fast_host_among_slow_switches_reads_steadily() -> None:
    """Two hosts scraped every 5 s, one 60 s fast, and six switches scraped every 30 or 60 s. The
    median of the latest stamps stalled between the switches' scrapes while the host's stamps moved
    on: its estimate swept from about 58 to 83 s and back every 30 s, and its correction, applied
    at two of the fleet's median intervals (60 s here), came and went. Where the intervals of the
    other clocks agree, it reads within a scrape of 60 s, and once applied its correction stays."""
    clocks = SourceClocks(lateness_s=30.0)
    phase = {"node000": 0.0, "node001": 0.0, "leaf0": 1.0, "leaf1": 7.0, "leaf2": 13.0, "leaf3": 19.0,
             "spine0": 3.0, "spine1": 33.0}  # fmt: skip
    every = {name: 5 if name.startswith("node") else 30 if name.startswith("leaf") else 60 for name in phase}
    fast = {"node001": 60.0}
    applied = []
    for tenth in range(0, 6000):  # ten minutes in tenths of a second, each source on its own phase
        t = tenth / 10
        for name in sorted(phase):
            if round(t - phase[name], 1) >= 0 and round(t - phase[name], 1) % every[name] == 0:
                clocks.observe(name, "port", T0 + t + fast.get(name, 0.0))
        if t >= 180:  # from the third minute on
            assert 55.0 <= clocks.offsets()["node001"] <= 65.0
            assert abs(clocks.offsets()["node000"]) <= 5.0
            applied.append(clocks.offset("node001"))
    assert len(set(applied)) == 1 and 55.0 <= applied[0] <= 65.0


def gpu(source: str, t: float, seq: int, temp: float = 60.0) -> schema.Message:
    return schema.make("gpu", source, T0 + t, seq, {"device": [f"{source}/gpu0"], "temp_c": [temp]})


class SourcesSeen(RecordingEngine):
    """Remembers, per tick, each source's gpu rows' seq in the order of their (corrected) ts."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, dict[str, np.ndarray]]] = []

    def run(self, window, now):
        gpu = window.frame("gpu")
        self.seen.append((window.end, {s: g["seq"].to_numpy() for s, g in gpu.groupby("source")}))
        return super().run(window, now)


def test_a_fast_source_neither_runs_detection_ahead_nor_hides_from_it() -> None:
    store = Store()
    engine = SourcesSeen()
    p = Processor(schema_topology(), store, clock=VirtualClock(), engine=engine, grace_s=1.0)
    offset = 0
    for i, t in enumerate(range(0, 200, 5)):  # one record per message, in arrival order, as live
        for source, skew in (("node000", 0.0), ("node001", 0.0), ("node002", 60.0)):
            p.handle([rec(gpu(source, t + skew, i), offset)])
            offset += 1
    ends = [c[1] - T0 for c in engine.calls]
    assert max(ends) <= 195 + 5  # not 60 s ahead, with the fast source's stamps
    assert 55.0 <= p.metrics.clock_offset.labels("node002")._value.get() <= 65.0
    # every tick saw all three sources: the fast one's rows were moved back onto the fleet's clock, to
    # within a scrape (its estimate is good to its arrival phase), every one of them and in their order
    late = [seen for end, seen in engine.seen if end - T0 >= 120]
    assert late and all(abs(seen["node002"].size - seen["node000"].size) <= 1 for seen in late)
    assert all((np.diff(seen["node002"]) > 0).all() for seen in late)


def test_a_window_holds_two_samples_of_a_slow_stream() -> None:
    engine = RecordingEngine()
    engine.window_s = 60.0
    p = Processor(schema_topology(), Store(), clock=VirtualClock(), engine=engine, grace_s=1.0)
    offset = 0
    for i, t in enumerate(range(0, 400, 5)):
        p.handle([rec(gpu("node000", t, i), offset)])
        offset += 1
        if t % 60 == 0:  # a switch-like stream polled every 60 s
            p.handle([rec(gpu("leaf0", t, t // 60), offset)])
            offset += 1
    assert p.window_span() == pytest.approx(150.0)
    start, end, _, _ = engine.calls[-1]
    assert end - start == pytest.approx(150.0)

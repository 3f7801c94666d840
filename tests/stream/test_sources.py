"""Time over sources: a fast clock is estimated, exported and taken out; detection advances on the
slowest live source, and a silent one holds it back for the bounded lateness only."""

from __future__ import annotations

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
    assert clocks.watermark() == pytest.approx(T0 + 115 + 5, abs=1.5)  # to within the arrival phase


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


def test_a_skewed_pair_keeps_its_offsets_when_one_falls_silent() -> None:
    """Two sources 60 s apart split the difference (nothing tells which is right); when one falls
    silent the other has nothing to be measured against, so its offset stays as it was."""
    clocks = SourceClocks(lateness_s=30.0)
    fleet = {"a": 60.0, "b": 0.0}
    for t in range(0, 300, 5):
        scrape(clocks, t, fleet)
    before = clocks.offsets()["a"]
    assert 25.0 <= before <= 35.0
    for t in range(300, 900, 5):
        scrape(clocks, t, fleet, skip=("b",))
        assert 25.0 <= clocks.offsets()["a"] <= 40.0


def gpu(source: str, t: float, seq: int, temp: float = 60.0) -> schema.Message:
    return schema.make("gpu", source, T0 + t, seq, {"device": [f"{source}/gpu0"], "temp_c": [temp]})


def test_a_fast_source_neither_runs_detection_ahead_nor_hides_from_it() -> None:
    store = Store()
    engine = RecordingEngine()
    p = Processor(schema_topology(), store, clock=VirtualClock(), engine=engine, grace_s=1.0)
    offset = 0
    for i, t in enumerate(range(0, 200, 5)):  # one record per message, in arrival order, as live
        for source, skew in (("node000", 0.0), ("node001", 0.0), ("node002", 60.0)):
            p.handle([rec(gpu(source, t + skew, i), offset)])
            offset += 1
    ends = [c[1] - T0 for c in engine.calls]
    assert max(ends) <= 195 + 5  # not 60 s ahead, with the fast source's stamps
    assert 55.0 <= p.metrics.clock_offset.labels("node002")._value.get() <= 65.0
    # every tick saw all three sources: the fast one's rows were moved back onto the fleet's clock
    late = [c for c in engine.calls if c[1] - T0 >= 120]
    assert late and all(c[3] == 3 * len(range(int(c[1] - T0 - 30), int(c[1] - T0) + 1, 5)) for c in late)


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

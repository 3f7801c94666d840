"""Corruption judged as events (issue 9): short error bursts (rack work) are a handful of events an
hour whatever their error count, while a steadily corrupting port at the same hourly count pages."""

from __future__ import annotations

import numpy as np
import pytest

from fabricwatch import topology
from fabricwatch.detectors.corruption import ACC, Corruption
from tests.detectors.synth import Timeline

TOPO = topology.generate(128, rails=8, gpus_per_node=8)
FAB = TOPO.links[200]  # leaf4-0:p72 <-> spine00:p36
BURSTS = (100.0, 105.0, 160.0, 220.0, 280.0)  # two in consecutive 5-s intervals, then sparse
PER_BURST = 100  # symbol errors: ~6 failed codewords of RS(544,514) at once
SPAN_S = 240.0  # 60 s .. 300 s
PER_H = len(BURSTS) * PER_BURST / SPAN_S * 3600  # 7,500 an hour, far past NVSentinel's 120


def bursty(tl: Timeline, column: str = "symbol_errors_total", size: int = PER_BURST) -> None:
    for t in BURSTS:  # each burst's errors rise within one scrape interval
        tl.count("port", column, size / tl.step, t - tl.step, t, port=FAB.b)


def steady(tl: Timeline) -> None:
    tl.count("port", "symbol_errors_total", PER_H / 3600, 60, port=FAB.b)


def findings_by_tick(edit, duration: float = 300.0) -> dict[float, set[str]]:
    tl = Timeline(TOPO, duration=duration, seed=5)
    edit(tl)
    det = Corruption()
    return {t: {f.id for f in det.detect(tl.window(t))} for t in tl.ticks(10.0, 60.0)}


def test_bursts_never_page_at_a_count_past_nvsentinels() -> None:
    seen = findings_by_tick(bursty)
    assert not any(seen.values()), "five bursts are five events, not 7,500 symbol errors an hour"


def test_crc_bursts_never_page() -> None:
    """30 lost frames a burst on a busy port: ~1e-8 of its frames, in five events."""
    seen = findings_by_tick(lambda tl: bursty(tl, "rx_crc_errors_total", 30))
    assert not any(seen.values())


def test_steady_errors_at_the_same_hourly_count_page() -> None:
    seen = findings_by_tick(steady)
    assert FAB.b in seen[300.0]
    first = min(t for t, ids in seen.items() if FAB.b in ids)
    assert first <= 60.0 + 10 * 5.0 + 10.0, "judged once ten intervals followed the first error"


def test_an_old_snapshot_restores_with_the_spread_unknown() -> None:
    det = Corruption()
    det.restore({"open": [FAB.b], "ports": [FAB.b], "acc": [[1.0, 1e8, 17.0, 60.0, 1.0, 1.0, 100.0]], "last_end": 1.0})
    assert det.acc.shape == (1, len(ACC))
    assert det.acc[0, -1] == pytest.approx(100.0) and np.all(det.acc[0, 6:8] == 0.0)


def no_symbol_counter(tl: Timeline) -> None:
    """The port's source has no symbol-error counter (OpenConfig gNMI: FEC uncorrectable blocks only)."""
    tl.put("port", "symbol_errors_total", np.nan, port=FAB.b)


def test_failed_codewords_count_where_the_symbol_counter_is_missing() -> None:
    """Each failed KP4 codeword holds at least 16 symbol errors: steady failed codewords at a sixteenth
    of the symbol rate above still page, and the finding says what it counted."""

    def edit(tl: Timeline) -> None:
        no_symbol_counter(tl)
        tl.count("port", "fec_uncorrectable_total", PER_H / 16 / 3600, 60, port=FAB.b)

    tl = Timeline(TOPO, duration=300.0, seed=5)
    edit(tl)
    det = Corruption()
    found = []
    for t in tl.ticks(10.0, 60.0):
        found = [f for f in det.detect(tl.window(t)) if f.id == FAB.b]
    assert found, "a missing symbol counter is read from the failed codewords, not as quiet"
    (symbols,) = [e for e in found[0].evidence if e["metric"] == "symbol_errors_per_h"]
    assert symbols["counted_from"] == "failed codewords"


def test_failed_codeword_bursts_never_page_without_the_symbol_counter() -> None:
    def edit(tl: Timeline) -> None:
        no_symbol_counter(tl)
        bursty(tl, "fec_uncorrectable_total", PER_BURST // 16)

    assert not any(findings_by_tick(edit).values())


def test_no_counter_at_all_is_unknown() -> None:
    """Neither symbol errors nor failed codewords: nothing is judged (no rate is invented)."""

    def edit(tl: Timeline) -> None:
        steady(tl)  # the port corrupts, but its source reads neither counter
        no_symbol_counter(tl)
        tl.put("port", "fec_uncorrectable_total", np.nan, port=FAB.b)

    assert not any(findings_by_tick(edit).values())

"""bench/detect_tick.py times ticks on windows cut as the live processor cuts them: those windows
must hold exactly the rows of the timeline's own cut, so the bench measures detection on the same data."""

from __future__ import annotations

import pandas as pd

from bench.detect_tick import buffered_windows, synth_timeline
from fabricwatch.detectors.engine import DetectionEngine


def test_buffered_windows_hold_the_timelines_rows_and_find_the_same() -> None:
    tl, at = synth_timeline(64, 8)
    live, plain = DetectionEngine(tl.topology), DetectionEngine(tl.topology)
    for t, window in zip(at, buffered_windows(tl, at), strict=True):
        want = tl.window(t)
        assert (window.start, window.end) == (want.start, want.end)
        for kind, frame in want.frames.items():
            got = window.frames[kind][list(frame.columns)]
            pd.testing.assert_frame_equal(
                got.reset_index(drop=True), frame.reset_index(drop=True), check_dtype=False, check_exact=True
            )
        live.run(window, now=window.end)
        plain.run(want, now=want.end)
    assert [i.to_dict() for i in live.incidents()] == [i.to_dict() for i in plain.incidents()]
    assert live.incidents()  # the timeline's faults opened incidents: the comparison compared something

"""What a tick carries to the next (detectors/frames.py ``carried``) is reused only while its inputs are
equal, so a tick with carried facts finds exactly what a fresh one would."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pandas as pd

from fabricwatch import topology
from fabricwatch.detectors.frames import CARRY, factorize, keyed, module_thresholds, peer_positions
from fabricwatch.detectors.optical_thresholds import OpticalThresholdsConfig
from fabricwatch.records import Window
from tests.detectors.synth import Timeline

TOPO = topology.generate(16, rails=8)


def _windows(n: int = 3) -> list:
    tl = Timeline(TOPO, duration=60 + 10 * n, seed=3)
    return [tl.window(t) for t in tl.ticks(10.0, 60.0)][:n]


def test_module_thresholds_are_reused_while_the_modules_are_equal_and_read_afresh_when_one_changes() -> None:
    carry: dict = {}
    first, second, third = _windows()
    cfg = OpticalThresholdsConfig()
    for w in (first, second, third):
        w.cache[CARRY] = carry
    a = module_thresholds(first, keyed(first, "optical").index, cfg)
    b = module_thresholds(second, keyed(second, "optical").index, cfg)
    for column in a:
        np.testing.assert_array_equal(a[column], b[column])
    port = TOPO.ports[0]
    mods = third.modules
    row = mods.index[mods["port"] == port]
    assert len(row)
    mods.loc[row, "rx_power_low_alarm_dbm"] = -12.5  # the module says otherwise now
    c = module_thresholds(third, keyed(third, "optical").index, cfg)
    fresh = module_thresholds(
        Window(third.start, third.end, third.frames, mods, third.topology),  # nothing carried
        keyed(third, "optical").index,
        cfg,
    )
    index = keyed(third, "optical").index
    at_port = np.asarray(index.get_level_values(0) == port)
    assert (c["rx_power_low_alarm_dbm"][at_port] == -12.5).all()
    for column in c:
        np.testing.assert_array_equal(c[column], fresh[column])


def test_link_peers_are_recomputed_for_other_entities() -> None:
    carry: dict = {}
    first, second = _windows(2)
    for w in (first, second):
        w.cache[CARRY] = carry
    at = keyed(first, "port")
    assert peer_positions(first, at) is peer_positions(second, keyed(second, "port"))  # the same ports: reused
    fewer = second.frames["port"][second.frames["port"]["port"] != TOPO.ports[0]].reset_index(drop=True)
    third = Window(second.start, second.end, {**second.frames, "port": fewer}, second.modules, TOPO)
    third.cache[CARRY] = carry
    got = peer_positions(third, keyed(third, "port"))
    np.testing.assert_array_equal(got, keyed(third, "port").peer_positions(TOPO.port_peer))
    assert len(got) == len(at.index) - 1


def test_factorize_reuses_the_sorted_keys_only_for_an_equal_dictionary() -> None:
    memo: dict = {}
    col = pd.Series(["b", "a", "b", "c"], dtype="str")
    codes, keys = factorize(col, memo)
    codes2, keys2 = factorize(pd.Series(["b", "a", "c", "c"], dtype="str"), memo)
    assert keys2 is keys  # the same names, in the same first-seen order: reused
    np.testing.assert_array_equal(codes2, [1, 0, 2, 2])
    codes3, keys3 = factorize(pd.Series(["a", "d", "b"], dtype="str"), memo)
    assert list(keys3) == ["a", "b", "d"]
    np.testing.assert_array_equal(codes3, [0, 2, 1])
    np.testing.assert_array_equal(codes, [1, 0, 1, 2])


def test_a_ticks_window_is_freed_without_the_cyclic_collector() -> None:
    """Nothing a tick keeps (carried facts, the engine's state) holds its window, and nothing in the
    window's cache holds the window: at 2,048 GPUs scraped every second a window's frames are
    hundreds of MB, and a reference cycle left each one to the cyclic collector (bench/stage1.py's
    window cut tripled)."""
    from fabricwatch.detectors.engine import DetectionEngine

    windows = _windows(3)
    engine = DetectionEngine(TOPO)
    engine.run(windows[0], now=windows[0].end)
    engine.run(windows[1], now=windows[1].end)
    frame = weakref.ref(windows[0].frames["optical"])  # a Window has slots: no weak reference to it
    gc.disable()
    try:
        del windows[0]
        assert frame() is None
    finally:
        gc.enable()

"""Per-port traffic rates over ``recent_s``, shared by the congestion and PFC detectors (cached).

Utilisation is bytes × 8 over the span against the port's own ``speed_gbps`` (no speed, no
utilisation: nothing is assumed); frames come from the optional packet counters, else bytes / MTU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.frames import Keyed, carried, keyed, peer_positions, recent_counters, same_keys
from fabricwatch.records import Window


class TrafficConfig(DetectorConfig):
    """What the congestion and PFC detectors share (each has its own copy to tune)."""

    mtu_bytes: int = 4096  # RoCEv2 MTU, to count frames from bytes when frame counters are absent
    queue_high_bytes: int = 1 << 20  # 1 MiB queued: far above a RoCE ECN Kmin (~100-400 KB at 400G)
    pause_rate_min: float = 1000.0  # pause frames/s that count as pausing (a storm refreshes ~12k/s)


@dataclass(frozen=True, slots=True)
class Traffic:
    at: Keyed
    tx_util: np.ndarray  # fraction of line rate
    rx_util: np.ndarray
    ecn_frac: np.ndarray  # ECN-marked frames / frames sent (a blind switch port: as its NIC received them)
    ecn_far: np.ndarray  # ecn_frac read at the far end (the port's own marks unknown)
    queue: np.ndarray  # median queue depth, bytes
    tx_pause: np.ndarray  # pause frames sent per second
    rx_pause: np.ndarray  # pause frames received per second
    first_pause: np.ndarray  # ts of the first sample (whole window) sending pauses at the pausing rate
    first_busy: np.ndarray  # ts of the first sample (whole window) with a queue ≥ the high mark

    def device_of(self, window: Window) -> np.ndarray:
        devices = window.topology.port_device
        return np.array([devices.get(p, str(p).rsplit(":p", 1)[0]) for p in self.at.index], dtype=object)


def _frames(at: Keyed, direction: str, mtu: int) -> np.ndarray:
    if at.has(f"{direction}_packets_total"):
        return at.increase(f"{direction}_packets_total").total
    return at.increase(f"{direction}_bytes_total").total / mtu


def traffic(window: Window, recent_s: float, config: TrafficConfig) -> Traffic:
    key = ("traffic", recent_s, config.mtu_bytes, config.queue_high_bytes, config.pause_rate_min)
    hit = window.cache.get(key)
    if hit is not None:
        return hit
    at = recent_counters(window, "port", recent_s)
    speed_bps = at.last("speed_gbps") * 1e9
    tx_bytes, rx_bytes = at.increase("tx_bytes_total"), at.increase("rx_bytes_total")
    ecn = at.increase("ecn_marked_total")
    txp, rxp = at.increase("tx_pause_total"), at.increase("rx_pause_total")
    with np.errstate(invalid="ignore", divide="ignore"):
        tx_util = np.where(tx_bytes.span > 0, tx_bytes.total * 8 / tx_bytes.span / speed_bps, np.nan)
        rx_util = np.where(rx_bytes.span > 0, rx_bytes.total * 8 / rx_bytes.span / speed_bps, np.nan)
        ecn_frac = ecn.total / _frames(at, "tx", config.mtu_bytes)
    ecn_frac, ecn_far = _far_marks(window, at, ecn.total, config.mtu_bytes, ecn_frac)
    queue = at.median("queue_depth_bytes")
    full = keyed(window, "port")
    with np.errstate(invalid="ignore"):
        first_queue = full.first_ts_where(full.values("queue_depth_bytes") >= config.queue_high_bytes)
    first_pause = full.first_rate_at_least("tx_pause_total", config.pause_rate_min)
    recent_start = at.first_ts()  # when the whole-window evidence is missing: the start of "now"
    hit = Traffic(
        at=at,
        tx_util=tx_util,
        rx_util=rx_util,
        ecn_frac=ecn_frac,
        ecn_far=ecn_far,
        queue=queue,
        tx_pause=txp.rate(),
        rx_pause=rxp.rate(),
        first_pause=np.where(np.isnan(first_pause), recent_start, first_pause),
        first_busy=np.where(np.isnan(first_queue), recent_start, first_queue),
    )
    window.cache[key] = hit
    return hit


def _far_marks(
    window: Window, at: Keyed, marks: np.ndarray, mtu: int, ecn_frac: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``ecn_frac``, with a switch port's unknown marked share read at its link's far end where that is
    a GPU's NIC, and where it was so read: a NIC counts the RoCE packets that *arrived* ECN-marked
    (mlx5 ``np_ecn_marked_roce_packets``, collectors/ethtool_stats.py), which are the ones the switch
    egress marked. OpenConfig gNMI has no ECN leaf (collectors/gnmi.py), so a leaf read over it is
    blind to its own marks, and its hosts are not. Marks are evidence of a queue; their absence at the
    far end is not evidence of none (a switch may not mark at all), so the queue stays unknown."""
    unknown = np.isnan(ecn_frac)
    none = np.zeros(at.n, dtype=bool)
    if not unknown.any():
        return ecn_frac, none
    peer = peer_positions(window, at)
    nic = _nics(window, at)
    use = unknown & ~nic & (peer >= 0)
    use[use] &= nic[peer[use]]
    if not use.any():
        return ecn_frac, none
    with np.errstate(invalid="ignore", divide="ignore"):
        arrived = marks / _frames(at, "rx", mtu)
    out = ecn_frac.copy()
    out[use] = arrived[peer[use]]
    return out, use & ~np.isnan(out)


def _nics(window: Window, at: Keyed) -> np.ndarray:
    """Per port, whether it is a GPU's NIC; reused from the last tick for the same ports (a pass over
    every port name, every tick, in a fleet whose leaves are blind to their marks)."""
    memo, topo = carried(window), window.topology
    last = memo.get("nics")
    if last is not None and last[1] is topo and same_keys(last[0], at.index):
        return last[2]
    nic = np.array([topo.port_device.get(p) in topo.gpu_node for p in at.names], dtype=bool)
    memo["nics"] = (at.index, topo, nic)
    return nic


def by_device(values: np.ndarray, devices: np.ndarray) -> pd.Series:
    """How many ports of each device have ``values`` True."""
    return pd.Series(values.astype(np.int64), index=devices).groupby(level=0).sum()

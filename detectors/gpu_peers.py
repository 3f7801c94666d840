"""A GPU hotter than its peers at the same load (DESIGN §4 gpu_thermal), before any absolute limit.

Peers are the other GPUs of its cooling loop (same coolant, so the same inlet temperature) whose
utilisation is within ``gpu_peer_load_margin_pct`` of its own: a busier GPU is rightly hotter. A GPU
stands out when it is ``gpu_peer_excess_c`` above the peers' median AND ``gpu_peer_mad_k`` robust
standard deviations above it, so a fleet with a wide natural spread does not page on its hottest
healthy member. A whole loop running hot moves the median with it: that is cooling_loop's job.
"""

from __future__ import annotations

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.frames import first_crossing, keyed, recent, sig, ts_or
from fabricwatch.records import Finding, Window

MIN_SPREAD_C = 1.0  # floor of the robust standard deviation: sensors read in whole or half degrees
MAD_SD = 1.4826  # a Gaussian's standard deviation per median absolute deviation (1 / Φ⁻¹(3/4))
# The peer comparison's defaults (GpuPeerConfig below), kept here so that the detectors comparing a GPU
# or a loop with its peers the same way (gpu_model, cooling_loop) take theirs from one place:
PEER_MAD_K = 5.0  # robust standard deviations of the peers' spread
PEER_MIN = 4  # fewer peers than this: no peer comparison
PEER_LOAD_MARGIN_PCT = 15.0  # a GPU whose utilisation differs by more than this is not a peer


def nanmedian_rows(x: np.ndarray) -> np.ndarray:
    """Median of each row ignoring NaN (NaN for an all-NaN row): sort puts NaN last, then pick the
    middle of the valid values; much faster than numpy's masked nanmedian on small matrices."""
    if not x.size:
        return np.full(len(x), np.nan)
    s = np.sort(x, axis=1)
    k = np.sum(~np.isnan(x), axis=1)
    rows = np.arange(len(x))
    lo, hi = np.maximum((k - 1) // 2, 0), np.maximum(k // 2, 0)
    return np.where(k > 0, (s[rows, lo] + s[rows, hi]) / 2, np.nan)


def loop_of(window: Window) -> np.ndarray:
    """The cooling loop of each GPU of the window's ``gpu`` entities ("" for a GPU the topology does
    not know), aligned with ``keyed(window, "gpu").index``; cached per window."""
    loops = window.cache.get("gpu_loops")
    if loops is None:
        gpus = keyed(window, "gpu").index
        topo = window.topology
        by_node = {n.name: n.cooling_loop for n in topo.nodes}
        loops = np.array(
            [by_node.get(str(g).split("/", 1)[0], "") if g in topo.gpu_node else "" for g in gpus], dtype=object
        )
        window.cache["gpu_loops"] = loops
    return loops


class GpuPeerConfig(DetectorConfig):
    gpu_peer_excess_c: float = 10.0  # hotter than the median of its cooling-loop peers by this much
    gpu_peer_mad_k: float = PEER_MAD_K  # ... and by this many robust standard deviations of the peers' spread
    gpu_peer_min: int = PEER_MIN  # fewer peers than this: no peer comparison
    gpu_peer_load_margin_pct: float = PEER_LOAD_MARGIN_PCT  # a GPU busier than its peers by more: not compared


class GpuPeerThermal(Detector):
    name = "gpu_peers"
    emits = frozenset({"gpu_hotter_than_peers"})
    Config = GpuPeerConfig
    config: GpuPeerConfig

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        now = recent(window, "gpu", self.recent_s)
        if now.n < cfg.gpu_peer_min + 1:
            return []
        temp = now.median("temp_c")
        util = now.median("util_pct")
        loops = loop_of(window)
        peer_median = np.full(now.n, np.nan)
        peer_spread = np.full(now.n, np.nan)
        for loop in sorted(set(loops) - {""}):
            idx = np.flatnonzero(loops == loop)
            t, u = temp[idx], util[idx]
            similar = np.abs(u[:, None] - u[None, :]) <= cfg.gpu_peer_load_margin_pct
            similar |= np.isnan(u)[:, None] | np.isnan(u)[None, :]
            np.fill_diagonal(similar, False)
            similar &= np.isfinite(t)[None, :]
            enough = similar.sum(axis=1) >= cfg.gpu_peer_min
            peers = np.where(similar, t[None, :], np.nan)
            med = nanmedian_rows(peers)
            mad = nanmedian_rows(np.abs(peers - med[:, None]))
            peer_median[idx] = np.where(enough, med, np.nan)
            peer_spread[idx] = np.where(enough, np.maximum(MAD_SD * mad, MIN_SPREAD_C), np.nan)
        excess = temp - peer_median
        with np.errstate(invalid="ignore"):
            hot = (excess >= cfg.gpu_peer_excess_c) & (excess >= cfg.gpu_peer_mad_k * peer_spread)
        flagged = np.flatnonzero(np.nan_to_num(hot, nan=0).astype(bool))
        if not len(flagged):
            return []
        full = keyed(window, "gpu")
        first = first_crossing(full, "temp_c", peer_median + cfg.gpu_peer_excess_c, below=False)
        last_ts = now.last_ts()
        out = []
        for i in flagged:
            gpu = now.names[i]
            out.append(
                Finding(
                    detector=self.name,
                    symptom="gpu_hotter_than_peers",
                    entity="gpu",
                    id=gpu,
                    first_seen=ts_or(first[i], last_ts[i]),
                    last_seen=float(last_ts[i]),
                    severity="minor",
                    evidence=(
                        {
                            "metric": "temp_c",
                            "gpu": gpu,
                            "value": sig(temp[i]),
                            "peers": sig(peer_median[i]),
                            "cooling_loop": str(loops[i]),
                        },
                    ),
                    score=float(excess[i] / peer_spread[i]),
                    attrs={"excess_c": sig(excess[i]), "cooling_loop": str(loops[i])},
                )
            )
        return out

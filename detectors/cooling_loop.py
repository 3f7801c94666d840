"""A cooling loop whose GPUs all run warmer (DESIGN §4 cooling_failure), found as a loop, not as N GPUs.

The loop's level is the median of its GPUs (at their recent median temperature); it is compared, at the
same instant, with the median level of its peers: the other loops under the same load (median
utilisation within ``gpu_peer_load_margin_pct``) whose level holds still (moved less than
``settled_c`` over the window), as Minder (NSDI'25) compares machines of one job. The room, the
facility water of the day and a job ramping everywhere move both sides; a loop whose nodes idle, or
that has just joined the job and is still warming towards its new level, is nobody's peer. The loop's
excess over its peers is learnt as a baseline (loops differ a little by design) while it holds still
too; a loop ``loop_excess_c`` above its usual excess is failing. Before a baseline exists,
``loop_excess_abs_c`` alone is enough. The baseline belongs to the load it was learnt at: when the
loop's load steps by more than the margin, it is learnt afresh. With no peer under the same load there
is nothing to compare with: correlation then counts hot GPUs per loop instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.baseline import BaselineConfig, Baselines, Gate
from fabricwatch.detectors.config import RECENT_S
from fabricwatch.detectors.frames import Keyed, keyed, recent, sig, ts_or
from fabricwatch.detectors.gpu_peers import loop_of
from fabricwatch.records import Finding, Window


class CoolingLoopConfig(BaselineConfig):
    loop_excess_c: float = 6.0  # a loop's median GPU above the other loops' median, beyond its own baseline
    loop_excess_abs_c: float = 12.0  # ... or this much above without a baseline (no baseline learnt yet)
    baseline_gate_c: float = 3.0  # the excess is learnt only while within this of its baseline
    gpu_peer_load_margin_pct: float = 15.0  # loops whose loads differ by more than this are not peers
    # (as gpu_peers'); a load step by more than this starts the loop's baseline afresh
    settled_c: float = 1.0  # a loop whose level moved less than this over the window holds still (GPU
    # temperature sensors read in whole degrees: nvidia-smi, NVML)
    gpu_hot_c: float = 85.0  # GPUs at this temperature make the finding critical (as gpu_temp's limit)


class CoolingLoop(Detector):
    name = "cooling_loop"
    emits = frozenset({"cooling_loop_warm"})
    Config = CoolingLoopConfig
    config: CoolingLoopConfig

    def __init__(self, config: CoolingLoopConfig | None = None, *, recent_s: float = RECENT_S) -> None:
        super().__init__(config, recent_s=recent_s)
        cfg = self.config
        self.baseline = Baselines(
            {"excess_c": Gate(cfg.baseline_gate_c), "load_pct": Gate(cfg.gpu_peer_load_margin_pct)},
            cfg.baseline_warmup_ticks,
            cfg.baseline_tau_s,
        )

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        now = recent(window, "gpu", self.recent_s)
        if not now.n:
            return []
        temp = now.median("temp_c")
        util = now.median("util_pct")
        loops = loop_of(window)
        names = sorted(set(loops[np.isfinite(temp)]) - {""})
        if len(names) < 2:
            return []
        early = _early_median(window, now, "temp_c")
        level = np.array([np.median(temp[(loops == n) & np.isfinite(temp)]) for n in names])
        before = np.array([_nanmedian(early[loops == n]) for n in names])
        load = np.array([_nanmedian(util[loops == n]) for n in names])
        with np.errstate(invalid="ignore"):
            # a window too short to tell (start-up) counts as still, as every loop is then alike
            settled = ~(np.abs(level - before) >= cfg.settled_c)
            same_load = np.abs(load[:, None] - load[None, :]) <= cfg.gpu_peer_load_margin_pct
            same_load |= np.isnan(load)[:, None] & np.isnan(load)[None, :]
        peers = same_load & settled[None, :]
        np.fill_diagonal(peers, False)
        others = np.array([np.median(level[peers[i]]) if peers[i].any() else np.nan for i in range(len(names))])
        excess = level - others
        keys = pd.Index(names, dtype=object)
        learnt = self.baseline.lookup(keys)
        with np.errstate(invalid="ignore"):
            stepped = np.abs(load - learnt["load_pct"]) > cfg.gpu_peer_load_margin_pct
        if stepped.any():  # a load step: the excess learnt at the old load says nothing about the new
            self.baseline.forget({names[i] for i in np.flatnonzero(stepped)})
            learnt = self.baseline.lookup(keys)
        base = learnt["excess_c"]
        rise = np.where(np.isfinite(base), excess - base, np.nan)
        with np.errstate(invalid="ignore"):
            warm = (rise >= cfg.loop_excess_c) | (np.isnan(base) & (excess >= cfg.loop_excess_abs_c))
        self.baseline.update(keys, {"excess_c": excess, "load_pct": load}, window.end, learn=settled)
        flagged = np.flatnonzero(warm)
        if not len(flagged):
            return []
        full = keyed(window, "gpu")
        row_loop = full.per_row(loops)
        row_temp = full.values("temp_c")
        out = []
        for i in flagged:
            loop = names[i]
            threshold = others[i] + (base[i] if np.isfinite(base[i]) else 0.0) + cfg.loop_excess_c
            with np.errstate(invalid="ignore"):
                rows = (row_loop == loop) & (row_temp >= threshold)
            first = full.ts[rows].min() if rows.any() else np.nan
            members = loops == loop
            hot = int(np.sum(temp[members] >= cfg.gpu_hot_c))
            out.append(
                Finding(
                    detector=self.name,
                    symptom="cooling_loop_warm",
                    entity="cooling_loop",
                    id=loop,
                    first_seen=ts_or(first, window.end),
                    last_seen=float(np.nanmax(now.last_ts()[members])),
                    severity="critical" if hot else "major",
                    evidence=(
                        {
                            "metric": "temp_c",
                            "cooling_loop": loop,
                            "value": sig(level[i]),
                            "peers": sig(others[i]),
                            "baseline": sig(others[i] + base[i]) if np.isfinite(base[i]) else None,
                        },
                    ),
                    cause="cooling_failure",
                    score=float(np.nan_to_num(rise[i], nan=excess[i])),
                    attrs={"gpus": int(members.sum()), "gpus_hot": hot, "excess_c": sig(excess[i])},
                )
            )
        return out

    def snapshot(self) -> dict[str, Any]:
        return {"excess": self.baseline.snapshot()}

    def restore(self, state: dict[str, Any]) -> None:
        self.baseline.restore(state.get("excess", {}))


def _early_median(window: Window, now: Keyed, column: str) -> np.ndarray:
    """Each entity's median of ``column`` over the window before ``now`` (NaN without such rows)."""
    full = keyed(window, "gpu")
    start = float(np.nanmin(now.first_ts())) if now.n and np.isfinite(now.first_ts()).any() else window.end
    mask = full.ts < start
    if not mask.any():
        return np.full(full.n, np.nan)
    agg = pd.Series(full.values(column)[mask]).groupby(full.codes[mask]).median()
    return agg.reindex(range(full.n)).to_numpy(dtype=np.float64, na_value=np.nan)


def _nanmedian(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    return float(np.median(x)) if len(x) else float("nan")

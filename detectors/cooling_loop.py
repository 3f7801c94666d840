"""A cooling loop whose GPUs all run warmer (DESIGN §4 cooling_failure), found as a loop, not as N GPUs.

The loop's level is the median of its GPUs (at their recent median temperature); it is compared with
the median of the other loops' levels, which carries the cluster's load and room temperature, so a
job ramping up everywhere moves both sides. The loop's excess over the others is learnt as a baseline
(loops differ a little by design); a loop ``loop_excess_c`` above its usual excess is failing. Before
a baseline exists, ``loop_excess_abs_c`` alone is enough. A loop much busier than the others is not
compared (more work, more heat). With a single loop there is nothing to compare with: correlation
then counts hot GPUs per loop instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.baseline import BaselineConfig, Baselines, Gate
from fabricwatch.detectors.config import RECENT_S
from fabricwatch.detectors.frames import keyed, recent, sig, ts_or
from fabricwatch.detectors.gpu_peers import loop_of
from fabricwatch.records import Finding, Window


class CoolingLoopConfig(BaselineConfig):
    loop_excess_c: float = 6.0  # a loop's median GPU above the other loops' median, beyond its own baseline
    loop_excess_abs_c: float = 12.0  # ... or this much above without a baseline (no baseline learnt yet)
    baseline_gate_c: float = 3.0  # the excess is learnt only while within this of its baseline
    gpu_peer_load_margin_pct: float = 15.0  # a loop busier than the others by more than this is not compared
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
            {"excess_c": Gate(cfg.baseline_gate_c)}, cfg.baseline_warmup_ticks, cfg.baseline_tau_s
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
        level = np.array([np.median(temp[(loops == n) & np.isfinite(temp)]) for n in names])
        load = np.array([_nanmedian(util[loops == n]) for n in names])
        others = np.array([np.median(np.delete(level, i)) for i in range(len(names))])
        others_load = np.array([_nanmedian(np.delete(load, i)) for i in range(len(names))])
        excess = level - others
        keys = pd.Index(names, dtype=object)
        base = self.baseline.lookup(keys)["excess_c"]
        busier = np.nan_to_num(load - others_load, nan=0.0) > cfg.gpu_peer_load_margin_pct
        rise = np.where(np.isfinite(base), excess - base, np.nan)
        with np.errstate(invalid="ignore"):
            warm = ~busier & ((rise >= cfg.loop_excess_c) | (np.isnan(base) & (excess >= cfg.loop_excess_abs_c)))
        self.baseline.update(keys, {"excess_c": excess}, window.end, learn=~busier)
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


def _nanmedian(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    return float(np.median(x)) if len(x) else float("nan")

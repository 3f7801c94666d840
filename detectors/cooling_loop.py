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
loop's load steps by more than the margin, it is learnt afresh.

A loop with no peer under the same load (the one loop that idles while the others work, or works
while they idle) is judged against its own history instead. At a steady load a GPU sits at
T_coolant + R·P, so what moves a loop's level without a load step is its coolant: the facility water
of the day moves every loop alike, a failing loop alone. Each loop learns its own level at its own
load (afresh after a load step, gated as above), and the loop's rise over it, less the median rise of
the other loops that hold still (what they shared), by ``loop_excess_c`` or more is failing. A loop
whose load or whose every reference stepped has no judgement until it is learnt again.

A loop's GPUs sit on several nodes, so on several processors' partitions, and its peers are the other
loops: the judgement needs every GPU of the cluster. It therefore runs in stage 2 (detectors/stage.py).
In stage 1, :class:`CoolingLoop` summarises each tick what its window holds of each loop
(``cooling_loop_sample``, never an incident): per GPU its recent median temperature and utilisation and
its median before the recent span, and for the loop its newest recent reading and the times its
temperature first reached each level. In stage 2, :class:`LoopJudge` merges every processor's samples
of the tick, takes the loops' medians over their GPUs and judges loop against loop with its learnt
baselines (``cooling_loop_warm``, read by correlation rule 1). The medians are of the merged per-GPU
values, so a split deployment judges as one process does, to the bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fabricwatch.detectors.base import Detector, Judge
from fabricwatch.detectors.baseline import BaselineConfig, Baselines, Gate
from fabricwatch.detectors.frames import Keyed, keyed, recent, sig, ts_or
from fabricwatch.detectors.gpu_peers import PEER_LOAD_MARGIN_PCT, loop_of
from fabricwatch.detectors.gpu_temp import GPU_HOT_C
from fabricwatch.records import Finding, Window

SAMPLE = "cooling_loop_sample"  # stage 1 → stage 2: what one processor's window holds of a loop
WARM = "cooling_loop_warm"  # stage 2 → correlation rule 1

# The findings topic carries one sample per loop and processor each tick. Its size, measured with
# stream.findings.encode (tests/detectors/test_cooling_split.py: 60 s windows scraped every 5 s,
# generate()'s loops of 64 GPUs, temperature and utilisation in whole units as nvidia-smi and NVML
# report them): about 31 bytes per GPU (its id, three medians) and 0.4 kB per loop (the finding's
# fields, 3 to 16 steps), 2.4 kB a sample; 38 kB per tick for 1024 GPUs (16 loops) and 3.9 MB per
# tick for 100,000 GPUs (1563 loops), 0.4 MB/s at a tick every 10 s (``every_s``). Unrounded readings
# (the simulator's) take twice as much. A sample stays far under Kafka's 1 MB message limit; a loop
# split over n processors costs its per-loop part n times.

# A loop's alarm margin and how near its baseline the excess must be to be learnt: half the margin, so a
# fault developing is not learnt (gpu_model gates what it learns by the same share).
LOOP_EXCESS_C = 6.0
BASELINE_GATE_C = 3.0
# GPU temperature sensors read in whole degrees (nvidia-smi, NVML): a level that moved less than this
# over the window holds still (gpu_model judges its loop peers' level by the same).
SETTLED_C = 1.0


class CoolingLoopConfig(BaselineConfig):
    loop_excess_c: float = LOOP_EXCESS_C  # a loop's median GPU above the other loops' median, beyond its own baseline
    loop_excess_abs_c: float = 12.0  # ... or this much above without a baseline (no baseline learnt yet)
    baseline_gate_c: float = BASELINE_GATE_C  # the excess is learnt only while within this of its baseline
    gpu_peer_load_margin_pct: float = PEER_LOAD_MARGIN_PCT  # loops whose loads differ by more than this are
    # not peers (gpu_peers' default); a load step by more than this starts the loop's baseline afresh
    settled_c: float = SETTLED_C  # a loop whose level moved less than this over the window holds still
    gpu_hot_c: float = GPU_HOT_C  # GPUs at this temperature make the finding critical (gpu_temp's default)


@dataclass(frozen=True, slots=True)
class _Loop:
    """A loop as every processor's samples of one tick show it: its GPUs' values, its newest recent
    reading, its steps (:func:`_first_reached`)."""

    temp: np.ndarray
    early: np.ndarray
    util: np.ndarray
    last_ts: float
    steps: list[tuple[float, float]]

    def first_reached(self, level: float) -> float:
        """The earliest ts at which a GPU of the loop read ``level`` or more (NaN: never in the window)."""
        hits = [ts for temp, ts in self.steps if temp >= level]
        return min(hits) if hits else math.nan


class LoopJudge(Judge):
    """Stage 2: the samples of one tick from every processor → the loops warmer than their peers."""

    name = "cooling_loop"
    reads = frozenset({SAMPLE})
    emits = frozenset({WARM})
    config: CoolingLoopConfig

    def __init__(self, config: CoolingLoopConfig | None = None) -> None:
        super().__init__(config if config is not None else CoolingLoopConfig())
        cfg = self.config
        self.baseline = Baselines(
            {"excess_c": Gate(cfg.baseline_gate_c), "load_pct": Gate(cfg.gpu_peer_load_margin_pct)},
            cfg.baseline_warmup_ticks,
            cfg.baseline_tau_s,
        )
        # each loop's own level at its own load, less what every loop shared when it was learnt
        self.own = Baselines(
            {"level_c": Gate(cfg.baseline_gate_c), "load_pct": Gate(cfg.gpu_peer_load_margin_pct)},
            cfg.baseline_warmup_ticks,
            cfg.baseline_tau_s,
        )

    def judge(self, findings: list[Finding]) -> list[Finding]:
        cfg = self.config
        end, loops = _merge(findings)
        names = sorted(n for n, lp in loops.items() if np.isfinite(lp.temp).any())
        if len(names) < 2:
            return []
        level = np.array([_nanmedian(loops[n].temp) for n in names])
        before = np.array([_nanmedian(loops[n].early) for n in names])
        load = np.array([_nanmedian(loops[n].util) for n in names])
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
        self.baseline.update(keys, {"excess_c": excess, "load_pct": load}, end, learn=settled)
        own = self._own_rise(keys, level, load, settled, end)
        with np.errstate(invalid="ignore"):  # a loop with a peer under its load is judged against the peer
            warm |= np.isnan(others) & (own >= cfg.loop_excess_c)
        out = []
        for i in np.flatnonzero(warm):
            loop, members = names[i], loops[names[i]]
            peered = bool(np.isfinite(others[i]))
            if peered:
                reference = others[i] + (base[i] if np.isfinite(base[i]) else 0.0)
                baseline = sig(reference) if np.isfinite(base[i]) else None
            else:  # its own level at this load, moved by what the other loops shared
                reference = level[i] - own[i]
                baseline = sig(reference)
            threshold = reference + cfg.loop_excess_c
            with np.errstate(invalid="ignore"):
                hot = int(np.sum(members.temp >= cfg.gpu_hot_c))
            out.append(
                Finding(
                    detector=self.name,
                    symptom=WARM,
                    entity="cooling_loop",
                    id=loop,
                    first_seen=ts_or(members.first_reached(threshold), end),
                    last_seen=members.last_ts,
                    severity="critical" if hot else "major",
                    evidence=(
                        {
                            "metric": "temp_c",
                            "cooling_loop": loop,
                            "value": sig(level[i]),
                            "peers": sig(others[i]),
                            "baseline": baseline,
                        },
                    ),
                    cause="cooling_failure",
                    score=float(np.nan_to_num(rise[i], nan=excess[i]) if peered else own[i]),
                    attrs={
                        "gpus": len(members.temp),
                        "gpus_hot": hot,
                        "excess_c": sig(excess[i] if peered else own[i]),
                        "judged_against": "peers" if peered else "own history",
                    },
                )
            )
        return out

    def _own_rise(
        self, keys: pd.Index, level: np.ndarray, load: np.ndarray, settled: np.ndarray, end: float
    ) -> np.ndarray:
        """Each loop's rise over its own learnt level, less the median rise of the other settled loops
        (what they shared: the facility water); NaN where either is unknown. Learns this tick's levels
        in the same frame (less what is shared), so the day's drift stays with the shared part."""
        cfg = self.config
        learnt = self.own.lookup(keys)
        with np.errstate(invalid="ignore"):
            stepped = np.abs(load - learnt["load_pct"]) > cfg.gpu_peer_load_margin_pct
        if stepped.any():  # a load step moves the level by R·ΔP: learnt afresh
            self.own.forget({keys[i] for i in np.flatnonzero(stepped)})
            learnt = self.own.lookup(keys)
        shift = level - learnt["level_c"]
        ref, known = settled & np.isfinite(shift), np.isfinite(shift)
        shared, anchored = np.full(len(keys), np.nan), np.zeros(len(keys), dtype=bool)
        for i in range(len(keys)):
            others = np.arange(len(keys)) != i
            anchored[i] = bool((known & others).any())
            if (ref & others).any():
                shared[i] = np.median(shift[ref & others])
        # no loop learnt yet: the frame starts here; learnt ones but none holding still: unknown, not 0
        frame = np.where(anchored, shared, 0.0)
        self.own.update(keys, {"level_c": level - frame, "load_pct": load}, end, learn=settled)
        return shift - shared

    def snapshot(self) -> dict[str, Any]:
        return {"excess": self.baseline.snapshot(), "own": self.own.snapshot()}

    def restore(self, state: dict[str, Any]) -> None:
        self.baseline.restore(state.get("excess", {}))
        self.own.restore(state.get("own", {}))


class CoolingLoop(Detector):
    """Stage 1: each loop as this window holds it (one ``cooling_loop_sample`` per loop), for
    :class:`LoopJudge`. Stateless: the baselines are the judge's."""

    name = "cooling_loop"
    emits = frozenset({SAMPLE})
    Config = CoolingLoopConfig
    judge = LoopJudge
    config: CoolingLoopConfig

    def detect(self, window: Window) -> list[Finding]:
        now = recent(window, "gpu", self.recent_s)
        if not now.n:
            return []
        full = keyed(window, "gpu")
        loops = loop_of(window)
        temp, util = now.median("temp_c"), now.median("util_pct")
        early = _early_median(window, now, "temp_c")
        last, first_row, last_row = now.last_ts(), full.first_ts(), full.last_ts()
        steps = _first_reached(full.per_row(loops), full.values("temp_c"), full.ts)
        end = float(window.end)
        gpus = full.names
        out = []
        for loop, m in _by_loop(loops):
            out.append(
                Finding(
                    detector=self.name,
                    symptom=SAMPLE,
                    entity="cooling_loop",
                    id=loop,
                    first_seen=ts_or(_finite(first_row[m], np.min), end),
                    last_seen=ts_or(_finite(last_row[m], np.max), end),
                    severity="warning",  # never an incident: stage 2 judges it (LoopJudge)
                    attrs={
                        "end": end,  # the tick: the judge learns its baselines at this time
                        "gpus": [gpus[i] for i in m],
                        "temp_c": _floats(temp[m]),  # recent median
                        "before_c": _floats(early[m]),  # median before the recent span
                        "util_pct": _floats(util[m]),  # recent median
                        "last_ts": _finite(last[m], np.max),  # the loop's newest recent reading
                        "steps": steps.get(loop, []),
                    },
                )
            )
        return out


def _merge(findings: list[Finding]) -> tuple[float, dict[str, _Loop]]:
    """One tick's samples → its time and each loop. A GPU in two samples (its partition moving between
    two processors) counts once, from the first: stage 2's joiner hands findings over sorted."""
    rows: dict[str, list[np.ndarray]] = {}
    last: dict[str, list[float]] = {}
    steps: dict[str, list[tuple[float, float]]] = {}
    seen: set[str] = set()
    end = -math.inf
    for f in findings:
        if f.symptom != SAMPLE:
            continue
        a, loop = f.attrs, f.id
        end = max(end, float(a["end"]))
        gpus = a["gpus"]
        values = np.array([a["temp_c"], a["before_c"], a["util_pct"]], dtype=np.float64).reshape(3, -1)  # None: NaN
        if len(values[0]) != len(gpus):
            raise ValueError(f"cooling_loop_sample {loop}: {len(gpus)} GPUs, {len(values[0])} values")
        if seen.isdisjoint(gpus) and len(set(gpus)) == len(gpus):  # as a rule: no GPU in two samples
            seen.update(gpus)
        else:
            first = [i for i, g in enumerate(gpus) if g not in seen and not seen.add(g)]
            values = values[:, first]
        rows.setdefault(loop, []).append(values.T)
        last.setdefault(loop, []).extend(x for x in (_num(a["last_ts"]),) if math.isfinite(x))
        steps.setdefault(loop, []).extend((float(t), float(ts)) for t, ts in a["steps"])
    loops = {}
    for loop, parts in rows.items():
        v = np.concatenate(parts)
        loops[loop] = _Loop(v[:, 0], v[:, 1], v[:, 2], max(last[loop], default=math.nan), steps[loop])
    return end, loops


def _first_reached(row_loop: np.ndarray, temp: np.ndarray, ts: np.ndarray) -> dict[str, list[list[float]]]:
    """Per loop, its steps ``[[temp, ts], ...]``: the times at which its hottest reading so far rose (the
    hottest reading then, in time order). The earliest row of the loop at or above a level is the first
    step at or above it, so stage 2 reads the same first_seen from the steps as from the rows; steps of
    several processors together are the loop's. At most one per distinct ts of the loop's rows; measured,
    3 to 7 while the loop holds steady and up to 16 while it warms (64 GPUs, 60 s scraped every 5 s)."""
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(temp) & np.isfinite(ts) & (row_loop != "")
    if not ok.any():
        return {}
    loop, names = pd.factorize(row_loop[ok], sort=True)
    t, v = ts[ok], temp[ok]
    order = np.lexsort((t, loop))
    loop, t, v = loop[order], t[order], v[order]
    new = np.r_[True, (loop[1:] != loop[:-1]) | (t[1:] != t[:-1])]  # each (loop, ts) group's first row
    at = np.flatnonzero(new)
    loop, t, peak = loop[at], t[at], np.maximum.reduceat(v, at)  # the hottest GPU at each ts
    # the hottest before, per loop: a running maximum of exact integer ranks, each loop's above the last's
    rank = np.unique(peak, return_inverse=True)[1].reshape(-1).astype(np.int64) + loop * (len(peak) + 1)
    prior = np.r_[-1, np.maximum.accumulate(rank)[:-1]]
    first = np.r_[True, loop[1:] != loop[:-1]]
    rose = np.flatnonzero(first | (rank > prior))
    out: dict[str, list[list[float]]] = {}
    for i in rose:
        out.setdefault(str(names[loop[i]]), []).append([float(peak[i]), float(t[i])])
    return out


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


def _by_loop(loops: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Each known loop (sorted) with the positions of its GPUs, in window order: one sort, not a
    comparison per loop (a 100,000-GPU cluster has 1563 loops)."""
    codes, names = pd.factorize(loops, sort=True)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
    return [(str(n), order[bounds[k] : bounds[k + 1]]) for k, n in enumerate(names) if n != ""]


def _finite(x: np.ndarray, how: Any) -> float | None:
    """``how`` (np.min, np.max) of the finite values; None without one."""
    x = x[np.isfinite(x)]
    return float(how(x)) if len(x) else None


def _floats(x: np.ndarray) -> list[float | None]:
    """Per-GPU values for JSON, exactly (floats round-trip); NaN → None."""
    out = x.astype(object)
    out[~np.isfinite(x)] = None
    return out.tolist()


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)

"""A GPU hotter than a model of its healthy self says it should be at its power (DESIGN §4 gpu_thermal).

A liquid-cooled GPU settles at T = T_inlet + R_th · P: its coolant, plus its power through its
die-to-coolant thermal resistance. Its loop's other GPUs share the inlet, so against the median of
its loop peers (temperature T_o, mean power P_o) that is

    T − T_o = a_gpu + R · (P − P_o)

with ``a_gpu`` the GPU's own offset (its resistance and manifold position: healthy GPUs of one loop
spread over ~6 °C at one load) and R the thermal resistance of the fleet's GPUs. Both are learnt from
the GPU's healthy, steady windows: R by a robust regression (scikit-learn's HuberRegressor) pooled
over every GPU, each GPU's rows centred on its own median, so R comes from GPUs whose load changed
while their offsets cancel; ``a_gpu`` as the median, R taken out, of the GPU's rows learnt at about its
present power (its own resistance makes its offset grow with the load it shares with its peers, so an
offset learnt idle says nothing of it busy: a load it has no rows at is not judged). A GPU whose
temperature sits ``model_k`` robust standard deviations of the healthy residuals (and at least
``model_floor_c``) above its prediction is hot for its power.

gpu_peers must tolerate the whole healthy spread of a loop (10 °C); knowing each GPU's own offset,
this model sees a GPU leave it a few degrees in, earlier (BENCHMARKS.md "scikit-learn: the
multivariate model"), and R carries the offset across loads that differ from its peers'. Its finding
feeds the gpu_thermal cause (correlation's GPU_HEAT), as gpu_peers' does.

The model describes steady state. A GPU is judged, and learnt from, only while its loop peers' level
held still over the window and its own load did (a die lags a load step by tens of seconds; a fault
moves the temperature, not the load), and only at a power over its peers' (relative to its own usual)
inside the range the fit has seen: the model interpolates, it never extrapolates. What it learns (each GPU's healthy
rows and the fit) is JSON-able state, restored with the engine; refits are every
``model_refit_ticks`` ticks, deterministic (HuberRegressor has no randomness; rows in GPU-name order).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import RECENT_S, DetectorConfig
from fabricwatch.detectors.cooling_loop import BASELINE_GATE_C, LOOP_EXCESS_C, SETTLED_C
from fabricwatch.detectors.frames import Keyed, first_crossing, keyed, recent, sig, ts_or
from fabricwatch.detectors.gpu_peers import (
    MAD_SD,
    PEER_LOAD_MARGIN_PCT,
    PEER_MAD_K,
    PEER_MIN,
    loop_of,
    nanmedian_rows,
)
from fabricwatch.detectors.gpu_temp import GPU_HOT_C
from fabricwatch.records import Finding, Window

SYMPTOM = "gpu_hot_for_power"


class GpuModelConfig(DetectorConfig):
    model_k: float = PEER_MAD_K  # robust standard deviations of the healthy residuals (gpu_peers' default)
    # ... and never less than this above the prediction: the residual sums three values read in NVML's
    # whole degrees (the GPU's median, its peers' median, its learnt offset), each up to 1 °C off
    model_floor_c: float = 3.0
    # learnt only within this share of the alarm margin of the prediction, the share within which
    # cooling_loop learns its baseline (its default gate over its margin: half): a fault developing is
    # not learnt
    model_gate_fraction: float = BASELINE_GATE_C / LOOP_EXCESS_C
    settled_c: float = SETTLED_C  # peers whose level moved less than this over the window hold still
    # (cooling_loop's default: sensors read in whole degrees)
    gpu_peer_load_margin_pct: float = PEER_LOAD_MARGIN_PCT  # a GPU whose utilisation moved more is in a
    # load step (gpu_peers' default)
    gpu_peer_min: int = PEER_MIN  # fewer loop peers than this: no loop level to compare with (gpu_peers')
    gpu_hot_c: float = GPU_HOT_C  # a GPU this hot (gpu_temp's default) is never learnt: NVML's thermal slowdown
    # engages from there (the max operating temperature), so throttled rows stay out too
    model_min_rows: int = 3  # a GPU's healthy rows before it is judged: a median of three outvotes one bad row
    model_rows: int = 32  # healthy rows kept per GPU
    model_refresh_s: float = 600.0  # once full, a GPU takes a new row this often (32 rows: over 5 h of
    # its load mix) or when its load leaves the range its rows cover, dropping its oldest
    model_fit_rows: int = 4096  # R is fitted on at most this many rows, every k-th (one slope: plenty;
    # the fit's CPU time grows with its rows: 60-350 ms at 32k rows, 20-70 ms at 4096, measured on
    # bench/detect_tick.py's 1024-GPU timeline)
    model_refit_ticks: int = 30  # refit R and the residual scale every this many ticks (5 min at every_s 10),
    # and whenever the rows have doubled since the last fit (a young model learns fast, at amortised cost)


class GpuThermalModel(Detector):
    name = "gpu_model"
    emits = frozenset({SYMPTOM})
    Config = GpuModelConfig
    config: GpuModelConfig

    def __init__(self, config: DetectorConfig | None = None, *, recent_s: float = RECENT_S) -> None:
        super().__init__(config, recent_s=recent_s)
        cap = self.config.model_rows
        self._slot: dict[str, int] = {}
        self._index: pd.Index | None = None  # the keys of _slot in slot order, for _slots
        self._x = np.full((0, cap), np.nan)  # P − P_o per healthy row, oldest first
        self._y = np.full((0, cap), np.nan)  # T − T_o per healthy row
        self._p = np.full((0, cap), np.nan)  # P per healthy row: the load regime it was learnt at
        self._n = np.zeros(0, dtype=np.int64)
        self._last = np.full(0, np.nan)  # ts of each GPU's newest row
        self._ticks = 0
        self._fit: dict[str, float] | None = None  # slope, sigma, lo, hi, band, tick, rows (_refit)

    # --- detection ---------------------------------------------------------------------------------

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        self._ticks += 1
        now = recent(window, "gpu", self.recent_s)
        if not now.n:
            return []
        full = keyed(window, "gpu")
        loops = loop_of(window)
        temp, util, power = now.median("temp_c"), now.median("util_pct"), _mean(now, "power_w")
        start = _start(now, window.end)
        before = full.ts < start
        temp_b = full.median_where("temp_c", before)
        util_b = full.median_where("util_pct", before)
        (peer_t, peer_tb, peer_p), count = _others_median(np.stack([temp, temp_b, power]), _loop_codes(window))
        x, y = power - peer_p, temp - peer_t
        with np.errstate(invalid="ignore"):
            steady = (
                (count >= cfg.gpu_peer_min)
                & (np.abs(peer_t - peer_tb) < cfg.settled_c)
                & (np.abs(util - util_b) <= cfg.gpu_peer_load_margin_pct)
                & np.isfinite(x)
                & np.isfinite(y)
            )
        slots = self._slots(now.index)
        known = slots >= 0
        pred = np.full(now.n, np.nan)
        judged = np.zeros(now.n, dtype=bool)
        fit = self._fit
        if fit is not None and known.any():
            k = slots[known]
            # the GPU's offset at this load: its rows learnt at about this power (its own resistance
            # makes its offset over its peers grow with the load they share)
            with np.errstate(invalid="ignore"):
                near = np.abs(self._p[k] - power[known][:, None]) <= fit["band"]
            rows = near.sum(axis=1) >= cfg.model_min_rows
            offset = nanmedian_rows(np.where(near, self._y[k] - fit["slope"] * self._x[k], np.nan))
            centre = nanmedian_rows(self._x[k])
            p = np.full(now.n, np.nan)
            p[known] = np.where(rows, peer_t[known] + offset + fit["slope"] * x[known], np.nan)
            pred = p
            c = np.full(now.n, np.nan)
            c[known] = centre
            with np.errstate(invalid="ignore"):
                judged = steady & np.isfinite(pred) & (x - c >= fit["lo"]) & (x - c <= fit["hi"])
        margin = self._margin()
        resid = temp - pred
        with np.errstate(invalid="ignore"):
            hot = judged & (resid >= margin)
            cool = temp < cfg.gpu_hot_c
            gate = ~np.isfinite(pred) | (np.abs(resid) <= cfg.model_gate_fraction * margin)
        self._learn(now.index, slots, x, y, power, steady & cool & gate & ~hot, float(window.end))
        if fit is None or self._ticks - fit["tick"] >= cfg.model_refit_ticks or self._n.sum() >= 2 * fit["rows"]:
            self._refit()
        flagged = np.flatnonzero(hot)
        if not len(flagged):
            return []
        first = first_crossing(full, "temp_c", pred + margin, below=False)
        last_ts = now.last_ts()
        assert fit is not None  # hot needs a prediction
        out = []
        for i in flagged:
            gpu, loop = str(now.index[i]), str(loops[i])
            power_c = fit["slope"] * x[i]
            evidence = {
                "metric": "temp_c",
                "gpu": gpu,
                "value": sig(temp[i]),
                "predicted": sig(pred[i]),
                "threshold": sig(pred[i] + margin),
                "cooling_loop": loop,
                # the prediction, term by term (°C to the hundredth): the loop's level, the GPU's learnt
                # offset, its power's share
                "explained_by": {
                    "peers_temp_c": _c(peer_t[i]),
                    "own_offset_c": _c(pred[i] - peer_t[i] - power_c),
                    "power_c": _c(power_c),
                },
                "power_w": sig(power[i]),
                "peers_power_w": sig(peer_p[i]),
            }
            out.append(
                Finding(
                    detector=self.name,
                    symptom=SYMPTOM,
                    entity="gpu",
                    id=gpu,
                    first_seen=ts_or(first[i], last_ts[i]),
                    last_seen=float(last_ts[i]),
                    severity="minor",
                    evidence=(evidence,),
                    score=float(resid[i] * cfg.model_k / margin),  # in (effective) standard deviations
                    attrs={
                        "excess_c": sig(resid[i]),
                        "cooling_loop": loop,
                        "thermal_resistance_c_per_w": round(fit["slope"], 5),
                    },
                )
            )
        return out

    def _margin(self) -> float:
        cfg = self.config
        sigma = self._fit["sigma"] if self._fit is not None else 0.0
        return max(cfg.model_k * sigma, cfg.model_floor_c)

    # --- learning ----------------------------------------------------------------------------------

    def _learn(
        self,
        names: pd.Index,
        slots: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        power: np.ndarray,
        ok: np.ndarray,
        ts: float,
    ) -> None:
        """Append each healthy GPU's row (x, y rounded to 0.01: exact in JSON, far under the sensors'
        resolution) while its rows are few, when ``model_refresh_s`` passed since its last, or when its
        power is outside what its rows cover (a load regime it has not been learnt at)."""
        cfg, cap = self.config, self.config.model_rows
        for i in np.flatnonzero(ok & (slots < 0)):
            slots[i] = self._add(str(names[i]))
        take = np.flatnonzero(ok)
        if not len(take):
            return
        s = slots[take]
        xs, ys, ps = np.round(x[take], 2), np.round(y[take], 2), np.round(power[take], 2)
        with np.errstate(invalid="ignore"):
            lo, hi = (
                np.nanmin(np.where(self._n[s, None] > 0, self._p[s], np.inf), axis=1),
                np.nanmax(np.where(self._n[s, None] > 0, self._p[s], -np.inf), axis=1),
            )
            new = (self._n[s] < cap) | (ts - self._last[s] >= cfg.model_refresh_s) | (ps < lo) | (ps > hi)
        s, xs, ys, ps = s[new], xs[new], ys[new], ps[new]
        full = self._n[s] >= cap
        if full.any():  # drop the oldest row
            f = s[full]
            self._x[f, :-1], self._y[f, :-1], self._p[f, :-1] = self._x[f, 1:], self._y[f, 1:], self._p[f, 1:]
            self._n[f] -= 1
        pos = self._n[s]
        self._x[s, pos], self._y[s, pos], self._p[s, pos] = xs, ys, ps
        self._n[s] += 1
        self._last[s] = ts

    def _add(self, gpu: str) -> int:
        slot = len(self._slot)
        if slot >= len(self._n):
            grow = max(16, len(self._n))
            cap = self.config.model_rows
            self._x = np.vstack([self._x, np.full((grow, cap), np.nan)])
            self._y = np.vstack([self._y, np.full((grow, cap), np.nan)])
            self._p = np.vstack([self._p, np.full((grow, cap), np.nan)])
            self._n = np.concatenate([self._n, np.zeros(grow, dtype=np.int64)])
            self._last = np.concatenate([self._last, np.full(grow, np.nan)])
        self._slot[gpu] = slot
        self._index = None
        return slot

    def _slots(self, gpus: pd.Index) -> np.ndarray:
        """Each GPU's row in the learnt arrays (-1: none yet), by one hash join, not a lookup a GPU."""
        if self._index is None:
            self._index = pd.Index(list(self._slot), dtype=object)
        return self._index.get_indexer(gpus.astype(object)).astype(np.int64)

    def _refit(self) -> None:
        """R by HuberRegressor over every GPU's rows centred on its medians (standardised), then the
        residual scale and the centred load range the fit covers. Needs ``gpu_peer_min`` + 1 GPUs with
        ``model_min_rows`` rows; rows in GPU-name order, so a restored model refits to the same bits."""
        cfg = self.config
        names = sorted(g for g, s in self._slot.items() if self._n[s] >= cfg.model_min_rows)
        if len(names) < cfg.gpu_peer_min + 1:
            return
        s = np.array([self._slot[g] for g in names])
        X, Y = self._x[s], self._y[s]
        xc, yc = X - nanmedian_rows(X)[:, None], Y - nanmedian_rows(Y)[:, None]
        ok = np.isfinite(xc) & np.isfinite(yc)
        xv, yv = xc[ok], yc[ok]
        step = -(-len(xv) // cfg.model_fit_rows)  # every step-th row: a bounded, deterministic fit
        slope = self._fit["slope"] if self._fit is not None else 0.0
        scale = float(np.std(xv))
        if scale > 0.0:
            from sklearn.exceptions import ConvergenceWarning
            from sklearn.linear_model import HuberRegressor

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)  # a capped fit is still the best so far
                try:
                    model = HuberRegressor(fit_intercept=False).fit((xv[::step] / scale)[:, None], yv[::step])
                    slope = float(model.coef_[0]) / scale
                except ValueError:  # l-BFGS failed outright on degenerate rows: keep the last slope
                    pass
        resid = Y - slope * X
        resid = resid - nanmedian_rows(resid)[:, None]
        r = resid[np.isfinite(resid)]
        sigma = MAD_SD * float(np.median(np.abs(r))) if len(r) else 0.0
        # the loads it covers: the rows' range, widened by model_k robust SDs of a GPU's own load noise
        # (a job's phases sampled at a few instants), so that noise is one regime and a new one is not
        noise = cfg.model_k * MAD_SD * float(np.median(np.abs(xv))) if len(xv) else 0.0
        # a load regime: powers within model_k standard deviations of a GPU's row-to-row power noise
        # (the median step between its consecutive rows over 0.6745·√2, as Keyed.noise: a regime
        # change is a rare step, so it does not count as noise)
        P = self._p[s]
        steps = np.abs(np.diff(P, axis=1))
        steps = steps[np.isfinite(steps)]
        band = cfg.model_k * float(np.median(steps)) / (0.6745 * math.sqrt(2.0)) if len(steps) else 0.0
        self._fit = {
            "slope": slope,
            "sigma": sigma,
            "lo": float(xv.min()) - noise if len(xv) else 0.0,
            "hi": float(xv.max()) + noise if len(xv) else 0.0,
            "band": band,
            "tick": float(self._ticks),
            "rows": float(len(xv)),
        }

    # --- state -------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        gpus = {}
        for g in sorted(self._slot):
            s, n = self._slot[g], int(self._n[self._slot[g]])
            gpus[g] = {
                "x": self._x[s, :n].tolist(),
                "y": self._y[s, :n].tolist(),
                "p": self._p[s, :n].tolist(),
                "last": float(self._last[s]),
            }
        return {"ticks": self._ticks, "fit": dict(self._fit) if self._fit else None, "gpus": gpus}

    def restore(self, state: dict[str, Any]) -> None:
        cap = self.config.model_rows
        self._slot, self._index = {}, None
        self._x, self._y, self._p = (np.full((0, cap), np.nan) for _ in range(3))
        self._n, self._last = np.zeros(0, dtype=np.int64), np.full(0, np.nan)
        for g, row in sorted(state.get("gpus", {}).items()):
            s = self._add(g)
            xs, ys, ps = list(row["x"])[-cap:], list(row["y"])[-cap:], list(row["p"])[-cap:]
            self._x[s, : len(xs)], self._y[s, : len(ys)], self._p[s, : len(ps)] = xs, ys, ps
            self._n[s] = len(xs)
            self._last[s] = float(row["last"]) if row.get("last") is not None else math.nan
        self._ticks = int(state.get("ticks", 0))
        fit = state.get("fit")
        self._fit = {k: float(v) for k, v in fit.items()} if fit else None

    def forget(self, sources: Mapping[str, float]) -> None:
        """GPUs of nodes now another processor's: their rows go (the fit stays until the next refit)."""
        gone = [g for g in self._slot if g.split("/", 1)[0] in sources]
        if gone:
            state = self.snapshot()
            for g in gone:
                state["gpus"].pop(g, None)
            self.restore(state)


def _c(x: float) -> float:
    """A temperature term for evidence, to 0.01 °C (far under NVML's 1 °C; no float dust like 1e-12)."""
    return round(float(x), 2) + 0.0  # + 0.0: no -0.0


def _mean(now: Keyed, column: str) -> np.ndarray:
    """Each GPU's mean of ``column`` over the recent span: a die integrates its power over tens of
    seconds, so the mean, not the median of samples that each land in one phase of a job's
    compute/all-reduce cycle, is what its temperature answers to."""
    v = now.values(column)
    ok = np.isfinite(v)
    total = np.bincount(now.codes[ok], weights=v[ok], minlength=now.n)
    count = np.bincount(now.codes[ok], minlength=now.n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _start(now: Keyed, end: float) -> float:
    first = now.first_ts()
    return float(np.nanmin(first)) if np.isfinite(first).any() else float(end)


def _loop_codes(window: Window) -> np.ndarray:
    """Each GPU's cooling loop (loop_of) as an integer code, -1 for none; cached per window."""
    codes = window.cache.get("gpu_loop_codes")
    if codes is None:
        loops = loop_of(window)
        codes, names = pd.factorize(loops, sort=True)
        if len(names):
            codes = np.where(np.asarray(names, dtype=object)[codes] == "", -1, codes)
        window.cache["gpu_loop_codes"] = codes = codes.astype(np.int64)
    return codes


def _others_median(v: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``v`` (values x GPUs) and GPU, the median of the other GPUs of its loop (``codes``,
    -1: no known loop, NaN), and per GPU how many finite others its first row has. One sort by (loop,
    value) per row, no loop over loops: removing a GPU of rank j within its loop shifts the ranks above."""
    groups = int(codes.max()) + 1 if len(codes) else 0
    out = np.full(v.shape, np.nan)
    count = np.zeros(v.shape[1], dtype=np.int64)
    member = codes >= 0
    for r in range(v.shape[0]):
        vals = v[r]
        fin = np.isfinite(vals) & member
        idx = np.flatnonzero(fin)
        o = idx[np.lexsort((vals[idx], codes[idx]))]
        sv = vals[o]
        k_of = np.bincount(codes[o], minlength=groups)
        start = np.concatenate([[0], np.cumsum(k_of)[:-1]]).astype(np.int64)
        rank = np.zeros(len(vals), dtype=np.int64)
        rank[o] = np.arange(len(o)) - start[codes[o]]
        g = np.where(member, codes, 0)
        k = k_of[g] if len(k_of) else np.zeros(len(vals), dtype=np.int64)
        j = np.where(fin, rank, k)  # a value that is none of the others' removes nothing
        n = np.where(fin, k - 1, k)
        lo, hi = np.maximum((n - 1) // 2, 0), np.maximum(n // 2, 0)
        top = np.maximum(k - 1, 0)
        if len(sv):
            a = sv[np.minimum(start[g] + np.minimum(lo + (lo >= j), top), len(sv) - 1)]
            b = sv[np.minimum(start[g] + np.minimum(hi + (hi >= j), top), len(sv) - 1)]
            out[r] = np.where(member & (n > 0), (a + b) / 2, np.nan)
        if r == 0:
            count = np.where(member, n, 0)
    return out, count

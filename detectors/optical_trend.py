"""A transmitter fading slowly: found by its trend, hours before any threshold (issue 9 item 7).

Per lane it fits tx power against time over the lane's recent history, by weighted least squares
with the module's temperature as a second regressor, so that a reading that follows the module's
temperature (the coolant of the day, a job starting or stopping) is not taken for ageing. Each point
is the lane's median over the samples since the previous point (one point per ``recent_s`` at most;
points share no sample, since overlapping medians would make the slope look surer than it is, and a
lane scraped more slowly gets a point per scrape), and old points fade with time constant ``tau_s``;
the history is kept as running sums, a dozen numbers per lane. A lane is falling when the slope's t
statistic is below the one-sided Student-t quantile at ``alpha`` (the test decides, not a fixed
dB/h), its expected crossing of the module's own tx low alarm (the 400G-DR4 default without one)
lies within ``horizon_s``, and no single step between consecutive points carries half the fitted
decline (a step is a swap or a reseat, which the baseline rules judge, not a drift). The finding is
a ``warning`` with cause laser_degradation and a forecast: the threshold and ``eta_s`` until the fit
reaches it.

A replaced module (new vendor, part or serial number), a link that retrained (``link_down_total``
rose at either end: a swap for the same part, a reseat), a dark lane and a lane that stops reporting
start the lane's history afresh.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import RECENT_S, DetectorConfig
from fabricwatch.detectors.frames import keyed, module_thresholds, recent, sig
from fabricwatch.detectors.optical_thresholds import OpticalThresholdsConfig
from fabricwatch.records import Finding, Window

# running sums per lane: weight, then t, x (temperature), y (tx power) and their products
SUMS = ("w", "t", "x", "y", "tt", "xx", "yy", "tx", "ty", "xy")
IDENTITY = ("vendor", "part_number", "serial_number", "serial")


class OpticalTrendConfig(DetectorConfig):
    tau_s: float = 3600.0  # history fades with this time constant: an hour of a lane's past
    min_points: int = 5  # points (one per recent_s) before a slope is tested; with few points the
    # Student-t quantile at alpha is itself huge (t(1e-6, 2 dof) ≈ 700), so the test stays strict
    alpha: float = 1e-6  # one-sided false-alarm probability of the slope test, per lane and point
    horizon_s: float = 86_400.0  # forecast crossings up to a day ahead (UFM Cyber-AI predicts 1-24 h)
    step_share: float = 0.5  # one step carrying this share of the fitted decline is a step, not a drift
    loss_of_light_dbm: float = -30.0  # a darker lane is loss of light, not a trend: its history restarts
    min_temp_spread_c: float = 0.05  # below this spread of module temperature it is no regressor (a
    # DOM reads temperature in 1/256 °C; a flat reading says nothing about the power's dependence on it)
    # Optical power reaches us rounded to 0.01 dB (ethtool -m and switch CLIs print dBm with two
    # decimals: ../shared/data/switch-cli), an error uniform over ±0.005 dB, variance q²/12: a fit closer
    # than that is rounding, not evidence (a few points on a 0.01-dB staircase fit a line exactly)
    resolution_db: float = 0.01


class OpticalTrend(Detector):
    name = "optical_trend"
    emits = frozenset({"tx_power_falling"})
    Config = OpticalTrendConfig
    config: OpticalTrendConfig

    def __init__(self, config: OpticalTrendConfig | None = None, *, recent_s: float = RECENT_S) -> None:
        super().__init__(config, recent_s=recent_s)
        self._keys = pd.Index([], dtype=object)
        self._sums = np.zeros((len(SUMS), 0))
        self._ref = np.zeros((2, 0))  # per lane: the first y and x, so the sums stay small
        self._last = np.zeros((3, 0))  # per lane: t of the last point, its y, the largest step since
        self._origin: float | None = None  # t of the sums is seconds since this
        self._point_at = -np.inf  # end of the last window that added a point
        self.modules: dict[str, str] = {}
        self._modules_ts = -np.inf
        self._retrain_ts = -np.inf  # the newest link-down event looked at

    # --- state ----------------------------------------------------------------------------------------

    def _positions(self, keys: pd.Index) -> np.ndarray:
        pos = self._keys.get_indexer(keys) if len(self._keys) else np.full(len(keys), -1)
        new = pos < 0
        if new.any():
            start = len(self._keys)
            self._keys = keys[new] if not len(self._keys) else self._keys.append(keys[new])
            added = int(new.sum())
            self._sums = np.concatenate([self._sums, np.zeros((len(SUMS), added))], axis=1)
            self._ref = np.concatenate([self._ref, np.full((2, added), np.nan)], axis=1)
            self._last = np.concatenate([self._last, np.full((3, added), np.nan)], axis=1)
            pos = pos.copy()
            pos[new] = np.arange(start, start + added)
        return pos

    def _restart(self, where: np.ndarray) -> None:
        self._sums[:, where] = 0.0
        self._ref[:, where] = np.nan
        self._last[:, where] = np.nan

    def _replaced(self, window: Window) -> set[str]:
        """Ports whose module identity changed since the last module rows looked at."""
        mods = window.modules
        if mods is None or not len(mods) or "port" not in mods.columns:
            return set()
        columns = [c for c in IDENTITY if c in mods.columns]
        if not columns:
            return set()
        if "ts" in mods.columns:
            ts = pd.to_numeric(mods["ts"], errors="coerce")
            new = ~(ts <= self._modules_ts).to_numpy()
            if not new.any():  # the usual tick: nothing new (filtering the frame costs more than this)
                return set()
            mods = mods[new]
            if not len(mods):
                return set()
            self._modules_ts = max(self._modules_ts, float(ts.max()))
            mods = mods.sort_values("ts", kind="stable")
        latest = mods.drop_duplicates("port", keep="last")
        ident = ["|".join("" if pd.isna(v) else str(v) for v in row) for row in latest[columns].itertuples(index=False)]
        swapped = set()
        for port, name in zip(latest["port"].astype(str), ident, strict=True):
            if self.modules.get(port, name) != name:
                swapped.add(port)
            self.modules[port] = name
        return swapped

    def _retrained(self, window: Window) -> set[str]:
        """Both ends of every link whose link_down_total rose since the last look (a swap, a reseat)."""
        ports = keyed(window, "port")
        if not ports.n:
            return set()
        st = ports.steps("link_down_total")
        new = (st.step > 0) & (st.ts > self._retrain_ts)
        if not new.any():
            return set()
        self._retrain_ts = float(st.ts[new].max())
        peer = window.topology.port_peer
        ends = {ports.names[c] for c in np.unique(st.codes[new])}
        return ends | {peer.get(p, p) for p in ends}

    # --- detection ------------------------------------------------------------------------------------

    def detect(self, window: Window) -> list[Finding]:
        now = recent(window, "optical", self.recent_s)
        swapped = self._replaced(window) | self._retrained(window)
        if not now.n:
            return []
        keys = now.index
        pos = self._positions(keys)
        if swapped:
            self._restart(pos[keys.levels[0].isin(list(swapped))[keys.codes[0]]])  # by port, spread to lanes
        y = now.median("tx_power_dbm")
        if self._origin is None:
            self._origin = window.end
        t = window.end - self._origin
        if window.end - self._point_at >= self.recent_s:  # a new point from samples no point holds yet
            # the recent rows, less those an earlier point already holds
            overlap = len(now.ts) and self._point_at >= float(now.ts.min())
            fresh = keyed(window, "optical", self._point_at + 1e-6) if overlap else now
            self._point_at = window.end
            self._add(pos, t, fresh.median("tx_power_dbm"), fresh.median("module_temp_c"), np.isfinite(y))
        return self._judge(window, now, pos, y)

    def _add(self, pos: np.ndarray, t: float, y: np.ndarray, x: np.ndarray, reported: np.ndarray) -> None:
        """One point per lane with new samples; a dark lane, or one silent over ``recent_s``, restarts."""
        cfg = self.config
        lit = y > cfg.loss_of_light_dbm  # NaN: no new sample since the last point (a slower cadence)
        dark = ~lit & (np.isfinite(y) | ~reported)
        self._restart(pos[dark])
        p = pos[lit]
        ref = self._ref[:, p]
        fresh = np.isnan(ref[0])
        ref[0] = np.where(fresh, y[lit], ref[0])
        ref[1] = np.where(fresh | np.isnan(ref[1]), x[lit], ref[1])
        self._ref[:, p] = ref
        last_t, last_y, jump = self._last[:, p]
        fade = np.where(np.isfinite(last_t), np.exp(-(t - last_t) / cfg.tau_s), 0.0)
        s = self._sums[:, p] * fade
        dy = y[lit] - ref[0]
        dx = np.nan_to_num(x[lit] - ref[1], nan=0.0)
        values = {"w": 1.0, "t": t, "x": dx, "y": dy, "tt": t * t, "xx": dx * dx, "yy": dy * dy,
                  "tx": t * dx, "ty": t * dy, "xy": dx * dy}  # fmt: skip
        for i, name in enumerate(SUMS):
            s[i] += values[name]
        self._sums[:, p] = s
        step = np.where(np.isfinite(last_y), np.abs(y[lit] - last_y), 0.0)
        self._last[:, p] = np.vstack([np.full(len(p), t), y[lit], np.fmax(np.nan_to_num(jump) * fade, step)])

    def _judge(self, window: Window, now: Any, pos: np.ndarray, y: np.ndarray) -> list[Finding]:
        cfg = self.config
        w, st, sx, sy, stt, sxx, syy, stx, sty, sxy = self._sums[:, pos]
        with np.errstate(invalid="ignore", divide="ignore"):
            ctt, cxx, cyy = stt - st * st / w, sxx - sx * sx / w, syy - sy * sy / w
            ctx, cty, cxy = stx - st * sx / w, sty - st * sy / w, sxy - sx * sy / w
            # with temperature as a regressor where it moved, else the slope on time alone
            with_x = cxx > (cfg.min_temp_spread_c**2) * w
            det = ctt * cxx - ctx * ctx
            b = np.where(with_x, (cxx * cty - ctx * cxy) / det, cty / ctt)
            c = np.where(with_x, (ctt * cxy - ctx * cty) / det, 0.0)
            dof = w - np.where(with_x, 3.0, 2.0)
            rss = np.maximum(cyy - b * cty - c * cxy, np.maximum(dof, 0.0) * cfg.resolution_db**2 / 12.0)
            var_b = rss / dof * np.where(with_x, cxx / det, 1.0 / ctt)
            tstat = b / np.sqrt(var_b)
            n_points = np.where(w > 0, w, 0.0)
            enough = (n_points >= cfg.min_points) & (dof > 0) & (ctt > 0)
            significant = enough & (b < 0)
            critical = np.full(len(b), -np.inf)
            critical[significant] = -stats.t.isf(cfg.alpha, dof[significant])
            significant &= tstat <= critical
        if not significant.any():
            return []
        threshold = module_thresholds(window, now.index, _DEFAULTS)["tx_power_low_alarm_dbm"]
        with np.errstate(invalid="ignore", divide="ignore"):
            eta = (y - threshold) / -b
            span = np.sqrt(12.0 * ctt / w)  # the history's length, for a uniform spread of points
            decline = -b * span
            stepped = self._last[2, pos] >= cfg.step_share * decline
            falling = significant & (eta > 0) & (eta <= cfg.horizon_s) & ~stepped
        return self._findings(now, np.flatnonzero(falling), y, b, eta, threshold)

    def _findings(self, now: Any, flagged: np.ndarray, y: np.ndarray, b: np.ndarray, eta: np.ndarray,
                  threshold: np.ndarray) -> list[Finding]:  # fmt: skip
        if not len(flagged):
            return []
        ports = np.asarray(now.index.get_level_values(0), dtype=object)
        lanes = np.asarray(now.index.get_level_values(1))
        last_ts = now.last_ts()
        out = []
        by_port: dict[str, list[int]] = {}
        for i in flagged:
            by_port.setdefault(str(ports[i]), []).append(int(i))
        for port in sorted(by_port):
            rows = by_port[port]
            soonest = min(rows, key=lambda i: eta[i])
            forecast = {
                "metric": "tx_power_dbm",
                "threshold": sig(threshold[soonest]),
                "eta_s": round(float(eta[soonest])),
            }
            entry = {
                "metric": "tx_power_dbm",
                "port": port,
                "lane": int(lanes[soonest]),
                "value": sig(y[soonest]),
                "slope_db_per_h": sig(b[soonest] * 3600.0),
                "threshold": forecast["threshold"],
                "eta_s": forecast["eta_s"],
            }
            out.append(
                Finding(
                    detector=self.name,
                    symptom="tx_power_falling",
                    entity="port",
                    id=port,
                    first_seen=float(max(last_ts[i] for i in rows)),  # the sample that made the trend
                    last_seen=float(max(last_ts[i] for i in rows)),
                    severity="warning",
                    evidence=(entry,),
                    cause="laser_degradation",
                    score=float(-b[soonest] * 3600.0),
                    attrs={
                        "lanes": sorted(int(lanes[i]) for i in rows),
                        "lanes_total": int(np.sum(ports == port)),
                        "forecast": forecast,
                    },
                )
            )
        return out

    # --- snapshot -------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        keys = [list(k) if isinstance(k, tuple) else k for k in self._keys]
        keys = [[k[0], int(k[1])] if isinstance(k, list) else k for k in keys]

        def plain(a: np.ndarray) -> list:
            return [[float(v) if np.isfinite(v) else None for v in row] for row in a]

        return {
            "keys": keys,
            "sums": plain(self._sums),
            "ref": plain(self._ref),
            "last": plain(self._last),
            "origin": self._origin,
            "point_at": self._point_at if np.isfinite(self._point_at) else None,
            "modules": dict(sorted(self.modules.items())),
            "retrain_ts": self._retrain_ts if np.isfinite(self._retrain_ts) else None,
        }

    def restore(self, state: dict[str, Any]) -> None:
        keys = state.get("keys", [])
        self._keys = pd.MultiIndex.from_tuples([tuple(k) for k in keys]) if keys else pd.Index([], dtype=object)

        def arr(name: str, rows: int) -> np.ndarray:
            raw = state.get(name)
            if not raw:
                return np.full((rows, len(keys)), np.nan if name != "sums" else 0.0)
            return np.array([[np.nan if v is None else v for v in row] for row in raw], dtype=np.float64)

        self._sums, self._ref, self._last = arr("sums", len(SUMS)), arr("ref", 2), arr("last", 3)
        self._origin = state.get("origin")
        self._point_at = state.get("point_at") if state.get("point_at") is not None else -np.inf
        self.modules = dict(state.get("modules", {}))
        self._retrain_ts = state["retrain_ts"] if state.get("retrain_ts") is not None else -np.inf


_DEFAULTS = OpticalThresholdsConfig()  # the 400G-DR4 thresholds of a module that reported none

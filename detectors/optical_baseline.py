"""Optical levels against each lane's own past: what finds a dirty connector before any alarm.

Per lane it learns rx and tx power, laser bias and module temperature (detectors/baseline.py: the
average of the first ticks, then slow drift only within a gate, so a fault is never learnt). Then:

* rx below its baseline: light lost on the way in (contamination is 2-6 dB);
* tx below its baseline: the laser itself fades;
* bias ``bias_rise_frac`` above its baseline: the laser is driven harder (ageing, or heat);
* module temperature ``module_temp_rise_c`` above its baseline (a hot GPU next to its NPO engine).

A power change is judged against the lane's own measured noise (the median step between its
consecutive samples, learnt like a level, and never measured over a window in which the lane's level
stands more than ``baseline_gate_db`` from its baseline: those steps are the change): ``noise_k``
standard deviations, and never less than ``rx_drop_db`` / ``tx_drop_db``. So a 1.5 dB step on a lane
that reads within 0.05 dB is a change, while a noisy DOM needs more. Absolute readings carry the
DOM's ±3 dB calibration error (SFF-8472); changes of one lane against itself do not.

A smaller change that still stands ``noise_k`` of the lane's own noise clear of it (the noise floored
at the DOM's ~0.01 dB resolution, REALISM.md) is a ``rx_power_dip`` / ``tx_power_dip``: a hint, never
an incident alone (a reseat moves a lane by up to 0.75 dB). The correlator reads it beside corruption:
a one-direction receive dip with new CRC errors and a steady far transmitter is the connector or the
fibre, not the module (issue 9).

A replaced module (its vendor, part or serial number changes in the ``module`` kind; a row with one of
them unread is no change) starts the
baselines of both ends of its link afresh: the new part launches at its own level, which the far end
receives. So does a link that went down and retrained (``link_down_total`` rose at either end): a
module is never replaced, nor a connector cleaned or reseated, without the link dropping, and the same
part number may come back at another level; the new levels are learnt from samples after the event.
A dark lane (below ``loss_of_light_dbm``) is neither judged nor learnt: that is loss of light.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.baseline import BaselineConfig, Baselines, Gate
from fabricwatch.detectors.config import RECENT_S
from fabricwatch.detectors.frames import first_crossing, keyed, lane_findings, recent
from fabricwatch.records import Finding, Window

METRICS = ("rx_power_dbm", "tx_power_dbm", "bias_ma", "module_temp_c")
NOISE = ("rx_noise_db", "tx_noise_db")
IDENTITY = ("vendor", "part_number", "serial_number", "serial")  # what names a module in the module kind


class OpticalBaselineConfig(BaselineConfig):
    loss_of_light_dbm: float = -30.0  # below this a lane is dark: neither judged nor learnt
    # The smallest power change that counts, whatever the lane's noise: a mated connector pair may
    # lose up to 0.75 dB (TIA-568.3-D), so a reseat moves a healthy lane by that much.
    rx_drop_db: float = 1.0  # rx down at least this much vs the lane's own baseline ...
    tx_drop_db: float = 1.0  # ... tx likewise (the laser fading) ...
    noise_k: float = 10.0  # ... and at least this many of the lane's own noise standard deviations (a
    # recent median of ~6 samples has ~0.5 σ of noise: 10 σ is ~20 of its own, for a fleet's lanes x ticks)
    # a dip (rx/tx_power_dip) is noise_k of the lane's noise, floored at the DOM's resolution: "a module
    # against its own history is precise (0.1 µW / ~0.01 dB resolution)" (REALISM.md, SFF-8472)
    dom_resolution_db: float = 0.01
    noise_gate_frac: float = 1.0  # the noise is learnt while within ×2 of its learnt level ...
    noise_tau_s: float = 600.0  # ... measured once a window, averaging about ten windows' estimates
    bias_rise_frac: float = 0.10  # bias up 10 % vs baseline: a laser pushed harder for its light
    module_temp_rise_c: float = 8.0  # module temperature up this much vs baseline
    baseline_gate_db: float = 1.0  # baselines follow drift only while within this of the level (a fault
    baseline_gate_frac: float = 0.05  # is not learnt); the same gate for bias, relative ...
    baseline_gate_c: float = 3.0  # ... and for module temperature


class OpticalBaseline(Detector):
    name = "optical_baseline"
    emits = frozenset({"rx_power_drop", "tx_power_drop", "rx_power_dip", "tx_power_dip", "bias_rise",
                       "module_temp_rise"})  # fmt: skip
    Config = OpticalBaselineConfig
    config: OpticalBaselineConfig

    def __init__(self, config: OpticalBaselineConfig | None = None, *, recent_s: float = RECENT_S) -> None:
        super().__init__(config, recent_s=recent_s)
        cfg = self.config
        gates = {
            "rx_power_dbm": Gate(cfg.baseline_gate_db),
            "tx_power_dbm": Gate(cfg.baseline_gate_db),
            "bias_ma": Gate(cfg.baseline_gate_frac, relative=True),
            "module_temp_c": Gate(cfg.baseline_gate_c),
        }
        self.baselines = Baselines(gates, cfg.baseline_warmup_ticks, cfg.baseline_tau_s)
        noise_gate = Gate(cfg.noise_gate_frac, relative=True)
        # each window's estimate is trusted at once, then averaged with the next ones (an EWMA)
        self.noise = Baselines(dict.fromkeys(NOISE, noise_gate), 1, cfg.noise_tau_s)
        self._noise_at = -np.inf  # end of the window the noise was last measured over
        self.modules: dict[str, str] = {}  # port -> the identity of its module (vendor|part|serial)
        self._modules_ts = -np.inf  # the newest module row looked at
        self._swapped_at: dict[str, float] = {}  # port -> when its link's module was replaced
        self._retrain_ts = -np.inf  # the newest link-down event looked at

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        now = recent(window, "optical", self.recent_s)
        if not now.n:
            return []
        full = keyed(window, "optical")
        keys = now.index
        self._replaced(window)
        self._retrained(window)
        level = {m: now.median(m) for m in METRICS}
        base = self.baselines.lookup(keys)
        rx, tx, bias, temp = (level[m] for m in METRICS)
        measured = None
        if window.end - self._noise_at >= window.end - window.start:  # once per window: samples not reused
            self._noise_at = window.end
            measured = {"rx_noise_db": full.noise("rx_power_dbm"), "tx_noise_db": full.noise("tx_power_dbm")}
        if measured is not None:  # a lane whose level has left its baseline is changing, not noisy:
            # its steps are the change (a fault ramping through a slow lane's two or three samples)
            for m, metric in zip(NOISE, ("rx_power_dbm", "tx_power_dbm"), strict=True):
                with np.errstate(invalid="ignore"):
                    moved = np.abs(level[metric] - base[metric]) > cfg.baseline_gate_db  # NaN: not moved
                measured[m] = np.where(moved, np.nan, measured[m])
        learnt = self.noise.lookup(keys)
        noise = learnt if measured is None else {m: np.fmax(learnt[m], measured[m]) for m in NOISE}
        rx_step = np.fmax(cfg.rx_drop_db, cfg.noise_k * noise["rx_noise_db"])
        tx_step = np.fmax(cfg.tx_drop_db, cfg.noise_k * noise["tx_noise_db"])
        # a dip needs the lane's noise measured: before that, only a drop is judged
        rx_dip = np.where(np.isfinite(noise["rx_noise_db"]),
                          cfg.noise_k * np.fmax(noise["rx_noise_db"], cfg.dom_resolution_db), np.inf)  # fmt: skip
        tx_dip = np.where(np.isfinite(noise["tx_noise_db"]),
                          cfg.noise_k * np.fmax(noise["tx_noise_db"], cfg.dom_resolution_db), np.inf)  # fmt: skip
        with np.errstate(invalid="ignore"):
            alive = (rx > cfg.loss_of_light_dbm) & (tx > cfg.loss_of_light_dbm)
            lit_rx = rx > cfg.loss_of_light_dbm
            lit_tx = tx > cfg.loss_of_light_dbm
            rules = (
                # symptom, metric, mask, level that defines it, below?
                ("rx_power_drop", "rx_power_dbm", lit_rx & (base["rx_power_dbm"] - rx >= rx_step),
                 base["rx_power_dbm"] - rx_step, True),
                ("tx_power_drop", "tx_power_dbm", lit_tx & (base["tx_power_dbm"] - tx >= tx_step),
                 base["tx_power_dbm"] - tx_step, True),
                ("rx_power_dip", "rx_power_dbm",
                 lit_rx & (base["rx_power_dbm"] - rx >= rx_dip) & ~(base["rx_power_dbm"] - rx >= rx_step),
                 base["rx_power_dbm"] - rx_dip, True),
                ("tx_power_dip", "tx_power_dbm",
                 lit_tx & (base["tx_power_dbm"] - tx >= tx_dip) & ~(base["tx_power_dbm"] - tx >= tx_step),
                 base["tx_power_dbm"] - tx_dip, True),
                ("bias_rise", "bias_ma", bias >= base["bias_ma"] * (1 + cfg.bias_rise_frac),
                 base["bias_ma"] * (1 + cfg.bias_rise_frac), False),
                ("module_temp_rise", "module_temp_c", temp - base["module_temp_c"] >= cfg.module_temp_rise_c,
                 base["module_temp_c"] + cfg.module_temp_rise_c, False),
            )  # fmt: skip
        out: list[Finding] = []
        for symptom, metric, mask, threshold, below in rules:
            if mask.any():
                first = first_crossing(full, metric, threshold, below)
                out += lane_findings(
                    self.name, symptom, "minor" if symptom.endswith("_drop") else "warning", now, mask, metric,
                    level[metric], first, worst="min" if below else "max", reference=("baseline", base[metric]),
                )  # fmt: skip
        if self._swapped_at:  # learn a new module's level only from samples all taken after the swap
            since = float(np.nanmin(now.first_ts()))
            self._swapped_at = {p: t for p, t in self._swapped_at.items() if t >= since}
            alive &= ~keys.levels[0].isin(list(self._swapped_at))[keys.codes[0]]  # by port, spread to lanes
        self.baselines.update(keys, level, window.end, learn=alive)
        if measured is not None:
            self.noise.update(keys, measured, window.end, learn=alive)
        return out

    def _replaced(self, window: Window) -> None:
        """Forget both ends' baselines of every port whose module identity changed since last seen."""
        mods = window.modules
        if mods is None or not len(mods) or "port" not in mods.columns:
            return
        columns = [c for c in IDENTITY if c in mods.columns]
        if not columns:
            return
        if "ts" in mods.columns:  # only module rows newer than the last tick's need a look
            ts = pd.to_numeric(mods["ts"], errors="coerce")
            new = ~(ts <= self._modules_ts).to_numpy()
            if not new.any():  # the usual tick: nothing new (filtering the frame costs more than this)
                return
            fresh = mods[new]
            if not len(fresh):
                return
            self._modules_ts = max(self._modules_ts, float(ts.max()))
            mods = fresh.sort_values("ts", kind="stable")
        # a row with an identity field unread (a collector's N/A cell) says nothing of the module: skipped
        mods = mods[mods[columns].notna().all(axis=1).to_numpy()]
        latest = mods.drop_duplicates("port", keep="last")
        ident = ["|".join(str(v) for v in row) for row in latest[columns].itertuples(index=False)]
        swapped: set[str] = set()
        peer = window.topology.port_peer
        when = pd.to_numeric(latest["ts"], errors="coerce") if "ts" in latest.columns else [window.end] * len(latest)
        for port, name, at in zip(latest["port"].astype(str), ident, when, strict=True):
            before = self.modules.get(port)
            if before is not None and before != name:
                swapped |= {port, peer.get(port, port)}
                for end in (port, peer.get(port, port)):
                    self._swapped_at[end] = float(at) if np.isfinite(at) else window.end
            self.modules[port] = name
        if swapped:
            self.baselines.forget(swapped)
            self.noise.forget(swapped)

    def _retrained(self, window: Window) -> None:
        """Forget both ends' baselines of every link whose link_down_total rose since the last look."""
        ports = keyed(window, "port")
        if not ports.n:
            return
        st = ports.steps("link_down_total")
        new = (st.step > 0) & (st.ts > self._retrain_ts)
        if not new.any():
            return
        self._retrain_ts = float(st.ts[new].max())
        peer = window.topology.port_peer
        gone: set[str] = set()
        for code, at in zip(st.codes[new], st.ts[new], strict=True):
            port = ports.names[code]
            for end in (port, peer.get(port, port)):
                gone.add(end)
                self._swapped_at[end] = max(self._swapped_at.get(end, -np.inf), float(at))
        self.baselines.forget(gone)
        self.noise.forget(gone)

    def snapshot(self) -> dict[str, Any]:
        return {
            "lanes": self.baselines.snapshot(),
            "noise": self.noise.snapshot(),
            "modules": dict(sorted(self.modules.items())),
            "noise_at": self._noise_at if np.isfinite(self._noise_at) else None,
            "retrain_ts": self._retrain_ts if np.isfinite(self._retrain_ts) else None,
            "swapped_at": dict(sorted(self._swapped_at.items())),
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.baselines.restore(state.get("lanes", {}))
        self.noise.restore(state.get("noise", {}))
        self.modules = dict(state.get("modules", {}))
        self._noise_at = state["noise_at"] if state.get("noise_at") is not None else -np.inf
        self._retrain_ts = state["retrain_ts"] if state.get("retrain_ts") is not None else -np.inf
        self._swapped_at = {str(k): float(v) for k, v in state.get("swapped_at", {}).items()}

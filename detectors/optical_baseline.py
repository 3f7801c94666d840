"""Optical levels against each lane's own past: what finds a dirty connector before any alarm.

Per lane it learns rx and tx power, laser bias and module temperature (detectors/baseline.py: the
average of the first ticks, then slow drift only within a gate, so a fault is never learnt). Then:

* rx ``rx_drop_db`` below its baseline: light lost on the way in (contamination is 2-6 dB);
* tx ``tx_drop_db`` below its baseline: the laser itself fades;
* bias ``bias_rise_frac`` above its baseline: the laser is driven harder (ageing, or heat);
* module temperature ``module_temp_rise_c`` above its baseline (a hot GPU next to its NPO engine).

A dark lane (below ``loss_of_light_dbm``) is neither judged nor learnt: that is loss of light.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.baseline import BaselineConfig, Baselines, Gate
from fabricwatch.detectors.config import RECENT_S
from fabricwatch.detectors.frames import first_crossing, keyed, lane_findings, recent
from fabricwatch.records import Finding, Window

METRICS = ("rx_power_dbm", "tx_power_dbm", "bias_ma", "module_temp_c")


class OpticalBaselineConfig(BaselineConfig):
    loss_of_light_dbm: float = -30.0  # below this a lane is dark: neither judged nor learnt
    rx_drop_db: float = 2.0  # rx down this much vs the lane's own baseline (contamination is 2-6 dB)
    tx_drop_db: float = 1.5  # tx down this much vs baseline: the laser itself is fading
    bias_rise_frac: float = 0.10  # bias up 10 % vs baseline: a laser pushed harder for its light
    module_temp_rise_c: float = 8.0  # module temperature up this much vs baseline
    baseline_gate_db: float = 1.0  # baselines follow drift only while within this of the level (a fault
    baseline_gate_frac: float = 0.05  # is not learnt); the same gate for bias, relative ...
    baseline_gate_c: float = 3.0  # ... and for module temperature


class OpticalBaseline(Detector):
    name = "optical_baseline"
    emits = frozenset({"rx_power_drop", "tx_power_drop", "bias_rise", "module_temp_rise"})
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

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        now = recent(window, "optical", self.recent_s)
        if not now.n:
            return []
        full = keyed(window, "optical")
        keys = now.index
        level = {m: now.median(m) for m in METRICS}
        base = self.baselines.lookup(keys)
        rx, tx, bias, temp = (level[m] for m in METRICS)
        with np.errstate(invalid="ignore"):
            alive = (rx > cfg.loss_of_light_dbm) & (tx > cfg.loss_of_light_dbm)
            lit_rx = rx > cfg.loss_of_light_dbm
            lit_tx = tx > cfg.loss_of_light_dbm
            rules = (
                # symptom, metric, mask, level that defines it, below?
                ("rx_power_drop", "rx_power_dbm", lit_rx & (base["rx_power_dbm"] - rx >= cfg.rx_drop_db),
                 base["rx_power_dbm"] - cfg.rx_drop_db, True),
                ("tx_power_drop", "tx_power_dbm", lit_tx & (base["tx_power_dbm"] - tx >= cfg.tx_drop_db),
                 base["tx_power_dbm"] - cfg.tx_drop_db, True),
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
                    self.name, symptom, "minor" if metric.endswith("dbm") else "warning", now, mask, metric,
                    level[metric], first, worst="min" if below else "max", reference=("baseline", base[metric]),
                )  # fmt: skip
        self.baselines.update(keys, level, window.end, learn=alive)
        return out

    def snapshot(self) -> dict[str, Any]:
        return {"lanes": self.baselines.snapshot()}

    def restore(self, state: dict[str, Any]) -> None:
        self.baselines.restore(state.get("lanes", {}))

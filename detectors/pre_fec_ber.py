"""Pre-FEC bit error ratio: above what RS(544,514) can correct, well above healthy, or rising.

Healthy 400G PAM4 lanes sit around 1e-9..1e-6. Above ``ber_limit`` (2.4e-4, the KP4 FEC limit) frames
are lost; above ``ber_warn`` (and ``ber_fleet_factor`` times the fleet's median, so a fleet that runs
hotter than textbook is not all "high") the link has little margin left. A BER ``ber_rise_factor`` times its own
baseline (learnt in log10, so a decade is a decade at any level) is the early sign of optics under
stress — a hot NPO engine, a dirtying connector — long before the limit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.baseline import BaselineConfig, Baselines, Gate
from fabricwatch.detectors.config import RECENT_S
from fabricwatch.detectors.frames import first_crossing, keyed, recent, sig, ts_or
from fabricwatch.records import Finding, Window

BER_FLOOR = 1e-15  # a BER of 0 (nothing counted) is learnt as this, so its log is finite


class PreFecBerConfig(BaselineConfig):
    ber_limit: float = 2.4e-4  # RS(544,514) "KP4" FEC correction limit (IEEE 802.3bs)
    ber_warn: float = 1e-5  # 10x above the worst healthy 400G PAM4 lane (1e-9..1e-6) ...
    ber_fleet_factor: float = 10.0  # ... and 10x the fleet's median BER (a fleet that runs at 1e-6 is normal)
    ber_rise_factor: float = 100.0  # BER this many times its own baseline (and ≥ ber_rise_floor)
    ber_rise_floor: float = 1e-7


class PreFecBer(Detector):
    name = "pre_fec_ber"
    emits = frozenset({"ber_above_limit", "ber_high", "ber_rise"})
    Config = PreFecBerConfig
    config: PreFecBerConfig

    def __init__(self, config: PreFecBerConfig | None = None, *, recent_s: float = RECENT_S) -> None:
        super().__init__(config, recent_s=recent_s)
        cfg = self.config
        self.baseline = Baselines(
            {"log10_ber": Gate(1.0)}, cfg.baseline_warmup_ticks, cfg.baseline_tau_s
        )  # gate: a decade

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        now = recent(window, "port", self.recent_s)
        if not now.n:
            return []
        ber = now.median("pre_fec_ber")
        log_ber = np.log10(np.maximum(ber, BER_FLOOR))
        base = self.baseline.lookup(now.index)["log10_ber"]
        fleet = np.nanmedian(ber) if np.isfinite(ber).any() else np.nan
        warn = max(cfg.ber_warn, cfg.ber_fleet_factor * fleet) if np.isfinite(fleet) else cfg.ber_warn
        with np.errstate(invalid="ignore"):
            above = ber >= cfg.ber_limit
            high = ~above & (ber >= warn)
            rise = ~above & ~high & (ber >= cfg.ber_rise_floor) & (log_ber - base >= np.log10(cfg.ber_rise_factor))
        self.baseline.update(now.index, {"log10_ber": log_ber}, window.end)
        full = keyed(window, "port")
        last_ts = now.last_ts()
        out: list[Finding] = []
        rules = (
            ("ber_above_limit", "major", above, np.full(now.n, cfg.ber_limit), "threshold"),
            ("ber_high", "minor", high, np.full(now.n, warn), "threshold"),
            ("ber_rise", "warning", rise, 10.0 ** (base + np.log10(cfg.ber_rise_factor)), "baseline"),
        )
        for symptom, severity, mask, level, ref in rules:
            flagged = np.flatnonzero(mask)
            if not len(flagged):
                continue
            first = first_crossing(full, "pre_fec_ber", level, below=False)
            for i in flagged:
                port = str(now.index[i])
                reference = level[i] if ref == "threshold" else 10.0 ** base[i]
                out.append(
                    Finding(
                        detector=self.name,
                        symptom=symptom,
                        entity="port",
                        id=port,
                        first_seen=ts_or(first[i], last_ts[i]),
                        last_seen=float(last_ts[i]),
                        severity=severity,
                        evidence=(
                            {"metric": "pre_fec_ber", "port": port, "value": sig(ber[i], 3), ref: sig(reference, 3)},
                        ),
                        score=float(log_ber[i] - np.log10(level[i])),
                        attrs={"pre_fec_ber": sig(ber[i], 3)},
                    )
                )
        return out

    def snapshot(self) -> dict[str, Any]:
        return {"log10_ber": self.baseline.snapshot()}

    def restore(self, state: dict[str, Any]) -> None:
        self.baseline.restore(state.get("log10_ber", {}))

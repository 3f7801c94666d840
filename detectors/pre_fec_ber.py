"""Pre-FEC bit error ratio: above what RS(544,514) can correct, well above healthy, or rising.

Healthy 400G PAM4 lanes sit around 1e-9..1e-6. Above ``ber_limit`` (2.4e-4, the KP4 FEC limit) frames
are lost; above ``ber_warn`` (and ``ber_fleet_factor`` times the fleet's median, so a fleet that runs
hotter than textbook is not all "high") the link has little margin left. A BER ``ber_rise_factor`` times its own
baseline (learnt in log10, so a decade is a decade at any level) is the early sign of optics under
stress — a hot NPO engine, a dirtying connector — long before the limit.

Where a source has no BER column (ethtool -S on mlx5 counts corrected *bits* instead,
``rx_corrected_bits_phy`` → ``fec_corrected_total``), the BER is those bits over the bits the PHY
carried: the corrected-bit rate over the line rate through the FEC. A port with neither (or without
its speed) has an unknown BER: it gets no finding, never a "healthy" one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.baseline import BaselineConfig, Baselines, Gate
from fabricwatch.detectors.config import RECENT_S
from fabricwatch.detectors.frames import Keyed, first_crossing, first_per_code, keyed, recent, sig, ts_or
from fabricwatch.records import Finding, Window

BER_FLOOR = 1e-15  # a BER of 0 (nothing counted) is learnt as this, so its log is finite
# Bits through the FEC per bit of MAC rate: 256b/257b transcoding, then RS(544,514) parity (IEEE 802.3
# clauses 91/119): 400 Gb/s Ethernet is 425 Gb/s on the wire (4 x 106.25 Gb/s lanes).
FEC_LINE_FACTOR = (257 / 256) * (544 / 514)
FROM_BITS = "fec_corrected_total"  # evidence of a BER derived from corrected bits says so


def line_bits_per_s(at: Keyed) -> np.ndarray:
    """Per entity, the bits a second through the FEC at the reported speed (NaN: speed unknown)."""
    speed = at.last("speed_gbps")
    return np.where(speed > 0, speed * 1e9 * FEC_LINE_FACTOR, np.nan)


def corrected_ber(at: Keyed) -> np.ndarray:
    """Per entity, pre-FEC BER from the corrected-bit counter (NaN where it or the speed is unknown)."""
    rate = at.increase("fec_corrected_total").rate()
    with np.errstate(invalid="ignore", divide="ignore"):
        return rate / line_bits_per_s(at)


def first_corrected_crossing(full: Keyed, level: np.ndarray) -> np.ndarray:
    """Per entity, the ts of the first corrected-bit step whose BER reached ``level`` (NaN: never)."""
    st = full.steps("fec_corrected_total")
    bits = line_bits_per_s(full)
    with np.errstate(invalid="ignore", divide="ignore"):
        hit = (st.dt > 0) & (st.step / st.dt / bits[st.codes] >= level[st.codes])
    return first_per_code(st.codes[hit], st.ts[hit], full.n)


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
        derived = np.isnan(ber) & (now.has("fec_corrected_total") if now.n else False)
        if derived.any():
            ber = np.where(derived, corrected_ber(now), ber)
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
            if derived.any():
                first = np.where(derived, first_corrected_crossing(full, level), first)
            for i in flagged:
                port = now.names[i]
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
                            {"metric": "pre_fec_ber", "port": port, "value": sig(ber[i], 3), ref: sig(reference, 3)}
                            | ({"from": FROM_BITS} if derived[i] else {}),
                        ),
                        score=float(log_ber[i] - np.log10(level[i])),
                        attrs={"pre_fec_ber": sig(ber[i], 3)} | ({"ber_from": FROM_BITS} if derived[i] else {}),
                    )
                )
        return out

    def snapshot(self) -> dict[str, Any]:
        return {"log10_ber": self.baseline.snapshot()}

    def restore(self, state: dict[str, Any]) -> None:
        self.baseline.restore(state.get("log10_ber", {}))

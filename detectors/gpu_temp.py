"""GPU temperature at or above the hot limit (the seeds' rule: ≥ 85 °C → throttle).

The level is the median of the last ``recent_s`` (one hot sample is noise, not a page); the NVML
clocks-event reasons that say the GPU is already slowing itself down for heat come with it as
evidence. Whether the heat is the GPU's own, its cooling loop's, or cooks its optics is decided
later by correlation.
"""

from __future__ import annotations

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.frames import keyed, recent, sig, ts_or
from fabricwatch.records import Finding, Window

# NVML clocks-event reasons (nvmlClocksEventReasons*, nvml.h); the ones caused by heat are thermal.
CLOCKS_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THERMAL_MASK = 0x20 | 0x40
HW_THERMAL = 0x40


def reasons(mask: int) -> list[str]:
    return [name for bit, name in CLOCKS_EVENT_REASONS.items() if mask & bit]


# The seeds' rule; NVIDIA's "max operating" (gpu_temp_max_gpu_threshold) on A100. The detectors that
# judge by the same limit (cooling_loop, gpu_model) take their default from here.
GPU_HOT_C = 85.0


class GpuTemperatureConfig(DetectorConfig):
    gpu_hot_c: float = GPU_HOT_C  # see the constant
    gpu_critical_c: float = 90.0  # a few degrees below the slowdown threshold (89-92 °C in nvidia-smi -q)


class GpuTemperature(Detector):
    name = "gpu_temp"
    emits = frozenset({"gpu_hot"})
    Config = GpuTemperatureConfig
    config: GpuTemperatureConfig

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        now = recent(window, "gpu", self.recent_s)
        if not now.n:
            return []
        temp = now.median("temp_c")
        hot = np.flatnonzero(temp >= cfg.gpu_hot_c)
        if not len(hot):
            return []
        mask = now.last("throttle_mask")
        full = keyed(window, "gpu")
        first = full.first_ts_where(full.values("temp_c") >= cfg.gpu_hot_c)
        last_ts = now.last_ts()
        out = []
        for i in hot:
            gpu = now.names[i]
            bits = int(mask[i]) if np.isfinite(mask[i]) else 0
            thermal = reasons(bits & THERMAL_MASK)
            evidence = [{"metric": "temp_c", "gpu": gpu, "value": sig(temp[i]), "threshold": cfg.gpu_hot_c}]
            if bits:
                evidence.append({"metric": "throttle_mask", "gpu": gpu, "value": bits, "reasons": reasons(bits)})
            critical = temp[i] >= cfg.gpu_critical_c or bool(bits & HW_THERMAL)
            out.append(
                Finding(
                    detector=self.name,
                    symptom="gpu_hot",
                    entity="gpu",
                    id=gpu,
                    first_seen=ts_or(first[i], last_ts[i]),
                    last_seen=float(last_ts[i]),
                    severity="critical" if critical else "major",
                    evidence=tuple(evidence),
                    score=float(temp[i] - cfg.gpu_hot_c),
                    attrs={"runbook": "throttle-gpu", "temp_c": sig(temp[i]), "thermal_throttle": thermal},
                )
            )
        return out

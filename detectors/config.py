"""Every threshold of detection in one frozen object, checked once at load (STYLE item 2).

Numbers come from the hardware, not from one simulator: each field says where it comes from. Rules
compare against the data's own thresholds first (a module's alarm levels), then against the entity's
own baseline, its peers or the other end of its link; absolute limits are the last resort.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from fabricwatch.errors import InputError


@dataclass(frozen=True, slots=True)
class EngineConfig:
    # --- cadence ---------------------------------------------------------------------------------
    window_s: float = 60.0  # history a tick looks at
    every_s: float = 10.0  # tick cadence in telemetry time
    recent_s: float = 30.0  # gauges: median of the last recent_s; counters: increase over it (stretched
    # to 2.5 scrape intervals when the data is scraped more slowly, so a counter always has two samples)
    detectors: tuple[str, ...] = ()  # names from detectors.base.DETECTORS; empty = all of them

    # --- GPUs ------------------------------------------------------------------------------------
    gpu_hot_c: float = 85.0  # the seeds' rule; NVIDIA's "max operating" (gpu_temp_max_gpu_threshold) on A100
    gpu_critical_c: float = 90.0  # a few degrees below the slowdown threshold (89-92 °C in nvidia-smi -q)
    gpu_peer_excess_c: float = 10.0  # hotter than the median of its cooling-loop peers by this much
    gpu_peer_mad_k: float = 5.0  # ... and by this many robust standard deviations of the peers' spread
    gpu_peer_min: int = 4  # fewer peers than this: no peer comparison
    gpu_peer_load_margin_pct: float = 15.0  # a GPU busier than its peers by more than this is not compared
    loop_excess_c: float = 6.0  # a loop's median GPU above the other loops' median, beyond its own baseline
    loop_excess_abs_c: float = 12.0  # ... or this much above without a baseline (no baseline learnt yet)
    loop_hot_min_gpus: int = 4  # a loop with this many GPUs hot ...
    loop_hot_min_fraction: float = 0.25  # ... being at least this share of its GPUs is a cooling failure
    # XIDs that mean broken hardware (NVIDIA XID catalogue): 48 DBE, 63/64 row remap, 74 NVLink,
    # 79 fallen off the bus, 92 high SBE rate, 94/95 contained/uncontained ECC, 119/120 GSP.
    xid_critical: tuple[int, ...] = (48, 64, 74, 79, 92, 95, 119, 120)
    xid_ignore: tuple[int, ...] = ()  # e.g. (13, 31, 43) where application faults must not page

    # --- optics (defaults for a module that never reported its thresholds: 400GBASE-DR4) ---------
    # IEEE 802.3bs cl. 124: launch power -2.9..+4.0 dBm a lane, receive ≥ -5.9 dBm average; vendors
    # put the low alarm ~3 dB under the warning. Loss of light reads about -40 dBm.
    dr4_rx_low_warn_dbm: float = -5.9
    dr4_rx_low_alarm_dbm: float = -8.9
    dr4_tx_low_warn_dbm: float = -2.9
    dr4_tx_low_alarm_dbm: float = -5.9
    dr4_temp_high_warn_c: float = 70.0  # QSFP-DD case temperature limit
    dr4_temp_high_alarm_c: float = 75.0
    loss_of_light_dbm: float = -30.0  # below this a lane receives (or sends) nothing
    rx_drop_db: float = 2.0  # rx down this much vs the lane's own baseline (contamination is 2-6 dB)
    tx_drop_db: float = 1.5  # tx down this much vs baseline: the laser itself is fading
    bias_rise_frac: float = 0.10  # bias up 10 % vs baseline: a laser pushed harder for its light
    module_temp_rise_c: float = 8.0  # module temperature up this much vs baseline
    link_loss_max_db: float = 5.0  # tx(far) - rx(near) above this: out of any DR4 budget (3 dB + margin) ...
    link_loss_margin_db: float = 3.0  # ... and this much above the fleet's median loss (DOM calibration differs)
    baseline_warmup_ticks: int = 3  # ticks averaged before a baseline is trusted
    baseline_tau_s: float = 86_400.0  # then it follows slow drift with this time constant ...
    baseline_gate_db: float = 1.0  # ... but only while within this of the baseline (a fault is not learnt)
    baseline_gate_frac: float = 0.05  # the same gate for bias, relative
    baseline_gate_c: float = 3.0  # the same gate for temperatures

    # --- errors ----------------------------------------------------------------------------------
    ber_limit: float = 2.4e-4  # RS(544,514) "KP4" FEC correction limit (IEEE 802.3bs)
    ber_warn: float = 1e-5  # 10x above the worst healthy 400G PAM4 lane (1e-9..1e-6) ...
    ber_fleet_factor: float = 10.0  # ... and 10x the fleet's median BER (a fleet that runs at 1e-6 is normal)
    ber_rise_factor: float = 100.0  # BER this many times its own baseline (and ≥ ber_rise_floor)
    ber_rise_floor: float = 1e-7
    loss_ratio: float = 0.01  # the seeds' rule: ≥ 1 % of frames lost on a link
    loss_min_frames: int = 10  # a ratio over fewer lost frames is noise
    mtu_bytes: int = 4096  # RoCEv2 MTU, to count frames from bytes when frame counters are absent
    fec_uncorrectable_min: int = 1  # uncorrectable codewords in recent_s; healthy post-FEC BER ~1e-15
    flap_min_events: int = 2  # link-down events within flap_memory_s that make a flap
    flap_memory_s: float = 300.0

    # --- congestion and PFC ----------------------------------------------------------------------
    line_rate_frac: float = 0.9  # egress at ≥ 90 % of line rate
    ecn_frac: float = 0.01  # ≥ 1 % of frames ECN-marked
    queue_high_bytes: int = 1 << 20  # 1 MiB queued: far above a RoCE ECN Kmin (~100-400 KB at 400G)
    pause_rate_min: float = 1000.0  # pause frames/s that count as pausing (a storm refreshes ~12k/s)
    storm_max_util_frac: float = 0.2  # a storm source carries little traffic ...
    storm_max_queue_bytes: int = 64 << 10  # ... and has nothing queued behind its pauses

    # --- correlation -----------------------------------------------------------------------------
    switch_fault_min_links: int = 4  # links with errors on one switch ...
    switch_fault_min_fraction: float = 0.25  # ... being this share of its links: the switch is the root

    # --- incident tracker ------------------------------------------------------------------------
    open_after_s: float = 30.0  # a diagnosis must hold this long (and every tick) before it pages
    resolve_after_s: float = 120.0  # and be gone this long before its incident resolves
    max_evidence: int = 8

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float | int) and not isinstance(value, bool) and not math.isfinite(value):
                raise InputError("engine config", f"{f.name} must be finite, not {value!r}")
        for name in ("window_s", "every_s", "recent_s", "open_after_s", "resolve_after_s", "flap_memory_s"):
            if getattr(self, name) <= 0:
                raise InputError("engine config", f"{name} must be > 0, not {getattr(self, name)!r}")
        if self.recent_s > self.window_s:
            raise InputError(
                "engine config", f"recent_s ({self.recent_s:g}) must not exceed window_s ({self.window_s:g})"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, place: str = "engine config") -> EngineConfig:
        """Build from a mapping (a YAML section); unknown keys and wrong types are one clear error."""
        data = data or {}
        if not isinstance(data, dict):
            raise InputError(place, "must be a mapping of threshold names to values")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(map(str, data)) - set(fields))
        if unknown:
            raise InputError(place, f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(fields))})")
        kwargs: dict[str, Any] = {}
        for name, value in data.items():
            default = getattr(cls(), name)
            if isinstance(default, tuple):
                if not isinstance(value, list | tuple):
                    raise InputError(place, f"{name} must be a list, not {value!r}")
                kwargs[name] = tuple(value)
            elif isinstance(default, bool) or not isinstance(value, int | float) or isinstance(value, bool):
                raise InputError(place, f"{name} must be a number, not {value!r}")
            elif isinstance(default, int) and not isinstance(default, bool):
                if value != int(value):
                    raise InputError(place, f"{name} must be an integer, not {value!r}")
                kwargs[name] = int(value)
            else:
                kwargs[name] = float(value)
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

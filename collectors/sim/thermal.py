"""GPU power, temperature and clocks-event (throttle) reasons; NPO module temperatures on GPU ports.

The GPU modelled is a liquid-cooled 700 W SXM part (H100 SXM5 datasheet: 700 W TDP, 1980 MHz max
boost). Power follows the job's phase (job.py): ~675 W in compute, ~430 W during all-reduce, averaged
over one second as NVML reports it. Temperature is a first-order lag (τ = 15 s, die plus cold plate)
towards

    T = T_coolant + R_th · P

with R_th ≈ 0.052 °C/W per GPU (±5 %) and the coolant of the GPU's cooling loop at 35 ± 1.5 °C (ASHRAE
W40-class facility water through a CDU) plus a per-GPU manifold offset. Healthy GPUs sit at 60-75 °C.
HBM follows with its own resistance (mem_temp_c a few °C above the core).

Thermal limits are those nvidia-smi reports for an SXM part (../shared/data/nvidia-smi/a100-sxm4-v12.xml:
max operating 85 °C, slowdown 89 °C, shutdown 92 °C). Throttle bits are NVML clocks-event reasons
(nvml.h ``nvmlClocksEventReason*``):

* SW_POWER_CAP 0x4 while demand exceeds the 700 W limit (a few high-leakage GPUs, in compute phases:
  a healthy outlier, not a fault);
* SW_THERMAL 0x20 once the core reaches 85 °C: the driver cuts power until T settles at ~86 °C;
* HW_SLOWDOWN 0x8 and HW_THERMAL 0x40 at 89 °C, when even the lowest power cannot hold it.

Clocks fall with power as f ∝ P^0.4 (dynamic power ∝ f·V², V roughly ∝ f over the DVFS range), in
NVML's 15 MHz steps; readings are integers like NVML's (temperature °C, utilisation %).

Near-package optics share the GPU's substrate and cold plate. Healthy, an engine's temperature follows
the coolant and the GPU's *power* (heat spreading through the shared cold plate):
T_module = T_coolant + 0.018 °C/W · P + ~5 °C of its own dissipation, about 50 °C. It does not follow
the die temperature: a GPU that runs hot through a bad die-side interface leaves its optics alone. The
npo_thermal_coupling fault adds a direct path from the hot die (weight ``coupling``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

POWER_LIMIT_W = 700.0
IDLE_W = 90.0
COMPUTE_W = 675.0
COMM_W = 430.0
JOB_MEAN_W = 0.7 * COMPUTE_W + 0.3 * COMM_W  # the typical load "at the same load as its peers"
MIN_THROTTLED_W = 150.0
MAX_CLOCK_MHZ = 1980.0
CLOCK_STEP_MHZ = 15.0
T_MAX_OPERATING = 85.0
T_THROTTLE_HOLD = 86.0
T_SLOWDOWN = 89.0
COOLANT_C = 35.0
TAU_GPU_S = 15.0
TAU_MEM_S = 25.0
TAU_MODULE_S = 30.0
R_DIE = 0.052  # °C/W
R_MEM = 0.050
MEM_OFFSET_C = 2.0
R_MODULE = 0.018  # °C/W of GPU power reaching the engine through the shared cold plate
MODULE_SELF_C = 5.0
FLOW_LOSS_R = 0.35  # cooling failure: the cold plate's resistance rises this much at full severity

GPU_IDLE = 0x1
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40


@dataclass(slots=True)
class GpuReadings:
    util_pct: np.ndarray
    mem_util_pct: np.ndarray
    temp_c: np.ndarray
    mem_temp_c: np.ndarray
    power_w: np.ndarray
    sm_clock_mhz: np.ndarray
    throttle_mask: np.ndarray
    mean_power_w: np.ndarray  # over the interval, for the optics' heat path


class GpuThermal:
    """Per-GPU constants and the lagged temperatures (state between scrapes)."""

    def __init__(self, n_gpus: int, n_loops: int, gpu_loop: np.ndarray, gen: np.random.Generator) -> None:
        self.G = n_gpus
        self.gpu_loop = gpu_loop
        self.compute_w = COMPUTE_W * (1.0 + np.clip(gen.normal(0.0, 0.022, n_gpus), -0.06, 0.06))
        self.comm_w = COMM_W * (1.0 + np.clip(gen.normal(0.0, 0.03, n_gpus), -0.08, 0.08))
        self.r_die = R_DIE * (1.0 + np.clip(gen.normal(0.0, 0.05, n_gpus), -0.12, 0.12))
        self.r_mem = R_MEM * (1.0 + np.clip(gen.normal(0.0, 0.05, n_gpus), -0.12, 0.12))
        self.inlet_offset = np.clip(gen.normal(0.0, 0.5, n_gpus), -1.2, 1.2)
        self.loop_base = COOLANT_C + gen.uniform(-1.5, 1.5, n_loops)
        self.loop_wander_period = gen.uniform(900.0, 1500.0, n_loops)
        self.loop_wander_phase = gen.uniform(0.0, 2 * math.pi, n_loops)
        self.module_self = MODULE_SELF_C + np.clip(gen.normal(0.0, 1.0, n_gpus), -2.5, 2.5)
        self.mem_util_base = gen.uniform(40.0, 60.0, n_gpus)
        self.temp: np.ndarray | None = None
        self.mem_temp: np.ndarray | None = None
        self.module_temp: np.ndarray | None = None

    def coolant(self, t: float) -> np.ndarray:
        """Coolant at each GPU: loop set point, a slow CDU control wander of ±0.5 °C, manifold offset."""
        loop = self.loop_base + 0.5 * np.sin(2 * math.pi * t / self.loop_wander_period + self.loop_wander_phase)
        return loop[self.gpu_loop] + self.inlet_offset

    def step(
        self,
        *,
        dt: float,
        coolant: np.ndarray,
        comm_recent: float,
        comm_interval: float,
        r_mult: np.ndarray,
        r_extra: np.ndarray,
        npo_coupling: np.ndarray,
        noise: np.random.Generator,
        busy: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[GpuReadings, np.ndarray]:
        """Advance by ``dt`` seconds; returns the readings and the NPO module temperature per GPU.

        ``busy`` is (share of the job each GPU runs at the scrape, over the interval); None: all of it.
        An idle GPU draws IDLE_W, shows 0 % utilisation and NVML's GpuIdle bit.
        """
        z = noise.standard_normal((6, self.G))
        r_total = self.r_die * r_mult + r_extra
        demand_now = self.compute_w * (1 - comm_recent) + self.comm_w * comm_recent
        demand_mean = self.compute_w * (1 - comm_interval) + self.comm_w * comm_interval
        if busy is not None:
            demand_now = busy[0] * demand_now + (1.0 - busy[0]) * IDLE_W
            demand_mean = busy[1] * demand_mean + (1.0 - busy[1]) * IDLE_W
        first = self.temp is None
        if first:
            self.temp = coolant + r_total * np.minimum(demand_mean, POWER_LIMIT_W)
        prev = self.temp
        # Thermal slowdown engages once the core has reached the max operating temperature and holds
        # it just above; HW slowdown when even the minimum throttled power cannot.
        hold_w = np.maximum((T_THROTTLE_HOLD - coolant) / r_total, MIN_THROTTLED_W)
        thermal = (prev >= T_MAX_OPERATING) & (hold_w < np.minimum(demand_mean, POWER_LIMIT_W))
        cap_now = np.minimum(demand_now, POWER_LIMIT_W)
        power_now = np.where(thermal, np.minimum(cap_now, hold_w), cap_now)
        cap_mean = np.minimum(demand_mean, POWER_LIMIT_W)
        power_mean = np.where(thermal, np.minimum(cap_mean, hold_w), cap_mean)

        target = coolant + r_total * power_mean
        a = 1.0 if first else 1.0 - math.exp(-dt / TAU_GPU_S)
        self.temp = prev + (target - prev) * a
        mem_target = coolant + self.r_mem * r_mult * power_mean + MEM_OFFSET_C
        am = 1.0 if self.mem_temp is None else 1.0 - math.exp(-dt / TAU_MEM_S)
        self.mem_temp = mem_target if self.mem_temp is None else self.mem_temp + (mem_target - self.mem_temp) * am

        healthy_module = coolant + R_MODULE * r_mult * power_mean + self.module_self
        module_target = healthy_module + npo_coupling * np.maximum(self.temp - healthy_module, 0.0)
        amod = 1.0 if self.module_temp is None else 1.0 - math.exp(-dt / TAU_MODULE_S)
        self.module_temp = (
            module_target if self.module_temp is None else self.module_temp + (module_target - self.module_temp) * amod
        )

        mask = np.zeros(self.G, dtype=np.int64)
        mask |= np.where(demand_now > POWER_LIMIT_W, SW_POWER_CAP, 0)
        mask |= np.where(thermal, SW_THERMAL, 0)
        hot = self.temp >= T_SLOWDOWN
        mask |= np.where(hot, HW_SLOWDOWN | HW_THERMAL, 0)
        ratio = np.clip(power_now / np.maximum(demand_now, 1.0), 0.05, 1.0)
        clock = MAX_CLOCK_MHZ * ratio**0.4 + 8.0 * z[0]
        clock = np.minimum(np.round(clock / CLOCK_STEP_MHZ) * CLOCK_STEP_MHZ, MAX_CLOCK_MHZ)

        util = np.clip(np.round(99.0 - 22.0 * comm_recent + 1.2 * z[1]), 0, 100)
        mem_util = np.clip(np.round(self.mem_util_base * (1.0 - 0.6 * comm_recent) + 2.0 * z[2]), 0, 100)
        if busy is not None:
            idle = busy[0] <= 0.0
            util = np.where(idle, 0.0, util)
            mem_util = np.where(idle, 0.0, mem_util)
            mask |= np.where(idle, GPU_IDLE, 0)
        power_read = np.round(np.maximum(power_now + 4.0 * z[3], IDLE_W), 2)
        temp_read = np.round(self.temp + 0.3 * z[4])
        mem_read = np.round(self.mem_temp + 0.3 * z[5])
        readings = GpuReadings(util, mem_util, temp_read, mem_read, power_read, clock, mask, power_mean)
        return readings, self.module_temp

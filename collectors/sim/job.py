"""The training job's load: synchronous data-parallel iterations of compute then all-reduce.

A large-model training step is a compute phase (forward and backward passes; GPUs near their power
limit, the network nearly idle) followed by a communication phase (gradient all-reduce over the rails;
host links near line rate, GPUs busy with NCCL kernels at lower power). Iterations of a few seconds
with ~30 % of the time in exposed communication are typical of data-parallel jobs at this scale
(MLPerf training reference runs report step times of 1-10 s). The whole supernode runs one job in
lock-step, so every GPU shares the phase; per-GPU and per-link spread is added by the models that
use it.

The phase is a square wave, so its integral over any interval is exact: byte counters integrate
rate × time without sampling error, whatever the scrape interval.
"""

from __future__ import annotations

import math

import numpy as np

COMM_FRACTION = 0.30  # share of an iteration spent in exposed all-reduce
POWER_WINDOW_S = 1.0  # NVML power and utilisation readings average over about one second


class TrainingJob:
    """The phase of the job over time; the iteration period and phase come from the seed."""

    def __init__(self, gen: np.random.Generator) -> None:
        self.period = float(gen.uniform(3.5, 4.5))  # seconds per iteration
        self.comm = COMM_FRACTION
        self.phase = float(gen.uniform(0.0, self.period))

    def _comm_cumulative(self, t: float) -> float:
        """Seconds of communication phase in [0, t] (the phase runs last in each iteration)."""
        u = t + self.phase
        n = math.floor(u / self.period)
        r = u - n * self.period
        compute = (1.0 - self.comm) * self.period
        base = n * self.comm * self.period - self._comm_before_origin()
        return base + min(max(r - compute, 0.0), self.comm * self.period)

    def _comm_before_origin(self) -> float:
        r = self.phase
        compute = (1.0 - self.comm) * self.period
        return min(max(r - compute, 0.0), self.comm * self.period)

    def comm_seconds(self, t0: float, t1: float) -> float:
        """Seconds of communication in (t0, t1]."""
        if t1 <= t0:
            return 0.0
        return self._comm_cumulative(t1) - self._comm_cumulative(t0)

    def comm_now(self, t: float) -> bool:
        r = (t + self.phase) % self.period
        return r >= (1.0 - self.comm) * self.period

    def comm_share_recent(self, t: float, window: float = POWER_WINDOW_S) -> float:
        """Share of the last ``window`` seconds spent communicating (what a 1 s average sees)."""
        return self.comm_seconds(t - window, t) / window

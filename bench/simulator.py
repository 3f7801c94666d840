"""Simulator speed: scrapes per second and rows per second for standard supernodes.

Usage: .venv/bin/python bench/simulator.py [--steps N] [--runs R] [--realistic]

Each run simulates N scrapes (messages built, not encoded) of a fresh simulator; the figures are the
median over R runs. The target: a 1024-GPU 8-rail step (~21.5k rows, 25.6k with module rows) well
under 100 ms on a 2-core machine. ``--realistic`` turns on the realistic pathology mix (DESIGN §4b).
"""

from __future__ import annotations

import argparse
import statistics
import time

from fabricwatch.collectors.sim import Simulator
from fabricwatch.realistic import realistic
from fabricwatch.schema import row_count
from fabricwatch.topology import generate


def measure(gpus: int, steps: int, runs: int, messy: bool = False) -> tuple[float, float, float]:
    topo = generate(gpus, rails=8, gpus_per_node=8)
    step_times, row_rates = [], []
    for seed in range(runs):
        sim = Simulator(topo, seed=seed, pathologies=realistic(topo, seed) if messy else ())
        sim.step()  # t = 0 (module messages, thermal start-up) is not typical: leave it out
        rows = 0
        started = time.perf_counter()
        for _ in range(steps):
            rows += sum(row_count(m) for m in sim.step())
        elapsed = time.perf_counter() - started
        step_times.append(elapsed / steps)
        row_rates.append(rows / elapsed)
    ms = statistics.median(step_times) * 1e3
    return ms, 1e3 / ms, statistics.median(row_rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--realistic", action="store_true", help="with the realistic pathology mix")
    args = parser.parse_args()
    print(f"{'GPUs':>6} {'ms/step':>9} {'steps/s':>9} {'rows/s':>12}")
    for gpus in (128, 1024):
        ms, steps_per_s, rows_per_s = measure(gpus, args.steps, args.runs, args.realistic)
        print(f"{gpus:>6} {ms:>9.1f} {steps_per_s:>9.1f} {rows_per_s:>12,.0f}")
    print(f"(medians of {args.runs} runs × {args.steps} steps)")


if __name__ == "__main__":
    main()

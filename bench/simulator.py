"""Simulator speed: milliseconds per step, tidy and realistic, optionally against an earlier commit.

Usage: .venv/bin/python bench/simulator.py [--gpus 128 1024] [--steps N] [--runs R] [--baseline DIR]

A step is one scrape of every source (messages built, not encoded). Each run is a fresh process that
builds a simulator (seed = run number), leaves out its first scrape (t = 0: module messages, thermal
start-up), times the next N and reports wall and CPU time per step. The worlds:

* ``tidy``: no pathologies (the unit tests' world);
* ``realistic``: the default fleet of ``demo`` and ``simulate`` (fabricwatch.realistic: profiles,
  cadences, skewed clocks, late and lost scrapes, DOM offsets, bursts, ...);
* ``baseline``: with ``--baseline DIR``, the tidy world of another checkout (a ``git worktree`` of an
  earlier commit with its own ``.venv``, e.g. one made by its scripts/setup), run with its own Python.

Runs are interleaved (run 1 of every world, then run 2, ...), so a busy machine slows them alike.
Figures are medians over R runs, with the slowest and fastest run; the ratios are speeds (steps/s)
against the tidy world and against the baseline, of wall time, and with a baseline also of CPU time
(``CPU vs base``: what the run itself used, less moved by other processes on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Runs in the checkout being measured, with its own Python: only what every version has.
WORKER = """
import importlib, json, sys, time
try:
    Simulator = importlib.import_module("fabricwatch.collectors.sim").Simulator
except ImportError:  # before the stage folders installed under fabricwatch (a baseline's checkout)
    Simulator = importlib.import_module("collectors.sim").Simulator
from fabricwatch.schema import row_count
from fabricwatch.topology import generate

world, gpus, steps, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
topo = generate(gpus, rails=8, gpus_per_node=8)
if world == "realistic":
    from fabricwatch.realistic import realistic

    sim = Simulator(topo, seed=seed, pathologies=realistic(topo, seed))
else:
    sim = Simulator(topo, seed=seed)
sim.step()
rows = 0
wall, cpu = time.perf_counter(), time.process_time()
for _ in range(steps):
    rows += sum(row_count(m) for m in sim.step())
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
print(json.dumps({"wall": wall / steps, "cpu": cpu / steps, "rows": rows / steps}))
"""

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class World:
    label: str
    checkout: Path
    world: str  # "tidy" or "realistic"

    def run(self, gpus: int, steps: int, seed: int) -> dict[str, float]:
        python = self.checkout / ".venv" / "bin" / "python"
        argv = [str(python), "-c", WORKER, self.world, str(gpus), str(steps), str(seed)]
        done = subprocess.run(argv, cwd=self.checkout, capture_output=True, text=True, check=False)
        if done.returncode:
            sys.exit(f"{self.label}: the run failed:\n{done.stderr}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def commit_of(checkout: Path) -> str:
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="a checkout of an earlier commit with its own .venv")
    args = parser.parse_args()
    worlds = [World("tidy", ROOT, "tidy"), World("realistic", ROOT, "realistic")]
    if args.baseline is not None:
        base = args.baseline.resolve()
        if not (base / ".venv" / "bin" / "python").exists():
            sys.exit(f"--baseline {base}: no .venv there (run its scripts/setup)")
        worlds.append(World(f"tidy at {commit_of(base)}", base, "tidy"))
    print(f"this checkout: {commit_of(ROOT)}; medians of {args.runs} runs × {args.steps} steps, interleaved")
    header = f"{'GPUs':>5}  {'world':<16} {'ms/step':>8} {'(min–max)':>13} {'CPU ms':>7} {'steps/s':>8} {'rows/s':>11}"
    print(header + f" {'vs tidy':>8}" + (f" {'vs base':>8} {'CPU vs base':>11}" if args.baseline else ""))
    for gpus in args.gpus:
        results: dict[str, list[dict[str, float]]] = {w.label: [] for w in worlds}
        for seed in range(args.runs):
            for w in worlds:
                results[w.label].append(w.run(gpus, args.steps, seed))
        ms = {label: statistics.median(r["wall"] for r in runs) * 1e3 for label, runs in results.items()}
        cpu_ms = {label: statistics.median(r["cpu"] for r in runs) * 1e3 for label, runs in results.items()}
        for w in worlds:
            runs = results[w.label]
            walls = [r["wall"] * 1e3 for r in runs]
            cpu = cpu_ms[w.label]
            rows = statistics.median(r["rows"] / r["wall"] for r in runs)
            line = f"{gpus:>5}  {w.label:<16} {ms[w.label]:>8.1f} {f'({min(walls):.1f}–{max(walls):.1f})':>13}"
            line += f" {cpu:>7.1f} {1e3 / ms[w.label]:>8.1f} {rows:>11,.0f} {ms['tidy'] / ms[w.label]:>8.2f}"
            if args.baseline:
                line += f" {ms[worlds[-1].label] / ms[w.label]:>8.2f} {cpu_ms[worlds[-1].label] / cpu:>11.2f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()

"""Step faults off the tick grid: how long from the first bad sample to the incident (issue 9 part 8).

The target: step faults (link down, loss of light, a dead lane) found within 2 scrape intervals of the
first bad sample at p95. The library's faults start on the tick grid, and its sources scrape in phase
with it, so its step delays (1 s) say nothing about a fault whose first bad sample lands just after a
tick. Here every source's clock (nodes and switches) runs a random 0-5 s off (DESIGN §4b
``clock_skew``, with jitter), so samples fall at every phase of the grid, and step faults start at
random times.

Simulates a 128-GPU 8-rail supernode (5 s scrapes) with one step fault per node, replays the capture
once per tick cadence (``every_s``, with or without the step tick halfway between ticks:
``EngineConfig.step_tick``, on by default), and prints per cadence the delay from the incident's first bad
sample (its ``first_seen``, the earliest stamp of its evidence) to its detection, p50 / p95 / max, the
delay from the fault's start, and the detection CPU per simulated second.

With ``--switch-interval S`` every switch is scraped only every S s (DESIGN §4b ``scrape_interval``:
a spine's gNMI every 30-60 s, REALISM.md) while hosts keep their 5 s: a link fault is then seen first
at the host end, and the switch end's state stays stale until its next scrape.

    .venv/bin/python bench/step_latency.py [--gpus 128] [--every 10 10+step 5] [--seed 1] [--switch-interval 30]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from fabricwatch import topology
from fabricwatch.app import library
from fabricwatch.collectors.sim.capture import simulate_capture
from fabricwatch.detectors.config import EngineConfig
from fabricwatch.detectors.engine import DetectionEngine
from fabricwatch.replay.run import replay

INTERVAL_S = 5.0  # hosts' scrape interval (REALISM.md): the target is 2 of these


def scenario_yaml(gpus: int, seed: int, duration: float, switch_interval: float | None = None) -> str:
    """One step fault per node at a random time, on distinct ports; every source's clock 0-5 s off;
    switches scraped every ``switch_interval`` s when given."""
    rng = random.Random(seed)
    nodes = gpus // 8
    lines = [
        'description: "step faults off the tick grid"',
        f"topology: {{gpus: {gpus}, rails: 8, gpus_per_node: 8}}",
        f"duration: {duration:g}",
        f"interval: {INTERVAL_S:g}",
        f"seed: {seed}",
        "faults:",
    ]
    for n in range(nodes):
        start = round(rng.uniform(100.0, duration - 60.0), 1)
        gpu = rng.randrange(8)
        if n % 2:
            port = f"node{n:03d}/gpu{gpu}:p0"
            lines.append(f"  - {{cause: transceiver_fault, port: {port}, start: {start}, mode: dead_lane, lane: 2}}")
        else:
            lines.append(f"  - {{cause: link_down, link: L{n * 8 + gpu:05d}, start: {start}}}")
    lines.append("pathologies:")
    topo = topology.generate(gpus, rails=8)
    for source in [n.name for n in topo.nodes] + [s.name for s in topo.switches]:
        offset = round(rng.uniform(0.0, INTERVAL_S), 2)
        lines.append(f"  - {{kind: clock_skew, source: {source}, offset_s: {offset}, jitter_s: 0.2}}")
    if switch_interval is not None:
        for switch in topo.switches:
            lines.append(f"  - {{kind: scrape_interval, source: {switch.name}, interval_s: {switch_interval:g}}}")
    return "\n".join(lines) + "\n"


class TimedEngine(DetectionEngine):
    """The engine, with the CPU time of its ticks (and step ticks) summed."""

    cpu_s = 0.0

    def run(self, *args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return super().run(*args, **kwargs)
        finally:
            self.cpu_s += time.process_time() - started

    def run_step(self, *args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return super().run_step(*args, **kwargs)
        finally:
            self.cpu_s += time.process_time() - started


def cadence(spec: str) -> tuple[float, bool]:
    """``10`` (ticks every 10 s), ``10+step`` (and a step tick halfway: the default)."""
    every, _, step = spec.partition("+")
    if step not in ("", "step"):
        raise argparse.ArgumentTypeError(f"{spec!r}: a cadence is N or N+step")
    return float(every), step == "step"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=128)
    parser.add_argument(
        "--every", type=cadence, nargs="+", default=[(10.0, False), (10.0, True), (5.0, False)],
        help="tick cadences (s) to compare, N+step with step ticks halfway (default: 10 10+step 5)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--switch-interval", type=float, help="scrape every switch only every S s (hosts: 5 s)")
    args = parser.parse_args()
    switches = f", switches every {args.switch_interval:g} s" if args.switch_interval else ""
    title = f"step faults off the grid: {args.gpus} GPUs, {INTERVAL_S:g} s scrapes{switches}, seed {args.seed}"
    table = Table(title=title)
    columns = ("every_s", "found", "from first bad sample p50 / p95 / max (s)", "p95 / target", "from start p95 (s)")
    for column in (*columns, "false", "detection CPU s per 100 s"):
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "steps.yaml"
        spec.write_text(scenario_yaml(args.gpus, args.seed, args.duration, args.switch_interval))
        sc = library.load_scenario(spec)
        simulate_capture(sc.topology, sc.plan, sc.duration, sc.interval, sc.capture, progress=False)
        for every, step in args.every:
            engines: list[TimedEngine] = []

            def factory(
                topo: topology.Topology, every: float = every, step: bool = step, engines: list = engines
            ) -> TimedEngine:
                engines.append(TimedEngine(topo, EngineConfig(every_s=every, step_tick=step)))
                return engines[-1]

            result = replay(sc.capture, engine_factory=factory)
            scored = library.score(result.truth or [], result.incidents, result.first_ts or 0.0)
            found = [m for m in scored.matches if m.incident is not None and m.located and m.cause_ok]
            from_sample = [m.incident.detected_at - m.incident.first_seen for m in found]
            from_start = [m.latency_s for m in found if m.latency_s is not None]
            table.add_row(
                f"{every:g}{' + step' if step else ''}",
                f"{len(found)}/{len(scored.matches)}",
                f"{statistics.median(from_sample):.1f} / {pct(from_sample, 95):.1f} / {max(from_sample):.1f}",
                f"{pct(from_sample, 95) / (2 * INTERVAL_S):.2f}",
                f"{pct(from_start, 95):.1f}",
                str(len(scored.false_alarms)),
                f"{engines[0].cpu_s / args.duration * 100:.2f}",
            )
    Console(width=120).print(table)
    print(f"target: p95 from the first bad sample <= {2 * INTERVAL_S:g} s (2 scrape intervals)")


if __name__ == "__main__":
    main()

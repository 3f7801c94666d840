"""An hour of a healthy 1024-GPU supernode with every pathology on: the false-alarm target of issue 9.

Simulates the supernode (no fault injected) with the realistic fleet mix of fabricwatch.realistic
(clock skew, lost and late scrapes, switch cadences, collector outages, counter resets and
saturation, DOM offsets, mixed vendors, spare ports, a duplicate source, a loop joining late, bursty
all-reduce, coolant drift, a module swap, a leaf's maintenance) through the demo's whole pipeline
(in-memory bus, validation, DuckDB, detection), then prints every incident it raised, split into
fabric incidents (the target is none) and collector incidents (a silent collector is reported as its
`collector` incident and as nothing else).

    .venv/bin/python bench/healthy_hour.py [--gpus 1024] [--duration 3600] [--seed 11]

Exit status 1 when a fabric incident was raised.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabricwatch import topology
from fabricwatch.app.demo import Progress, run_demo
from fabricwatch.realistic import realistic


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--duration", type=float, default=3600.0)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    topo = topology.generate(args.gpus, rails=8)
    pathologies = realistic(topo, args.seed, horizon=args.duration)
    kinds = Counter(p.kind for p in pathologies)
    print(f"{topo.summary()}; {args.duration:.0f} s at {args.interval:g} s; seed {args.seed}")
    print("pathologies: " + ", ".join(f"{k}×{n}" for k, n in sorted(kinds.items())))
    last = [0.0]

    def progress(p: Progress) -> None:
        if p.wall_s - last[0] >= 15 or p.sim_t >= p.duration:
            last[0] = p.wall_s
            line = f"  t+{p.sim_t:5.0f}s  {p.rows:>11,} rows  {p.incidents} incidents  {p.wall_s:6.1f}s wall"
            print(line, flush=True)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result = run_demo(
            topo,
            [],
            duration=args.duration,
            interval=args.interval,
            seed=args.seed,
            db=Path(tmp) / "healthy.duckdb",
            pathologies=pathologies,
            on_progress=progress,
        )
    wall = time.perf_counter() - started
    fabric = [i for i in result.incidents if i.location.get("entity") != "collector"]
    collector = [i for i in result.incidents if i.location.get("entity") == "collector"]
    print(f"{result.rows:,} rows in {wall:.0f} s wall")
    print(f"{'kind':<10} {'cause':<26} {'where':<28} {'t+s':>6} {'severity':<9}")
    for kind, incidents in (("fabric", fabric), ("collector", collector)):
        for i in incidents:
            where = f"{i.location.get('entity')} {i.location.get('id')}"
            print(f"{kind:<10} {i.cause:<26} {where:<28} {i.first_seen - result.start_ts:>6.0f} {i.severity:<9}")
    print(f"fabric incidents: {len(fabric)} (target 0) · collector incidents: {len(collector)}")
    return 1 if fabric else 0


if __name__ == "__main__":
    sys.exit(main())

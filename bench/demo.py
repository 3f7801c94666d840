"""The demo's speed: the default 1024-GPU 8-rail demo end to end on the in-memory bus, repeated; the
fleet shaped like production as the demo has it by default (``--tidy``: the simulator's tidy world).

Target (issue 2): under 60 s wall on a 2-core machine. Prints wall time, rows/s and how many times
faster than real time, as medians over the runs. Run: .venv/bin/python -m bench.demo [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from fabricwatch.app.demo import default_faults, run_demo
from fabricwatch.realistic import realistic
from fabricwatch.topology import generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--duration", type=float, default=420.0)
    parser.add_argument("--tidy", action="store_true", help="no pathology (the demo's --tidy)")
    args = parser.parse_args()
    topo = generate(args.gpus, 8, 8)
    pathologies = [] if args.tidy else realistic(topo, 7, horizon=args.duration)
    results = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            r = run_demo(
                topo,
                default_faults(topo),
                duration=args.duration,
                interval=5.0,
                seed=7,
                db=Path(tmp) / "demo.duckdb",
                pathologies=pathologies,
            )
        results.append(r)
        Console(stderr=True).print(
            f"run {i + 1}: {r.wall_s:.1f} s, {r.rows:,} rows, {r.score.detected}/"
            f"{len(r.score.matches)} faults found, {len(r.score.false_alarms)} false alarms"
        )
    wall = statistics.median(r.wall_s for r in results)
    rows = results[0].rows
    world = "tidy" if args.tidy else "realistic"
    table = Table(title=f"demo ({world}): {topo.summary()}, {args.duration:.0f} s at 5 s (median of {args.runs})")
    for col in ("wall s", "rows", "rows/s", "× real time", "faults found", "false alarms", "target"):
        table.add_column(col, justify="right")
    table.add_row(
        f"{wall:.1f}",
        f"{rows:,}",
        f"{rows / wall:,.0f}",
        f"{args.duration / wall:.0f}×",
        f"{results[0].score.detected}/{len(results[0].score.matches)}",
        str(len(results[0].score.false_alarms)),
        "< 60 s" + (" ✓" if wall < 60 else " ✗"),
    )
    Console().print(table)


if __name__ == "__main__":
    main()

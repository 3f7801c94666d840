"""``fabricwatch simulate``: a simulated supernode with injected faults, written to a capture file."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from fabricwatch import faults, topology
from fabricwatch.cli import non_negative_int, positive_float
from fabricwatch.realistic import realistic


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate a supernode with injected faults and write a capture",
        description="Run the physics-based simulator over a cluster file with the faults of a fault spec, "
        "and write every scrape to a capture (JSON Lines, gzip when OUT ends in .gz) whose header carries "
        "the topology and the faults as ground truth.",
    )
    p.add_argument("--topology", type=Path, required=True, metavar="FILE", help="cluster YAML (DESIGN §2)")
    p.add_argument("--faults", type=Path, metavar="FILE", help="fault spec YAML (DESIGN §4); default: none")
    p.add_argument("--duration", type=positive_float, required=True, metavar="S", help="simulated seconds")
    p.add_argument("--interval", type=positive_float, default=5.0, metavar="S", help="scrape interval (default 5)")
    p.add_argument("--seed", type=non_negative_int, metavar="N", help="random seed (overrides the fault file's)")
    p.add_argument("--out", type=Path, required=True, metavar="CAPTURE", help="capture file to write")
    world = p.add_mutually_exclusive_group()
    world.add_argument(
        "--realistic",
        action="store_true",
        help="production's mess: every pathology of DESIGN §4b at a plausible rate, replacing the fault file's "
        "own pathologies (the default when the fault file has none)",
    )
    world.add_argument(
        "--tidy",
        action="store_true",
        help="the simulator's tidy world: one clock, every column, no pathology (unit tests' world)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fabricwatch.collectors.sim import simulate_capture  # numpy-heavy: imported only when the command runs

    topo = topology.load(args.topology)
    plan = faults.load_plan(args.faults, topo) if args.faults else faults.FaultPlan(0, ())
    if args.seed is not None:
        plan = dataclasses.replace(plan, seed=args.seed)
    if args.realistic or not (args.tidy or plan.pathologies):
        plan = dataclasses.replace(plan, pathologies=tuple(realistic(topo, plan.seed, args.duration)))
    started = time.perf_counter()
    written = simulate_capture(topo, plan, args.duration, args.interval, args.out, progress=not args.quiet)
    print(
        f"wrote {args.out}: {written} messages, {args.duration:g} s simulated in "
        f"{time.perf_counter() - started:.1f} s ({len(plan.faults)} faults, {len(plan.pathologies)} pathologies, "
        f"seed {plan.seed})",
        file=sys.stderr,
    )
    return 0

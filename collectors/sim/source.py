"""The simulator as a live telemetry source (``fabricwatch collect --source sim``).

Each scrape advances the simulation by one interval (``--interval``, 5 s by default) and stamps the
messages with the caller's clock, so a live run at wall-clock pace looks like a real plant.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fabricwatch import faults, topology
from fabricwatch.collectors.base import Source
from fabricwatch.collectors.sim.simulator import Simulator
from fabricwatch.errors import InputError
from fabricwatch.schema import Message


class SimSource(Source):
    name = "sim"

    def __init__(self, simulator: Simulator) -> None:
        self.simulator = simulator

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("sim source")
        group.add_argument("--topology", type=Path, metavar="FILE", help="cluster YAML to simulate")
        group.add_argument("--faults", type=Path, metavar="FILE", help="fault spec YAML (default: no faults)")
        group.add_argument("--seed", type=int, metavar="N", help="random seed (default: the fault file's, else 0)")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SimSource:
        path = getattr(args, "topology", None)
        if path is None:
            raise InputError("--topology", "the sim source needs a cluster file (--topology FILE)")
        topo = topology.load(path)
        fault_file = getattr(args, "faults", None)
        plan = faults.load_plan(fault_file, topo) if fault_file else faults.FaultPlan(0, ())
        seed = getattr(args, "seed", None)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise InputError("--seed", f"must be an integer ≥ 0, not {seed!r}")
        interval = getattr(args, "interval", None) or 5.0
        seed = plan.seed if seed is None else seed
        return cls(Simulator(topo, plan.faults, seed=seed, interval=interval, pathologies=plan.pathologies))

    def scrape(self, now: float) -> list[Message]:
        messages = self.simulator.step()
        scrape_ts = self.simulator.ts
        for m in messages:  # keep what a pathology did to a stamp (clock skew, a duplicate's lag)
            m.ts = float(now) + (m.ts - scrape_ts)
        return messages

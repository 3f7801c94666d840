"""The simulator as a live telemetry source (``fabricwatch collect --source sim``).

Each scrape advances the simulation by one interval (``--interval``, 5 s by default) and stamps the
messages with the caller's clock, so a live run at wall-clock pace looks like a real plant.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Annotated

import msgspec

from fabricwatch import faults, topology
from fabricwatch.collectors.base import Source, SourceConfig
from fabricwatch.collectors.sim.simulator import Simulator
from fabricwatch.errors import InputError
from fabricwatch.schema import Message


class SimConfig(SourceConfig):
    topology: Path | None = None  # cluster YAML to simulate (required)
    faults: Path | None = None  # fault spec YAML (None: no faults)
    seed: Annotated[int, msgspec.Meta(ge=0)] | None = None  # None: the fault file's seed, else 0
    interval: Annotated[float, msgspec.Meta(gt=0)] = 5.0  # seconds of plant time per scrape


class SimSource(Source):
    name = "sim"
    Config = SimConfig

    def __init__(self, simulator: Simulator) -> None:
        self.simulator = simulator

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("sim source")
        group.add_argument("--topology", type=Path, metavar="FILE", help="cluster YAML to simulate")
        group.add_argument("--faults", type=Path, metavar="FILE", help="fault spec YAML (default: no faults)")
        group.add_argument("--seed", type=int, metavar="N", help="random seed (default: the fault file's, else 0)")

    @classmethod
    def build(cls, config: SourceConfig) -> SimSource:
        assert isinstance(config, SimConfig)
        if config.topology is None:
            raise InputError("--topology", "the sim source needs a cluster file (--topology FILE)")
        topo = topology.load(config.topology)
        plan = faults.load_plan(config.faults, topo) if config.faults else faults.FaultPlan(0, ())
        seed = plan.seed if config.seed is None else config.seed
        return cls(Simulator(topo, plan.faults, seed=seed, interval=config.interval, pathologies=plan.pathologies))

    def scrape(self, now: float) -> list[Message]:
        messages = self.simulator.step()
        scrape_ts = self.simulator.ts
        for m in messages:  # keep what a pathology did to a stamp (clock skew, a duplicate's lag)
            m.ts = float(now) + (m.ts - scrape_ts)
        return messages

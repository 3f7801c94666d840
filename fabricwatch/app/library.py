"""The stored incident library: scenarios, their captures, their expected incidents, and their score.

A scenario is a YAML file in the library folder (``replay/library/`` in the repository): what it
shows, the topology to generate, how long to simulate and at what scrape interval, and a fault file's
``seed``, ``faults`` and ``pathologies``. Building the library simulates each scenario once into
``<name>.jsonl.gz`` (ground truth in its header) and stores what replaying it gives today as
``<name>.expected.json``. Tests and ``fabricwatch score --library`` only replay the stored captures,
never re-simulate: a change of physics and a regression of detection can no longer look the same.

A scenario that detection gets wrong today says so in ``known_failure`` (the reason, in words); the
test suite marks it as an expected failure, and the detection work turns it green.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from fabricwatch import yamlconf
from fabricwatch.app.score import Score, fault_location, score
from fabricwatch.detectors.config import EngineConfig, MaintenanceWindow
from fabricwatch.errors import InputError
from fabricwatch.faults import FaultPlan, parse_faults
from fabricwatch.incident import Incident
from fabricwatch.pathologies import Pathology
from fabricwatch.realistic import pathologies_of
from fabricwatch.topology import Topology, generate


class TopologyShape(yamlconf.Config):
    """A standard supernode (``fabricwatch topology``)."""

    gpus: Annotated[int, msgspec.Meta(ge=1)]
    rails: Literal[4, 8] = 8
    gpus_per_node: Literal[8, 16] = 8


Seconds = Annotated[float, msgspec.Meta(gt=0)]


class ScenarioFile(yamlconf.Config):
    """A scenario file: a fault file (seed, faults, pathologies) with what to simulate and why."""

    description: Annotated[str, msgspec.Meta(min_length=1)]
    topology: TopologyShape | None = None  # not for a recorded capture: its own topology is in its header
    duration: Seconds | None = None
    interval: Seconds = 5.0
    seed: Annotated[int, msgspec.Meta(ge=0)] = 0
    faults: list[Any] | None = None  # each checked by parse_faults: its options depend on its cause
    # DESIGN §4b entries, the realistic fleet mix (``realistic``), or a list holding both
    pathologies: list[Any] | Literal["realistic"] | None = None
    known_failure: Annotated[str, msgspec.Meta(min_length=1)] | None = None  # why detection fails it today
    recorded: bool = False  # a capture recorded live (fabricwatch record): replayed as it is, never simulated


COMPRESSLEVEL = 9  # the library is stored in the repository: smallest files, built once


@dataclass(frozen=True)
class Scenario:
    name: str
    path: Path
    description: str
    topology: Topology
    duration: float
    interval: float
    plan: FaultPlan  # faults (the ground truth) and pathologies (never truth)
    known_failure: str | None = None
    recorded: bool = False  # a capture recorded live (fabricwatch record): never simulated, only replayed

    @property
    def capture(self) -> Path:
        return self.path.with_name(f"{self.name}.jsonl.gz")

    @property
    def expected(self) -> Path:
        return self.path.with_name(f"{self.name}.expected.json")


def load_scenario(path: str | Path) -> Scenario:
    """One scenario file; every problem names the file and line."""
    path = Path(path)
    data = yamlconf.load(path)
    if not isinstance(data, dict):
        raise InputError(str(path), "a scenario is a mapping (description, topology, duration, interval, faults)")
    spec = yamlconf.convert(data, ScenarioFile, str(path))
    name = path.name.removesuffix(".yaml")
    place = f"{path}:{yamlconf.line_of(data) or 1}"
    if spec.recorded:
        from fabricwatch.replay.capture import open_capture

        if spec.topology is not None or spec.duration is not None or spec.faults is not None or spec.pathologies:
            raise InputError(place, "a recorded scenario takes its topology and faults from its capture")
        cap = open_capture(path.with_name(f"{name}.jsonl.gz"))
        cap.close()
        return Scenario(
            name, path, spec.description, cap.topology, 0.0, 0.0, FaultPlan(0, ()), spec.known_failure, True
        )
    if spec.topology is None or spec.duration is None:
        raise InputError(place, "a simulated scenario needs topology and duration")
    shape = spec.topology
    try:
        topo = generate(shape.gpus, shape.rails, shape.gpus_per_node)
    except InputError as exc:
        raise InputError(f"{path}:{yamlconf.line_of(data, 'topology')}", f"topology: {exc}") from None
    faults = parse_faults(data.get("faults"), topo, str(path))
    pathologies = tuple(pathologies_of(data.get("pathologies"), topo, spec.seed, str(path)))
    plan = FaultPlan(spec.seed, tuple(faults), pathologies)
    return Scenario(name, path, spec.description, topo, spec.duration, spec.interval, plan, spec.known_failure)


def scenarios(folder: str | Path) -> list[Scenario]:
    """Every scenario of a library folder, by name."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(str(folder), "not a library folder")
    found = sorted(folder.glob("*.yaml"))
    if not found:
        raise InputError(str(folder), "holds no scenario (*.yaml)")
    return [load_scenario(p) for p in found]


# --- building ---------------------------------------------------------------------------------------


def build(scenario: Scenario, *, simulate: bool = True) -> list[Incident]:
    """Simulate the scenario into its capture (unless ``simulate`` is false: keep the stored one) and
    store the incidents its replay gives today as the expected ones."""
    from fabricwatch.collectors.sim.capture import simulate_capture
    from fabricwatch.replay.run import replay

    if simulate and not scenario.recorded:
        simulate_capture(
            scenario.topology,
            scenario.plan,
            scenario.duration,
            scenario.interval,
            scenario.capture,
            progress=False,
            compresslevel=COMPRESSLEVEL,
        )
    incidents = replay(scenario.capture, engine_factory=engine_for(scenario)).incidents
    scenario.expected.write_text(json.dumps([i.to_dict() for i in incidents], indent=1, sort_keys=True) + "\n")
    return incidents


# --- scoring ----------------------------------------------------------------------------------------


@dataclass
class ScenarioResult:
    scenario: Scenario
    incidents: list[Incident]
    score: Score
    errors: list[InputError] = field(default_factory=list)

    @property
    def found(self) -> int:
        return self.score.detected

    @property
    def missed(self) -> list[dict[str, Any]]:
        return [m.fault for m in self.score.matches if m.incident is None]

    @property
    def wrong_cause(self) -> list[tuple[dict[str, Any], Incident]]:
        return [(m.fault, m.incident) for m in self.score.matches if m.incident is not None and not m.cause_ok]

    @property
    def false_incidents(self) -> list[Incident]:
        return self.score.false_alarms

    @property
    def passed(self) -> bool:
        """Every fault found at its place with its cause, and nothing else raised."""
        return self.found == len(self.score.matches) and not self.false_incidents and not self.errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.name,
            "faults": len(self.score.matches),
            "found": self.found,
            "missed": [f"{f['cause']} at {' '.join(fault_location(f))}" for f in self.missed],
            "wrong_cause": [f"{f['cause']} at {' '.join(fault_location(f))}: {i.cause}" for f, i in self.wrong_cause],
            "false_incidents": [f"{i.type} at {i.location['entity']} {i.location['id']}" for i in self.false_incidents],
            "delays_s": [m.latency_s for m in self.score.matches if m.latency_s is not None],
            "passed": self.passed,
            "known_failure": self.scenario.known_failure,
        }


def maintenance_tickets(pathologies: Sequence[Pathology], t0: float) -> list[MaintenanceWindow]:
    """The change tickets of the planned maintenance among ``pathologies`` (a maintenance window is
    planned by definition), in epoch seconds from the run's start ``t0``. Detection reads these
    tickets, never the pathology list."""
    return [
        MaintenanceWindow(switch=p["switch"], start=t0 + p["start"], end=t0 + p["start"] + p["duration"])
        for p in pathologies
        if p.kind == "maintenance"
    ]


def change_tickets(scenario: Scenario) -> list[MaintenanceWindow]:
    """A scenario's change tickets, in the capture's time: its first record is the run's t = 0."""
    if not any(p.kind == "maintenance" for p in scenario.plan.pathologies) or not scenario.capture.exists():
        return []
    from fabricwatch.replay.capture import open_capture

    cap = open_capture(scenario.capture)
    t0 = next((r.ts for r in cap.records()), 0.0)
    cap.close()
    return maintenance_tickets(scenario.plan.pathologies, t0)


def engine_for(scenario: Scenario) -> Callable[[Topology], Any]:
    """The detection engine a scenario is replayed with: the defaults, plus its change tickets."""
    from fabricwatch.detectors.engine import DetectionEngine

    config = EngineConfig(maintenance=change_tickets(scenario))
    return lambda topology: DetectionEngine(topology, config)


def run_scenario(scenario: Scenario) -> ScenarioResult:
    """Replay the stored capture and score it against its ground truth."""
    from fabricwatch.replay.run import replay

    if not scenario.capture.exists():
        raise InputError(str(scenario.capture), "no capture: build the library first (scripts/build-library)")
    result = replay(scenario.capture, engine_factory=engine_for(scenario))
    truth = result.truth or []
    return ScenarioResult(
        scenario, result.incidents, score(truth, result.incidents, result.first_ts or 0.0), result.errors
    )


def run_library(folder: str | Path, progress: Callable[[Scenario], None] | None = None) -> Iterator[ScenarioResult]:
    for scenario in scenarios(folder):
        if progress is not None:
            progress(scenario)
        yield run_scenario(scenario)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank), or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def totals(results: list[ScenarioResult]) -> dict[str, Any]:
    """Precision, recall and cause accuracy over every scenario, and detection delay per cause."""
    faults = sum(len(r.score.matches) for r in results)
    placed = sum(1 for r in results for m in r.score.matches if m.incident is not None)
    found = sum(r.found for r in results)
    false = sum(len(r.false_incidents) for r in results)
    delays: dict[str, list[float]] = defaultdict(list)
    for r in results:
        for m in r.score.matches:
            if m.latency_s is not None and m.cause_ok:
                delays[m.fault["cause"]].append(m.latency_s)
    return {
        "scenarios": len(results),
        "passed": sum(r.passed for r in results),
        "faults": faults,
        "found": found,
        "false_incidents": false,
        "precision": placed / (placed + false) if placed + false else 1.0,
        "recall": found / faults if faults else 1.0,
        "cause_accuracy": found / placed if placed else 1.0,
        "delay_s": {
            cause: {"n": len(v), "p50": percentile(v, 50), "p95": percentile(v, 95)}
            for cause, v in sorted(delays.items())
        },
    }


# --- the build command ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m fabricwatch.app.library DIR [--only NAME ...] [--expected-only]`` (scripts/build-library)."""
    import argparse
    import sys
    import time

    parser = argparse.ArgumentParser(
        prog="build-library",
        description="Simulate every scenario of a library folder into its capture and store the incidents its "
        "replay gives today as the expected ones.",
    )
    parser.add_argument("folder", type=Path)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="build these scenarios only")
    parser.add_argument(
        "--expected-only",
        action="store_true",
        help="keep the stored captures; only replay them and store the incidents",
    )
    args = parser.parse_args(argv)
    try:
        todo = [s for s in scenarios(args.folder) if not args.only or s.name in args.only]
        missing = set(args.only or ()) - {s.name for s in todo}
        if missing:
            raise InputError("--only", f"no such scenario: {', '.join(sorted(missing))}")
        for n, scenario in enumerate(todo, 1):
            started = time.perf_counter()
            incidents = build(scenario, simulate=not args.expected_only)
            size = scenario.capture.stat().st_size / 1e6
            print(
                f"[{n}/{len(todo)}] {scenario.name}: {len(incidents)} incidents, {size:.2f} MB, "
                f"{time.perf_counter() - started:.1f} s",
                file=sys.stderr,
            )
    except InputError as exc:
        for line in str(exc).splitlines():
            print(f"build-library: {line}", file=sys.stderr)
        return 2
    total = sum(p.stat().st_size for p in Path(args.folder).glob("*.jsonl.gz")) / 1e6
    print(f"library {args.folder}: {len(list(Path(args.folder).glob('*.yaml')))} scenarios, {total:.1f} MB of captures")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

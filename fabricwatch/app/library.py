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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabricwatch.app.score import Score, fault_location, score
from fabricwatch.errors import InputError, InputErrors
from fabricwatch.faults import FaultPlan, parse_faults
from fabricwatch.incident import Incident
from fabricwatch.topology import Topology, generate, load_yaml

SCENARIO_KEYS = {
    "description",
    "topology",
    "duration",
    "interval",
    "seed",
    "faults",
    "pathologies",
    "known_failure",
    "recorded",
}
TOPOLOGY_KEYS = {"gpus", "rails", "gpus_per_node"}
COMPRESSLEVEL = 9  # the library is stored in the repository: smallest files, built once


@dataclass(frozen=True)
class Scenario:
    name: str
    path: Path
    description: str
    topology: Topology
    duration: float
    interval: float
    plan: FaultPlan
    pathologies: tuple[dict[str, Any], ...] = ()
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
    data, lines = load_yaml(path)
    place = f"{path}:{lines.get(id(data), 1)}"
    if not isinstance(data, dict):
        raise InputError(str(path), "a scenario is a mapping (description, topology, duration, interval, faults)")
    unknown = set(data) - SCENARIO_KEYS
    if unknown:
        raise InputError(
            place, f"unknown key(s) {', '.join(sorted(map(str, unknown)))} (known: {sorted(SCENARIO_KEYS)})"
        )
    if data.get("recorded") is True:
        return _recorded_scenario(path, data, place)
    errors: list[InputError] = []

    def number(key: str, default: float | None = None) -> float:
        value = data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value < math.inf):
            errors.append(InputError(place, f"{key}: must be a number of seconds > 0, not {value!r}"))
            return 1.0
        return float(value)

    duration, interval = number("duration"), number("interval", 5.0)
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        errors.append(InputError(place, "description: say in words what the scenario shows"))
    known = data.get("known_failure")
    if known is not None and not (isinstance(known, str) and known.strip()):
        errors.append(InputError(place, "known_failure: the reason detection fails it today, in words"))
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        errors.append(InputError(place, f"seed: must be an integer ≥ 0, not {seed!r}"))
    shape = data.get("topology")
    topo = None
    if not isinstance(shape, dict) or set(shape) - TOPOLOGY_KEYS or "gpus" not in shape:
        errors.append(InputError(place, f"topology: a mapping of {sorted(TOPOLOGY_KEYS)} with at least gpus"))
    else:
        try:
            topo = generate(int(shape["gpus"]), int(shape.get("rails", 8)), int(shape.get("gpus_per_node", 8)))
        except (InputError, TypeError, ValueError) as exc:
            errors.append(InputError(place, f"topology: {exc}"))
    pathologies = data.get("pathologies") or []
    if not isinstance(pathologies, list) or not all(isinstance(p, dict) for p in pathologies):
        errors.append(InputError(place, "pathologies: a list of {kind: ..., ...} mappings (DESIGN §4b)"))
    if errors:
        raise InputErrors(errors)
    assert topo is not None
    faults = parse_faults(data.get("faults"), topo, str(path), lines)
    return Scenario(
        path.name.removesuffix(".yaml"),
        path,
        description.strip(),
        topo,
        duration,
        interval,
        FaultPlan(seed, tuple(faults)),
        tuple(pathologies),
        known.strip() if known else None,
    )


def _recorded_scenario(path: Path, data: dict[str, Any], place: str) -> Scenario:
    """A scenario around a recorded capture: its topology and ground truth are the capture's own."""
    from fabricwatch.replay.capture import open_capture

    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        raise InputError(place, "description: say in words what the scenario shows")
    extra = set(data) - {"description", "recorded", "known_failure"}
    if extra:
        raise InputError(place, f"a recorded scenario takes its topology and faults from its capture: {sorted(extra)}")
    name = path.name.removesuffix(".yaml")
    cap = open_capture(path.with_name(f"{name}.jsonl.gz"))
    cap.close()
    known = data.get("known_failure")
    return Scenario(name, path, description.strip(), cap.topology, 0.0, 0.0, FaultPlan(0, ()), (), known, True)


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

    if scenario.pathologies:
        raise InputError(str(scenario.path), "pathologies are not simulated yet (issue 8, part 1)")
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
    incidents = replay(scenario.capture).incidents
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


def run_scenario(scenario: Scenario) -> ScenarioResult:
    """Replay the stored capture and score it against its ground truth."""
    from fabricwatch.replay.run import replay

    if not scenario.capture.exists():
        raise InputError(str(scenario.capture), "no capture: build the library first (scripts/build-library)")
    result = replay(scenario.capture)
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

"""The step tick (EngineConfig.step_tick) through the replay path: a step fault whose first bad sample
lands just after a tick is found at the step tick halfway to the next one; a leaf rebooting, its hosts'
clocks off by different amounts so that ticks see its links go down a few at a time, is still one
switch incident, and no link incident is ever published on the way."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest

from fabricwatch import topology
from fabricwatch.app import library
from fabricwatch.collectors.sim.capture import simulate_capture
from fabricwatch.detectors.config import EngineConfig
from fabricwatch.detectors.engine import DetectionEngine
from fabricwatch.incident import Incident
from fabricwatch.records import Window
from fabricwatch.replay.run import ReplayResult, replay

pytestmark = pytest.mark.timeout(300)
EVERY_S = 10.0  # the default tick: the step tick is halfway, 5 s after each tick
GRACE_S = 1.0  # the processor's grace for late scrapes: a tick at T runs at T + 1


class Recording(DetectionEngine):
    """The engine, with every change it returned: (``step`` or ``tick``, the incident as published)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.changes: list[tuple[str, Incident]] = []

    def run(self, window: Window, now: float) -> list[Incident]:
        out = super().run(window, now)
        self.changes += [("tick", i) for i in out]
        return out

    def run_step(self, window: Window, now: float) -> list[Incident]:
        out = super().run_step(window, now)
        self.changes += [("step", i) for i in out]
        return out


def run(spec: Path, text: str, step: bool) -> tuple[ReplayResult, Recording]:
    spec.write_text(text)
    sc = library.load_scenario(spec)
    if not sc.capture.exists():
        simulate_capture(sc.topology, sc.plan, sc.duration, sc.interval, sc.capture, progress=False)
    engines: list[Recording] = []

    def factory(topo: topology.Topology) -> Recording:
        engines.append(Recording(topo, EngineConfig(step_tick=step)))
        return engines[-1]

    return replay(sc.capture, engine_factory=factory), engines[0]


LINK_DOWN = """description: "a link down whose first bad sample is 2 s after a tick"
topology: {gpus: 8, rails: 4, gpus_per_node: 8}
duration: 120
interval: 2
seed: 5
faults:
  - {cause: link_down, link: L00001, start: 50.5}
"""


@pytest.mark.parametrize("step", [True, False])
def test_a_step_fault_just_after_a_tick_is_found_before_the_next_tick(tmp_path: Path, step: bool) -> None:
    result, _ = run(tmp_path / "down.yaml", LINK_DOWN, step)
    (inc,) = result.incidents
    assert (inc.cause, inc.location) == ("link_down", {"entity": "link", "id": "L00001"})
    last_tick = math.floor(inc.first_seen / EVERY_S) * EVERY_S
    assert 0 < inc.first_seen - last_tick < EVERY_S / 2  # the first bad sample lands just after a tick
    next_tick = last_tick + EVERY_S
    if step:  # the step tick halfway opens it, before the next tick has run
        assert inc.detected_at == last_tick + EVERY_S / 2 + GRACE_S < next_tick + GRACE_S
    else:  # without it, the next tick does (what fails the step tick's test is the wait)
        assert inc.detected_at == next_tick + GRACE_S


def reboot(gpus: int, seed: int) -> str:
    """A leaf rebooting at a random time; every node's and switch's clock 0-5 s off (jitter 0.2 s), so
    its hosts read their links down at different phases of the tick grid."""
    rng = random.Random(seed)
    topo = topology.generate(gpus, rails=4, gpus_per_node=8)
    start = round(rng.uniform(60, 70), 1)
    lines = [
        'description: "a leaf reboots; clocks off"',
        f"topology: {{gpus: {gpus}, rails: 4, gpus_per_node: 8}}",
        "duration: 240",
        "interval: 5",
        f"seed: {seed}",
        "faults:",
        f"  - {{cause: switch_fault, switch: leaf1-0, mode: reboot, start: {start}, down_s: 90}}",
        "pathologies:",
    ]
    for source in [n.name for n in topo.nodes] + [s.name for s in topo.switches]:
        offset = round(rng.uniform(0.0, 5.0), 2)
        lines.append(f"  - {{kind: clock_skew, source: {source}, offset_s: {offset}, jitter_s: 0.2}}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", [0, 2])
def test_a_leaf_reboot_off_the_grid_is_one_switch_incident_and_pages_no_link_first(tmp_path: Path, seed: int) -> None:
    with_step, engine = run(tmp_path / "reboot.yaml", reboot(32, seed), step=True)
    without, _ = run(tmp_path / "reboot.yaml", reboot(32, seed), step=False)
    fabric = [i for i in with_step.incidents if i.type != "collector_silent"]  # its collector: its own (rule 8)
    (switch,) = fabric
    assert (switch.cause, switch.location) == ("switch_fault", {"entity": "switch", "id": "leaf1-0"})
    # nothing about its links was ever published, neither firing nor folded at once
    assert {i.type for _, i in engine.changes} == {"switch_fault", "collector_silent"}
    (before,) = [i for i in without.incidents if i.type != "collector_silent"]
    assert before.id == switch.id and switch.detected_at in (before.detected_at, before.detected_at - EVERY_S / 2)
    assert next(kind for kind, i in engine.changes if i.id == switch.id) == "step"  # these seeds: the step tick's

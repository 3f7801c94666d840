"""Scenarios simulated and replayed here (the stored library is at its 30 MB cap): each fault found at
its place with its cause, and no other incident. Each case failed before the rule it names:

* a PFC storm and an incast on one leaf: the incast's port, congested against its peers before its
  absolute finding, was folded into the storm as a victim (a storm's victims receive its pauses, and
  port_peers leaves those out of the queue comparison: correlate rule 7);
* an XID on a GPU of a failing cooling loop: the loop covers its hot GPUs, and the GPU's XID was
  folded into it, so nobody was told to drain it (tracker ``NEVER_FOLDED``);
* an incast in the all-reduce phases only, on a leaf of the realistic fleet mix (read over gNMI every
  30 s: no queue, no ECN marks, the phases averaged away): the marks its hosts' NICs received are
  the egress's own (detectors/traffic.py ``_far_marks``);
* the storm and the incast again, in the realistic mix: the storming NIC's stamps scatter, its held
  share read 98.6 % in two intervals, and it was read as a step upstream and folded into the incast
  (pfc_storm now keeps a storm until its pauses stop, as the SONiC watchdog restores a queue)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.app import library
from fabricwatch.app.score import score
from fabricwatch.collectors.sim.capture import simulate_capture
from fabricwatch.replay.run import replay

pytestmark = pytest.mark.timeout(300)

CASES = {
    "storm-and-incast": """
topology: {gpus: 16, rails: 8, gpus_per_node: 8}
duration: 240
interval: 10
seed: 924
faults:
  - {cause: pfc_storm, port: node000/gpu1:p0, start: 60}
  - {cause: incast_hotspot, port: leaf1-0:p01, start: 90}
""",
    "storm-and-incast-in-the-mix": """
topology: {gpus: 16, rails: 8, gpus_per_node: 8}
duration: 300
interval: 10
seed: 963
pathologies: realistic
faults:
  - {cause: pfc_storm, port: node000/gpu1:p0, start: 60}
  - {cause: incast_hotspot, port: leaf1-0:p01, start: 90}
""",
    "xid-in-failing-loop": """
topology: {gpus: 32, rails: 8, gpus_per_node: 8}
duration: 240
interval: 10
seed: 925
faults:
  - {cause: cooling_failure, cooling_loop: cl00, start: 60}
  - {cause: gpu_xid, gpu: node001/gpu3, start: 120}
""",
    "incast-in-all-reduce-behind-gnmi": """
topology: {gpus: 16, rails: 8, gpus_per_node: 8}
duration: 300
interval: 10
seed: 943
pathologies: realistic
faults:
  - {cause: incast_hotspot, port: leaf3-0:p00, start: 60, phase: allreduce}
""",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_fault_is_found(tmp_path: Path, name: str) -> None:
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f'description: "{name}"{CASES[name]}')
    sc = library.load_scenario(spec)
    simulate_capture(sc.topology, sc.plan, sc.duration, sc.interval, sc.capture, progress=False)
    result = replay(sc.capture)
    s = score(result.truth or [], result.incidents, result.first_ts or 0.0)
    found = sorted((m.fault["cause"], m.incident.cause if m.incident else None) for m in s.matches)
    assert all(m.located and m.cause_ok for m in s.matches), found
    assert not s.false_alarms, [(i.cause, i.location) for i in s.false_alarms]
    assert len(s.matches) == CASES[name].count("cause:")

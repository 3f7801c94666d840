"""gpu_model: a GPU hotter than its learnt self at its power, against gpu_peers' fixed margin.

The timelines here are physical, unlike synth's independent noise: each GPU settles at
T = T_inlet + R_gpu · P through a first-order lag (τ 15 s, a die and cold plate), with its own
resistance (±5 %) and manifold offset, read in NVML's whole degrees; power is the load's plus noise.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from fabricwatch import topology
from fabricwatch.detectors.gpu_model import GpuThermalModel
from fabricwatch.detectors.gpu_peers import GpuPeerThermal
from fabricwatch.records import Finding
from tests.detectors.synth import Timeline

TOPO = topology.generate(64, rails=8, gpus_per_node=8)  # one cooling loop of 64 GPUs on 8 nodes
GPUS = TOPO.gpus
HOT = "node002/gpu3"
BUSY_W, LIGHT_W, IDLE_W = 650.0, 330.0, 90.0


def physical(tl: Timeline, load_w: dict[str, list[tuple[float, float]]], hot_c: float = 0.0, hot_from: float = 0.0,
             coolant_rise_c: float = 0.0) -> None:  # fmt: skip
    """Write power, utilisation and temperature of every GPU: ``load_w[node]`` is [(from s, watts)],
    steps in time order; ``hot_c`` ramps onto HOT over 60 s from ``hot_from`` (its resistance rising);
    ``coolant_rise_c`` ramps the whole loop's inlet over the run."""
    rng = np.random.default_rng(11)
    f = tl.frames["gpu"]
    n, m = len(tl.times), len(GPUS)
    t = tl.times - tl.start
    r = 0.052 * (1 + np.clip(rng.normal(0, 0.05, m), -0.12, 0.12))
    inlet = 35.0 + np.clip(rng.normal(0, 0.5, m), -1.2, 1.2)
    load = np.zeros((n, m))
    for j, g in enumerate(GPUS):
        for start, watts in load_w[g.split("/")[0]]:
            load[t >= start, j] = watts
    power = load * (1 + rng.normal(0, 0.03, (n, m)))
    target = inlet[None, :] + coolant_rise_c * (t / t[-1])[:, None] + r[None, :] * load
    target[:, GPUS.index(HOT)] += hot_c * np.clip((t - hot_from) / 60.0, 0, 1)
    temp = np.empty((n, m))
    temp[0] = target[0]
    a = 1 - np.exp(-tl.step / 15.0)
    for k in range(1, n):
        temp[k] = temp[k - 1] + (target[k] - temp[k - 1]) * a
    f["power_w"] = np.round(power, 2).ravel()
    f["util_pct"] = np.clip(np.round(100 * load / BUSY_W + rng.normal(0, 1.5, (n, m))), 0, 100).ravel()
    f["temp_c"] = np.round(temp + rng.normal(0, 0.3, (n, m))).ravel()


def run(detector: GpuThermalModel | GpuPeerThermal, tl: Timeline, first: float = 10.0) -> dict[float, list[Finding]]:
    return {at: detector.detect(tl.window(at)) for at in tl.ticks(10.0, first)}


def hot_ids(findings: list[Finding]) -> set[str]:
    return {f.id for f in findings}


# Half the loop's nodes run a light job, the other half a heavy one: the loop's GPUs differ in load.
MIXED = {f"node{i:03d}": [(0.0, LIGHT_W if i < 4 else BUSY_W)] for i in range(8)}


@pytest.mark.timeout(120)
def test_a_gpu_hot_for_its_power_among_gpus_of_other_loads_is_found_before_the_peer_rule() -> None:
    """6 °C over its own healthy self, under gpu_peers' 10 °C margin: the model names it, with the
    terms that explain its prediction; the peer rule does not."""
    tl = Timeline(TOPO, duration=400.0, seed=2)
    physical(tl, MIXED, hot_c=6.0, hot_from=200.0)
    model = run(GpuThermalModel(), tl)
    assert not any(model[at] for at in model if at < 200.0), "healthy before the fault"
    assert hot_ids(model[400.0]) == {HOT}
    (found,) = model[400.0]
    assert found.symptom == "gpu_hot_for_power"
    ev = found.evidence[0]
    terms = ev["explained_by"]
    assert ev["value"] - ev["predicted"] >= 3.0
    assert ev["predicted"] == pytest.approx(terms["peers_temp_c"] + terms["own_offset_c"] + terms["power_c"], abs=0.05)
    assert not run(GpuPeerThermal(), tl)[400.0]


@pytest.mark.timeout(120)
def test_a_load_step_with_its_proportional_rise_is_not_found() -> None:
    """Half the loop goes from a light job to a heavy one (and later the other half idles): each GPU
    warms towards its new level through its lag, the hot GPU's node among them. Nothing is hot for
    its power at any tick, nor when the whole loop's coolant drifts up 6 °C meanwhile."""
    steps = {
        f"node{i:03d}": [(0.0, LIGHT_W), (150.0, BUSY_W)] if i < 4 else [(0.0, BUSY_W), (300.0, IDLE_W)]
        for i in range(8)
    }
    tl = Timeline(TOPO, duration=480.0, seed=3)
    physical(tl, steps, coolant_rise_c=6.0)
    model = run(GpuThermalModel(), tl)
    assert {at: hot_ids(f) for at, f in model.items() if f} == {}


@pytest.mark.timeout(120)
def test_save_and_restore_give_the_same_findings() -> None:
    tl = Timeline(TOPO, duration=400.0, seed=4)
    physical(tl, MIXED, hot_c=8.0, hot_from=200.0)
    straight = run(GpuThermalModel(), tl)
    first = GpuThermalModel()
    head = {at: first.detect(tl.window(at)) for at in tl.ticks(10.0, 10.0) if at < 180.0}
    second = GpuThermalModel()
    second.restore(json.loads(json.dumps(first.snapshot())))
    tail = {at: second.detect(tl.window(at)) for at in tl.ticks(10.0, 180.0)}
    assert repr({**head, **tail}) == repr(straight)
    assert hot_ids(straight[400.0]) == {HOT}


@pytest.mark.timeout(120)
def test_a_node_handed_to_another_processor_is_forgotten() -> None:
    tl = Timeline(TOPO, duration=120.0, seed=5)
    physical(tl, MIXED)
    model = GpuThermalModel()
    run(model, tl)
    assert any(g.startswith("node002/") for g in model.snapshot()["gpus"])
    model.forget({"node002": tl.start + 120.0})
    kept = model.snapshot()["gpus"]
    assert kept and not any(g.startswith("node002/") for g in kept)


def test_the_gpu_heat_detectors_share_their_common_defaults() -> None:
    """gpu_model restates gpu_peers', gpu_temp's and cooling_loop's settings it judges by (a peer, a
    load step, a still level, a throttling GPU): their defaults come from the module owning each, so
    one changed there moves them all, and none can drift apart."""
    from fabricwatch.detectors.cooling_loop import CoolingLoopConfig
    from fabricwatch.detectors.gpu_model import GpuModelConfig
    from fabricwatch.detectors.gpu_peers import GpuPeerConfig
    from fabricwatch.detectors.gpu_temp import GpuTemperatureConfig

    configs = [GpuModelConfig(), GpuPeerConfig(), GpuTemperatureConfig(), CoolingLoopConfig()]
    shared: dict[str, set[float]] = {}
    for config in configs:
        for name, value in config.to_dict().items():
            shared.setdefault(name, set()).add(value)
    assert {n for n in shared if n != "enabled" and sum(n in c.to_dict() for c in configs) > 1} == {
        "gpu_peer_load_margin_pct",
        "gpu_peer_min",
        "gpu_hot_c",
        "settled_c",
    }
    assert all(len(values) == 1 for values in shared.values())
    model, peers, loop = configs[0], configs[1], configs[3]
    assert model.model_k == peers.gpu_peer_mad_k
    assert model.model_gate_fraction == loop.baseline_gate_c / loop.loop_excess_c

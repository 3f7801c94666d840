"""Stage 2's step tick (``Stage2.run_step``, ``IncidentTracker.update_step``): it opens step incidents
only, moves nothing else, and leaves a link seen down from its host end alone (its switch may be
rebooting) to the full tick."""

from __future__ import annotations

from fabricwatch.detectors.config import EngineConfig
from fabricwatch.detectors.stage import STEP_DETECTORS, Stage1, Stage2
from fabricwatch.records import Finding
from fabricwatch.topology import generate
from tests.detectors.synth import Timeline

TOPO = generate(128, rails=8, gpus_per_node=8)
HOST = TOPO.links[3]  # node000/gpu3:p0 <-> leaf3-0:p00


def down(port: str, first_seen: float = 12.0, last_seen: float = 15.0) -> Finding:
    return Finding("link_state", "link_down", "port", port, first_seen, last_seen, "critical",
                   ({"metric": "state", "port": port, "value": 0},))  # fmt: skip


def hot(gpu: str = "node001/gpu0") -> Finding:
    return Finding("gpu_temp", "gpu_hot", "gpu", gpu, 10.0, 15.0, "major", ({"metric": "temp_c", "value": 91.0},))


def test_a_link_down_seen_from_both_ends_opens_at_the_step_tick() -> None:
    stage2 = Stage2(TOPO)
    (inc,) = stage2.run_step([down(HOST.a), down(HOST.b, 13.0)], now=16.0)
    assert (inc.cause, inc.location["id"], inc.detected_at, inc.first_seen) == ("link_down", HOST.id, 16.0, 12.0)


def test_a_link_down_seen_from_its_host_end_only_waits_for_the_tick() -> None:
    """The leaf has not said so: it may be rebooting, its other links not read yet; the full tick (with
    every detector, as before step ticks) decides."""
    stage2 = Stage2(TOPO)
    assert stage2.run_step([down(HOST.a)], now=16.0) == []
    assert stage2.tracker.snapshot()["pending"] == {}  # not even a debounce started
    (inc,) = stage2.run([down(HOST.a)], now=21.0)
    assert (inc.cause, inc.detected_at) == ("link_down", 21.0)


def test_a_step_tick_opens_no_judgement_and_resolves_nothing() -> None:
    cfg = EngineConfig(resolve_after_s=5.0)
    stage2 = Stage2(TOPO, cfg)
    (link,) = stage2.run([down(HOST.a), down(HOST.b)], now=11.0)
    assert stage2.run_step([hot()], now=26.0) == []  # a hot GPU is judged over open_after_s, at full ticks
    assert stage2.tracker.snapshot()["pending"] == {}
    assert [i.status for i in stage2.incidents()] == ["firing"]  # gone past resolve_after_s: not its call
    assert [(i.id, i.status) for i in stage2.run([], now=31.0)] == [(link.id, "resolved")]


def test_step_detectors_are_their_own_and_saved_with_the_state() -> None:
    stage1 = Stage1(TOPO)
    assert [d.name for d in stage1.step_detectors] == list(STEP_DETECTORS)
    assert not {id(d) for d in stage1.step_detectors} & {id(d) for d in stage1.detectors}
    assert set(stage1.snapshot()["step_detectors"]) == set(STEP_DETECTORS)
    off = Stage1(TOPO, EngineConfig(step_tick=False))
    assert off.step_detectors == [] and off.step_kinds == frozenset() and "step_detectors" not in off.snapshot()


LEAF = TOPO.port_device[HOST.b]
FAR = sorted(
    {TOPO.gpu_node.get(d, d) for d in (TOPO.port_device[TOPO.port_peer[p]] for p in TOPO.ports_of_device(LEAF))}
)


def step_tick(tl: Timeline, at: float) -> list:
    stage1, stage2 = Stage1(TOPO), Stage2(TOPO)
    found = stage1.detect_step(tl.window(at))
    return [f for f in found if f.symptom == "link_down"], stage2.run_step(found, now=tl.start + at + 1.0)


def test_a_host_link_down_beside_a_live_leaf_not_scraped_yet_opens_at_the_step_tick() -> None:
    """The leaf (scraped every 30-60 s in production) has not read its end yet, but its other links'
    hosts read theirs up since: the leaf is not rebooting."""
    tl = Timeline(TOPO, duration=120, seed=2)
    tl.silence(LEAF, 50)
    tl.put("port", "state", 0, start=60, port=HOST.a)
    (down_,), (inc,) = step_tick(tl, 66.0)
    assert down_.attrs["switch_alive"] and (inc.cause, inc.location["id"]) == ("link_down", HOST.id)


def test_the_first_link_of_a_leaf_reboot_read_down_waits_for_the_tick() -> None:
    """The leaf silent, one host has read its link down, the far ends of its other links (hosts, spines)
    not read since: one link of a reboot looks like that; the full tick decides (a switch incident once
    more of them read down)."""
    tl = Timeline(TOPO, duration=120, seed=2)
    tl.silence(LEAF, 60)
    for far in FAR:
        if far != TOPO.gpu_node[TOPO.port_device[HOST.a]]:
            tl.silence(far, 59)
    tl.put("port", "state", 0, start=60, port=HOST.a)
    (down_,), opened = step_tick(tl, 66.0)
    assert "switch_alive" not in down_.attrs and opened == []

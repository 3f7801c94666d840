"""The whole engine over hand-built timelines: every cause of DESIGN §4 becomes exactly one incident,
of the right type, cause and location; healthy data becomes none; the same input gives the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from fabricwatch.detectors import base
from fabricwatch.detectors.base import Detector, detector_class
from fabricwatch.detectors.config import DetectorConfig, EngineConfig
from fabricwatch.detectors.engine import DetectionEngine
from fabricwatch.errors import InputError
from fabricwatch.faults import CAUSES
from fabricwatch.records import Finding, Window
from fabricwatch.topology import generate
from tests.detectors.synth import Timeline, run_engine

TOPO = generate(128, rails=8, gpus_per_node=8)
HOST = TOPO.links[3]  # node000/gpu3:p0 <-> leaf3-0:p00
FAB = TOPO.links[200]  # leaf4-0:p72 <-> spine00:p36
GPU = "node002/gpu1"
BYTES_PER_S = 400e9 / 8


def contamination(tl: Timeline) -> None:
    tl.shift("optical", "rx_power_dbm", -4.0, start=60, ramp=60, port=HOST.b)


def fiber(tl: Timeline) -> None:
    tl.shift("optical", "rx_power_dbm", -6.0, start=60, ramp=60, port=[HOST.a, HOST.b])


def laser(tl: Timeline) -> None:
    tl.shift("optical", "tx_power_dbm", -5.0, start=60, ramp=200, port=FAB.a)
    tl.shift("optical", "bias_ma", 9.0, start=60, ramp=200, port=FAB.a)
    tl.shift("optical", "rx_power_dbm", -5.0, start=60, ramp=200, port=FAB.b)


def transceiver_errors(tl: Timeline) -> None:
    tl.put("port", "pre_fec_ber", 1e-3, start=60, port=FAB.b)
    tl.count("port", "fec_uncorrectable_total", 50, start=60, port=FAB.b)
    tl.count("port", "rx_crc_errors_total", 400_000, start=60, port=FAB.b)


def dead_lane(tl: Timeline) -> None:
    tl.put("optical", "tx_power_dbm", -40.0, start=60, port=FAB.a, lane=0)
    tl.put("optical", "rx_power_dbm", -40.0, start=60, port=FAB.b, lane=0)


def flap(tl: Timeline) -> None:
    for k in range(60, 300, 30):
        tl.put("port", "state", 0, start=k, end=k + 4, port=[HOST.a, HOST.b])
        tl.put("optical", "rx_power_dbm", -40.0, start=k, end=k + 4, port=[HOST.a, HOST.b])
        tl.count("port", "link_down_total", 1000, start=k, end=k + 0.001, port=[HOST.a, HOST.b])


def link_down(tl: Timeline) -> None:
    tl.put("port", "state", 0, start=60, port=[HOST.a, HOST.b])
    tl.put("optical", "rx_power_dbm", -40.0, start=60, port=[HOST.a, HOST.b])
    tl.count("port", "link_down_total", 1000, start=60, end=60.001, port=[HOST.a, HOST.b])


def switch(tl: Timeline) -> None:
    ports = TOPO.ports_of_device("leaf0-0")[:20]
    tl.put("port", "pre_fec_ber", 5e-4, start=60, port=ports)
    tl.count("port", "fec_uncorrectable_total", 5, start=60, port=ports)
    tl.count("port", "rx_crc_errors_total", 20_000, start=60, port=ports)


def incast(tl: Timeline) -> None:
    hot = "leaf3-0:p00"
    tl.count("port", "tx_bytes_total", 0.38 * BYTES_PER_S, start=60, port=hot)
    tl.count("port", "tx_packets_total", 0.38 * BYTES_PER_S / 4096, start=60, port=hot)
    tl.count("port", "ecn_marked_total", 0.05 * BYTES_PER_S / 4096, start=60, port=hot)
    tl.put("port", "queue_depth_bytes", 4_000_000, start=60, port=hot)
    upstream = ["leaf3-0:p64", "leaf3-0:p65", "leaf3-0:p66"]
    tl.count("port", "tx_pause_total", 5000, start=60, port=upstream)
    spine = [TOPO.port_peer[p] for p in upstream]
    tl.count("port", "rx_pause_total", 5000, start=60, port=spine)
    tl.put("port", "queue_depth_bytes", 2_000_000, start=60, port=spine)


def pfc_storm(tl: Timeline) -> None:
    nic = "node001/gpu2:p0"
    leaf = TOPO.port_peer[nic]
    tl.count("port", "tx_pause_total", 20_000, start=60, port=nic)
    tl.freeze("port", "rx_bytes_total", start=60, port=nic)
    tl.freeze("port", "rx_packets_total", start=60, port=nic)
    tl.freeze("port", "tx_bytes_total", start=60, port=leaf)
    tl.freeze("port", "tx_packets_total", start=60, port=leaf)
    tl.count("port", "rx_pause_total", 20_000, start=60, port=leaf)
    tl.put("port", "queue_depth_bytes", 3_000_000, start=60, port=leaf)
    upstream = [p for p in TOPO.ports_of_device(TOPO.port_device[leaf]) if p != leaf][16:20]
    tl.count("port", "tx_pause_total", 5000, start=60, port=upstream)


def cooling(tl: Timeline) -> None:
    tl.shift("gpu", "temp_c", 18.0, start=60, ramp=120, device=TOPO.gpus_of_loop("cl00"))
    tl.put("gpu", "throttle_mask", 0x20, start=170, device=TOPO.gpus_of_loop("cl00")[:10])


def gpu_thermal(tl: Timeline) -> None:
    tl.shift("gpu", "temp_c", 22.0, start=60, ramp=60, device=GPU)


def npo(tl: Timeline, heat_from: float = 60.0, decades: float = 3.0) -> None:
    """The GPU heats from ``heat_from`` over 60 s, its NPO engine with it; BER at the far end of the
    link climbs from 1e-7 by ``decades`` over the first minute of the fault."""
    port = f"{GPU}:p0"
    tl.shift("gpu", "temp_c", 20.0, start=heat_from, ramp=60, device=GPU)
    tl.shift("optical", "module_temp_c", 12.0, start=heat_from, ramp=60, port=port)
    tl.shift("optical", "bias_ma", 6.0, start=heat_from, ramp=60, port=port)
    rise = lambda ts: 1e-7 * 10 ** (decades * ((ts - tl.start - 60) / 60).clip(0, 1))  # noqa: E731
    tl.put("port", "pre_fec_ber", rise, start=60, port=TOPO.port_peer[port])


def xid(tl: Timeline) -> None:
    tl.put("gpu", "xid", 79, start=60, device="node001/gpu0")


SCENARIOS = [
    # cause injected, how it shows, (entity, id) the one incident must be located at
    ("connector_contamination", contamination, ("link", HOST.id)),
    ("fiber_damage", fiber, ("link", HOST.id)),
    ("laser_degradation", laser, ("port", FAB.a)),
    ("transceiver_fault", transceiver_errors, ("port", FAB.b)),
    ("transceiver_fault", dead_lane, ("port", FAB.a)),
    ("link_flap", flap, ("link", HOST.id)),
    ("link_down", link_down, ("link", HOST.id)),
    ("switch_fault", switch, ("switch", "leaf0-0")),
    ("incast_hotspot", incast, ("port", "leaf3-0:p00")),
    ("pfc_storm", pfc_storm, ("port", "node001/gpu2:p0")),
    ("cooling_failure", cooling, ("cooling_loop", "cl00")),
    ("gpu_thermal", gpu_thermal, ("gpu", GPU)),
    ("npo_thermal_coupling", npo, ("gpu", GPU)),
    ("gpu_xid", xid, ("gpu", "node001/gpu0")),
]


def replay(edit: Callable[[Timeline], None], duration: float = 300.0, seed: int = 11,
           config: EngineConfig | None = None) -> tuple[DetectionEngine, Timeline, list]:  # fmt: skip
    tl = Timeline(TOPO, duration=duration, seed=seed)
    edit(tl)
    engine = DetectionEngine(TOPO, config)
    changed = run_engine(engine, tl)
    assert engine.errors == []
    return engine, tl, changed


@pytest.mark.parametrize(("cause", "edit", "location"), SCENARIOS, ids=[f"{s[0]}/{s[1].__name__}" for s in SCENARIOS])
def test_each_cause_is_one_incident_at_its_location(cause: str, edit: Callable, location: tuple[str, str]) -> None:
    engine, tl, _ = replay(edit)
    (inc,) = engine.incidents()
    assert (inc.type, inc.cause, inc.location) == (
        CAUSES[cause].incident_type, cause, {"entity": location[0], "id": location[1]}
    )  # fmt: skip
    # a link losing ≥ 1 % of its frames is rerouted first (the seeds' rule), else the cause's runbook
    lossy = any(e["metric"] == "loss_ratio" for e in inc.evidence)
    assert inc.runbook == ("reroute" if lossy else CAUSES[cause].runbook) and inc.status == "firing"
    assert tl.start + 55 <= inc.first_seen <= inc.detected_at <= tl.start + 300
    assert inc.evidence and all("metric" in e for e in inc.evidence)


def test_healthy_twenty_minutes_of_128_gpus_give_no_incident() -> None:
    def outliers(tl: Timeline) -> None:
        """Healthy data has outliers that are not faults: single wild samples, a stray error."""
        for k, at in enumerate(range(100, 1200, 97)):
            tl.spike("gpu", "temp_c", 96.0, at=at, device=TOPO.gpus[k])
            tl.spike("optical", "rx_power_dbm", -25.0, at=at + 3, port=TOPO.ports[7 * k], lane=k % 4)
            tl.spike("port", "pre_fec_ber", 5e-4, at=at + 5, port=TOPO.ports[11 * k])
            tl.spike("optical", "module_temp_c", 85.0, at=at + 7, port=TOPO.ports[13 * k])
        tl.count("port", "fec_uncorrectable_total", 1, start=400, end=401, port=FAB.b)
        tl.count("port", "link_down_total", 1000, start=700, end=700.001, port=HOST.a)
        tl.put("port", "state", 0, start=700, end=704, port=HOST.a)

    engine, _, changed = replay(outliers, duration=1200, seed=21)
    assert changed == [] and engine.incidents() == []


def test_same_windows_give_the_same_incidents_byte_for_byte() -> None:
    def two_faults(tl: Timeline) -> None:
        contamination(tl)
        gpu_thermal(tl)

    runs = [replay(two_faults) for _ in range(2)]
    texts = [json.dumps([i.to_dict() for i in e.incidents()], sort_keys=True) for e, _, _ in runs]
    assert texts[0] == texts[1] and len(json.loads(texts[0])) == 2
    assert [i.to_dict() for i in runs[0][2]] == [i.to_dict() for i in runs[1][2]]
    assert [i.id for i in runs[0][0].incidents()] == ["inc-0001", "inc-0002"]


def test_snapshot_restore_mid_run_changes_nothing() -> None:
    tl = Timeline(TOPO, duration=300, seed=11)
    contamination(tl)
    laser(tl)
    ticks = list(tl.ticks(10.0, 60.0))
    whole = DetectionEngine(TOPO)
    for t in ticks:
        whole.run(tl.window(t), tl.start + t)
    first = DetectionEngine(TOPO)
    for t in ticks[:9]:
        first.run(tl.window(t), tl.start + t)
    second = DetectionEngine(TOPO)
    second.restore(json.loads(json.dumps(first.snapshot())))
    for t in ticks[9:]:
        second.run(tl.window(t), tl.start + t)
    assert [i.to_dict() for i in second.incidents()] == [i.to_dict() for i in whole.incidents()]
    assert json.dumps(second.snapshot(), sort_keys=True) == json.dumps(whole.snapshot(), sort_keys=True)


def test_a_fault_that_ends_resolves_after_the_quiet_period() -> None:
    def transient(tl: Timeline) -> None:
        tl.put("gpu", "xid", 79, start=60, end=150, device="node001/gpu0")

    engine, tl, changed = replay(transient, duration=400)
    (inc,) = engine.incidents()
    assert inc.status == "resolved" and 150 + 120 <= inc.resolved_at - tl.start <= 150 + 120 + 30
    assert [c.status for c in changed] == ["firing", "resolved"]


def test_an_incident_opened_early_is_folded_into_the_root_found_later() -> None:
    """BER at the far end of an NPO link climbs past the FEC limit first; the GPU beside it only heats
    a minute later: the link incident opens first, then becomes a symptom of the GPU, its root."""
    engine, _, changed = replay(lambda tl: npo(tl, heat_from=120.0, decades=4.0))
    (root,) = engine.incidents()
    assert root.cause == "npo_thermal_coupling" and root.location == {"entity": "gpu", "id": GPU}
    (folded,) = [c for c in changed if c.id in root.symptoms and c.status == "resolved"]
    assert folded.type == "link_degradation" and folded.id < root.id


def test_findings_of_the_last_tick_are_kept_for_the_processor() -> None:
    engine, _, _ = replay(gpu_thermal, duration=150)
    assert {(f.symptom, f.id) for f in engine.findings} >= {("gpu_hot", GPU), ("gpu_hotter_than_peers", GPU)}
    assert engine.window_s == 60.0 and engine.every_s == 10.0


class Boom(Detector):
    name = "boom"
    emits = frozenset()

    def detect(self, window: Window) -> list[Finding]:
        raise ValueError("bad corner of the data")


def test_a_failing_detector_is_reported_and_the_others_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(base.DETECTORS, "boom", f"{__name__}:Boom")
    engine = DetectionEngine(TOPO, EngineConfig.only(["boom", "gpu_xid"]))
    tl = Timeline(TOPO, duration=120, seed=1)
    xid(tl)
    engine.run(tl.window(120), tl.start + 120)
    assert engine.errors == ["boom: ValueError: bad corner of the data"]
    assert [f.symptom for f in engine.findings] == ["gpu_xid"]


CONFIG_ERRORS = [
    # mapping, the message the one error line must carry
    ({"detectors": {"gpu_temp": {"gpu_hot_C": 85}}}, "detectors.gpu_temp.gpu_hot_C: unknown key (known: enabled, "),
    ({"detectors": {"gpu_temp": {"gpu_hot_c": "hot"}}}, "detectors.gpu_temp.gpu_hot_c: must be a number, not 'hot'"),
    ({"detectors": {"packet_loss": {"loss_min_frames": 2.5}}}, "loss_min_frames: must be an integer, not 2.5"),
    ({"detectors": ["gpu_temp"]}, "detectors: must be a mapping"),
    ({"detectors": {"gpu_tmp": {}}}, "detectors.gpu_tmp: unknown key (known: congestion, cooling_loop, "),
    ({"detectors": {"gpu_xid": {"enabled": "no"}}}, "detectors.gpu_xid.enabled: must be true or false"),
    ({"detectors": {"link_state": {"flap_memory_s": 0}}}, "flap_memory_s: must be a number > 0, not 0"),
    ({"window_s": 0}, "window_s: must be a number > 0"),
    ({"recent_s": 90}, "recent_s (90) must not exceed window_s (60)"),
    ({"gpu_hot_c": 85}, "gpu_hot_c: unknown key (known: window_s, "),  # thresholds live with their detector
]


@pytest.mark.parametrize(("mapping", "message"), CONFIG_ERRORS, ids=[m for _, m in CONFIG_ERRORS])
def test_config_rejects_bad_keys_with_one_clear_line(mapping: dict, message: str) -> None:
    with pytest.raises(InputError) as err:
        EngineConfig.from_dict(mapping)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_config_from_dict_and_unknown_detector() -> None:
    cfg = EngineConfig.from_dict(
        {"detectors": {"gpu_temp": {"gpu_hot_c": 83}, "gpu_xid": {"xid_ignore": [13]}, "pfc_storm": {"enabled": False}}}
    )
    assert (cfg.detector("gpu_temp").gpu_hot_c, cfg.detector("gpu_xid").xid_ignore) == (83.0, (13,))
    assert "pfc_storm" not in cfg.enabled() and "gpu_temp" in cfg.enabled()
    assert cfg.detector("congestion") == detector_class("congestion").Config()  # not named: its defaults
    assert EngineConfig.from_dict(cfg.to_dict()) == cfg
    engine = DetectionEngine(TOPO, cfg)
    assert "pfc_storm" not in {d.name for d in engine.detectors}
    assert next(d for d in engine.detectors if d.name == "gpu_temp").config.gpu_hot_c == 83.0
    with pytest.raises(InputError, match="unknown detector 'nope'"):
        DetectionEngine(TOPO, EngineConfig(detectors={"nope": DetectorConfig()}))
    with pytest.raises(InputError, match="engine snapshot"):
        DetectionEngine(TOPO).restore({"version": 99})

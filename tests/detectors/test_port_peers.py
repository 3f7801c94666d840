"""port_peers: a port congested against its peers of the same role and load at the same instant.

One row per scenario over the hand-built 128-GPU timeline (every role has 128 ports there): the edit
and exactly which (symptom, port) findings the detector reports at the last tick.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from fabricwatch.detectors.port_peers import PortPeerConfig, role_of
from fabricwatch.records import Window
from tests.detectors.synth import Timeline
from tests.detectors.test_detectors import TOPO, findings_at

LEAF_HOST = sorted(p for p in TOPO.ports if TOPO.port_link[p].tier == "host" and p.startswith("leaf"))
HOT = "leaf1-0:p02"  # the egress towards node002/gp1's NIC
assert HOT in LEAF_HOST and len(LEAF_HOST) == 128
BUSY, IDLE = LEAF_HOST[::2], LEAF_HOST[1::2]  # a partial load step: every other host port idles
MB2 = 2_000_000  # a standing queue far over any ECN threshold


def queue(tl: Timeline, ports: list[str] | str, value: float = MB2) -> None:
    tl.put("port", "queue_depth_bytes", value, start=100, port=ports)


def idle(tl: Timeline, ports: list[str]) -> None:
    """The job stops on these ports' GPUs: background traffic only, no queue."""
    for direction in ("tx", "rx"):
        load(tl, ports, direction, 0.004)
    tl.freeze("port", "ecn_marked_total", start=0, port=ports)
    tl.put("port", "queue_depth_bytes", 0, port=ports)


def load(tl: Timeline, ports: list[str] | str, direction: str, util: float) -> None:
    """These ports carry ``util`` of line rate in ``direction`` from the start."""
    tl.freeze("port", f"{direction}_bytes_total", start=0, per_s=util * 50e9, port=ports)
    tl.freeze("port", f"{direction}_packets_total", start=0, per_s=util * 50e9 / 4096, port=ports)


def incast(tl: Timeline) -> None:
    """The job averages 25 % of line rate each way (compute phases between all-reduces); the hotspot's
    egress is offered more than the line and sends at 98 %, 4x its peers, its ingress at the job's 25 %."""
    for direction in ("tx", "rx"):
        load(tl, LEAF_HOST, direction, 0.25)
    load(tl, HOT, "tx", 0.98)
    queue(tl, HOT)


def only(ports: list[str]) -> Callable[[Window], Window]:
    """The window with the port rows of ``ports`` only (what a processor of a tiny fabric sees)."""

    def cut(w: Window) -> Window:
        frames = dict(w.frames)
        frames["port"] = w.frames["port"][w.frames["port"]["port"].isin(ports)].reset_index(drop=True)
        return Window(w.start, w.end, frames, w.modules, w.topology)

    return cut


ROWS = [
    # comment, edit, window cut, expected {(symptom, port)}
    ("healthy fleet: noise, spread, tens of kB queues", lambda tl: None, None, set()),
    (
        "one egress holds 2 MB, its peers ~10 kB: it stands out",
        lambda tl: queue(tl, HOT),
        None,
        {("congestion_vs_peers", HOT)},
    ),
    (
        "a load step raises every host egress together: shared, no outlier",
        lambda tl: queue(tl, LEAF_HOST),
        None,
        {("congestion_shared", p) for p in LEAF_HOST},
    ),
    (
        "a hotspot over a loaded group still stands out",
        lambda tl: (queue(tl, LEAF_HOST, 500e3), queue(tl, HOT, 4e6)),
        None,
        {("congestion_vs_peers", HOT)} | {("congestion_shared", p) for p in LEAF_HOST if p != HOT},
    ),
    (
        "partial load step: the busy half congested together, the idle half is nobody's peer",
        lambda tl: (idle(tl, IDLE), queue(tl, BUSY)),
        None,
        {("congestion_shared", p) for p in BUSY},
    ),
    (
        "an incast: the hotspot's egress at line rate, its ingress at the job's share like its peers'",
        incast,
        None,
        {("congestion_vs_peers", HOT)},
    ),
    (
        "a NIC counts the ECN marks it receives: congestion on its way, not at its egress",
        lambda tl: tl.count("port", "ecn_marked_total", 350_000, start=60, port="node002/gpu1:p0"),
        None,
        set(),
    ),
    (
        "a leaf blind to its own marks (OpenConfig gNMI has no ECN leaf): the marks its NIC received are the"
        " ones its egress set, and that egress stands out",
        lambda tl: (
            tl.put("port", "ecn_marked_total", np.nan, port=[p for p in TOPO.ports if p.startswith("leaf1-0:")]),
            tl.count("port", "ecn_marked_total", 350_000, start=60, port="node002/gpu1:p0"),
        ),
        None,
        {("congestion_vs_peers", HOT)},
    ),
    (
        "a leaf egress marking ~5 % of its frames (350k of ~7M a second), its peers almost none",
        lambda tl: tl.count("port", "ecn_marked_total", 350_000, start=60, port=HOT),
        None,
        {("congestion_vs_peers", HOT)},
    ),
    ("a queue under the floor is quiet whatever its peers do", lambda tl: queue(tl, HOT, 300e3), None, set()),
    (
        "a PFC victim's queue is its partner holding it, not load",
        lambda tl: (queue(tl, HOT), tl.count("port", "rx_pause_total", 5000, start=60, port=HOT)),
        None,
        set(),
    ),
    (
        "a port sending pauses its peers do not: pausing, not congested",
        lambda tl: tl.count("port", "tx_pause_total", 5000, start=60, port=HOT),
        None,
        {("pausing_vs_peers", HOT)},
    ),
    (
        "too few peers (4 ports of the role): no judgement",
        lambda tl: queue(tl, HOT),
        only([*LEAF_HOST[:3], HOT]),
        set(),
    ),
    (
        "five ports of the role: four peers, judged",
        lambda tl: queue(tl, HOT),
        only([*LEAF_HOST[:4], HOT]),
        {("congestion_vs_peers", HOT)},
    ),
]


@pytest.mark.parametrize(("comment", "edit", "cut", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_port_peer_rows(comment: str, edit: Callable, cut: Callable | None, expected: set) -> None:
    found = findings_at("port_peers", edit, cut=cut or (lambda w: w))
    assert {(f.symptom, f.id) for f in found} == expected, comment


def test_an_outlier_names_its_signal_and_peers() -> None:
    (found,) = findings_at("port_peers", lambda tl: queue(tl, HOT))
    assert found.cause == "incast_hotspot" and found.severity == "warning"
    (e,) = found.evidence
    assert e["metric"] == "queue_depth_bytes" and e["value"] == MB2 and e["peers"] < 20_000 and e["n_peers"] == 127
    assert found.attrs["role"] == "leaf_host" and found.first_seen >= found.last_seen - 90


def test_a_missing_column_is_unknown_not_quiet() -> None:
    """Without queue depth (gNMI's OpenConfig counters carry none) a shared load is not called shared:
    a 'no outlier' verdict would hold the absolute judgement back on a reading nobody made."""

    def load(tl: Timeline) -> None:
        queue(tl, LEAF_HOST)
        tl.drop_column("port", "queue_depth_bytes")

    assert findings_at("port_peers", load) == []


def test_null_peers_are_not_peers() -> None:
    """Peers whose queue reads null are left out, not counted as empty queues: with three left the
    hot port has too few to be judged against."""

    def nulls(tl: Timeline) -> None:
        queue(tl, HOT)
        f = tl.frames["port"]
        f["queue_depth_bytes"] = f["queue_depth_bytes"].astype("float64")
        f.loc[f["port"].isin(LEAF_HOST[3:]) & (f["port"] != HOT), "queue_depth_bytes"] = np.nan

    assert findings_at("port_peers", nulls) == []


def test_roles_follow_the_topology() -> None:
    w = Timeline(TOPO, duration=60).window(60)
    ports = ["node002/gpu1:p0", HOT, "leaf4-0:p72", "spine00:p36", "leaf0-0:p127"]
    assert list(role_of(w, ports)) == ["nic", "leaf_host", "leaf_uplink", "spine", ""]


def test_every_constant_keeps_its_meaning() -> None:
    """The floors are the levels the other traffic detectors use (one meaning of 'pausing')."""
    from fabricwatch.detectors.congestion import CongestionConfig

    cfg = PortPeerConfig()
    assert cfg.port_peer_ecn_floor == CongestionConfig().ecn_frac
    assert cfg.port_peer_queue_floor_bytes < cfg.queue_high_bytes


def test_a_load_step_on_every_port_pages_nothing_and_a_hotspot_among_them_pages() -> None:
    """Through the engine (congestion's absolute rule and port_peers, then correlation and the tracker),
    on a 32-GPU fabric: every host egress at line rate with a standing queue is the load, not 32
    hotspots; one port queued twice as deep as the rest is the one hotspot."""
    from fabricwatch.detectors.config import EngineConfig
    from fabricwatch.detectors.engine import DetectionEngine
    from fabricwatch.topology import generate
    from tests.detectors.synth import run_engine

    topo = generate(32, rails=4, gpus_per_node=8)
    host = [p for p in topo.ports if topo.port_link[p].tier == "host" and p.startswith("leaf")]
    hot = "leaf1-0:p02"
    assert hot in host and len(host) == 32

    def opened(detectors: list[str], extra: Callable[[Timeline], None] = lambda tl: None) -> set[tuple[str, str]]:
        tl = Timeline(topo, duration=160, seed=5)
        for direction in ("tx", "rx"):
            load(tl, host, direction, 0.95)
        queue(tl, host)
        extra(tl)
        engine = DetectionEngine(topo, EngineConfig.only(detectors))
        return {(i.location["id"], i.severity) for i in run_engine(engine, tl) if i.cause == "incast_hotspot"}

    assert len(opened(["congestion"])) == len(host)  # the absolute rule alone: every port a hotspot
    assert opened(["congestion", "port_peers"]) == set()
    assert opened(["congestion", "port_peers"], lambda tl: queue(tl, hot, 4e6)) == {(hot, "major")}

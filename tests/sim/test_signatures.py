"""Physics: every cause of DESIGN §4 shows its documented signature, and nothing else changes.

Each case runs a small supernode twice with the same seed, without and with one fault. The random
streams are drawn independently of faults (collectors/sim/streams.py), so the difference between
the two runs is exactly what the fault did: the test checks that every changed cell lies inside the
signature documented in collectors/sim/injection.py, and that the signature is there and strong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from fabricwatch.collectors.sim import fabric, optics
from fabricwatch.collectors.sim.plant import Plant
from tests.sim.helpers import changes, faults_of, healthy, run, series, standard

FEC_COLUMNS = ("pre_fec_ber", "fec_corrected_total", "fec_uncorrectable_total", "symbol_errors_total")
ERROR_COLUMNS = (*FEC_COLUMNS, "rx_crc_errors_total")
TRAFFIC = ("rx_bytes_total", "tx_bytes_total", "rx_packets_total", "tx_packets_total")
LINK_DOWN_PORT = (
    "state",
    "speed_gbps",
    "link_down_total",
    *TRAFFIC,
    *FEC_COLUMNS,
    "queue_depth_bytes",
    "ecn_marked_total",
    "tx_pause_total",
    "rx_pause_total",
)
INTERVAL = 5.0
T0 = 1764400000.0


def at(t: float) -> int:
    """Scrape index of simulated time t."""
    return int(t / INTERVAL)


def link_ends(topo, lid: str) -> tuple[str, str]:
    link = topo.link_by_id[lid]
    return link.a, link.b


def lanes(port: str, which=range(4)) -> set:
    return {(port, lane) for lane in which}


def allow(**groups: tuple[tuple[str, ...], set]) -> dict[tuple[str, str], set]:
    """allow(port=(columns, entities), ...) → {(kind, column): entities}; entities may be given twice."""
    out: dict[tuple[str, str], set] = {}
    for kind, specs in groups.items():
        for columns, entities in specs:
            for column in columns:
                out.setdefault((kind.rstrip("_"), column), set()).update(entities)
    return out


@dataclass(frozen=True)
class Case:
    id: str
    gpus: int
    spec: dict
    steps: int
    allowed: Callable  # (topo) -> {(kind, column): entities}
    check: Callable  # (topo, healthy, faulted) -> None, asserts the signature is present
    required: tuple[tuple[str, str], ...] = ()  # (kind, column) that must change


# --- signature checks -----------------------------------------------------------------------------------


def check_contamination(topo, h, f):
    _, b = link_ends(topo, "L00000")
    t = at(150)
    for lane in range(4):
        drop = series(h, "optical", (b, lane), "rx_power_dbm")[t] - series(f, "optical", (b, lane), "rx_power_dbm")[t]
        assert 0.6 * 9 - 0.3 <= drop <= 9 + 0.3  # per-lane share of the 9 dB, plus reading noise
    assert series(f, "port", b, "pre_fec_ber")[t] > 10 * series(h, "port", b, "pre_fec_ber")[t]
    before = series(f, "optical", (b, 0), "rx_power_dbm")[at(55)]
    assert before == series(h, "optical", (b, 0), "rx_power_dbm")[at(55)]  # nothing before start


def check_contamination_b_to_a(topo, h, f):
    a, _ = link_ends(topo, "L00009")
    drops = [
        series(h, "optical", (a, lane), "rx_power_dbm")[-1] - series(f, "optical", (a, lane), "rx_power_dbm")[-1]
        for lane in range(4)
    ]
    assert max(drops) == pytest.approx(4.0, abs=0.3) and min(drops) >= 2.4 - 0.3  # DESIGN: 2-6 dB down


def check_fiber(topo, h, f):
    for end in link_ends(topo, "L00070"):
        for lane in range(4):
            drop = (
                series(h, "optical", (end, lane), "rx_power_dbm")[-1]
                - series(f, "optical", (end, lane), "rx_power_dbm")[-1]
            )
            assert 0.85 * 10 - 0.3 <= drop <= 10 + 0.3
        assert series(f, "port", end, "pre_fec_ber")[-1] > 3 * series(h, "port", end, "pre_fec_ber")[-1]


def check_laser(topo, h, f):
    port = "node000/gpu2:p0"
    peer = topo.port_peer[port]
    full = at(160)  # ramp done at 150, module replaced at 200
    for lane in range(4):
        tx_drop = (
            series(h, "optical", (port, lane), "tx_power_dbm")[full]
            - series(f, "optical", (port, lane), "tx_power_dbm")[full]
        )
        assert tx_drop == pytest.approx(5.0, abs=0.2)
        bias_h = series(h, "optical", (port, lane), "bias_ma")[full]
        assert series(f, "optical", (port, lane), "bias_ma")[full] == pytest.approx(1.5 * bias_h, rel=0.02)
        rx_drop = (
            series(h, "optical", (peer, lane), "rx_power_dbm")[full]
            - series(f, "optical", (peer, lane), "rx_power_dbm")[full]
        )
        assert rx_drop == pytest.approx(5.0, abs=0.3)  # the far end follows
    after = at(205)
    assert (
        series(f, "optical", (port, 0), "tx_power_dbm")[after] == series(h, "optical", (port, 0), "tx_power_dbm")[after]
    )
    for end in (port, peer):  # the replacement retrains the link once
        assert series(f, "port", end, "link_down_total")[after] == series(h, "port", end, "link_down_total")[after] + 1
        assert (
            series(f, "port", end, "fec_corrected_total")[after] < series(h, "port", end, "fec_corrected_total")[after]
        )


def check_transceiver_errors(topo, h, f):
    port = "leaf0-0:p01"
    assert series(f, "port", port, "pre_fec_ber")[-1] == pytest.approx(1e-3, rel=0.05)
    for column in ("fec_uncorrectable_total", "rx_crc_errors_total", "symbol_errors_total"):
        values = series(f, "port", port, column)
        assert values[-1] - values[at(100)] > 1000  # thousands per second past the FEC limit
        assert values[at(55)] == series(h, "port", port, column)[at(55)]


def check_dead_lane(topo, h, f):
    port = "leaf0-0:p01"
    peer = topo.port_peer[port]
    t = at(150)
    assert series(f, "optical", (port, 2), "tx_power_dbm")[t] == optics.LOSS_OF_LIGHT_DBM
    assert series(f, "optical", (port, 2), "bias_ma")[t] == 0.0
    assert series(f, "optical", (peer, 2), "rx_power_dbm")[t] == optics.LOSS_OF_LIGHT_DBM
    assert series(f, "port", port, "state")[t] == 0 and series(f, "port", peer, "state")[t] == 0
    assert series(f, "port", port, "state")[at(205)] == 1  # replaced module: up again
    resent = {m.source for s in f[1:] for m in s if m.kind == "module"}
    assert resent - {m.source for s in h[1:] for m in s if m.kind == "module"} == {"leaf0-0"}


def check_flap(topo, h, f):
    for end in link_ends(topo, "L00003"):
        drops = series(f, "port", end, "link_down_total")[-1] - series(h, "port", end, "link_down_total")[-1]
        assert drops == 6  # at 60, 90, ..., 210 s; the run ends at 235 s
        states = series(f, "port", end, "state")
        assert 0 in states[at(60) :] and states[at(55)] == 1


def check_link_down(topo, h, f):
    for end in link_ends(topo, "L00003"):
        t = at(100)
        assert all(series(f, "optical", (end, lane), "rx_power_dbm")[t] == -40.0 for lane in range(4))
        assert series(f, "port", end, "state")[t] == 0 and series(f, "port", end, "pre_fec_ber")[t] is None
        tx = series(f, "port", end, "tx_bytes_total")
        assert tx[at(100)] == tx[-1]  # no traffic
        downs = series(f, "port", end, "link_down_total")
        assert downs[-1] == downs[0] + 1


def check_switch(topo, h, f):
    ports = topo.ports_of_device("leaf2-0")
    bad = [p for p in ports if series(f, "port", p, "pre_fec_ber")[-1] > 2.4e-4]
    assert len(bad) == round(0.6 * len(ports))
    for p in bad:
        unc = series(f, "port", p, "fec_uncorrectable_total")
        assert unc[-1] > unc[at(100)]


def check_incast(topo, h, f):
    port = "leaf1-0:p03"
    plant = Plant(topo)
    for t in range(at(70), len(f)):
        assert series(f, "port", port, "queue_depth_bytes")[t] >= fabric.KMIN
    tx = series(f, "port", port, "tx_bytes_total")
    assert (tx[-1] - tx[-11]) / 50.0 >= 0.98 * fabric.LINE_BYTES_PER_S  # line-rate tx
    ecn = series(f, "port", port, "ecn_marked_total")
    ecn_h = series(h, "port", port, "ecn_marked_total")
    assert ecn[-1] - ecn[-11] > 100 * (ecn_h[-1] - ecn_h[-11] + 1)
    for q in plant.feeders(plant.port_index[port]).tolist():
        feeder = plant.ports[q]
        sent = series(f, "port", feeder, "tx_pause_total")
        assert sent[-1] - sent[-11] > 10_000  # pauses sent upstream
        peer = topo.port_peer[feeder]
        assert series(f, "port", peer, "rx_pause_total")[-1] - series(h, "port", peer, "rx_pause_total")[-1] > 0


def check_storm(topo, h, f):
    port = "node001/gpu1:p0"
    partner = topo.port_peer[port]
    sent = series(f, "port", port, "tx_pause_total")
    assert (sent[-1] - sent[-11]) / 50.0 == pytest.approx(fabric.PAUSE_FULL_PER_S, rel=0.05)
    rx = series(f, "port", port, "rx_bytes_total")
    assert rx[-1] == rx[at(65)]  # nothing arrives behind the pauses
    assert series(f, "port", port, "queue_depth_bytes") == series(h, "port", port, "queue_depth_bytes")
    assert min(series(f, "port", partner, "queue_depth_bytes")[at(65) :]) >= 0.9 * fabric.QUEUE_CAP_BYTES
    uplinks = [p for p in topo.ports_of_device(partner.split(":")[0]) if int(p.split(":p")[1]) >= 64]
    for up in uplinks:  # hop 1: the partner's switch pauses its uplinks
        s = series(f, "port", up, "tx_pause_total")
        assert (s[-1] - s[-11]) / 50.0 == pytest.approx(0.5 * fabric.PAUSE_FULL_PER_S, rel=0.1)
        held = series(f, "port", topo.port_peer[up], "rx_pause_duration_p3_us_total")
        assert (held[-1] - held[-11]) / 50e6 == pytest.approx(0.5, rel=0.1)  # held half the time
    # the storm is on RoCE's priority 3: the partner's queue is held all the time (SONiC: a storm)
    assert series(f, "port", port, "tx_pause_p3_total") == sent  # every pause is priority 3
    held = series(f, "port", partner, "rx_pause_duration_p3_us_total")
    assert held[-1] - held[-11] == pytest.approx(50e6, rel=0.001)


def check_cooling(topo, h, f):
    loop_gpus = topo.gpus_of_loop("cl00")
    t = len(f) - 1
    for g in loop_gpus:
        assert series(f, "gpu", g, "temp_c")[t] >= series(h, "gpu", g, "temp_c")[t] + 10
        assert series(f, "gpu", g, "throttle_mask")[t] & 0x20
        assert series(f, "gpu", g, "power_w")[t] <= 600
    for g in topo.gpus_of_loop("cl01")[:4]:
        assert series(f, "gpu", g, "temp_c") == series(h, "gpu", g, "temp_c")


def check_gpu_thermal(topo, h, f):
    g = "node002/gpu3"
    t = len(f) - 1
    assert series(f, "gpu", g, "temp_c")[t] >= 85 and series(h, "gpu", g, "temp_c")[t] <= 75
    assert all(m & 0x20 for m in series(f, "gpu", g, "throttle_mask")[at(120) :])
    assert series(f, "gpu", g, "sm_clock_mhz")[t] <= series(h, "gpu", g, "sm_clock_mhz")[t]
    module_h = series(h, "optical", (g + ":p0", 0), "module_temp_c")
    module_f = series(f, "optical", (g + ":p0", 0), "module_temp_c")
    assert all(-2.5 <= y - x <= 0.01 for x, y in zip(module_h, module_f, strict=True))  # its optics do not heat


def check_npo(topo, h, f):
    g = "node002/gpu3"
    port = g + ":p0"
    t = len(f) - 1
    assert series(f, "gpu", g, "temp_c")[t] >= series(h, "gpu", g, "temp_c")[t] + 12
    assert (
        series(f, "optical", (port, 0), "module_temp_c")[t] >= series(h, "optical", (port, 0), "module_temp_c")[t] + 15
    )
    for lane in range(4):
        assert (
            series(f, "optical", (port, lane), "bias_ma")[t] >= 1.12 * series(h, "optical", (port, lane), "bias_ma")[t]
        )
    assert series(f, "port", port, "pre_fec_ber")[t] >= 5 * series(h, "port", port, "pre_fec_ber")[t]


def check_xid48(topo, h, f):
    g = "node002/gpu3"
    assert series(f, "gpu", g, "xid")[at(30)] == 48 and series(f, "gpu", g, "xid")[at(25)] == 0
    assert series(f, "gpu", g, "ecc_dbe_total")[-1] == series(h, "gpu", g, "ecc_dbe_total")[-1] + 1


def check_xid79(topo, h, f):
    g = "node002/gpu3"
    t = at(100)
    assert series(f, "gpu", g, "xid")[t] == 79
    assert series(f, "gpu", g, "temp_c")[t] is None and series(f, "gpu", g, "power_w")[t] is None
    assert series(f, "gpu", g, "temp_c")[at(205)] == series(h, "gpu", g, "temp_c")[at(205)]  # back after end
    tx = series(f, "port", g + ":p0", "tx_bytes_total")
    assert tx[at(60)] == tx[at(190)]


# --- the table --------------------------------------------------------------------------------------------

CASES = [
    # contamination: 9 dB in the a→b fibres of a host link; only b's receiver sees it, BER follows the waterfall
    Case(
        "connector_contamination",
        64,
        {
            "cause": "connector_contamination",
            "link": "L00000",
            "direction": "a_to_b",
            "start": 60,
            "ramp": 60,
            "loss_db": 9.0,
        },
        48,
        lambda t: allow(optical=[(("rx_power_dbm",), lanes("leaf0-0:p00"))], port=[(ERROR_COLUMNS, {"leaf0-0:p00"})]),
        check_contamination,
        (("optical", "rx_power_dbm"), ("port", "pre_fec_ber")),
    ),
    # contamination with defaults, other direction: 4 dB at the GPU's receiver, too far from sensitivity for BER
    Case(
        "connector_contamination_b_to_a",
        64,
        {"cause": "connector_contamination", "link": "L00009", "direction": "b_to_a", "start": 30},
        24,
        lambda t: allow(
            optical=[(("rx_power_dbm",), lanes("node001/gpu1:p0"))], port=[(ERROR_COLUMNS, {"node001/gpu1:p0"})]
        ),
        check_contamination_b_to_a,
        (("optical", "rx_power_dbm"),),
    ),
    # fibre damage on a fabric link: both directions, all lanes, 10 dB (within ~3 dB of sensitivity: BER up)
    Case(
        "fiber_damage",
        64,
        {"cause": "fiber_damage", "link": "L00070", "start": 60, "ramp": 30, "loss_db": 10.0},
        40,
        lambda t: allow(
            optical=[(("rx_power_dbm",), {x for end in link_ends(t, "L00070") for x in lanes(end)})],
            port=[(ERROR_COLUMNS, set(link_ends(t, "L00070")))],
        ),
        check_fiber,
        (("optical", "rx_power_dbm"), ("port", "pre_fec_ber")),
    ),
    # laser ageing at a GPU transmitter, then the module is replaced at 200 s
    Case(
        "laser_degradation",
        64,
        {"cause": "laser_degradation", "port": "node000/gpu2:p0", "start": 30, "ramp": 120, "end": 200},
        48,
        lambda t: allow(
            optical=[
                (("tx_power_dbm", "bias_ma"), lanes("node000/gpu2:p0")),
                (("rx_power_dbm",), lanes("leaf2-0:p00")),
            ],
            port=[((*ERROR_COLUMNS, "link_down_total"), {"node000/gpu2:p0", "leaf2-0:p00"})],
            module=[(("<message>", "<seq>"), {"node000"})],
        ),
        check_laser,
        (("optical", "tx_power_dbm"), ("optical", "bias_ma"), ("optical", "rx_power_dbm"), ("module", "<message>")),
    ),
    # a transceiver's receive path corrupting bits: FEC counts, then uncorrectables and CRC errors; optics normal
    Case(
        "transceiver_fault_errors",
        64,
        {"cause": "transceiver_fault", "port": "leaf0-0:p01", "start": 60},
        40,
        lambda t: allow(port=[(ERROR_COLUMNS, {"leaf0-0:p01"})]),
        check_transceiver_errors,
        tuple(("port", c) for c in ERROR_COLUMNS),
    ),
    # one dead lane: that lane dark at both ends of its fibre, the link down, other lanes normal; replaced at 200 s
    Case(
        "transceiver_fault_dead_lane",
        64,
        {"cause": "transceiver_fault", "port": "leaf0-0:p01", "mode": "dead_lane", "lane": 2, "start": 60, "end": 200},
        48,
        lambda t: allow(
            optical=[
                (("tx_power_dbm", "bias_ma"), {("leaf0-0:p01", 2)}),
                (("rx_power_dbm",), {("node001/gpu0:p0", 2)}),
            ],
            port=[(LINK_DOWN_PORT, {"leaf0-0:p01", "node001/gpu0:p0"})],
            module=[(("<message>", "<seq>"), {"leaf0-0"})],
        ),
        check_dead_lane,
        (("port", "state"), ("optical", "rx_power_dbm")),
    ),
    # flapping host link: drops of 3 s every 30 s from 60 s
    Case(
        "link_flap",
        64,
        {"cause": "link_flap", "link": "L00003", "start": 60},
        48,
        lambda t: allow(port=[(LINK_DOWN_PORT, set(link_ends(t, "L00003")))]),
        check_flap,
        (("port", "link_down_total"), ("port", "state")),
    ),
    # link down: loss of light both ways
    Case(
        "link_down",
        64,
        {"cause": "link_down", "link": "L00003", "start": 60},
        40,
        lambda t: allow(
            optical=[(("rx_power_dbm",), {x for end in link_ends(t, "L00003") for x in lanes(end)})],
            port=[(LINK_DOWN_PORT, set(link_ends(t, "L00003")))],
        ),
        check_link_down,
        (("port", "state"), ("optical", "rx_power_dbm")),
    ),
    # a switch whose SerDes fail: errors on 60 % of its ports at once, nothing on their partners
    Case(
        "switch_fault",
        64,
        {"cause": "switch_fault", "switch": "leaf2-0", "start": 60, "ramp": 30},
        40,
        lambda t: allow(port=[(ERROR_COLUMNS, set(t.ports_of_device("leaf2-0")))]),
        check_switch,
        (("port", "fec_uncorrectable_total"), ("port", "rx_crc_errors_total")),
    ),
    # incast onto a leaf's GPU-facing port: standing queue, ECN, line-rate tx, pauses one hop upstream
    Case(
        "incast_hotspot",
        64,
        {"cause": "incast_hotspot", "port": "leaf1-0:p03", "start": 30, "ramp": 30},
        40,
        lambda t: _incast_allowed(t, "leaf1-0:p03"),
        check_incast,
        (("port", "queue_depth_bytes"), ("port", "ecn_marked_total"), ("port", "tx_pause_total")),
    ),
    # a GPU NIC storming pauses: its partner stops and fills, pauses spread two hops upstream
    Case(
        "pfc_storm",
        64,
        {"cause": "pfc_storm", "port": "node001/gpu1:p0", "start": 60},
        40,
        lambda t: _storm_allowed(t, "node001/gpu1:p0"),
        check_storm,
        (("port", "tx_pause_total"), ("port", "rx_pause_total"), ("port", "queue_depth_bytes")),
    ),
    # cooling loop failure (128 GPUs: two loops): every GPU of cl00 hot and throttling, cl01 untouched
    Case(
        "cooling_failure",
        128,
        {"cause": "cooling_failure", "cooling_loop": "cl00", "start": 30, "ramp": 90},
        48,
        lambda t: _thermal_allowed(t, t.gpus_of_loop("cl00"), optics_ber=True),
        check_cooling,
        (("gpu", "temp_c"), ("gpu", "throttle_mask"), ("optical", "module_temp_c")),
    ),
    # one GPU hot at the same load: throttle bits; its engines do not heat (they may cool as it throttles)
    Case(
        "gpu_thermal",
        64,
        {"cause": "gpu_thermal", "gpu": "node002/gpu3", "start": 30, "ramp": 60},
        40,
        lambda t: _thermal_allowed(t, ["node002/gpu3"], optics_ber=False),
        check_gpu_thermal,
        (("gpu", "temp_c"), ("gpu", "throttle_mask")),
    ),
    # a hot GPU heating its near-package optics: module temperature, bias and BER on its port
    Case(
        "npo_thermal_coupling",
        64,
        {"cause": "npo_thermal_coupling", "gpu": "node002/gpu3", "start": 30, "ramp": 60},
        40,
        lambda t: _thermal_allowed(t, ["node002/gpu3"], optics_ber=True),
        check_npo,
        (("optical", "module_temp_c"), ("optical", "bias_ma"), ("port", "pre_fec_ber")),
    ),
    # XID 48: double-bit ECC error, counted once
    Case(
        "gpu_xid_48",
        64,
        {"cause": "gpu_xid", "gpu": "node002/gpu3", "start": 30, "xid": 48},
        24,
        lambda t: allow(gpu=[(("xid", "ecc_dbe_total"), {"node002/gpu3"})]),
        check_xid48,
        (("gpu", "xid"), ("gpu", "ecc_dbe_total")),
    ),
    # XID 79: fallen off the bus until 200 s: null readings, its host link idle
    Case(
        "gpu_xid_79",
        64,
        {"cause": "gpu_xid", "gpu": "node002/gpu3", "start": 30, "end": 200},
        48,
        lambda t: allow(
            gpu=[(tuple(c for c in _GPU_COLUMNS if c != "device"), {"node002/gpu3"})],
            port=[
                (
                    (*TRAFFIC, "queue_depth_bytes", "ecn_marked_total"),
                    {"node002/gpu3:p0", t.port_peer["node002/gpu3:p0"]},
                )
            ],
        ),
        check_xid79,
        (("gpu", "temp_c"), ("port", "tx_bytes_total")),
    ),
]

_GPU_COLUMNS = (
    "device",
    "util_pct",
    "mem_util_pct",
    "temp_c",
    "mem_temp_c",
    "power_w",
    "power_limit_w",
    "sm_clock_mhz",
    "throttle_mask",
    "xid",
    "ecc_dbe_total",
    "pcie_replay_total",
)


def _thermal_allowed(topo, gpus, optics_ber: bool):
    ports = {p for g in gpus for p in topo.ports_of_device(g)}
    out = allow(
        gpu=[(("temp_c", "mem_temp_c", "power_w", "sm_clock_mhz", "throttle_mask"), set(gpus))],
        optical=[(("module_temp_c", "bias_ma"), {lane for p in ports for lane in lanes(p)})],
    )
    if optics_ber:
        out.update(allow(port=[(("pre_fec_ber", "fec_corrected_total"), ports)]))
    return out


# pauses on the RoCE priority (3) as the receiver counts them: frames, both totals, and time held
PAUSED_P3 = ("rx_pause_total", "rx_pause_p3_total", "rx_pause_duration_p3_us_total")
# ... and as the sender counts them: frames, both totals, and the time its pauses held the receiver
SENT_P3 = ("tx_pause_total", "tx_pause_p3_total", "tx_pause_duration_p3_us_total")


def _incast_allowed(topo, port):
    plant = Plant(topo)
    feeders = {plant.ports[q] for q in plant.feeders(plant.port_index[port]).tolist()}
    peer = topo.port_peer[port]
    return allow(
        port=[
            (("tx_bytes_total", "tx_packets_total", "queue_depth_bytes", "ecn_marked_total"), {port}),
            (("rx_bytes_total", "rx_packets_total", "ecn_marked_total"), {peer}),
            (SENT_P3, feeders),
            (PAUSED_P3, {topo.port_peer[q] for q in feeders}),
        ]
    )


def _storm_allowed(topo, port):
    plant = Plant(topo)
    partner = topo.port_peer[port]
    hop1 = plant.feeders(plant.port_index[partner])
    hop2 = np.concatenate([plant.feeders(q) for q in plant.port_peer[hop1].tolist()])
    senders = {port} | {plant.ports[q] for q in np.concatenate([hop1, hop2]).tolist()}
    return allow(
        port=[
            (SENT_P3, senders),
            (PAUSED_P3, {topo.port_peer[q] for q in senders}),
            (("tx_bytes_total", "tx_packets_total", "queue_depth_bytes", "ecn_marked_total"), {partner}),
            (("rx_bytes_total", "rx_packets_total", "ecn_marked_total"), {port}),
        ]
    )


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_signature_and_nothing_else(case: Case) -> None:
    topo = standard(case.gpus)
    faulted = run(topo, faults_of(topo, case.spec), case.steps)
    base = healthy(case.gpus, case.steps)
    found = changes(base, faulted)
    allowed = case.allowed(topo)
    outside = {key: sorted(map(str, ents - allowed.get(key, set())))[:5] for key, ents in found.items()}
    outside = {key: ents for key, ents in outside.items() if ents}
    assert not outside, f"changed beyond the signature: {outside}"
    for key in case.required:
        assert key in found, f"signature lacks {key}"
    case.check(topo, base, faulted)


def test_every_cause_has_a_case() -> None:
    from fabricwatch.faults import CAUSES

    assert {c.spec["cause"] for c in CASES} == set(CAUSES)

"""Localisation and correlation: hand-built findings in, root causes out (one per problem).

Each row is a scenario of findings as detectors would report them, and the exact set of
(cause, located entity, id) diagnoses expected, plus how many findings each folds in.
"""

from __future__ import annotations

import dataclasses

import pytest

from fabricwatch import topology
from fabricwatch.detectors.config import EngineConfig, MaintenanceWindow
from fabricwatch.detectors.correlate import Correlator
from fabricwatch.records import Finding

TOPO = topology.generate(128, rails=8, gpus_per_node=8)
GPU = "node002/gpu1"
GPU_PORT = f"{GPU}:p0"
HOST = TOPO.port_link[GPU_PORT]  # a: node002/gpu1:p0, b: leaf1-0:p02
FAB = TOPO.links[200]  # a: leaf4-0:p72, b: spine00:p36
LOOP0 = TOPO.gpus_of_loop("cl00")


def f(symptom: str, ident: str, entity: str = "port", severity: str = "minor", lanes: tuple[int, ...] = (0, 1, 2, 3),
      score: float = 1.0, cause: str | None = None, t: float = 100.0) -> Finding:  # fmt: skip
    attrs = {"lanes": list(lanes), "lanes_total": 4} if entity == "port" else {}
    return Finding("test", symptom, entity, ident, t, t + 30, severity, ({"metric": symptom, entity: ident},),
                   cause, score, attrs)  # fmt: skip


def burst(port: str) -> Finding:
    """Failed codewords on a port whose BER the detector could read (fec_uncorrectable's ``ber_known``)."""
    fec = f("fec_uncorrectable", port, severity="major")
    return dataclasses.replace(fec, attrs={**fec.attrs, "ber_known": True})


def errors_on(ports: list[str]) -> list[Finding]:
    return [f("ber_above_limit", p, severity="major") for p in ports]


LEAF0 = TOPO.ports_of_device("leaf0-0")  # 16 GPU-facing and 16 uplink ports at 128 GPUs
assert len(LEAF0) == 32

ROWS = [
    # comment, findings, {(cause, entity, id): number of findings folded in}
    (
        "rx down at one end, far tx normal: dirty connector on that link",
        [f("rx_power_drop", HOST.b), f("ber_high", HOST.b)],
        {("connector_contamination", "link", HOST.id): 2},
    ),
    (
        "rx under the module's warning with path loss over budget: both absolute readings of one rx DOM,"
        " which SFF-8472 allows ±3 dB (a calibration offset): findings, not an incident",
        [f("rx_power_low_warn", FAB.a), f("path_loss_high", FAB.a)],
        {},
    ),
    (
        "tx under the module's warning alone: a ticket's worth at most, never an incident",
        [f("tx_power_low_warn", FAB.a)],
        {},
    ),
    (
        "rx under its warning and down against the lane's own past: the path",
        [f("rx_power_low_warn", FAB.a), f("path_loss_high", FAB.a), f("rx_power_drop", FAB.a)],
        {("connector_contamination", "link", FAB.id): 3},
    ),
    (
        "tx falling towards its alarm with nothing else yet: a laser_degradation forecast (a warning)",
        [f("tx_power_falling", FAB.a), f("bias_rise", FAB.a)],
        {("laser_degradation", "port", FAB.a): 1},
    ),
    (
        "the forecast folds into the page once the laser has faded far enough to cross",
        [f("tx_power_falling", FAB.a), f("tx_power_drop", FAB.a), f("rx_power_drop", FAB.b)],
        {("laser_degradation", "port", FAB.a): 3},
    ),
    (
        "rx down in both directions: the fibre",
        [f("rx_power_drop", HOST.a), f("rx_power_drop", HOST.b), f("ber_high", HOST.b)],
        {("fiber_damage", "link", HOST.id): 3},
    ),
    (
        "one direction dark on every lane with its transmitter lit: a broken fibre",
        [f("loss_of_light", FAB.b, severity="critical")],
        {("fiber_damage", "link", FAB.id): 1},
    ),
    (
        "tx falling at a and the far rx following: the laser at a",
        [f("tx_power_drop", FAB.a), f("rx_power_drop", FAB.b), f("ber_high", FAB.b)],
        {("laser_degradation", "port", FAB.a): 3},
    ),
    (
        "bias rising at b while a receives less: the laser at b, before tx itself falls",
        [f("bias_rise", FAB.b, severity="warning"), f("rx_power_drop", FAB.a)],
        {("laser_degradation", "port", FAB.b): 2},
    ),
    (
        "errors at b with normal light both ways: the transceiver counting them",
        [
            f("ber_above_limit", FAB.b, severity="major"),
            f("fec_uncorrectable", FAB.b, severity="major"),
            f("ber_high", FAB.a),
        ],
        {("transceiver_fault", "port", FAB.b): 3},
    ),
    (
        "one transmitter lane dark, the far receiver's lane with it: the transmitting module",
        [
            f("tx_dark", FAB.a, severity="critical", lanes=(0,)),
            f("loss_of_light", FAB.b, severity="critical", lanes=(0,)),
        ],
        {("transceiver_fault", "port", FAB.a): 2},
    ),
    (
        "one receiver lane dark among lit ones, far tx fine: the receiving module",
        [f("loss_of_light", FAB.b, severity="critical", lanes=(2,))],
        {("transceiver_fault", "port", FAB.b): 1},
    ),
    (
        "state 0 at both ends, but only one lane dark and its transmitter dark: the transmitting module",
        [
            f("link_down", FAB.a, severity="critical"),
            f("link_down", FAB.b, severity="critical"),
            f("tx_dark", FAB.a, severity="critical", lanes=(2,)),
            f("loss_of_light", FAB.b, severity="critical", lanes=(2,)),
        ],
        {("transceiver_fault", "port", FAB.a): 4},
    ),
    (
        "state 0 at both ends with loss of light: one link_down, the optics folded in",
        [
            f("link_down", HOST.a, severity="critical"),
            f("link_down", HOST.b, severity="critical"),
            f("loss_of_light", HOST.a, severity="critical"),
            f("loss_of_light", HOST.b, severity="critical"),
            f("rx_power_drop", HOST.b),
        ],
        {("link_down", "link", HOST.id): 5},
    ),
    (
        "both directions dark, no state reported: down",
        [f("loss_of_light", HOST.a, severity="critical"), f("loss_of_light", HOST.b, severity="critical")],
        {("link_down", "link", HOST.id): 2},
    ),
    (
        "link-down events repeating: a flap, even while down right now",
        [
            f("link_flap", HOST.b, severity="major"),
            f("link_down", HOST.b, severity="critical"),
            f("fec_uncorrectable", HOST.a, severity="major"),
        ],
        {("link_flap", "link", HOST.id): 3},
    ),
    (
        "a link going down while one direction's light arrives lit but under the module's alarm, the far"
        " transmitter normal: light lost on that way (an intermittent connector), the downs folded in",
        [
            f("link_flap", HOST.b, severity="major"),
            f("link_down", HOST.b, severity="critical"),
            f("rx_power_low_alarm", HOST.b, severity="major"),
            f("path_loss_high", HOST.b),
        ],
        {("connector_contamination", "link", HOST.id): 4},
    ),
    (
        "a flap with one direction's light low but its transmitter fading too: not the path's (a flap stays)",
        [
            f("link_flap", HOST.b, severity="major"),
            f("rx_power_low_alarm", HOST.b, severity="major"),
            f("tx_power_drop", HOST.a),
        ],
        {("link_flap", "link", HOST.id): 3},
    ),
    (
        "a link down with light lit but low in both directions, both transmitters normal: the fibre"
        " between them lost it (crushed past the receivers' reach), the downs folded in",
        [
            f("link_down", HOST.a, severity="critical"),
            f("link_down", HOST.b, severity="critical"),
            f("rx_power_low_alarm", HOST.b, severity="major"),
            f("rx_power_drop", HOST.a),
        ],
        {("fiber_damage", "link", HOST.id): 4},
    ),
    (
        "a flap with one direction's light low and the other's under its warning only: not one way's",
        [
            f("link_flap", HOST.b, severity="major"),
            f("rx_power_low_alarm", HOST.b, severity="major"),
            f("rx_power_low_warn", HOST.a),
        ],
        {("link_flap", "link", HOST.id): 3},
    ),
    (
        "a flap with only the receive warning (a DOM's calibration can put it there): a flap",
        [f("link_flap", HOST.b, severity="major"), f("rx_power_low_warn", HOST.b), f("path_loss_high", HOST.b)],
        {("link_flap", "link", HOST.id): 3},
    ),
    (
        "hot GPU and its NPO port hot with BER up at the far end: the GPU is the root",
        [
            f("gpu_hot", GPU, entity="gpu", severity="major"),
            f("module_temp_rise", GPU_PORT, severity="warning"),
            f("bias_rise", GPU_PORT, severity="warning"),
            f("ber_high", HOST.b),
            f("packet_loss", HOST.b, severity="major"),
        ],
        {("npo_thermal_coupling", "gpu", GPU): 5},
    ),
    (
        "hot GPU, its port quiet: the GPU alone",
        [f("gpu_hot", GPU, entity="gpu", severity="major"), f("gpu_hotter_than_peers", GPU, entity="gpu")],
        {("gpu_thermal", "gpu", GPU): 2},
    ),
    (
        "four hot GPUs in a loop of 64: too few for the loop, four GPUs",
        [f("gpu_hot", g, entity="gpu", severity="major") for g in LOOP0[:4]],
        {("gpu_thermal", "gpu", g): 1 for g in LOOP0[:4]},
    ),
    (
        "twenty hot GPUs of one loop: the loop, not twenty incidents",
        [f("gpu_hot", g, entity="gpu", severity="major") for g in LOOP0[:20]],
        {("cooling_failure", "cooling_loop", "cl00"): 20},
    ),
    (
        "loop warm, three of its GPUs hot and their NPO ports warming: all under the loop",
        [f("cooling_loop_warm", "cl00", entity="cooling_loop", severity="major", cause="cooling_failure")]
        + [f("gpu_hot", g, entity="gpu", severity="major") for g in LOOP0[:3]]
        + [f("module_temp_rise", f"{g}:p0", severity="warning") for g in LOOP0[:3]],
        {("cooling_failure", "cooling_loop", "cl00"): 7},
    ),
    (
        "errors on 6 of leaf0-0's 32 links (under a quarter): six transceivers, not the switch",
        errors_on(LEAF0[:6]),
        {("transceiver_fault", "port", p): 1 for p in LEAF0[:6]},
    ),
    (
        "errors on 20 of leaf0-0's 32 links at once: the switch",
        errors_on(LEAF0[:20]),
        {("switch_fault", "switch", "leaf0-0"): 20},
    ),
    ("GPU XID", [f("gpu_xid", GPU, entity="gpu", severity="critical", cause="gpu_xid")], {("gpu_xid", "gpu", GPU): 1}),
    (
        "a storm source and the switch ports pausing upstream because of it: one pfc_storm",
        [
            f("pfc_storm_source", HOST.a, severity="major", cause="pfc_storm"),
            f("pause_upstream", "leaf1-0:p64", severity="warning"),
            f("pause_upstream", TOPO.port_peer["leaf1-0:p64"], severity="warning"),
        ],
        {("pfc_storm", "port", HOST.a): 3},
    ),
    (
        "a congested egress and its upstream pauses: one incast_hotspot",
        [
            f("congestion", HOST.b, severity="major", cause="incast_hotspot"),
            f("pause_upstream", "leaf1-0:p70", severity="warning"),
        ],
        {("incast_hotspot", "port", HOST.b): 2},
    ),
    (
        "pauses with no root anywhere: nothing to page about",
        [f("pause_upstream", "leaf1-0:p70", severity="warning")],
        {},
    ),
    (
        "a congested egress its peers corroborate: one incast_hotspot, the peer finding folded in",
        [
            f("congestion", HOST.b, severity="major", cause="incast_hotspot"),
            f("congestion_vs_peers", HOST.b, severity="warning", cause="incast_hotspot"),
            f("pausing_vs_peers", "leaf1-0:p70", severity="warning"),
        ],
        {("incast_hotspot", "port", HOST.b): 3},
    ),
    (
        "congested only as much as its peers (a load step): no hotspot",
        [
            f("congestion", HOST.b, severity="major", cause="incast_hotspot"),
            f("congestion_shared", HOST.b, severity="warning"),
            f("pause_upstream", "leaf1-0:p70", severity="warning"),
        ],
        {},
    ),
    (
        "congested against its peers under the absolute levels: a hotspot at severity warning",
        [f("congestion_vs_peers", HOST.b, severity="warning", cause="incast_hotspot")],
        {("incast_hotspot", "port", HOST.b): 1},
    ),
    (
        "a port queued behind a nearer hotspot is its victim, folded in",
        [
            f("congestion", HOST.b, severity="major", cause="incast_hotspot"),
            f("congestion_vs_peers", "leaf1-0:p70", severity="warning", cause="incast_hotspot"),
        ],
        {("incast_hotspot", "port", HOST.b): 2},
    ),
    (
        "a port congested against its peers next to a storm is no victim of it (a storm's victims receive"
        " its pauses, which port_peers leaves out of the queue comparison): a hotspot of its own",
        [
            f("pfc_storm_source", HOST.a, severity="major", cause="pfc_storm"),
            f("congestion_vs_peers", "leaf1-0:p70", severity="warning", cause="incast_hotspot"),
        ],
        {("pfc_storm", "port", HOST.a): 1, ("incast_hotspot", "port", "leaf1-0:p70"): 1},
    ),
    (
        "a port pausing against its peers with no root anywhere: nothing to page about",
        [f("pausing_vs_peers", "leaf1-0:p70", severity="warning"), f("congestion_shared", HOST.b, severity="warning")],
        {},
    ),
    (
        "a lone bias or temperature rise is a hint, not an incident",
        [
            f("bias_rise", FAB.a, severity="warning"),
            f("module_temp_rise", HOST.b, severity="warning"),
            f("ber_rise", FAB.b, severity="warning"),
        ],
        {},
    ),
    (
        "a laser fading at a, and light lost on the way from b's normal transmitter to a: two faults on one"
        " link, one in each direction",
        [f("tx_power_drop", FAB.a), f("rx_power_drop", FAB.b), f("rx_power_drop", FAB.a, score=2.0)],
        {("laser_degradation", "port", FAB.a): 2, ("connector_contamination", "link", FAB.id): 1},
    ),
    (
        "both transmitters fading: two lasers, each with the receiver it feeds",
        [
            f("tx_power_drop", FAB.a, score=3.0),
            f("rx_power_drop", FAB.b),
            f("tx_power_drop", FAB.b),
            f("rx_power_drop", FAB.a),
            f("bias_rise", FAB.b, severity="warning"),
        ],
        {("laser_degradation", "port", FAB.a): 2, ("laser_degradation", "port", FAB.b): 3},
    ),
    (
        "light lost into b, frames corrupted into a under normal light: the connector and a's transceiver",
        [f("rx_power_drop", FAB.b), f("corruption", FAB.a), f("fec_uncorrectable", FAB.a, severity="major")],
        {("connector_contamination", "link", FAB.id): 1, ("transceiver_fault", "port", FAB.a): 2},
    ),
    (
        "light lost into b and failed codewords alone at a: bursts say nothing of a second fault",
        [f("rx_power_drop", FAB.b), burst(FAB.a)],
        {("connector_contamination", "link", FAB.id): 2},
    ),
    (
        "a laser fading at a, and a's receiver low while b's transmitter reads under its warning: b's"
        " light is not known normal, so nothing says the way is at fault: the laser only",
        [
            f("tx_power_drop", FAB.a),
            f("rx_power_drop", FAB.b),
            f("tx_power_low_warn", FAB.b),
            f("rx_power_drop", FAB.a),
        ],
        {("laser_degradation", "port", FAB.a): 4},
    ),
    (
        "tx under its warning and bias over its warning on one lane: two sensors agree the laser fails"
        " (a fault present before any baseline): a ticket at the transmitter",
        [
            f("tx_power_low_warn", FAB.a, severity="warning", lanes=(1,)),
            f("bias_high_warn", FAB.a, severity="warning", lanes=(1, 2)),
            f("rx_power_low_warn", FAB.b, severity="warning"),
        ],
        {("laser_degradation", "port", FAB.a): 3},
    ),
    (
        "tx under its warning on one lane, bias over its warning on another: no one lane says both",
        [
            f("tx_power_low_warn", FAB.a, severity="warning", lanes=(1,)),
            f("bias_high_warn", FAB.a, severity="warning", lanes=(2,)),
        ],
        {},
    ),
    (
        "both receivers under their warnings, both transmitters normal: two modules' calibrations do not"
        " both read low by chance: the fibre, a ticket",
        [
            f("rx_power_low_warn", FAB.a, severity="warning"),
            f("rx_power_low_warn", FAB.b, severity="warning"),
            f("path_loss_high", FAB.a, severity="warning"),
        ],
        {("fiber_damage", "link", FAB.id): 3},
    ),
    (
        "both receivers under their warnings while one transmitter is under its own: the light may be the"
        " transmitter's, and one warning says nothing of it: findings only",
        [
            f("rx_power_low_warn", FAB.a, severity="warning"),
            f("rx_power_low_warn", FAB.b, severity="warning"),
            f("tx_power_low_warn", FAB.b, severity="warning"),
        ],
        {},
    ),
    (
        "two independent problems stay two",
        [f("rx_power_drop", HOST.b), f("gpu_xid", "node003/gpu0", entity="gpu", severity="critical", cause="gpu_xid")],
        {("connector_contamination", "link", HOST.id): 1, ("gpu_xid", "gpu", "node003/gpu0"): 1},
    ),
]


@pytest.mark.parametrize(("comment", "findings", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_correlation_rows(comment: str, findings: list[Finding], expected: dict) -> None:
    diagnoses = Correlator(TOPO).correlate(findings)
    assert {(d.cause, d.entity, d.id): len(d.findings) for d in diagnoses} == expected, comment
    claimed = [id(x) for d in diagnoses for x in d.findings]
    assert len(claimed) == len(set(claimed)), "a finding is folded into one diagnosis at most"


def test_incident_key_hangs_on_the_link_so_refinement_keeps_it() -> None:
    c = Correlator(TOPO)
    (contamination,) = c.correlate([f("rx_power_drop", FAB.b)])
    (laser,) = c.correlate([f("rx_power_drop", FAB.b), f("tx_power_drop", FAB.a)])
    assert (contamination.cause, laser.cause) == ("connector_contamination", "laser_degradation")
    assert contamination.key == laser.key == f"link_degradation|link:{FAB.id}"


def test_a_second_problem_on_a_link_has_a_key_of_its_own_covered_with_the_link() -> None:
    from fabricwatch.detectors.tracker import base_anchor, incident_key

    findings = [f("tx_power_drop", FAB.a), f("rx_power_drop", FAB.b), f("rx_power_drop", FAB.a)]
    laser, dirt = sorted(Correlator(TOPO).correlate(findings), key=lambda d: d.cause, reverse=True)
    assert laser.anchor == f"link:{FAB.id}" and dirt.anchor == f"link:{FAB.id}>{FAB.a}"
    assert incident_key(laser) != incident_key(dirt)
    assert base_anchor(dirt.anchor) == base_anchor(laser.anchor) == f"link:{FAB.id}"


def test_corroborated_warnings_make_a_ticket_never_a_page() -> None:
    laser = [f("tx_power_low_warn", FAB.a, severity="minor"), f("bias_high_warn", FAB.a, severity="minor")]
    fibre = [f("rx_power_low_warn", HOST.a, severity="minor"), f("rx_power_low_warn", HOST.b, severity="minor")]
    found = {d.cause: d for d in Correlator(TOPO).correlate(laser + fibre)}
    assert set(found) == {"laser_degradation", "fiber_damage"}
    assert {d.severity for d in found.values()} == {"warning"}
    assert found["laser_degradation"].key == f"link_degradation|link:{FAB.id}"  # the page's key, if it comes


def test_root_covers_the_anchors_it_explains() -> None:
    findings = [f("gpu_hot", GPU, entity="gpu", severity="major"), f("module_temp_rise", GPU_PORT, severity="warning")]
    (d,) = Correlator(TOPO).correlate(findings)
    assert d.covers == {f"link:{HOST.id}"}
    assert d.type == "thermal" and d.runbook == "throttle-gpu" and d.severity == "major"


def test_evidence_is_root_first_deduplicated_and_bounded() -> None:
    findings = [f("ber_high", FAB.b), f("rx_power_drop", FAB.b), f("rx_power_low_warn", FAB.b)]
    (d,) = Correlator(TOPO).correlate(findings)
    metrics = [e["metric"] for e in d.evidence(limit=8)]
    assert metrics[:2] == ["rx_power_drop", "rx_power_low_warn"] and metrics[-1] == "ber_high"
    assert len(d.evidence(limit=1)) == 1


def test_correlation_ignores_input_order() -> None:
    findings = [f("rx_power_drop", HOST.b), f("gpu_hot", GPU, entity="gpu"), f("tx_power_drop", FAB.a)]
    forward = Correlator(TOPO).correlate(findings)
    backward = Correlator(TOPO).correlate(list(reversed(findings)))
    assert [(d.key, d.cause, d.id) for d in forward] == [(d.key, d.cause, d.id) for d in backward]


def test_loss_over_one_percent_reroutes_before_repair() -> None:
    # the seeds' rule: a link losing ≥ 1 % of frames is rerouted now; without loss, its repair runbook
    lossy = f("packet_loss", FAB.b, severity="major")
    lossy.attrs["runbook"] = "reroute"
    (with_loss,) = Correlator(TOPO).correlate([f("ber_above_limit", FAB.b, severity="major"), lossy])
    (without,) = Correlator(TOPO).correlate([f("ber_above_limit", FAB.b, severity="major")])
    assert (with_loss.cause, with_loss.runbook) == ("transceiver_fault", "reroute")
    assert (without.cause, without.runbook) == ("transceiver_fault", "replace-transceiver")


# --- topology roots: inventory, a switch down, errors on a share of a small switch ---------------------

SMALL = topology.generate(16, rails=4, gpus_per_node=8)  # leaf3-0: 4 host links on 2 nodes, 4 uplinks
LEAF3 = SMALL.ports_of_device("leaf3-0")
FAR3 = [SMALL.port_peer[p] for p in LEAF3]
EIGHT = topology.generate(16, rails=8, gpus_per_node=8)  # leaf3-0: 2 host links, 2 uplinks; spines of 8
SPINE01 = EIGHT.ports_of_device("spine01")


def down(ports: list[str], t: float = 100.0, last: float | None = None) -> list[Finding]:
    out = [f("link_down", p, severity="critical", t=t) for p in ports]
    if last is not None:
        out = [Finding(x.detector, x.symptom, x.entity, x.id, t, last, x.severity, x.evidence) for x in out]
    return out


SMALL_ROWS = [
    # comment, topology, findings, {(cause, entity, id): findings folded in}, {switch held (not paged)}
    (
        "a leaf reboots unplanned: its far ends see every link down, it is silent: one switch_fault",
        SMALL,
        down(FAR3, t=100, last=160) + [f("loss_of_light", p, severity="critical") for p in FAR3],
        {("switch_fault", "switch", "leaf3-0"): 16},
        set(),
    ),
    (
        "the leaf reports its own ports down with the far ends: one switch_fault with all 16",
        SMALL,
        down(FAR3 + LEAF3, t=100, last=130),
        {("switch_fault", "switch", "leaf3-0"): 16},
        set(),
    ),
    (
        "both nodes behind a leaf reboot: half its links (every host one), not a majority: four links",
        SMALL,
        down(FAR3[:4]),
        {("link_down", "link", SMALL.port_link[p].id): 1 for p in FAR3[:4]},
        set(),
    ),
    (
        "one node reboots: each leaf loses its links to that node only, one far domain: link downs",
        SMALL,
        down([p for p in SMALL.ports if p.startswith("node000/")]),
        {("link_down", "link", SMALL.port_link[p].id): 1 for p in SMALL.ports if p.startswith("node000/")},
        set(),
    ),
    (
        "errors with normal light on 2 of a 4-link leaf's links, far ends on two spines: the switch",
        EIGHT,
        [f("ber_above_limit", p, severity="major") for p in ("leaf3-0:p64", "leaf3-0:p65")],
        {("switch_fault", "switch", "leaf3-0"): 2},
        set(),
    ),
    (
        "errors on 3 of a spine's 8 links, far ends on three leaves: the spine",
        EIGHT,
        [f("fec_uncorrectable", p, severity="major") for p in SPINE01[2:5]] + [f("ber_high", p) for p in SPINE01[2:5]],
        {("switch_fault", "switch", "spine01"): 6},
        set(),
    ),
    (
        "failed codewords alone (BER normal) on 2 of a leaf's 4 links: error bursts, not the switch",
        EIGHT,
        [f("fec_uncorrectable", p, severity="major") for p in ("leaf3-0:p64", "leaf3-0:p65")],
        {("transceiver_fault", "port", p): 1 for p in ("leaf3-0:p64", "leaf3-0:p65")},
        set(),
    ),
    (
        "errors on 1 of the spine's 8 links: its transceiver",
        EIGHT,
        [f("fec_uncorrectable", SPINE01[2], severity="major")],
        {("transceiver_fault", "port", SPINE01[2]): 1},
        set(),
    ),
    (
        "failed codewords on one link with its BER known and normal, no corruption: error bursts, no incident",
        EIGHT,
        [burst(SPINE01[2])],
        {},
        set(),
    ),
    (
        "failed codewords with the BER known and rising: the transceiver",
        EIGHT,
        [burst(SPINE01[2]), f("ber_rise", SPINE01[2], severity="warning")],
        {("transceiver_fault", "port", SPINE01[2]): 2},
        set(),
    ),
    (
        "failed codewords with the BER known, and frames lost to corruption: the transceiver",
        EIGHT,
        [burst(SPINE01[2]), f("corruption", SPINE01[2], severity="major")],
        {("transceiver_fault", "port", SPINE01[2]): 2},
        set(),
    ),
    (
        "two links of one leaf erring, one with its rx down: light lost explains it, two link problems",
        EIGHT,
        [
            f("ber_above_limit", "leaf3-0:p64", severity="major"),
            f("ber_above_limit", "leaf3-0:p65", severity="major"),
            f("rx_power_drop", "leaf3-0:p65"),
        ],
        {
            ("transceiver_fault", "port", "leaf3-0:p64"): 1,
            ("connector_contamination", "link", EIGHT.port_link["leaf3-0:p65"].id): 2,
        },
        set(),
    ),
    (
        "a spare port (not in the topology) down and dark: inventory, nothing to page",
        SMALL,
        [
            f("port_not_in_topology", "leaf3-0:p68", severity="warning"),
            f("link_down", "leaf3-0:p68", severity="critical"),
            f("loss_of_light", "leaf3-0:p68", severity="critical"),
            f("rx_power_low_alarm", "leaf3-0:p68", severity="major"),
        ],
        {},
        set(),
    ),
]


@pytest.mark.parametrize(
    ("comment", "topo", "findings", "expected", "held"), SMALL_ROWS, ids=[r[0] for r in SMALL_ROWS]
)
def test_topology_roots(comment: str, topo: topology.Topology, findings: list[Finding], expected: dict,
                        held: set[str]) -> None:  # fmt: skip
    correlator = Correlator(topo)
    diagnoses = correlator.correlate(findings)
    assert {(d.cause, d.entity, d.id): len(d.findings) for d in diagnoses} == expected, comment
    assert {d.id for d in correlator.held} == held, comment
    claimed = [id(x) for d in diagnoses + correlator.held for x in d.findings]
    assert len(claimed) == len(set(claimed)), "a finding is folded into one diagnosis at most"


@pytest.mark.parametrize(
    ("comment", "window", "paged"),
    [
        ("the outage begins inside the leaf's change ticket: planned, held", ("leaf3-0", 90.0, 200.0), False),
        (
            "its far ends saw it 30 s before the ticket's start (clocks, scrapes): planned",
            ("leaf3-0", 130.0, 200.0),
            False,
        ),
        ("a ticket that ended before the outage began: unplanned, paged", ("leaf3-0", 0.0, 90.0), True),
        ("a ticket for another switch: unplanned, paged", ("leaf2-0", 90.0, 200.0), True),
    ],
)
def test_a_change_ticket_holds_a_planned_switch_outage(comment: str, window: tuple, paged: bool) -> None:
    switch, start, end = window
    config = EngineConfig(maintenance=[MaintenanceWindow(switch=switch, start=start, end=end)])
    correlator = Correlator(SMALL, config)
    diagnoses = correlator.correlate(down(FAR3, t=100, last=160))
    assert [(d.cause, d.id) for d in diagnoses] == ([("switch_fault", "leaf3-0")] if paged else []), comment
    assert [d.id for d in correlator.held] == ([] if paged else ["leaf3-0"]), comment
    assert len(correlator.held[0].findings if correlator.held else diagnoses[0].findings) == 8


def test_a_switch_down_covers_its_links_so_their_incidents_fold_into_it() -> None:
    (d,) = Correlator(SMALL).correlate(down(FAR3 + LEAF3, t=100, last=130))
    assert d.covers == {f"link:{SMALL.port_link[p].id}" for p in LEAF3}
    assert d.severity == "critical"


def test_spare_ports_are_listed_as_inventory() -> None:
    correlator = Correlator(SMALL)
    assert correlator.correlate([f("link_down", "leaf3-0:p68", severity="critical")]) == []
    assert correlator.inventory == ["leaf3-0:p68"]


def test_shared_congestion_is_listed_not_paged() -> None:
    c = Correlator(TOPO)
    found = [
        f("congestion", HOST.b, severity="major", cause="incast_hotspot"),
        f("congestion_shared", HOST.b, severity="warning"),
    ]
    assert c.correlate(found) == [] and c.shared == [HOST.b]
    diagnoses = c.correlate(found[:1])  # the peers not judged (too few, or a column missing): absolute decides
    assert [(d.cause, d.severity) for d in diagnoses] == [("incast_hotspot", "major")] and c.shared == []


def test_a_peer_only_hotspot_is_a_warning_keyed_as_the_page() -> None:
    """The peer judgement opens the ticket early; the absolute one, when it comes, updates the same key."""
    early = Correlator(TOPO).correlate([f("congestion_vs_peers", HOST.b, severity="warning", cause="incast_hotspot")])
    late = Correlator(TOPO).correlate([f("congestion", HOST.b, severity="major", cause="incast_hotspot")])
    assert [(d.key, d.severity) for d in early] == [(late[0].key, "warning")]

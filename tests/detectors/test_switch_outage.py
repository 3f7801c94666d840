"""A switch that goes away (a reboot, a drained leaf) as production's telemetry shows it: the switch
itself silent, its hosts' ends down, its uplinks' far ends (spines scraped every 60 s over gNMI) not
read during the outage. One switch_fault, judged over the links whose state is known; the last links
still down while it comes back stay its own; light that is back is no loss of light."""

from __future__ import annotations

import pytest

from fabricwatch import topology
from fabricwatch.detectors.base import detector_class
from fabricwatch.detectors.correlate import Correlator
from fabricwatch.records import Finding
from tests.detectors.synth import Timeline

TOPO = topology.generate(128, rails=8, gpus_per_node=8)
LEAF = "leaf1-0"  # 16 host links, 16 uplinks to 8 spines
PORTS = TOPO.ports_of_device(LEAF)
HOST_ENDS = [TOPO.port_peer[p] for p in PORTS if TOPO.port_link[p].tier == "host"]
SPINES = sorted({s.name for s in TOPO.switches if s.tier == "spine"})
assert len(HOST_ENDS) == 16 and len(PORTS) == 32


def outage(tl: Timeline, back: dict[str, float] | None = None) -> None:
    """The leaf reboots from 100 s: it reports nothing until 150 s; its hosts read their ports down and
    dark until ``back`` (default 150 s); the spines report nothing from 60 to 200 s (a slow cadence)."""
    back = back or {}
    for p in HOST_ENDS:
        end = back.get(p, 150.0)
        tl.put("port", "state", 0, start=100, end=end, port=p)
        tl.put("optical", "rx_power_dbm", -40.0, start=100, end=end, port=p)
    tl.silence(LEAF, 100, 150)
    for spine in SPINES:
        tl.silence(spine, 60, 200)


def diagnose(tl: Timeline, until: float) -> list:
    """Stage 1 (link_state, optical_thresholds) every 10 s, stage 2's correlator on each tick;
    the diagnoses of each tick as (t, [(cause, id, findings folded in)])."""
    detectors = [detector_class(n)() for n in ("link_state", "optical_thresholds")]
    correlator = Correlator(TOPO)
    out = []
    for t in tl.ticks(10.0, 60.0):
        if t > until:
            break
        findings: list[Finding] = [f for d in detectors for f in d.detect(tl.window(t))]
        out.append((t, [(d.cause, d.id, len(d.findings)) for d in correlator.correlate(findings)]))
    return out


def test_a_silent_leaf_whose_uplinks_nobody_read_is_one_switch_fault() -> None:
    tl = Timeline(TOPO, duration=200, seed=3)
    outage(tl)
    ticks = dict(diagnose(tl, until=145))
    for t in (110.0, 120.0, 140.0):
        # 16 host links down of the 16 read since it began (the uplinks: unknown, not up)
        assert [(c, i) for c, i, _ in ticks[t]] == [("switch_fault", LEAF)], t
        assert ticks[t][0][2] >= 16 * 2 + 1  # link_down and loss_of_light per host end, and the count


def test_without_the_count_half_the_links_down_is_not_a_switch() -> None:
    """A source that does not say which links it read: the share is of all the switch's links (16 of
    32 down is not more than half), so the links stay links: the rule is no looser than before."""
    findings = [
        Finding("test", "link_down", "port", p, 100.0, 130.0, "critical", ({"metric": "state", "port": p},))
        for p in HOST_ENDS
    ]
    diagnoses = Correlator(TOPO).correlate(findings)
    assert {d.cause for d in diagnoses} == {"link_down"} and len(diagnoses) == 16


def test_the_last_links_down_while_the_leaf_comes_back_stay_folded_into_it() -> None:
    tl = Timeline(TOPO, duration=200, seed=3)
    late = {p: 170.0 for p in HOST_ENDS[:3]}  # three hosts still read their ports down for 20 s more
    outage(tl, back=late)
    ticks = dict(diagnose(tl, until=200))
    assert [(c, i) for c, i, _ in ticks[160.0]] == [("switch_fault", LEAF)]
    assert ticks[200.0] == []  # every port up and lit again: nothing left, no loss of light lingers


@pytest.mark.parametrize("at", [155.0, 165.0])
def test_light_back_on_the_latest_reading_is_no_loss_of_light(at: float) -> None:
    """Dark is a state: a lane lit again is not dark for the rest of the window's median."""
    tl = Timeline(TOPO, duration=200, seed=3)
    tl.put("optical", "rx_power_dbm", -40.0, start=100, end=150, port=HOST_ENDS[0])
    found = detector_class("optical_thresholds")().detect(tl.window(at))
    assert [(f.symptom, f.id) for f in found if f.id == HOST_ENDS[0]] == []
    dark = detector_class("optical_thresholds")().detect(tl.window(145))
    assert ("loss_of_light", HOST_ENDS[0]) in {(f.symptom, f.id) for f in dark}


def test_the_outage_survives_a_restart_of_the_detector() -> None:
    tl = Timeline(TOPO, duration=200, seed=3)
    outage(tl, back={p: 170.0 for p in HOST_ENDS[:3]})
    before = detector_class("link_state")()
    for t in tl.ticks(10.0, 60.0):
        if t > 140:
            break
        before.detect(tl.window(t))
    after = detector_class("link_state")()
    after.restore(before.snapshot())
    (share,) = [f for f in after.detect(tl.window(160)) if f.symptom == "switch_links_down"]
    assert share.attrs["down"] == 16 and share.attrs["read"] == 16 and share.attrs["down_now"] == 3


def test_the_link_down_events_of_a_switch_outage_make_no_link_flap() -> None:
    """A module swapped at 40 s (one down sample) and the leaf's reboot at 100 s: two events on that
    link within five minutes, but the second is the switch's. A link that goes down twice on its own
    on the same leaf still flaps."""
    tl = Timeline(TOPO, duration=200, seed=3)
    swapped, flapping = HOST_ENDS[5], HOST_ENDS[9]
    tl.put("port", "state", 0, start=40, end=45, port=swapped)
    for start in (30, 60):
        tl.put("port", "state", 0, start=start, end=start + 5, port=flapping)
    outage(tl)
    detector = detector_class("link_state")()
    for t in tl.ticks(10.0, 60.0):
        found = {(f.symptom, f.id) for f in detector.detect(tl.window(t))}
        assert ("link_flap", swapped) not in found, t
    assert ("link_flap", flapping) in found


@pytest.mark.parametrize(("ticket", "paged"), [((90.0, 400.0), False), ((0.0, 50.0), True)])
def test_a_switch_silent_through_its_change_ticket_pages_nobody(ticket: tuple, paged: bool) -> None:
    from fabricwatch.detectors.config import EngineConfig, MaintenanceWindow

    silent = Finding("liveness", "collector_silent", "collector", LEAF, 100.0, 100.0, "major",
                     ({"metric": "silent_s", "source": LEAF, "value": 90},), attrs={"incident": True})  # fmt: skip
    config = EngineConfig(maintenance=[MaintenanceWindow(switch=LEAF, start=ticket[0], end=ticket[1])])
    correlator = Correlator(TOPO, config)
    diagnoses = correlator.correlate([silent])
    assert [(d.cause, d.id) for d in diagnoses] == ([("collector_silent", LEAF)] if paged else [])
    assert [d.id for d in correlator.held] == ([] if paged else [LEAF])


def _optics_unread(tl: Timeline, port: str, start: float, end: float) -> None:
    """The port's optics are not read between ``start`` and ``end`` (its poller reads them less often than
    its port state: a spine's gNMI, REALISM.md); its state still is."""
    f = tl.frames["optical"]
    ts = f["ts"].to_numpy()
    gone = (f["port"] == port).to_numpy() & (ts >= tl.start + start) & (ts < tl.start + end)
    tl.frames["optical"] = f[~gone].reset_index(drop=True)


@pytest.mark.parametrize(
    ("state_back", "dark"),
    [
        (150.0, False),  # the port read up after the last dark reading: that reading is the ended outage's
        (None, True),  # still down: the dark reading is today's, loss of light stands
    ],
)
def test_a_dark_reading_taken_inside_an_outage_ends_with_it(state_back: float | None, dark: bool) -> None:
    """Seed 8138's maintenance: the spines last read a rebooted leaf's uplinks dark during the reboot;
    the leaf came back, the outage ended, and the stale dark reading stood alone as fiber_damage."""
    tl = Timeline(TOPO, duration=200, seed=3)
    port = HOST_ENDS[0]
    tl.put("port", "state", 0, start=100, end=state_back, port=port)
    tl.put("optical", "rx_power_dbm", -40.0, start=100, end=state_back, port=port)
    _optics_unread(tl, port, 146, 200)  # last optical reading: 145 s, dark
    found = {(f.symptom, f.id) for f in detector_class("optical_thresholds")().detect(tl.window(158))}
    assert (("loss_of_light", port) in found) is dark


def test_a_dark_lane_on_a_port_that_never_read_down_stays_loss_of_light() -> None:
    """The rule needs the port down during the dark spell: a state column that lags or lies (up
    throughout) never hides a dark lane."""
    tl = Timeline(TOPO, duration=200, seed=3)
    port = HOST_ENDS[0]
    tl.put("optical", "rx_power_dbm", -40.0, start=100, port=port)
    _optics_unread(tl, port, 146, 200)
    found = {(f.symptom, f.id) for f in detector_class("optical_thresholds")().detect(tl.window(158))}
    assert ("loss_of_light", port) in found

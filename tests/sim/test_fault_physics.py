"""Fault physics beyond each cause's default (issue 8 part 3): low-rate corruption, an intermittent
connector, a switch reboot, an incast confined to the all-reduce phases and PFC per priority.

As in test_signatures.py, each case runs a small supernode twice with the same seed, without and with
one fault: the difference is exactly what the fault did (collectors/sim/injection.py documents each),
so each test checks the signature is there and that nothing outside it changed.
"""

from __future__ import annotations

import math

import pytest

from fabricwatch.collectors.sim import Simulator, fabric
from fabricwatch.collectors.sim.plant import Plant
from fabricwatch.errors import InputError
from fabricwatch.pathologies import parse_pathologies
from tests.sim.helpers import changes, faults_of, healthy, run, series, standard
from tests.sim.test_signatures import (
    ERROR_COLUMNS,
    _incast_allowed,
    allow,
    at,
    lanes,
    link_ends,
)

GPUS, SEED = 64, 5


def outside(found: dict, allowed: dict) -> dict:
    """Changed cells that lie outside the allowed signature."""
    out = {key: sorted(map(str, ents - allowed.get(key, set())))[:5] for key, ents in found.items()}
    return {key: ents for key, ents in out.items() if ents}


def faulted(spec: dict, steps: int) -> list:
    topo = standard(GPUS)
    return run(topo, faults_of(topo, spec), steps, SEED)


def extra(h: list, f: list, port: str, column: str) -> int:
    """How much more a port's counter rose in the faulted run than in the healthy one."""
    return series(f, "port", port, column)[-1] - series(h, "port", port, column)[-1]


# --- low-rate corruption ------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", [1e-8, 1e-6, 1e-4])
def test_low_rate_corruption_loses_that_share_of_frames_with_optics_and_ber_normal(loss: float) -> None:
    port, steps = "leaf0-0:p01", 40
    spec = {"cause": "transceiver_fault", "port": port, "mode": "corrupt", "frame_loss": loss, "start": 30}
    h, f = healthy(GPUS, steps, SEED), faulted(spec, steps)
    found = changes(h, f)
    crc = ("rx_crc_errors_total", "fec_uncorrectable_total", "symbol_errors_total")
    assert not outside(found, allow(port=[(crc, {port})]))  # no BER, FEC-corrected, optics or partner change
    lost = extra(h, f, port, "rx_crc_errors_total")
    frames = series(f, "port", port, "rx_packets_total")
    expected = loss * (frames[-1] - frames[at(30) - 1])  # the scrape at 30 s counts (25, 30] at its rate
    assert abs(lost - expected) <= 5 * math.sqrt(expected) + 2  # a Poisson count of the lost frames
    assert expected > 5  # even 1e-8 shows within minutes: ~3 M frames/s in all-reduce
    unc = extra(h, f, port, "fec_uncorrectable_total")
    assert abs(unc - lost / 1.16) <= 3 * math.sqrt(lost / 1.16) + 2  # one failed codeword per 1.16 lost frames
    assert series(f, "port", port, "pre_fec_ber") == series(h, "port", port, "pre_fec_ber")


def test_corruption_ramps_and_needs_a_plausible_rate() -> None:
    topo = standard(GPUS)
    bad = faults_of(topo, {"cause": "transceiver_fault", "port": "leaf0-0:p01", "mode": "corrupt", "frame_loss": 0.2})
    with pytest.raises(InputError, match="frame_loss must be in"):
        Simulator(topo, bad)


# --- intermittent connector -----------------------------------------------------------------------------

EPISODES = {
    "cause": "connector_contamination",
    "link": "L00000",
    "loss_db": 9.0,
    "episodes": 3,
    "on_s": 30,
    "off_s": 45,
    "start": 30,
}  # the loss is there in [30, 60), [105, 135) and [180, 210)


def test_an_intermittent_connector_errs_in_episodes_and_is_quiet_between() -> None:
    topo = standard(GPUS)
    _, b = link_ends(topo, "L00000")
    steps = 48
    h, f = healthy(GPUS, steps, SEED), faulted(EPISODES, steps)
    found = changes(h, f)
    allowed = allow(optical=[(("rx_power_dbm",), lanes(b))], port=[(ERROR_COLUMNS, {b})])
    assert not outside(found, allowed)
    rx_h, rx_f = series(h, "optical", (b, 0), "rx_power_dbm"), series(f, "optical", (b, 0), "rx_power_dbm")
    ber_h, ber_f = series(h, "port", b, "pre_fec_ber"), series(f, "port", b, "pre_fec_ber")
    fec_h, fec_f = series(h, "port", b, "fec_corrected_total"), series(f, "port", b, "fec_corrected_total")
    for on in (40, 50, 115, 125, 190, 200):
        assert rx_h[at(on)] - rx_f[at(on)] > 4.0 and ber_f[at(on)] > 10 * ber_h[at(on)]
        rise_f, rise_h = fec_f[at(on)] - fec_f[at(on) - 1], fec_h[at(on)] - fec_h[at(on) - 1]
        assert rise_f > 10 * rise_h  # errors in the episode
    for off in (25, 65, 80, 100, 140, 175, 215, 235):
        assert rx_f[at(off)] == rx_h[at(off)] and ber_f[at(off)] == ber_h[at(off)]
        assert fec_f[at(off)] - fec_f[at(off) - 1] == fec_h[at(off)] - fec_h[at(off) - 1]  # quiet spell


def test_without_episodes_contamination_is_as_before() -> None:
    steady = dict(EPISODES)
    for name in ("episodes", "on_s", "off_s"):
        steady.pop(name)
    with_null = dict(steady, episodes=None)
    assert faulted(steady, 16) == faulted(with_null, 16)


def test_episodes_must_be_a_count() -> None:
    topo = standard(GPUS)
    with pytest.raises(InputError, match="episodes must be an integer"):
        Simulator(topo, faults_of(topo, dict(EPISODES, episodes=1.5)))


# --- switch reboot --------------------------------------------------------------------------------------

REBOOT = {"cause": "switch_fault", "switch": "leaf1-0", "mode": "reboot", "start": 60, "down_s": 90}


def test_a_switch_reboot_takes_every_link_down_then_back_with_its_counters_reset() -> None:
    topo = standard(GPUS)
    steps = 48
    h, f = healthy(GPUS, steps, SEED), faulted(REBOOT, steps)
    window = range(at(60), at(150))
    times = [m.ts - 1764400000.0 for s in f for m in s if (m.source, m.kind) == ("leaf1-0", "port")]
    assert times == [5.0 * i for i in range(steps) if i not in window]  # its collector is silent
    ends = {x for link in topo.links if "leaf1-0:" in link.a + link.b for x in (link.a, link.b)}
    far = sorted(e for e in ends if not e.startswith("leaf1-0:"))
    assert len(far) == len(topo.ports_of_device("leaf1-0"))  # every port of the switch has a partner
    for port in far:
        state = series(f, "port", port, "state")
        assert all(state[i] == 0 for i in window) and state[at(155)] == 1  # down 90 s, then retrained
        assert series(f, "optical", (port, 0), "rx_power_dbm")[at(100)] == -40.0
        downs_f, downs_h = series(f, "port", port, "link_down_total"), series(h, "port", port, "link_down_total")
        assert downs_f[-1] == downs_h[-1] + 1
    leaf_port = topo.port_peer[far[0]]
    tx = series(f, "port", leaf_port, "tx_bytes_total")
    assert tx[at(60) - 1] > 1e12 and tx[at(60)] < 50e9 * 10  # counting from 0 after the reboot
    seqs = [m.seq for s in f for m in s if (m.source, m.kind) == ("leaf1-0", "port")]
    assert seqs[at(60)] == 0
    for (kind, column), ents in changes(h, f).items():
        if column in ("<message>", "<seq>"):
            assert ents == {"leaf1-0"}
            continue
        assert {e[0] if isinstance(e, tuple) else e for e in ents} <= ends | {"leaf1-0"}, (kind, column)


def test_a_reboot_reads_like_a_planned_maintenance_only_the_truth_differs() -> None:
    """Telemetry cannot tell an unplanned reboot from a maintenance window: the change ticket can."""
    topo = standard(GPUS)
    window = parse_pathologies(
        [{"kind": "maintenance", "switch": "leaf1-0", "start": 60, "duration": 90}], topo, "test"
    )
    planned = run(topo, (), 40, SEED, pathologies=window)
    assert faulted(REBOOT, 40) == planned


# --- incast in the all-reduce phases ---------------------------------------------------------------------


def test_an_allreduce_incast_queues_only_in_the_comm_phase() -> None:
    topo = standard(GPUS)
    port, steps = "leaf1-0:p03", 40
    spec = {"cause": "incast_hotspot", "port": port, "start": 30, "phase": "allreduce"}
    h, f = healthy(GPUS, steps, SEED), faulted(spec, steps)
    assert not outside(changes(h, f), _incast_allowed(topo, port))
    job = Simulator(topo, seed=SEED).job
    queue_f, queue_h = series(f, "port", port, "queue_depth_bytes"), series(h, "port", port, "queue_depth_bytes")
    comm = [i for i in range(at(35), steps) if job.comm_now(5.0 * i)]
    compute = [i for i in range(at(35), steps) if not job.comm_now(5.0 * i)]
    assert comm and compute
    assert all(queue_f[i] >= fabric.KMIN for i in comm)
    assert all(queue_f[i] == queue_h[i] for i in compute)  # no standing queue between collectives
    tx = series(f, "port", port, "tx_bytes_total")
    seconds = 5.0 * (steps - 1 - at(50))
    share = job.comm_seconds(50.0, 50.0 + seconds) / seconds
    rate = (tx[-1] - tx[at(50)]) / seconds / fabric.LINE_BYTES_PER_S
    assert rate == pytest.approx(fabric.MAX_TX_SHARE * share + fabric.BACKGROUND * (1 - share), rel=0.03)
    assert 0.2 < share < 0.4  # far from the line rate of an incast that never stops
    plant = Plant(topo)
    feeder = plant.ports[int(plant.feeders(plant.port_index[port])[0])]
    sent = series(f, "port", feeder, "tx_pause_total")
    per_s = (sent[-1] - sent[at(50)]) / seconds
    full = fabric.PAUSE_FULL_PER_S * 0.6 / 1.6
    assert per_s == pytest.approx(full * share, rel=0.1)


# --- PFC per priority -------------------------------------------------------------------------------------


@pytest.mark.parametrize("priority", [5, 4])
def test_a_storm_on_a_priority_the_job_does_not_use_only_sends_pauses(priority: int) -> None:
    """Priority 5 has no PFC columns (only 3 and 4 ride the bus): the port totals show it. Priority 4
    is lossless without the job on it: its own columns show the storm, the partner held all the time."""
    topo = standard(GPUS)
    port, steps = "node001/gpu1:p0", 40
    spec = {"cause": "pfc_storm", "port": port, "priority": priority, "start": 60}
    h, f = healthy(GPUS, steps, SEED), faulted(spec, steps)
    partner = topo.port_peer[port]
    # the source's few healthy RoCE pauses are told from the storm's by their share of the rate
    sent_cols = ("tx_pause_total", "tx_pause_p3_total", "tx_pause_p4_total")
    sent_cols += ("tx_pause_duration_p3_us_total", "tx_pause_duration_p4_us_total")
    got_cols = ("rx_pause_total", "rx_pause_p3_total", "rx_pause_p4_total")
    got_cols += ("rx_pause_duration_p3_us_total", "rx_pause_duration_p4_us_total")
    assert not outside(changes(h, f), allow(port=[(sent_cols, {port}), (got_cols, {partner})]))
    sent = series(f, "port", port, "tx_pause_total")
    assert (sent[-1] - sent[-11]) / 50.0 == pytest.approx(fabric.PAUSE_FULL_PER_S, rel=0.05)
    p4 = series(f, "port", port, "tx_pause_p4_total")
    held = series(f, "port", partner, "rx_pause_duration_p4_us_total")
    if priority == 5:
        assert p4 == series(h, "port", port, "tx_pause_p4_total")
        assert held == series(h, "port", partner, "rx_pause_duration_p4_us_total")
    else:
        assert p4[-1] - p4[-11] == pytest.approx(sent[-1] - sent[-11], abs=2)
        assert held[-1] - held[-11] == pytest.approx(50e6, rel=0.001)  # held the whole 50 s
        # ... which the sender counts too, as the time its pauses held the partner
        assert series(f, "port", port, "tx_pause_duration_p4_us_total") == held
    for name in ("tx_bytes_total", "queue_depth_bytes", "rx_pause_duration_p3_us_total"):  # RoCE flows on
        assert series(f, "port", partner, name) == series(h, "port", partner, name)
    lossless = [a + b for a, b in zip(series(f, "port", port, "tx_pause_p3_total"), p4, strict=True)]
    if priority == 4:  # the port total counts every priority's frames: here all are lossless
        assert lossless == sent
    else:
        assert all(a <= b for a, b in zip(lossless, sent, strict=True)) and lossless[-1] < sent[-1]


def test_short_pause_quanta_send_more_frames_for_the_same_paused_time() -> None:
    topo = standard(GPUS)
    port, steps = "node001/gpu1:p0", 40
    spec = {"cause": "pfc_storm", "port": port, "start": 60, "paused": 0.5, "quanta": 16384}
    h, f = healthy(GPUS, steps, SEED), faulted(spec, steps)
    sent = series(f, "port", port, "tx_pause_total")
    assert (sent[-1] - sent[-11]) / 50.0 == pytest.approx(0.5 * 4 * fabric.PAUSE_FULL_PER_S, rel=0.05)
    partner = topo.port_peer[port]
    held = series(f, "port", partner, "rx_pause_duration_p3_us_total")
    assert held[-1] - held[-11] == pytest.approx(0.5 * 50e6, rel=0.001)  # the time held, not frames × quanta
    tx_f, tx_h = series(f, "port", partner, "tx_bytes_total"), series(h, "port", partner, "tx_bytes_total")
    assert (tx_f[-1] - tx_f[-11]) == pytest.approx(0.5 * (tx_h[-1] - tx_h[-11]), rel=0.05)  # held half the time


# --- the options in the fault file --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ({"cause": "switch_fault", "switch": "leaf0-0", "mode": "rebooot"}, "mode must be one of errors, reboot"),
        ({"cause": "transceiver_fault", "port": "leaf0-0:p01", "mode": "crc"}, "one of errors, dead_lane, corrupt"),
        ({"cause": "incast_hotspot", "port": "leaf0-0:p01", "phase": "comm"}, "phase must be one of all, allreduce"),
        ({"cause": "transceiver_fault", "port": "leaf0-0:p01", "frame_loss": -1e-6}, "frame_loss must be a number"),
        ({"cause": "connector_contamination", "link": "L00000", "on_s": "30s"}, "on_s must be a number"),
        ({"cause": "pfc_storm", "port": "leaf0-0:p01", "paused": 2}, None),  # parses; the simulator refuses it
    ],
)
def test_new_options_are_checked_where_the_fault_file_is_read(entry: dict, said: str | None) -> None:
    from fabricwatch.errors import InputErrors
    from fabricwatch.faults import parse_faults

    topo = standard(GPUS)
    if said is None:
        (fault,) = parse_faults([entry], topo, "f.yaml")
        with pytest.raises(InputError, match="paused must be in"):
            Simulator(topo, (fault,))
        return
    with pytest.raises(InputErrors) as info:
        parse_faults([entry], topo, "f.yaml")
    assert said in str(info.value)


def test_a_port_held_in_xoff_sees_the_pause_rate_of_802_1qbb_at_400g() -> None:
    # 65535 quanta x 512 bit times at 400 Gb/s = 83.9 µs of pause; XOFF refreshed at half of it.
    pause_s = 65535 * 512 / 400e9
    assert pause_s == pytest.approx(83.9e-6, rel=1e-3)
    assert fabric.PAUSE_FULL_PER_S == pytest.approx(2 / pause_s) == pytest.approx(23_840, rel=1e-3)

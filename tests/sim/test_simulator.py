"""Simulator invariants: message shape, determinism, schema validity, optics consistency, counters."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest

from fabricwatch import schema, topology
from fabricwatch.collectors.sim import DEFAULT_START_TS, Simulator
from fabricwatch.collectors.sim.optics import THRESHOLD_COLUMNS
from fabricwatch.collectors.sim.plant import LANES
from fabricwatch.errors import InputError
from fabricwatch.faults import Fault
from tests.sim.helpers import faults_of, frames, healthy, run, standard


def encoded(scrapes) -> bytes:
    return b"".join(schema.encode(m) for scrape in scrapes for m in scrape)


def test_same_seed_same_bytes_and_different_seed_different_bytes() -> None:
    topo = standard(64)
    spec = {"cause": "link_flap", "link": "L00005", "start": 10}
    a = run(topo, faults_of(topo, spec), 12, seed=11)
    b = run(topo, faults_of(topo, spec), 12, seed=11)
    c = run(topo, faults_of(topo, spec), 12, seed=12)
    assert encoded(a) == encoded(b)
    assert encoded(a) != encoded(c)


def test_a_step_leaves_its_messages_to_the_oldest_generation_and_the_collector_as_it_found_it() -> None:
    sim = Simulator(standard(64), seed=1)
    messages = sim.step()
    assert gc.isenabled()
    oldest = {id(o) for o in gc.get_objects(2)}
    assert all(
        id(m.rows) in oldest and id(m.rows["port" if "port" in m.rows else "device"]) in oldest for m in messages
    )
    gc.disable()  # a caller that turned it off keeps it off
    try:
        sim.step()
        assert not gc.isenabled()
    finally:
        gc.enable()
    kept = [[]]
    gc.freeze()  # a caller's frozen objects stay frozen
    try:
        sim.step()
        assert gc.isenabled() and gc.get_freeze_count()
        assert all(id(kept) not in {id(o) for o in gc.get_objects(g)} for g in range(3))
    finally:
        gc.unfreeze()
    assert id(kept) in {id(o) for o in gc.get_objects(2)}


def test_every_message_validates_with_no_rejection() -> None:
    topo = standard(64)
    faults = faults_of(
        topo,
        {"cause": "gpu_xid", "gpu": "node001/gpu2", "start": 0},  # null readings
        {"cause": "link_down", "link": "L00004", "start": 10},  # null speed and BER
        {"cause": "transceiver_fault", "port": "leaf3-0:p02", "start": 0},
    )
    scrapes = run(topo, faults, 8)
    by_kind: dict[str, list[schema.Message]] = {}
    for scrape in scrapes:
        for m in scrape:
            schema.check_header(m)
            by_kind.setdefault(m.kind, []).append(m)
    assert set(by_kind) == set(schema.KINDS)
    for kind, messages in by_kind.items():
        batch = schema.to_table(kind, messages)
        assert batch.rejected == [] and batch.unknown_columns == 0
        assert batch.table.num_rows == sum(schema.row_count(m) for m in messages)


def test_values_are_plain_python_numbers() -> None:
    scrape = healthy(64, 2)[1]
    for m in scrape:
        for column, values in m.rows.items():
            assert type(values) is list, column
            assert all(v is None or type(v) in (int, float, str) for v in values), (m.kind, column)


def test_sources_rows_and_seq_follow_the_contract() -> None:
    topo = standard(64)
    scrapes = healthy(64, 3)
    first = scrapes[0]
    gpu = [m for m in first if m.kind == "gpu"]
    assert [m.source for m in gpu] == [n.name for n in topo.nodes]  # one message per node
    assert gpu[0].rows["device"] == [f"node000/gpu{i}" for i in range(8)]
    switch = [m for m in first if m.kind == "switch"]
    assert [m.rows["device"] for m in switch] == [[s.name] for s in topo.switches]  # one row, source = switch
    assert all(m.source == m.rows["device"][0] for m in switch)
    port_sources = [m.source for m in first if m.kind == "port"]
    assert port_sources == [n.name for n in topo.nodes] + [s.name for s in topo.switches]
    leaf = next(m for m in first if m.kind == "port" and m.source == "leaf0-0")
    assert set(leaf.rows["port"]) == set(topo.ports_of_device("leaf0-0"))
    optical = next(m for m in first if m.kind == "optical" and m.source == "node000")
    assert optical.rows["lane"][:LANES] == list(range(LANES))
    assert optical.rows["port"] == [f"node000/gpu{g}:p0" for g in range(8) for _ in range(LANES)]
    for k, scrape in enumerate(scrapes):  # seq rises by one per (source, kind)
        assert {m.seq for m in scrape if m.kind != "module"} == {k}
        assert {m.ts for m in scrape} == {DEFAULT_START_TS + 5.0 * k}


def test_module_messages_at_start_on_schedule_and_on_replacement() -> None:
    topo = standard(64)
    faults = faults_of(topo, {"cause": "laser_degradation", "port": "node003/gpu1:p0", "start": 0, "end": 12})
    sim = Simulator(topo, faults, seed=1, interval=4.0, module_every=20.0)
    sent = []
    for _ in range(12):  # t = 0 .. 44
        sent.append({(m.source, m.seq) for m in sim.step() if m.kind == "module"})
    everyone = len(topo.nodes) + len(topo.switches)
    assert len(sent[0]) == everyone and all(seq == 0 for _, seq in sent[0])
    assert sent[3] == {("node003", 1)}  # t = 12: the module replaced at the fault's end
    assert len(sent[5]) == everyone  # t = 20
    assert ("node003", 2) in sent[5] and ("node000", 1) in sent[5]
    assert len(sent[10]) == everyone  # t = 40
    assert all(not s for i, s in enumerate(sent) if i not in (0, 3, 5, 10))


def test_module_rows_carry_ordered_vendor_thresholds() -> None:
    topo = standard(64)
    f = frames(healthy(64, 1))
    modules = f["module"]
    assert set(modules["port"]) == set(topo.ports)
    assert modules["media"].eq("400G-DR4").all() and modules["lanes"].eq(LANES).all()
    assert modules["vendor"].nunique() >= 2 and modules["part_number"].nunique() >= 3
    for column in THRESHOLD_COLUMNS:
        assert modules[column].notna().all(), column
    assert (modules.rx_power_low_alarm_dbm < modules.rx_power_low_warn_dbm).all()
    assert (modules.rx_power_low_warn_dbm < modules.rx_power_high_alarm_dbm).all()
    assert (modules.tx_power_low_alarm_dbm < modules.tx_power_low_warn_dbm).all()
    assert (modules.bias_high_warn_ma < modules.bias_high_alarm_ma).all()
    assert (modules.temp_high_warn_c < modules.temp_high_alarm_c).all()


def test_rx_is_far_end_tx_minus_link_loss_per_lane() -> None:
    topo = standard(128)
    sim = Simulator(topo, seed=4)
    for _ in range(3):
        scrape = sim.step()
    tx: dict[tuple[str, int], float] = {}
    rx: dict[tuple[str, int], float] = {}
    for m in scrape:
        if m.kind == "optical":
            for port, lane, t, r in zip(
                m.rows["port"], m.rows["lane"], m.rows["tx_power_dbm"], m.rows["rx_power_dbm"], strict=True
            ):
                tx[port, lane], rx[port, lane] = t, r
    plant = sim.plant
    residual = []
    for row in range(plant.L):
        port = plant.ports[plant.lane_port[row]]
        lane = int(plant.lane_of_row[row])
        peer = topo.port_peer[port]
        residual.append(rx[port, lane] - (tx[peer, lane] - sim.loss_rx_db[row]))
    residual = np.array(residual)
    # reading noise 0.05 dB (rx) and 0.03 dB (tx), 0.03 dB of received-power jitter, 0.01 dB rounding
    assert np.abs(residual).max() < 0.35
    assert abs(residual.mean()) < 0.01 and residual.std() < 0.08
    assert sim.loss_rx_db.min() >= 0.3 and sim.loss_rx_db.max() <= 2.9  # connectors + fibre, per link and lane


def test_counters_rise_except_documented_resets() -> None:
    """FEC/symbol counters may drop (to a restart from 0) only when their link retrained; nothing else drops."""
    topo = standard(64)
    faults = faults_of(
        topo,
        {"cause": "link_flap", "link": "L00002", "start": 20, "period": 25, "down_s": 7},
        {"cause": "link_down", "link": "L00070", "start": 30, "end": 80},
        {"cause": "transceiver_fault", "port": "leaf5-0:p03", "start": 10, "end": 90},
        {"cause": "gpu_xid", "gpu": "node004/gpu4", "start": 15, "xid": 48},
    )
    f = frames(run(topo, faults, 40))
    port = f["port"].sort_values(["port", "ts"])
    by = port.groupby("port")
    prev_state = by["state"].shift()
    retrained = (by["link_down_total"].diff() > 0) | (prev_state == 0)
    resettable = ("fec_corrected_total", "fec_uncorrectable_total", "symbol_errors_total")
    counters = [c for c in port.columns if c.endswith("_total")]
    resets = 0
    for column in counters:
        step = by[column].diff()
        dropped = step < 0
        if column in resettable:
            assert not (dropped & ~retrained).any(), column
            assert (port.loc[dropped, column] <= port.loc[dropped.shift(-1, fill_value=False), column].max()).all()
            resets += int(dropped.sum())
        else:
            assert not dropped.any(), column
    assert resets > 0  # the flaps and the link restored at 80 s did reset them
    gpu = f["gpu"].sort_values(["device", "ts"]).groupby("device")
    for column in ("ecc_dbe_total", "pcie_replay_total"):
        assert (gpu[column].diff().dropna() >= 0).all()


def test_link_rx_counters_equal_far_end_tx() -> None:
    topo = standard(64)
    scrapes = run(topo, faults_of(topo, {"cause": "incast_hotspot", "port": "leaf0-0:p05", "start": 0}), 6)

    def bytes_of(scrape):
        out = {}
        for m in (m for m in scrape if m.kind == "port"):
            pairs = zip(m.rows["rx_bytes_total"], m.rows["tx_bytes_total"], strict=True)
            out.update(zip(m.rows["port"], pairs, strict=True))
        return out

    first, last = bytes_of(scrapes[0]), bytes_of(scrapes[-1])
    for port, peer in topo.port_peer.items():
        assert last[port][0] - first[port][0] == last[peer][1] - first[peer][1]


def test_any_topology_and_any_interval() -> None:
    """A hand-written cluster: two ports per GPU, a GPU-GPU link, a leaf-leaf link, a lone spine."""
    topo = topology.Topology.from_dict(
        {
            "name": "odd",
            "nodes": [{"name": "n0", "rack": "r0", "cooling_loop": "c0", "gpus": 2}],
            "switches": [
                {"name": "l0", "tier": "leaf"},
                {"name": "l1", "tier": "leaf"},
                {"name": "s0", "tier": "spine"},
            ],
            "links": [
                {"id": "A", "a": "n0/gpu0:p0", "b": "l0:p0", "tier": "host"},
                {"id": "B", "a": "n0/gpu0:p1", "b": "l1:p0", "tier": "host"},
                {"id": "C", "a": "n0/gpu1:p0", "b": "n0/gpu0:p2", "tier": "host"},
                {"id": "D", "a": "l0:p9", "b": "l1:p9", "tier": "fabric"},
                {"id": "E", "a": "l1:p10", "b": "s0:p0", "tier": "fabric"},
            ],
        }
    )
    faults = (Fault("pfc_storm", "n0/gpu1:p0", 0.0), Fault("incast_hotspot", "l0:p0", 0.0, options={"load": 2.0}))
    sim = Simulator(topo, faults, seed=3, interval=0.5)
    for _ in range(5):
        scrape = sim.step()
    assert math.isclose(sim.t, 2.0) and sim.ts == DEFAULT_START_TS + 2.0
    kinds = {m.kind for m in scrape}
    assert kinds == {"gpu", "switch", "port", "optical"}
    for kind in kinds:
        assert schema.to_table(kind, [m for m in scrape if m.kind == kind]).rejected == []
    ports = {p for m in scrape if m.kind == "port" for p in m.rows["port"]}
    assert ports == set(topo.ports)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        # a 4-lane module has lanes 0-3
        ({"cause": "laser_degradation", "port": "leaf0-0:p00", "lane": 4}, "lane must be an integer 0..3"),
        # XIDs are positive integers
        ({"cause": "gpu_xid", "gpu": "node000/gpu0", "xid": "79"}, "xid must be a positive integer"),
        # a flap cannot be down longer than its period
        ({"cause": "link_flap", "link": "L00001", "period": 5, "down_s": 9}, "down_s must be in"),
        # a fraction of ports is at most 1
        ({"cause": "switch_fault", "switch": "leaf0-0", "ports_fraction": 1.5}, "ports_fraction must be in"),
        # a BER is a probability
        ({"cause": "transceiver_fault", "port": "leaf0-0:p00", "ber": 2.0}, "ber must be in"),
    ],
)
def test_bad_fault_options_are_one_clear_error(spec, message) -> None:
    topo = standard(64)
    with pytest.raises(InputError) as err:
        Simulator(topo, faults_of(topo, spec))
    assert message in str(err.value) and str(err.value).startswith("faults[0] (")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("kw", "place"), [({"interval": 0}, "interval"), ({"seed": -1}, "seed")])
def test_bad_settings_are_input_errors(kw, place) -> None:
    with pytest.raises(InputError) as err:
        Simulator(standard(64), **kw)
    assert err.value.place == place

"""Fault-domain keys: one partition holds both ends of every host link (DESIGN §1)."""

from __future__ import annotations

import pytest

from fabricwatch import schema
from fabricwatch.stream.keys import outgoing, split_by_fault_domain
from fabricwatch.topology import Topology

T0 = 1764400000.0


def optical(source: str, ports: list[str], lanes: int = 4) -> schema.Message:
    rows = {
        "port": [p for p in ports for _ in range(lanes)],
        "lane": [lane for _ in ports for lane in range(lanes)],
        "rx_power_dbm": [round(-2.0 - 0.01 * i, 2) for i in range(len(ports) * lanes)],
    }
    return schema.make("optical", source, T0, 17, rows)


def test_a_node_scrape_splits_by_rail_leaf_and_keeps_every_row(topo128: Topology) -> None:
    ports = [f"node003/gpu{g}:p0" for g in range(8)]
    message = optical("node003", ports)
    parts = split_by_fault_domain(message, topo128)
    # 8 GPUs on 8 rails: one part per rail's leaf, in the order the rows came.
    assert [key for key, _ in parts] == [topo128.fault_domain(p) for p in ports]
    assert len({key for key, _ in parts}) == 8
    for key, part in parts:
        assert (part.source, part.ts, part.seq, part.kind) == ("node003", T0, 17, "optical")
        assert {topo128.fault_domain(p) for p in part.rows["port"]} == {key}
        assert len(part.rows["lane"]) == len(part.rows["port"]) == len(part.rows["rx_power_dbm"]) == 4
    joined = {c: [v for _, part in parts for v in part.rows[c]] for c in message.rows}
    assert joined == message.rows


def test_both_ends_of_every_host_link_get_one_key(topo128: Topology) -> None:
    for link in (lk for lk in topo128.links if lk.tier == "host"):
        gpu_side = split_by_fault_domain(optical(link.a.split("/")[0], [link.a]), topo128)
        leaf_side = split_by_fault_domain(optical(link.b.split(":")[0], [link.b]), topo128)
        assert gpu_side[0][0] == leaf_side[0][0], link.id


@pytest.mark.parametrize(
    ("kind", "source", "key_column", "entities", "expected"),
    [
        # a leaf's own ports (down- and uplinks) are all its domain: not cut, the same object back
        ("port", "leaf0-0", "port", ["leaf0-0:p00", "leaf0-0:p64"], ["leaf0-0"]),
        # GPU telemetry goes by node
        ("gpu", "node001", "device", ["node001/gpu0", "node001/gpu7"], ["node001"]),
        # a switch's own health goes by the switch
        ("switch", "spine00", "device", ["spine00"], ["spine00"]),
        # a port the topology does not know goes with its device's domain, not a key of its own
        ("port", "leaf0-0", "port", ["leaf0-0:p99"], ["leaf0-0"]),
    ],
)
def test_single_domain_messages_are_not_cut(topo128, kind, source, key_column, entities, expected) -> None:
    message = schema.make(kind, source, T0, 1, {key_column: entities})
    parts = split_by_fault_domain(message, topo128)
    assert [k for k, _ in parts] == expected
    assert parts[0][1] is message


def test_a_spine_scrape_splits_by_the_leaf_at_the_far_end(topo128: Topology) -> None:
    ports = topo128.ports_of_device("spine00")
    parts = split_by_fault_domain(schema.make("port", "spine00", T0, 3, {"port": ports}), topo128)
    leaves = {topo128.port_device[topo128.port_peer[p]] for p in ports}
    assert {k for k, _ in parts} == leaves
    assert sum(len(p.rows["port"]) for _, p in parts) == len(ports)


def test_a_message_without_rows_is_keyed_by_its_source(topo128: Topology) -> None:
    message = schema.make("optical", "node000", T0, 1, {})
    assert split_by_fault_domain(message, topo128) == [("node000", message)]


def test_outgoing_records_decode_to_the_parts(topo128: Topology) -> None:
    message = optical("node000", [f"node000/gpu{g}:p0" for g in range(8)])
    records = outgoing(message, topo128)
    assert len(records) == 8
    assert {r.topic for r in records} == {"fabricwatch.telemetry.optical"}
    assert all(r.ts == T0 for r in records)
    decoded = [schema.decode(r.value) for r in records]
    assert [d.rows["port"][0] for d in decoded] == [f"node000/gpu{g}:p0" for g in range(8)]
    assert [r.key for r in records] == [topo128.fault_domain(d.rows["port"][0]) for d in decoded]
    # without a topology: one record keyed by source
    (only,) = outgoing(message, None)
    assert only.key == "node000" and schema.unpack(schema.decode(only.value)) == message

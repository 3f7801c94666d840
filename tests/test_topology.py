from __future__ import annotations

import collections

import pytest

from fabricwatch import topology
from fabricwatch.errors import InputError


@pytest.mark.parametrize(
    ("gpus", "rails", "per_node", "leaves", "spines"),
    [
        (1024, 8, 8, 16, 8),  # the reference supernode: 2 leaves per rail
        (1024, 4, 8, 16, 8),  # 4 rails: GPUs g and g+4 share a rail, 4 leaves per rail
        (1024, 8, 16, 16, 8),
        (128, 8, 8, 8, 2),  # small: one leaf per rail, at least two spines
        (64, 4, 16, 4, 2),
    ],
)
def test_generate_is_non_blocking_and_complete(gpus, rails, per_node, leaves, spines):
    t = topology.generate(gpus, rails, per_node)
    assert len(t.gpus) == gpus
    assert sum(s.tier == "leaf" for s in t.switches) == leaves
    assert sum(s.tier == "spine" for s in t.switches) == spines
    host = [link for link in t.links if link.tier == "host"]
    fabric = [link for link in t.links if link.tier == "fabric"]
    assert len(host) == gpus
    # non-blocking: every leaf has as many uplinks as GPUs below it
    down = collections.Counter(t.port_device[link.b] for link in host)
    up = collections.Counter(t.port_device[link.a] for link in fabric)
    assert down == up
    # every GPU reaches its rail's leaf; every port is used once
    for link in host:
        gpu = t.port_device[link.a]
        rail = int(gpu.rsplit("gpu", 1)[1]) % rails
        assert link.rail == rail
        assert t.switch_by_name[t.port_device[link.b]].rail == rail
    assert len(set(t.ports)) == len(t.ports) == 2 * len(t.links)
    # every leaf reaches every spine
    for leaf in up:
        spines_reached = {t.port_device[lk.b] for lk in fabric if t.port_device[lk.a] == leaf}
        assert len(spines_reached) == spines


def test_reference_names_match_design():
    t = topology.generate(1024, 8, 8)
    assert t.links[0] == topology.Link("L00000", "node000/gpu0:p0", "leaf0-0:p00", "host", 0)
    assert t.links[1024] == topology.Link("L01024", "leaf0-0:p64", "spine00:p00", "fabric")
    assert t.node_by_name["node000"] == topology.Node("node000", "r00", "cl00", 8)
    assert t.fault_domain("node000/gpu0:p0") == t.fault_domain("leaf0-0:p00") == "leaf0-0"
    assert t.fault_domain("node017/gpu3") == "node017"


def test_four_rail_gpus_share_rail_not_ports():
    t = topology.generate(1024, 4, 8)
    leaf_of = {t.port_device[lk.a]: t.port_device[lk.b] for lk in t.links if lk.tier == "host"}
    assert t.switch_by_name[leaf_of["node000/gpu1"]].rail == t.switch_by_name[leaf_of["node000/gpu5"]].rail == 1


def test_yaml_round_trip(tmp_path):
    t = topology.generate(128, 4, 16)
    path = tmp_path / "c.yaml"
    path.write_text(t.to_yaml())
    assert topology.load(path).to_dict() == t.to_dict()


BASE = """name: x
nodes:
  - {name: node000, rack: r00, cooling_loop: cl00, gpus: 2}
switches:
  - {name: leaf0-0, tier: leaf, rail: 0, ports: 4}
links:
"""


@pytest.mark.parametrize(
    ("links", "expected"),
    [
        # unknown port: GPU index beyond the node's GPUs
        ("  - {id: L0, a: node000/gpu2:p0, b: leaf0-0:p00, tier: host}\n", ":7: links[0] (L0): a: unknown port"),
        # unknown port: beyond the switch's radix
        ("  - {id: L0, a: node000/gpu0:p0, b: leaf0-0:p09, tier: host}\n", "leaf0-0 has 4 ports"),
        # link to nowhere: a device that is not defined
        ("  - {id: L0, a: node000/gpu0:p0, b: leaf9-9:p00, tier: host}\n", "unknown device leaf9-9 (link to nowhere)"),
        # port used twice
        (
            "  - {id: L0, a: node000/gpu0:p0, b: leaf0-0:p00, tier: host}\n"
            "  - {id: L1, a: node000/gpu1:p0, b: leaf0-0:p00, tier: host}\n",
            ":8: links[1] (L1): port leaf0-0:p00 used twice (already by link L0)",
        ),
        # duplicate id
        (
            "  - {id: L0, a: node000/gpu0:p0, b: leaf0-0:p00, tier: host}\n"
            "  - {id: L0, a: node000/gpu1:p0, b: leaf0-0:p01, tier: host}\n",
            "links[1] (L0): duplicate id L0",
        ),
        # not a port id at all
        ("  - {id: L0, a: node000, b: leaf0-0:p00, tier: host}\n", "is not a port id"),
        # a typo in a key is not silently ignored
        ("  - {id: L0, a: node000/gpu0:p0, b: leaf0-0:p00, tier: host, rial: 0}\n", "unknown key(s) rial"),
        # bad YAML names the line
        ("  - {id: L0, a: [\n", "invalid YAML"),
    ],
)
def test_validation_errors_name_file_and_entry(tmp_path, links, expected):
    path = tmp_path / "cluster.yaml"
    path.write_text(BASE + links)
    with pytest.raises(InputError) as err:
        topology.load(path)
    assert str(path) in str(err.value)
    assert expected in str(err.value)


def test_every_problem_is_reported(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(
        BASE + "  - {id: L0, a: node000/gpu5:p0, b: leaf0-0:p00, tier: host}\n"
        "  - {id: L1, a: node000/gpu1:p0, b: nowhere:p1, tier: host}\n"
    )
    with pytest.raises(InputError) as err:
        topology.load(path)
    assert len(str(err.value).splitlines()) == 2


@pytest.mark.parametrize(("kwargs", "arg"), [({"rails": 6}, "--rails"), ({"gpus": 100}, "--gpus")])
def test_generate_rejects_bad_arguments(kwargs, arg):
    with pytest.raises(InputError, match=arg):
        topology.generate(**({"gpus": 1024} | kwargs))

"""Interface names → port ids: the default rules (one row per rule) and the map file."""

from __future__ import annotations

import pytest

from fabricwatch.collectors import portmap
from fabricwatch.collectors.portmap import PortMap
from fabricwatch.errors import InputError

HOST_CASES = [
    # (interface, RDMA port or None, expected port id)
    ("mlx5_3", 1, "node007/mlx5_3:p0"),  # IB ports count from 1, ours from 0
    ("mlx4_0", 2, "node007/mlx4_0:p1"),  # second port of a dual-port HCA
    ("eth2", None, "node007/eth2:p0"),  # a netdev is one port
    ("ens1f0np0", None, "node007/ens1f0np0:p0"),
]

SWITCH_CASES = [
    # (interface, style, expected port id)
    ("Ethernet7", "generic", "leaf0-0:p06"),  # front panels count from 1; two digits like topology files
    ("Et7", "generic", "leaf0-0:p06"),  # CLI abbreviation
    ("swp12", "generic", "leaf0-0:p11"),  # Cumulus
    ("1", "generic", "leaf0-0:p00"),  # a bare number (Ciena)
    ("Ethernet100", "generic", "leaf0-0:p99"),
    ("Ethernet129", "generic", "leaf0-0:p128"),  # wider than two digits stays whole
    ("et-0/0/7", "generic", "leaf0-0:p07"),  # Junos counts from 0
    ("Ethernet7/1", "eos", "leaf0-0:p06"),  # EOS: port 7, first lane
    ("Ethernet7/3", "eos", "leaf0-0:Ethernet7/3"),  # a breakout lane: no default number
    ("Ethernet1/7", "nxos", "leaf0-0:p06"),  # NX-OS: slot 1, port 7
    ("Ethernet2/7", "nxos", "leaf0-0:Ethernet2/7"),  # another slot: no default number
    ("Ethernet1/7", "generic", "leaf0-0:Ethernet1/7"),  # port/lane or slot/port? unknown: keep the name
    ("Ethernet0", "generic", "leaf0-0:Ethernet0"),  # SONiC counts lanes from 0: needs a map
    ("Et3/17/2", "eos", "leaf0-0:Ethernet3/17/2"),  # modular chassis
    ("lo0", "generic", "leaf0-0:lo0"),
]


@pytest.mark.parametrize(("iface", "ib_port", "expected"), HOST_CASES)
def test_host_defaults(iface, ib_port, expected):
    assert PortMap().host_port("node007", iface, ib_port) == expected


@pytest.mark.parametrize(("iface", "style", "expected"), SWITCH_CASES)
def test_switch_defaults(iface, style, expected):
    assert PortMap().switch_port("leaf0-0", iface, style) == expected


def test_map_file_overrides_flat_and_per_device(tmp_path):
    f = tmp_path / "ports.yaml"
    f.write_text(
        "mlx5_0/1: node007/gpu0:p0\n"
        "eth2: node007/gpu1:p0\n"
        "Ethernet1/1: spine00:p00\n"
        "leaf0-0:\n"
        "  Ethernet1/1: leaf0-0:p17\n"
    )
    pm = portmap.load(f)
    assert pm.host_port("node007", "mlx5_0", 1) == "node007/gpu0:p0"
    assert pm.host_port("node007", "eth2") == "node007/gpu1:p0"
    assert pm.switch_port("leaf0-0", "Et1/1") == "leaf0-0:p17"  # scoped entry wins; abbreviation resolved
    assert pm.switch_port("spine00", "Ethernet1/1") == "spine00:p00"  # flat entry
    assert pm.host_port("node007", "mlx5_1", 1) == "node007/mlx5_1:p0"  # unmapped: the default


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("eth2: not-a-port\n", "eth2"),  # a value that is not <device>:p<N>
        ("leaf0-0:\n  Ethernet1: 17\n", "leaf0-0.Ethernet1"),
        ("- a list\n", "mapping"),
        ("eth2: [unclosed\n", "not YAML"),
    ],
)
def test_bad_map_file_is_one_line_naming_the_entry(tmp_path, text, message):
    f = tmp_path / "ports.yaml"
    f.write_text(text)
    with pytest.raises(InputError, match=message) as info:
        portmap.load(f)
    assert str(f) in str(info.value) and "\n" not in str(info.value)

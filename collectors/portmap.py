"""Interface names → port ids (``<device>:p<N>``, DESIGN §2), by a documented default or a map file.

No naming scheme of NICs or switches says which topology port a cable lands on, so the default is
only a starting point and a port map file is the real answer in a deployed cluster.

Default rules (each row is tested in tests/collectors/test_portmap.py):

====================================  ==========================  =========================================
interface                             port id                     why
====================================  ==========================  =========================================
RDMA device ``mlx5_3`` port 1         ``node007/mlx5_3:p0``       InfiniBand ports count from 1, ours from 0
netdev ``eth2``, ``ens1f0np0``        ``node007/eth2:p0``         a netdev is one port
switch ``Ethernet7``, ``Et7``,        ``leaf0-0:p06``             front panels count from 1; switch ports
``swp7``, ``7``                                                   are written with two digits (as
                                                                  ``fabricwatch topology`` writes them)
Junos ``et-0/0/7``                    ``leaf0-0:p07``             Junos counts ports from 0
EOS ``Ethernet7/1`` (port 7, lane 1)  ``leaf0-0:p06``             only when the source knows it is EOS
NX-OS ``Ethernet1/7`` (slot 1, port)  ``leaf0-0:p06``             only when the source knows it is NX-OS
anything else (``Ethernet3/17/2``,    ``leaf0-0:Ethernet3/17/2``  keeps its own name: nothing is lost and
``Ethernet0``, ``lo0``)                                           nothing is put on the wrong port
====================================  ==========================  =========================================

A map file is YAML, ``interface: port-id``; a value may also be a mapping of one device's (host's or
switch's) interfaces, which wins over the flat entries for that device::

    mlx5_0/1: node000/gpu0:p0        # RDMA device/port, as the sysfs source names it
    eth2: node000/gpu1:p0
    leaf0-0:
      Ethernet1/1: leaf0-0:p00
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fabricwatch.errors import InputError
from fabricwatch.topology import split_port

STYLES = ("generic", "eos", "nxos")

_SINGLE = re.compile(r"^(?:ethernet|eth|et|swp|port)?(\d+)$", re.IGNORECASE)
_JUNOS = re.compile(r"^(?:et|xe|ge|mge)-0/0/(\d+)$", re.IGNORECASE)
_TWO = re.compile(r"^(?:ethernet|eth|et)(\d+)/(\d+)$", re.IGNORECASE)


def canonical_ifname(name: str) -> str:
    """``Et6/1`` and ``Eth6/1`` → ``Ethernet6/1``: switch CLIs abbreviate, gNMI and map files do not."""
    m = re.match(r"^(?:et|eth)(?=\d)", name, re.IGNORECASE)
    return "Ethernet" + name[m.end() :] if m else name


def switch_port_id(device: str, number: int) -> str:
    return f"{device}:p{number:02d}"


@dataclass(frozen=True)
class PortMap:
    """Resolves interface names to port ids; ``entries`` come from a map file (empty: defaults only)."""

    flat: dict[str, str] = field(default_factory=dict)
    scoped: dict[str, dict[str, str]] = field(default_factory=dict)

    def _lookup(self, device: str, names: tuple[str, ...]) -> str | None:
        for table in (self.scoped.get(device, {}), self.flat):
            for name in names:
                if name in table:
                    return table[name]
        return None

    def host_port(self, host: str, iface: str, ib_port: int | None = None) -> str:
        """A host NIC: a netdev (``ib_port`` None) or port ``ib_port`` (1-based) of an RDMA device."""
        if ib_port is None:
            return self._lookup(host, (iface,)) or f"{host}/{iface}:p0"
        mapped = self._lookup(host, (f"{iface}/{ib_port}",) + ((iface,) if ib_port == 1 else ()))
        return mapped or f"{host}/{iface}:p{ib_port - 1}"

    def switch_port(self, device: str, iface: str, style: str = "generic") -> str:
        """A switch interface; ``style`` says how to read two-number names (see the module table)."""
        full = canonical_ifname(iface)
        mapped = self._lookup(device, (iface, full))
        if mapped:
            return mapped
        if m := _SINGLE.match(iface):
            n = int(m.group(1))
            if n >= 1:
                return switch_port_id(device, n - 1)
        elif m := _JUNOS.match(iface):
            return switch_port_id(device, int(m.group(1)))
        elif (m := _TWO.match(iface)) and style != "generic":
            a, b = int(m.group(1)), int(m.group(2))
            if style == "eos" and b == 1 and a >= 1:
                return switch_port_id(device, a - 1)
            if style == "nxos" and a == 1 and b >= 1:
                return switch_port_id(device, b - 1)
        return f"{device}:{full}"


def load(path: str | Path | None) -> PortMap:
    """Read a port map file (None → defaults only); every bad entry is an error naming file and key."""
    if path is None:
        return PortMap()
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise InputError(str(path), f"cannot read port map: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        place = f"{path}:{mark.line + 1}" if mark else str(path)
        raise InputError(place, f"not YAML: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        return PortMap()
    if not isinstance(data, dict):
        raise InputError(str(path), "a port map is a mapping of interface names to port ids")
    flat: dict[str, str] = {}
    scoped: dict[str, dict[str, str]] = {}

    def check(key: object, value: object, where: str) -> str:
        if not isinstance(value, str) or split_port(value) is None:
            raise InputError(f"{path}: {where}{key}", f"{value!r} is not a port id like 'leaf0-0:p17'")
        return value

    for key, value in data.items():
        if isinstance(value, dict):
            scoped[str(key)] = {str(k): check(k, v, f"{key}.") for k, v in value.items()}
        else:
            flat[str(key)] = check(key, value, "")
    return PortMap(flat, scoped)

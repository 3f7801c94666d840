"""Source ``sysfs``: RDMA port counters and netdev statistics from ``/sys/class`` → ``port`` rows.

Reads ``class/infiniband/<dev>/ports/<n>/{counters,hw_counters,state,rate}`` and
``class/net/<iface>/{statistics,operstate,speed,carrier_down_count}``. The root is injectable: a
filesystem root (``/``, holding ``sys/class``), a sysfs root (``/sys``), ``/sys/class`` itself, or a
copy of ``/sys/class/infiniband`` (what diagnostic bundles save).

RDMA port (``mlx5_0`` port 1 → ``<host>/mlx5_0:p0`` unless the port map says otherwise):

* ``state``: 1 when ``state`` is ``4: ACTIVE``, else 0 (INIT and ARMED carry no traffic);
  ``speed_gbps`` from ``rate`` (``400 Gb/sec (4X NDR)`` → 400);
* ``rx_bytes_total``/``tx_bytes_total`` = ``port_rcv_data``/``port_xmit_data`` × 4: the InfiniBand
  counters count octets divided by 4 (IBTA PortCounters; kernel ABI sysfs-class-infiniband);
* ``rx_packets_total``/``tx_packets_total`` ← ``port_rcv_packets``/``port_xmit_packets``;
  ``symbol_errors_total`` ← ``symbol_error``; ``link_down_total`` ← ``link_downed``;
  ``tx_drops_total`` ← ``port_xmit_discards``; ``ecn_marked_total`` ← ``hw_counters/np_ecn_marked_roce_packets``
  (RoCE ports of newer kernels).
* Not mapped: ``port_rcv_errors`` (CRC and every other receive error in one count, so not
  ``rx_crc_errors_total``), the remaining error and constraint counters, ``port_xmit_wait``, the
  RDMA transport ``hw_counters`` (retransmits, CQE errors, ...). No FEC or pause counters exist here.

Netdev (``eth2`` → ``<host>/eth2:p0``; ``lo`` is skipped): ``state`` from ``operstate`` (up → 1;
down, lowerlayerdown, notpresent → 0; unknown, dormant, testing → null), ``speed_gbps`` = ``speed``
(Mb/s) / 1000 (-1 → null), ``link_down_total`` ← ``carrier_down_count``, and from ``statistics/``:
rx/tx bytes and packets, ``rx_crc_errors`` and ``tx_dropped``.

When the port map gives an RDMA port and a netdev the same port id, their rows merge (the first
non-null value of a column wins, RDMA first).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, ClassVar

from fabricwatch.collectors.portmap import PortMap
from fabricwatch.collectors.toolsource import Options, ToolConfig, ToolSource
from fabricwatch.collectors.values import integer, messages, number
from fabricwatch.errors import InputError
from fabricwatch.schema import Message

IB_COUNTERS = {
    "port_rcv_packets": "rx_packets_total",
    "port_xmit_packets": "tx_packets_total",
    "symbol_error": "symbol_errors_total",
    "link_downed": "link_down_total",
    "port_xmit_discards": "tx_drops_total",
}
IB_HW_COUNTERS = {"np_ecn_marked_roce_packets": "ecn_marked_total"}
IB_DATA = {"port_rcv_data": "rx_bytes_total", "port_xmit_data": "tx_bytes_total"}  # × 4
NET_STATISTICS = {
    "rx_bytes": "rx_bytes_total",
    "tx_bytes": "tx_bytes_total",
    "rx_packets": "rx_packets_total",
    "tx_packets": "tx_packets_total",
    "rx_crc_errors": "rx_crc_errors_total",
    "tx_dropped": "tx_drops_total",
}
OPERSTATE = {"up": 1, "down": 0, "lowerlayerdown": 0, "notpresent": 0}


def _read(path: Path) -> str | None:
    """A sysfs attribute's text; None when it is missing or unreadable (that value is then null)."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _counter(path: Path) -> int | None:
    value = integer(_read(path))
    return value if value is not None and value >= 0 else None


def find_class_dirs(root: Path) -> tuple[Path | None, Path | None]:
    """(infiniband class dir, net class dir) under ``root``, whichever of the accepted roots it is."""
    if not root.is_dir():
        raise InputError(f"sysfs {root}", "no such folder")
    for base in (root / "sys" / "class", root / "class", root):
        ib, net = base / "infiniband", base / "net"
        if ib.is_dir() or net.is_dir():
            return (ib if ib.is_dir() else None, net if net.is_dir() else None)
    if any((child / "ports").is_dir() for child in root.iterdir()):
        return root, None
    raise InputError(f"sysfs {root}", "no class/infiniband or class/net folder (nor RDMA devices) under it")


def _ports(device: Path) -> list[tuple[int, Path]]:
    ports = device / "ports"
    if not ports.is_dir():
        return []
    return sorted((int(p.name), p) for p in ports.iterdir() if p.name.isdigit())


def ib_port_row(port_dir: Path) -> dict[str, Any]:
    row: dict[str, Any] = {}
    state = _read(port_dir / "state")
    if state is not None:
        row["state"] = 1 if re.search(r"\bACTIVE\b", state) else 0
    row["speed_gbps"] = number(_read(port_dir / "rate"))
    for name, column in IB_DATA.items():
        words = _counter(port_dir / "counters" / name)
        row[column] = None if words is None else words * 4
    for name, column in IB_COUNTERS.items():
        row[column] = _counter(port_dir / "counters" / name)
    for name, column in IB_HW_COUNTERS.items():
        row[column] = _counter(port_dir / "hw_counters" / name)
    return row


def net_row(iface_dir: Path) -> dict[str, Any]:
    speed = number(_read(iface_dir / "speed"))
    row: dict[str, Any] = {
        "state": OPERSTATE.get((_read(iface_dir / "operstate") or "").lower()),
        "speed_gbps": speed / 1000.0 if speed is not None and speed > 0 else None,
        "link_down_total": _counter(iface_dir / "carrier_down_count"),
    }
    for name, column in NET_STATISTICS.items():
        row[column] = _counter(iface_dir / "statistics" / name)
    return row


def parse_tree(root: Path, host: str, port_map: PortMap, ts: float) -> list[Message]:
    """A sysfs tree → one ``port`` message (see the module doc for the accepted roots and columns)."""
    ib_dir, net_dir = find_class_dirs(root)
    rows: dict[str, dict[str, Any]] = {}

    def merge(port: str, row: dict[str, Any]) -> None:
        merged = rows.setdefault(port, {"port": port})
        for column, value in row.items():
            if merged.get(column) is None:
                merged[column] = value

    if ib_dir is not None:
        for device in sorted(ib_dir.iterdir()):
            for n, port_dir in _ports(device):
                merge(port_map.host_port(host, device.name, n), ib_port_row(port_dir))
    if net_dir is not None:
        for iface in sorted(net_dir.iterdir()):
            if iface.name != "lo" and iface.is_dir():
                merge(port_map.host_port(host, iface.name), net_row(iface))
    return messages(host, ts, {"port": list(rows.values())})


class SysfsConfig(ToolConfig):
    sysfs_root: Path = Path("/sys")  # where to read /sys from (a copy, in tests)


class SysfsSource(ToolSource):
    name: ClassVar[str] = "sysfs"
    Config = SysfsConfig
    saved_input = "a sysfs root folder (/, /sys, /sys/class or a copy of /sys/class/infiniband)"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--sysfs-root", type=Path, default=Path("/sys"), metavar="DIR", help="default /sys")

    @classmethod
    def parse_saved(cls, path: Path, opts: Options, ts: float) -> list[Message]:
        return parse_tree(Path(path), opts.host, opts.port_map, ts)

    def scrape_live(self, now: float) -> list[Message]:
        return parse_tree(self.opts.config.sysfs_root, self.opts.host, self.opts.port_map, now)

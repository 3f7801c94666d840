"""``ethtool -S IFACE`` (NIC statistics) and ``ethtool IFACE`` (link settings) → a ``port`` row.

Counter names are the mlx5 driver's physical-port counters (ConnectX; ``_phy`` counts everything on
the wire, RDMA included, where the plain ``rx_bytes`` of the netdev misses RoCE traffic):

==============================  =====================  ==============================================
ethtool -S name                 column                 note
==============================  =====================  ==============================================
rx_bytes_phy, tx_bytes_phy      rx/tx_bytes_total      else rx_bytes, tx_bytes (other drivers)
rx_packets_phy, tx_packets_phy  rx/tx_packets_total    else rx_packets, tx_packets
rx_crc_errors_phy               rx_crc_errors_total    else rx_crc_errors
rx_symbol_err_phy               symbol_errors_total
rx_corrected_bits_phy           fec_corrected_total    bits the FEC corrected
link_down_events_phy            link_down_total
rx_pause_ctrl_phy               rx_pause_total         pause frames, PFC included
tx_pause_ctrl_phy               tx_pause_total
np_ecn_marked_roce_packets      ecn_marked_total       RoCE packets that arrived ECN-marked
tx_discards_phy                 tx_drops_total         else tx_dropped
rx_prioP_pause                  rx_pause_pP_total      PFC frames received on priority P
tx_prioP_pause                  tx_pause_pP_total      PFC frames sent on priority P
rx_prioP_pause_duration         rx_pause_duration_     microseconds priority P was held by received
                                pP_us_total            pauses (the time it sent nothing)
tx_prioP_pause_duration         tx_pause_duration_     microseconds the pauses it sent on priority P
                                pP_us_total            held its link partner
==============================  =====================  ==============================================

P is each lossless priority of the schema (3 and 4); mlx5 lists a priority's pause counters only when
PFC is enabled on it (kernel Documentation/networking/device_drivers/ethernet/mellanox/mlx5/
counters.rst, "Priority Port Counters"), so a priority without them is null, never 0.

Not mapped: per-queue counters, the other per-priority counters (bytes, packets, pause transitions),
rx_discards_phy and rx_out_of_buffer (receive-side drops), per-lane error counters, the RoCE
congestion counters other than ECN marks. There is no uncorrectable-FEC count or pre-FEC BER in
``ethtool -S`` (null here). ``ethtool IFACE`` gives ``state`` (``Link detected: yes``) and
``speed_gbps`` (``Speed: 400000Mb/s``; ``Unknown!`` → null).
"""

from __future__ import annotations

import re
from typing import Any

from fabricwatch.collectors.values import integer
from fabricwatch.errors import InputError
from fabricwatch.schema import LOSSLESS_PRIORITIES, pause_columns, tx_pause_duration_column

STATS: dict[str, tuple[str, ...]] = {
    "rx_bytes_total": ("rx_bytes_phy", "rx_bytes"),
    "tx_bytes_total": ("tx_bytes_phy", "tx_bytes"),
    "rx_packets_total": ("rx_packets_phy", "rx_packets"),
    "tx_packets_total": ("tx_packets_phy", "tx_packets"),
    "rx_crc_errors_total": ("rx_crc_errors_phy", "rx_crc_errors"),
    "symbol_errors_total": ("rx_symbol_err_phy",),
    "fec_corrected_total": ("rx_corrected_bits_phy",),
    "link_down_total": ("link_down_events_phy",),
    "rx_pause_total": ("rx_pause_ctrl_phy",),
    "tx_pause_total": ("tx_pause_ctrl_phy",),
    "ecn_marked_total": ("np_ecn_marked_roce_packets",),
    "tx_drops_total": ("tx_discards_phy", "tx_dropped"),
}
for _p in LOSSLESS_PRIORITIES:
    _rx, _tx, _held = pause_columns(_p)
    STATS |= {_rx: (f"rx_prio{_p}_pause",), _tx: (f"tx_prio{_p}_pause",), _held: (f"rx_prio{_p}_pause_duration",)}
    STATS[tx_pause_duration_column(_p)] = (f"tx_prio{_p}_pause_duration",)
_STAT_LINE = re.compile(r"^\s+([^:\s][^:]*):\s*(-?\d+)\s*$")


def parse_stats(text: str, place: str) -> dict[str, Any]:
    """``ethtool -S`` → port columns (without ``port``); raises InputError if it is not that output."""
    if "NIC statistics:" not in text:
        raise InputError(place, "no 'NIC statistics:' header: not ethtool -S output")
    counters: dict[str, int] = {}
    for line in text.splitlines():
        if m := _STAT_LINE.match(line):
            value = int(m.group(2))
            if value >= 0:
                counters[m.group(1).strip()] = value
    row: dict[str, Any] = {}
    for column, names in STATS.items():
        row[column] = next((counters[n] for n in names if n in counters), None)
    return row


def parse_link(text: str, place: str) -> dict[str, Any]:
    """``ethtool IFACE`` → ``state`` and ``speed_gbps``."""
    if "Settings for" not in text:
        raise InputError(place, "no 'Settings for' header: not ethtool IFACE output")
    row: dict[str, Any] = {"state": None, "speed_gbps": None}
    for line in text.splitlines():
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if key == "Speed":
            mbps = integer(value.removesuffix("Mb/s")) if value.endswith("Mb/s") else None
            row["speed_gbps"] = mbps / 1000.0 if mbps is not None and mbps > 0 else None
        elif key == "Link detected":
            row["state"] = {"yes": 1, "no": 0}.get(value.lower())
    return row


def link_iface(text: str) -> str | None:
    """The interface named by ``Settings for eth2:``."""
    m = re.search(r"Settings for (\S+?):", text)
    return m.group(1) if m else None

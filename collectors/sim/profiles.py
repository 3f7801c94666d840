"""Collector profiles: the columns each real collector of collectors/ can fill, by telemetry kind.

A ``profile`` pathology makes a simulated source deliver what its real collector would: the columns
below keep their values and every other value column of those kinds is null (DESIGN §3: a value a
source cannot read is null). Kinds a collector does not report are left to the source's other
collectors. The sets follow the parsers' docstrings and are checked against every golden case of
tests/golden (tests/sim/test_profiles.py), so they cannot claim a column the parser never fills:

* ``nvml``: every gpu column; ``nvidia-smi``: every gpu column but ``xid`` (``-q`` shows no XID events);
  ``dcgm``: every gpu column (its memory temperature 0 on boards without the sensor is read as null).
* ``ethtool``: ``-m`` fills optical and module rows; ``-S`` (mlx5) has no uncorrectable-FEC count, no
  pre-FEC BER (corrected *bits* instead: fec_corrected_total) and no queue depth; it has PFC per
  lossless priority (``rx/tx_prioP_pause``, ``rx/tx_prioP_pause_duration`` in µs).
* ``sysfs``: InfiniBand/RDMA port counters only: no FEC, CRC or pause counters, and the IBTA widths:
  LinkDownedCounter 8 bits and SymbolErrorCounter 16 bits stick at their maximum (REALISM.md: a
  ConnectX-7 shows link_downed 255); port_xmit_data counts octets / 4, so bytes come in steps of 4.
* ``gnmi`` (OpenConfig): interface counters, FEC and pre-FEC BER, pauses; no queue depth, ECN marks or
  symbol errors; optical, module and switch rows. Its pauses are the port's only: the parser maps
  ``in-mac-pause-frames``/``out-mac-pause-frames`` of openconfig-if-ethernet and no per-priority path.
* ``switchcli``: transceiver tables: optical and module rows only.
* ``ibtools``: ``perfquery -x`` port counters and ``ibswinfo`` switch health.
* ``full``: every column (the tidy world the unit tests use).
"""

from __future__ import annotations

from fabricwatch.schema import KINDS, LOSSLESS_PRIORITIES, pause_columns, tx_pause_duration_column

GPU_ALL = frozenset(c.name for c in KINDS["gpu"].columns)
OPTICAL_ALL = frozenset(c.name for c in KINDS["optical"].columns)
MODULE_ALL = frozenset(c.name for c in KINDS["module"].columns)
SWITCH_ALL = frozenset(c.name for c in KINDS["switch"].columns)
PORT_ALL = frozenset(c.name for c in KINDS["port"].columns) | {"rx_packets_total", "tx_packets_total"}
PFC_PRIORITY = frozenset(c for p in LOSSLESS_PRIORITIES for c in (*pause_columns(p), tx_pause_duration_column(p)))

_PORT_BASE = frozenset(
    {"state", "speed_gbps", "rx_bytes_total", "tx_bytes_total", "rx_packets_total", "tx_packets_total"}
)

PROFILES: dict[str, dict[str, frozenset[str]]] = {
    "nvml": {"gpu": GPU_ALL},
    "nvidia-smi": {"gpu": GPU_ALL - {"xid"}},
    "dcgm": {"gpu": GPU_ALL},
    "ethtool": {
        "optical": OPTICAL_ALL,
        "module": MODULE_ALL,
        "port": _PORT_BASE
        | {
            "rx_crc_errors_total",
            "symbol_errors_total",
            "fec_corrected_total",
            "link_down_total",
            "rx_pause_total",
            "tx_pause_total",
            "ecn_marked_total",
            "tx_drops_total",
        }
        | PFC_PRIORITY,
    },
    "sysfs": {
        "port": _PORT_BASE | {"symbol_errors_total", "link_down_total", "tx_drops_total", "ecn_marked_total"},
    },
    "gnmi": {
        "optical": OPTICAL_ALL,
        "module": MODULE_ALL,
        "switch": SWITCH_ALL,
        "port": _PORT_BASE
        | {
            "rx_crc_errors_total",
            "fec_corrected_total",
            "fec_uncorrectable_total",
            "pre_fec_ber",
            "link_down_total",
            "rx_pause_total",
            "tx_pause_total",
            "tx_drops_total",
        },
    },
    "switchcli": {"optical": OPTICAL_ALL, "module": MODULE_ALL},
    "ibtools": {
        "port": frozenset(
            {
                "rx_bytes_total",
                "tx_bytes_total",
                "rx_packets_total",
                "tx_packets_total",
                "symbol_errors_total",
                "link_down_total",
                "tx_drops_total",
            }
        ),
        "switch": SWITCH_ALL,
    },
    "full": {"gpu": GPU_ALL, "optical": OPTICAL_ALL, "module": MODULE_ALL, "switch": SWITCH_ALL, "port": PORT_ALL},
}

# (column, bits) a collector's counters stick at: IBTA PortCounters as sysfs exposes them
SATURATES: dict[str, tuple[tuple[str, int], ...]] = {
    "sysfs": (("link_down_total", 8), ("symbol_errors_total", 16)),
}
# columns a collector reads in coarser steps: (column, step)
STEPS: dict[str, tuple[tuple[str, int], ...]] = {
    "sysfs": (("rx_bytes_total", 4), ("tx_bytes_total", 4)),
}

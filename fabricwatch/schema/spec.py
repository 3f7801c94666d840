"""What ``fabricwatch.telemetry/v1`` holds (DESIGN §3): the kinds, their key and value columns with
types and physical ranges, and the topic each kind travels on.

Everything else in the package reads these tables; nothing here decodes or validates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pyarrow as pa

SCHEMA = "fabricwatch.telemetry/v1"
TS_MIN, TS_MAX = 0.0, 4102444800.0  # the epoch .. 2100-01-01
MAX_ROWS = 1_000_000
COUNTER_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str  # "str", "float", "int"
    low: float = -math.inf
    high: float = math.inf

    @property
    def arrow_type(self) -> pa.DataType:
        return {"str": pa.string(), "float": pa.float64(), "int": pa.int64()}[self.type]

    @property
    def duckdb_type(self) -> str:
        return {"str": "VARCHAR", "float": "DOUBLE", "int": "BIGINT"}[self.type]


def _counter(name: str) -> Column:
    return Column(name, "int", 0, COUNTER_MAX)


@dataclass(frozen=True, slots=True)
class KindSpec:
    kind: str
    keys: tuple[Column, ...]
    values: tuple[Column, ...]

    @property
    def columns(self) -> tuple[Column, ...]:
        return self.keys + self.values

    @property
    def topic(self) -> str:
        return topic_of(self.kind)

    def column(self, name: str) -> Column | None:
        return COLUMN_BY_NAME[self.kind].get(name)


# PFC priorities carried per priority: the lossless ones (PFC enabled). SONiC's default QoS config
# enables PFC on 3 and 4 (PORT_QOS_MAP ``pfc_enable: "3,4"``, the PFC watchdog's ``pfcwd_sw_enable:
# "3,4"``; sonic-mgmt docs/pfcwd: "PFC watchdog is enabled at lossless priorities (e.g., 3 and 4) by
# default"); RoCEv2 runs on 3 by NVIDIA's default (DSCP 26). Only these ride the bus: the port totals
# rx/tx_pause_total still count every priority's frames. mlx5 fills ``rx_prioP_pause*`` only for
# priorities with PFC enabled (kernel mlx5 counters.rst), so a priority left out is null, not 0.
LOSSLESS_PRIORITIES = (3, 4)


def pause_columns(priority: int) -> tuple[str, str, str]:
    """The per-priority PFC columns of ``priority``: pause frames received, sent, and microseconds
    paused by received pauses (mlx5 ``rx_prioP_pause``/``tx_prioP_pause``/``rx_prioP_pause_duration``;
    SAI ``SAI_PORT_STAT_PFC_P_RX_PKTS``/``_TX_PKTS``/``_RX_PAUSE_DURATION_US``)."""
    return f"rx_pause_p{priority}_total", f"tx_pause_p{priority}_total", f"rx_pause_duration_p{priority}_us_total"


def tx_pause_duration_column(priority: int) -> str:
    """Microseconds the pauses this port *sent* on ``priority`` held its link partner (mlx5
    ``tx_prioP_pause_duration``): the same time as the partner's received-pause duration, read at the
    sender, so a NIC shows that it storms even where its switch reports no per-priority pause time."""
    return f"tx_pause_duration_p{priority}_us_total"


DBM = (-60.0, 20.0)  # loss of light reads about -40 dBm; no module transmits over +20 dBm
TEMP = (-60.0, 200.0)

KINDS: dict[str, KindSpec] = {
    spec.kind: spec
    for spec in (
        KindSpec(
            "gpu",
            (Column("device", "str"),),
            (
                Column("util_pct", "float", 0, 100),
                Column("mem_util_pct", "float", 0, 100),
                Column("temp_c", "float", *TEMP),
                Column("mem_temp_c", "float", *TEMP),
                Column("power_w", "float", 0, 10_000),
                Column("power_limit_w", "float", 0, 10_000),
                Column("sm_clock_mhz", "float", 0, 100_000),
                Column("throttle_mask", "int", 0, COUNTER_MAX),
                Column("xid", "int", 0, 2**31 - 1),
                _counter("ecc_dbe_total"),
                _counter("pcie_replay_total"),
            ),
        ),
        KindSpec(
            "optical",
            (Column("port", "str"), Column("lane", "int", 0, 63)),
            (
                Column("tx_power_dbm", "float", *DBM),
                Column("rx_power_dbm", "float", *DBM),
                Column("bias_ma", "float", 0, 1000),
                Column("module_temp_c", "float", *TEMP),
                Column("voltage_v", "float", 0, 20),
            ),
        ),
        KindSpec(
            "port",
            (Column("port", "str"),),
            (
                Column("state", "int", 0, 1),
                Column("speed_gbps", "float", 0, 10_000),
                _counter("rx_bytes_total"),
                _counter("tx_bytes_total"),
                _counter("rx_crc_errors_total"),
                _counter("symbol_errors_total"),
                _counter("fec_corrected_total"),
                _counter("fec_uncorrectable_total"),
                Column("pre_fec_ber", "float", 0, 1),
                _counter("link_down_total"),
                _counter("rx_pause_total"),
                _counter("tx_pause_total"),
                _counter("ecn_marked_total"),
                _counter("tx_drops_total"),
                Column("queue_depth_bytes", "int", 0, 2**40),
                # Extensions (optional): frame counters, so loss can be a ratio of frames.
                _counter("rx_packets_total"),
                _counter("tx_packets_total"),
                # Extensions (optional): PFC per lossless priority (null where the source has none).
                *(_counter(name) for p in LOSSLESS_PRIORITIES for name in pause_columns(p)),
                *(_counter(tx_pause_duration_column(p)) for p in LOSSLESS_PRIORITIES),
            ),
        ),
        KindSpec(
            "switch",
            (Column("device", "str"),),
            (
                Column("asic_temp_c", "float", *TEMP),
                Column("fan_min_rpm", "float", 0, 1_000_000),
                Column("psu_ok", "int", 0, 1),
            ),
        ),
        KindSpec(
            "module",
            (Column("port", "str"),),
            (
                Column("media", "str"),
                Column("vendor", "str"),
                Column("part_number", "str"),
                Column("lanes", "int", 1, 64),
                Column("rx_power_low_alarm_dbm", "float", *DBM),
                Column("rx_power_low_warn_dbm", "float", *DBM),
                Column("rx_power_high_alarm_dbm", "float", *DBM),
                Column("tx_power_low_alarm_dbm", "float", *DBM),
                Column("tx_power_low_warn_dbm", "float", *DBM),
                Column("bias_high_alarm_ma", "float", 0, 1000),
                Column("bias_high_warn_ma", "float", 0, 1000),
                Column("temp_high_alarm_c", "float", *TEMP),
                Column("temp_high_warn_c", "float", *TEMP),
            ),
        ),
    )
}

# kind → column name → Column (its keys() are the names a kind knows)
COLUMN_BY_NAME: dict[str, dict[str, Column]] = {kind: {c.name: c for c in spec.columns} for kind, spec in KINDS.items()}

TOPIC_PREFIX = "fabricwatch.telemetry."
TOPIC_FINDINGS = "fabricwatch.findings"
TOPIC_INCIDENTS = "fabricwatch.incidents"
TOPIC_DEADLETTER = "fabricwatch.deadletter"


def topic_of(kind: str) -> str:
    return TOPIC_PREFIX + kind


TELEMETRY_TOPICS = tuple(topic_of(k) for k in KINDS)
ALL_TOPICS = (*TELEMETRY_TOPICS, TOPIC_FINDINGS, TOPIC_INCIDENTS, TOPIC_DEADLETTER)

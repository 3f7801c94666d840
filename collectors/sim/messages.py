"""Cutting one scrape's readings into telemetry messages (DESIGN §3).

Sources, as a real deployment would have them:

* ``gpu``: one message per node (source = node name), one row per GPU (an NVML/DCGM agent per host);
* ``optical``, ``port``, ``module``: the GPU-side ports in one message per node, the switch-side ports in
  one message per switch (source = the switch); ``optical`` has one row per lane;
* ``switch``: one message per switch with its one row (source = the switch).

``seq`` rises by one per message of a (source, kind): every source reports ``gpu``/``optical``/``port``/
``switch`` at every scrape, so their seq is the scrape number; ``module`` messages go out at the first
scrape, every ``module_every`` seconds and when a module is replaced, with a seq of their own.

Values are plain Python numbers (``ndarray.tolist``), rounded to what the real source reports: NVML
integers for temperatures, utilisation and clocks, DOM resolutions for optics (0.01 dB, 0.001 mA,
0.01 °C, 0.1 mV).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from fabricwatch.collectors.sim import optics
from fabricwatch.collectors.sim.plant import LANES, Plant, Slice
from fabricwatch.collectors.sim.thermal import POWER_LIMIT_W
from fabricwatch.schema import LOSSLESS_PRIORITIES, SCHEMA, Message, make, pause_columns, tx_pause_duration_column

if TYPE_CHECKING:
    from fabricwatch.collectors.sim.simulator import Simulator

SPEED_GBPS = 400.0


def _with_nulls(values: list[Any], null_at: np.ndarray) -> list[Any]:
    for i in null_at.tolist():
        values[i] = None
    return values


class MessageBuilder:
    def __init__(self, plant: Plant, part_of_port: np.ndarray, table: list[optics.ModulePart] | None = None) -> None:
        self.plant = plant
        self.module_seq = [0] * len(plant.port_slices)
        table = table or list(optics.PARTS)
        parts = [table[i] for i in part_of_port.tolist()]
        self.module_columns: dict[str, list[Any]] = {
            "port": plant.port_list,
            "media": [m.media for m in parts],
            "vendor": [m.vendor for m in parts],
            "part_number": [m.part_number for m in parts],
            "lanes": [m.lanes for m in parts],
        }
        for name in optics.THRESHOLD_COLUMNS:
            self.module_columns[name] = [getattr(m, name) for m in parts]
        self.power_limit = [POWER_LIMIT_W] * plant.G
        self.psu_ok = [1] * plant.S
        self.cut = {
            "gpu": _Cutter("gpu", plant.gpu_slices),
            "switch": _Cutter("switch", plant.switch_slices),
            "port": _Cutter("port", plant.port_slices),
            "optical": _Cutter("optical", plant.port_slices, LANES),
        }

    def set_part(self, port: int, part: optics.ModulePart) -> None:
        """A module replaced by another part: its identity and thresholds from the next module message."""
        for name in self.module_columns:
            if name != "port":
                self.module_columns[name][port] = getattr(part, name)

    def build(
        self,
        ts: float,
        seq: int,
        r: dict[str, Any],
        sim: Simulator,
        send_modules: set[int],
        skip: Mapping[str, Collection[str]] | None = None,
    ) -> list[Message]:
        """The scrape's messages; ``skip`` maps a kind to sources whose message of it is not wanted (not cut)."""
        p = self.plant
        skip = skip or {}
        out: list[Message] = []

        gpu = r["gpu"]
        offbus = np.flatnonzero(r["offbus"])
        gpu_cols: dict[str, list[Any] | np.ndarray] = {
            "device": p.gpu_list,
            "util_pct": gpu.util_pct,
            "mem_util_pct": gpu.mem_util_pct,
            "temp_c": gpu.temp_c,
            "mem_temp_c": gpu.mem_temp_c,
            "power_w": gpu.power_w,
            "power_limit_w": self.power_limit,
            "sm_clock_mhz": gpu.sm_clock_mhz,
            "throttle_mask": gpu.throttle_mask,
            "xid": r["xid"],
            "ecc_dbe_total": r["ecc_dbe"],
            "pcie_replay_total": r["pcie_replay"],
        }
        if offbus.size:  # a GPU off the bus reports nulls: lists (the cutter cuts arrays as they are)
            for name, values in gpu_cols.items():
                if name not in ("device", "xid"):
                    listed = values.tolist() if isinstance(values, np.ndarray) else list(values)
                    gpu_cols[name] = _with_nulls(listed, offbus)
        self.cut["gpu"](out, ts, seq, gpu_cols, skip.get("gpu", ()))

        switch_cols: dict[str, list[Any] | np.ndarray] = {
            "device": p.switches,
            "asic_temp_c": r["switch_temp"],
            "fan_min_rpm": r["fan"],
            "psu_ok": self.psu_ok,
        }
        self.cut["switch"](out, ts, seq, switch_cols, skip.get("switch", ()))

        down = np.flatnonzero(~r["up_now"])
        port_cols: dict[str, list[Any] | np.ndarray] = {
            "port": p.port_list,
            "state": r["up_now"].astype(np.int64),
            "speed_gbps": _with_nulls([SPEED_GBPS] * p.P, down),
            "rx_bytes_total": sim.rx_bytes,
            "tx_bytes_total": sim.tx_bytes.value,
            "rx_crc_errors_total": sim.crc,
            "symbol_errors_total": sim.symbol_errors,
            "fec_corrected_total": sim.fec_corrected,
            "fec_uncorrectable_total": sim.fec_uncorrectable,
            # an array becomes a list for the wanted rows only (_Cutter); with a link down, a list with its nulls
            "pre_fec_ber": _with_nulls(r["measured_ber"].tolist(), down) if down.size else r["measured_ber"],
            "link_down_total": sim.link_down,
            "rx_pause_total": sim.rx_pause,
            "tx_pause_total": sim.tx_pause,
            "ecn_marked_total": sim.ecn,
            "tx_drops_total": sim.drops,
            "queue_depth_bytes": np.round(r["queue"]).astype(np.int64),
            "rx_packets_total": sim.rx_pkts,
            "tx_packets_total": sim.tx_pkts.value,
        }
        for row, priority in enumerate(LOSSLESS_PRIORITIES):
            rx, tx, held = pause_columns(priority)
            port_cols[rx] = sim.rx_pause_prio[row]
            port_cols[tx] = sim.tx_pause_prio[row]
            port_cols[held] = sim.rx_paused_us.value[row]
            # the time a port's pauses held its partner is the partner's time held (read at the sender)
            port_cols[tx_pause_duration_column(priority)] = sim.rx_paused_us.value[row][sim.plant.port_peer]
        self.cut["port"](out, ts, seq, port_cols, skip.get("port", ()))

        optical_cols: dict[str, list[Any] | np.ndarray] = {
            "port": p.lane_port_list,
            "lane": p.lane_list,
            "tx_power_dbm": np.round(r["tx_read"], 2),
            "rx_power_dbm": np.round(r["rx_read"], 2),
            "bias_ma": np.round(r["bias"], 3),
            "module_temp_c": np.repeat(np.round(r["module_temp"], 2), LANES),
            "voltage_v": np.repeat(np.round(r["voltage"], 4), LANES),
        }
        self.cut["optical"](out, ts, seq, optical_cols, skip.get("optical", ()))

        if send_modules:
            chosen = [i for i in range(len(p.port_slices)) if i in send_modules]
            unwanted = skip.get("module", ())
            for i in chosen:
                sl = p.port_slices[i]
                if sl.source in unwanted:  # its seq moves on as if it were sent
                    self.module_seq[i] += 1
                    continue
                rows = {name: values[sl.start : sl.stop] for name, values in self.module_columns.items()}
                out.append(make("module", sl.source, ts, self.module_seq[i], rows))
                self.module_seq[i] += 1
        return out


class _Cutter:
    """Cuts columns into one message per slice of a kind; the slice bounds are worked out once.

    A column is a list, or an array that becomes one (``tolist``) for the rows of wanted slices only.
    A list is cut by ``map`` over prepared ``slice`` objects; an array's rows, taken as runs of
    slices of one width, become the pieces in one ``reshape(...).tolist()`` per run (nodes of eight
    ports, switches of many). Each message's rows are zipped from the pieces, so the Python work per
    message is a few calls whatever its columns.
    """

    def __init__(self, kind: str, slices: list[Slice], scale: int = 1) -> None:
        self.kind = kind
        cuts = [slice(sl.start * scale, sl.stop * scale) for sl in slices]
        self.all = _Plan([sl.source for sl in slices], cuts, None, _runs(cuts))
        self.plans: dict[frozenset[str], _Plan] = {}

    def plan(self, skip: Collection[str]) -> _Plan:
        """The slices left when the sources in ``skip`` are not wanted, and where their rows are."""
        key = frozenset(skip)
        plan = self.plans.get(key)
        if plan is None:
            if len(self.plans) >= 64:  # outages and cadences make a few sets: a bound, never reached
                self.plans.clear()
            chosen = [i for i, source in enumerate(self.all.sources) if source not in key]
            cuts = [self.all.cuts[i] for i in chosen]
            rows = np.concatenate([np.arange(c.start, c.stop) for c in cuts]) if cuts else np.zeros(0, np.int64)
            packed = []
            at = 0
            for c in cuts:
                packed.append(slice(at, at + c.stop - c.start))
                at += c.stop - c.start
            plan = self.plans[key] = _Plan([self.all.sources[i] for i in chosen], cuts, rows, _runs(packed))
        return plan

    def __call__(
        self,
        out: list[Message],
        ts: float,
        seq: int,
        cols: dict[str, list[Any] | np.ndarray],
        skip: Collection[str],
    ) -> None:
        """One message per slice, except the sources in ``skip``."""
        plan = self.plan(skip) if skip else self.all
        pieces = []
        for values in cols.values():
            if isinstance(values, np.ndarray):
                pieces.append(_split(values if plan.rows is None else values[plan.rows], plan.runs))
            else:
                pieces.append(list(map(values.__getitem__, plan.cuts)))
        kind, ts = self.kind, float(ts)
        rows = map(dict, map(zip, repeat(list(cols)), zip(*pieces, strict=True)))
        out.extend(map(Message, repeat(SCHEMA), repeat(kind), plan.sources, repeat(ts), repeat(seq), rows))


@dataclass(slots=True)
class _Plan:
    """Slices to cut: their sources, their rows in a kind's arrays (``cuts``) and, with ``rows`` the
    indices of those rows, in the arrays' selection ``array[rows]`` (as ``runs`` of slices of one width)."""

    sources: list[str]
    cuts: list[slice]
    rows: np.ndarray | None  # None: every row
    runs: list[tuple[int, int, int]]  # (first row in the selection, slices, width)


def _runs(packed: list[slice]) -> list[tuple[int, int, int]]:
    """Consecutive slices of one width, back to back, as (first row, number of slices, width)."""
    runs: list[tuple[int, int, int]] = []
    for sl in packed:
        width = sl.stop - sl.start
        if runs and runs[-1][2] == width and runs[-1][0] + runs[-1][1] * width == sl.start:
            first, count, _ = runs[-1]
            runs[-1] = (first, count + 1, width)
        else:
            runs.append((sl.start, 1, width))
    return runs


def _split(values: np.ndarray, runs: list[tuple[int, int, int]]) -> list[list[Any]]:
    """A column's pieces, one list per slice: each run of equal slices is one ``reshape`` and ``tolist``."""
    if len(runs) == 1:
        first, count, width = runs[0]
        return values[first : first + count * width].reshape(count, width).tolist()
    pieces: list[list[Any]] = []
    for first, count, width in runs:
        pieces.extend(values[first : first + count * width].reshape(count, width).tolist())
    return pieces

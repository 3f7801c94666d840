"""Hand-built telemetry for detector tests: explicit frames from a Topology, not a simulator.

:class:`Timeline` lays down healthy values for every GPU, lane, port and module of a topology on a
scrape grid (each source offset by a fraction of a second, as real scrapes are), with seeded noise and
per-device spread, then lets a test write a fault's signature into the frames in plain terms:
``shift`` adds a (ramped) delta, ``put`` sets a value, ``count`` makes a counter rise, ``spike`` changes
one sample. :meth:`Timeline.window` cuts the Window a tick would see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from fabricwatch.records import Window
from fabricwatch.schema import KINDS
from fabricwatch.topology import Topology

T0 = 1_764_400_000.0
KEYS_OF = {"gpu": ["device"], "optical": ["port", "lane"], "port": ["port"], "switch": ["device"], "module": ["port"]}
LINE_BPS = 400e9

# A vendor's 400G-DR4 thresholds, deliberately not the config's defaults, so tests see them used.
MODULE = {
    "media": "400G-DR4",
    "vendor": "ACME",
    "part_number": "QDD-400G-DR4",
    "lanes": 4,
    "rx_power_low_alarm_dbm": -9.4,
    "rx_power_low_warn_dbm": -6.4,
    "rx_power_high_alarm_dbm": 5.0,
    "tx_power_low_alarm_dbm": -6.4,
    "tx_power_low_warn_dbm": -3.4,
    "bias_high_alarm_ma": 90.0,
    "bias_high_warn_ma": 80.0,
    "temp_high_alarm_c": 80.0,
    "temp_high_warn_c": 75.0,
}


class Timeline:
    def __init__(
        self,
        topology: Topology,
        duration: float = 300.0,
        step: float = 5.0,
        seed: int = 0,
        packets: bool = True,
        start: float = T0,
    ) -> None:
        self.topology = topology
        self.step = step
        self.start = start
        self.rng = np.random.default_rng(seed)
        self.times = start + np.arange(0.0, duration + 1e-9, step)
        self.frames: dict[str, pd.DataFrame] = {}
        self._offsets: dict[str, float] = {}
        self._gpu()
        self._optical()
        self._port(packets)
        self._switch()
        self.modules = pd.DataFrame(
            [{"ts": start, "source": self._source(p), "port": p, **MODULE} for p in topology.ports]
        )
        self.frames["module"] = self.modules.copy()

    # --- healthy values ------------------------------------------------------------------------------

    def _source(self, port_or_device: str) -> str:
        device = self.topology.port_device.get(port_or_device, port_or_device)
        return device.split("/", 1)[0]

    def _offset(self, source: str) -> float:
        if source not in self._offsets:
            self._offsets[source] = round(float(self.rng.uniform(0.0, 0.9)), 3)
        return self._offsets[source]

    def _grid(self, kind: str, keys: dict[str, np.ndarray], sources: np.ndarray) -> pd.DataFrame:
        """One row per (sample, entity): ts (with the source's offset), source and the key columns."""
        n, m = len(self.times), len(sources)
        offsets = np.array([self._offset(s) for s in sources])
        frame = {"ts": (self.times[:, None] + offsets[None, :]).ravel(), "source": np.tile(sources, n)}
        frame.update({k: np.tile(v, n) for k, v in keys.items()})
        self._shape = (n, m)
        return pd.DataFrame(frame)

    def _noise(self, sd: float) -> np.ndarray:
        return self.rng.normal(0.0, sd, self._shape).ravel()

    def _spread(self, sd: float) -> np.ndarray:
        return np.tile(self.rng.normal(0.0, sd, self._shape[1]), self._shape[0])

    def _counter(self, per_s: np.ndarray | float) -> np.ndarray:
        n, m = self._shape
        inc = np.broadcast_to(np.asarray(per_s, dtype=float), (n, m)) * self.step
        inc = np.maximum(inc * (1 + self.rng.normal(0, 0.05, (n, m))), 0)
        base = self.rng.integers(0, 10**9, m)[None, :]
        return (base + np.cumsum(inc, axis=0)).astype(np.int64).ravel()

    def _gpu(self) -> None:
        gpus = np.array(self.topology.gpus, dtype=object)
        f = self._grid("gpu", {"device": gpus}, np.array([g.split("/")[0] for g in gpus], dtype=object))
        loops = np.array([self.topology.cooling_loop_of(g) for g in gpus])
        loop_offset = {lp: self.rng.normal(0, 1.0) for lp in sorted(set(loops))}
        f["util_pct"] = np.clip(95 + self._noise(2.0), 0, 100)
        f["mem_util_pct"] = np.clip(60 + self._noise(3.0), 0, 100)
        f["temp_c"] = (
            62 + self._spread(2.5) + np.tile([loop_offset[lp] for lp in loops], len(self.times)) + self._noise(0.7)
        )
        f["mem_temp_c"] = 70 + self._spread(2.0) + self._noise(0.5)
        f["power_w"] = 650 + self._spread(15) + self._noise(20)
        f["power_limit_w"] = 700.0
        f["sm_clock_mhz"] = 1980.0
        f["throttle_mask"] = 0
        f["xid"] = 0
        f["ecc_dbe_total"] = 0
        f["pcie_replay_total"] = 0
        self.frames["gpu"] = f

    def _optical(self) -> None:
        ports = np.repeat(np.array(self.topology.ports, dtype=object), 4)
        lanes = np.tile(np.arange(4), len(self.topology.ports))
        f = self._grid(
            "optical", {"port": ports, "lane": lanes}, np.array([self._source(p) for p in ports], dtype=object)
        )
        n, m = self._shape
        tx_level = 1.0 + self.rng.normal(0, 0.6, m)
        loss = np.clip(1.5 + self.rng.normal(0, 0.4, m), 0.5, 3.0)  # per receiving lane
        index = {(p, k): i for i, (p, k) in enumerate(zip(ports, lanes, strict=True))}
        far = np.array([index[(self.topology.port_peer[p], k)] for p, k in zip(ports, lanes, strict=True)])
        tx = tx_level[None, :] + self.rng.normal(0, 0.05, (n, m))
        rx = tx[:, far] - loss[None, :] + self.rng.normal(0, 0.1, (n, m))
        gpu_port = np.array([self.topology.port_device[p] in self.topology.gpu_node for p in ports])
        f["tx_power_dbm"] = tx.ravel()
        f["rx_power_dbm"] = rx.ravel()
        f["bias_ma"] = 45 + self._spread(3.0) + self._noise(0.2)
        f["module_temp_c"] = np.tile(np.where(gpu_port, 50.0, 40.0), n) + self._spread(2.0) + self._noise(0.2)
        f["voltage_v"] = 3.3 + self._noise(0.01)
        self._far_lane = far
        self.frames["optical"] = f

    def _port(self, packets: bool) -> None:
        ports = np.array(self.topology.ports, dtype=object)
        f = self._grid("port", {"port": ports}, np.array([self._source(p) for p in ports], dtype=object))
        n, m = self._shape
        util = np.clip(0.6 + self.rng.normal(0, 0.05, m), 0.1, 0.85)
        byte_rate = LINE_BPS / 8 * util
        f["state"] = 1
        f["speed_gbps"] = 400.0
        f["rx_bytes_total"] = self._counter(byte_rate)
        f["tx_bytes_total"] = self._counter(byte_rate)
        if packets:
            f["rx_packets_total"] = self._counter(byte_rate / 4096)
            f["tx_packets_total"] = self._counter(byte_rate / 4096)
        ber = 10 ** self.rng.normal(-7.5, 0.5, m)
        f["pre_fec_ber"] = (ber[None, :] * 10 ** self.rng.normal(0, 0.1, (n, m))).ravel()
        f["rx_crc_errors_total"] = 0
        f["symbol_errors_total"] = self._counter(0.0)  # errors the FEC could not correct: none when healthy
        f["fec_corrected_total"] = self._counter(ber * 100e9 / 10)
        f["fec_uncorrectable_total"] = 0
        f["link_down_total"] = 0
        f["rx_pause_total"] = self._counter(self.rng.uniform(0, 5, m))
        f["tx_pause_total"] = self._counter(self.rng.uniform(0, 5, m))
        f["ecn_marked_total"] = self._counter(self.rng.uniform(0, 2, m))
        f["tx_drops_total"] = 0
        f["queue_depth_bytes"] = self.rng.integers(0, 20_000, n * m)
        self.frames["port"] = f

    def _switch(self) -> None:
        names = np.array([s.name for s in self.topology.switches], dtype=object)
        f = self._grid("switch", {"device": names}, names)
        f["asic_temp_c"] = 60 + self._noise(1.0)
        f["fan_min_rpm"] = 9000.0
        f["psu_ok"] = 1
        self.frames["switch"] = f

    # --- writing a fault's signature -----------------------------------------------------------------

    def rows(self, kind: str, since: float | None = None, until: float | None = None, **key: Any) -> np.ndarray:
        """Mask of the rows of ``kind`` whose key columns match (a value or a list) in [since, until)."""
        f = self.frames[kind]
        mask = np.ones(len(f), dtype=bool)
        for column, value in key.items():
            values = value if isinstance(value, list | tuple | set) else [value]
            mask &= f[column].isin(list(values)).to_numpy()
        if since is not None:
            mask &= (f["ts"] >= since).to_numpy()
        if until is not None:
            mask &= (f["ts"] < until).to_numpy()
        return mask

    def shift(self, kind: str, column: str, delta: float, start: float = 0.0, ramp: float = 0.0, **key: Any) -> None:
        """Add ``delta`` to ``column`` from ``start`` seconds into the run, ramping in over ``ramp``."""
        f = self.frames[kind]
        mask = self.rows(kind, since=self.start + start, **key)
        t = f.loc[mask, "ts"].to_numpy() - (self.start + start)
        weight = np.clip(t / ramp, 0, 1) if ramp > 0 else 1.0
        f.loc[mask, column] = f.loc[mask, column].to_numpy(dtype=float) + delta * weight

    def put(self, kind: str, column: str, value: Any, start: float = 0.0, end: float | None = None, **key: Any) -> None:
        """Set ``column`` to ``value`` (or ``value(ts)``) between ``start`` and ``end`` seconds into the run."""
        f = self.frames[kind]
        mask = self.rows(kind, self.start + start, None if end is None else self.start + end, **key)
        f.loc[mask, column] = value(f.loc[mask, "ts"].to_numpy()) if callable(value) else value

    def count(
        self, kind: str, column: str, per_s: float, start: float = 0.0, end: float | None = None, **key: Any
    ) -> None:
        """Make counter ``column`` rise by ``per_s`` a second from ``start`` (to ``end``) on top of itself."""
        f = self.frames[kind]
        mask = self.rows(kind, **key)
        t0, t1 = self.start + start, np.inf if end is None else self.start + end
        elapsed = np.clip(f.loc[mask, "ts"].to_numpy(), t0, t1) - t0
        f.loc[mask, column] = f.loc[mask, column].to_numpy(dtype=np.int64) + np.round(per_s * elapsed).astype(np.int64)

    def freeze(self, kind: str, column: str, start: float = 0.0, per_s: float = 0.0, **key: Any) -> None:
        """From ``start``, counter ``column`` stops rising (or rises only by ``per_s``): a paused port."""
        f = self.frames[kind]
        t0 = self.start + start
        for entity in np.unique(f.loc[self.rows(kind, **key), KEYS_OF[kind]].astype(str).agg("#".join, axis=1)):
            parts = dict(zip(KEYS_OF[kind], entity.split("#"), strict=True))
            match = self.rows(kind, **{k: (int(v) if k == "lane" else v) for k, v in parts.items()})
            before = match & (f["ts"] < t0).to_numpy()
            after = match & (f["ts"] >= t0).to_numpy()
            level = int(f.loc[before, column].iloc[-1]) if before.any() else 0
            elapsed = f.loc[after, "ts"].to_numpy() - t0
            f.loc[after, column] = level + np.round(per_s * elapsed).astype(np.int64)

    def spike(self, kind: str, column: str, value: Any, at: float, **key: Any) -> None:
        """Change the one sample of each matching entity nearest to ``at`` seconds into the run."""
        f = self.frames[kind]
        mask = self.rows(kind, **key)
        ts = f["ts"].to_numpy()
        sample = np.abs(ts - (self.start + at)) <= self.step / 2
        f.loc[mask & sample, column] = value

    def silence(self, source: str, start: float, end: float | None = None) -> None:
        """The source sends nothing (every kind) between ``start`` and ``end`` seconds into the run."""
        for kind, f in self.frames.items():
            ts = f["ts"].to_numpy()
            gone = (f["source"] == source).to_numpy() & (ts >= self.start + start)
            if end is not None:
                gone &= ts < self.start + end
            self.frames[kind] = f[~gone].reset_index(drop=True)

    def drop_column(self, kind: str, column: str) -> None:
        self.frames[kind] = self.frames[kind].drop(columns=[column])

    # --- cutting windows -----------------------------------------------------------------------------

    def window(self, at: float, span: float = 60.0) -> Window:
        """The Window a tick at ``at`` seconds into the run sees: rows with ts in [end - span, end]."""
        end = self.start + at
        frames = {}
        for kind in KINDS:
            f = self.frames[kind]
            part = f[(f["ts"] >= end - span) & (f["ts"] <= end)].sort_values("ts", kind="stable")
            frames[kind] = part.reset_index(drop=True)
        return Window(start=end - span, end=end, frames=frames, modules=self.modules.copy(), topology=self.topology)

    def ticks(self, every: float = 10.0, first: float = 60.0) -> Iterator[float]:
        """Tick times (seconds into the run) from ``first`` to the end of the timeline."""
        last = self.times[-1] - self.start
        t = first
        while t <= last + 1e-9:
            yield t
            t += every


def empty_window(topology: Topology, end: float = T0) -> Window:
    """A window in which nothing reported: every kind an empty frame with its columns."""
    frames = {
        kind: pd.DataFrame({c: [] for c in ["ts", "source", *(col.name for col in spec.columns)]})
        for kind, spec in KINDS.items()
    }
    return Window(end - 60.0, end, frames, frames["module"].copy(), topology)


def run_engine(engine: Any, timeline: Timeline, every: float = 10.0, first: float = 60.0, until: float | None = None,
               on_tick: Callable[[float, list], None] | None = None) -> list:  # fmt: skip
    """Feed the engine a tick every ``every`` s of the timeline; returns all changed incidents in order."""
    changed = []
    for t in timeline.ticks(every, first):
        if until is not None and t > until:
            break
        out = engine.run(timeline.window(t, engine.window_s), now=timeline.start + t)
        if on_tick:
            on_tick(t, out)
        changed += out
    return changed

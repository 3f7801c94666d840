"""Health summaries of one window: one row per link, port, GPU, cooling loop and switch, never one
per raw sample, so what ``serve`` exports grows with the fabric and not with its lanes or scrapes.

Pure: a :class:`~fabricwatch.records.Window` in, a :class:`Health` out; no clock, no I/O. Gauges are
the latest non-null value of the window's recent rows (what "now" means to the detectors, so a panel
and an incident agree); counters become reset-aware rates over the same rows. A value that cannot be
known (no sample, a module that reports no threshold) is NaN and is not exported: never a made-up number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from fabricwatch.detectors.config import EngineConfig
from fabricwatch.detectors.frames import Keyed, recent
from fabricwatch.detectors.gpu_temp import THERMAL_MASK
from fabricwatch.records import Window
from fabricwatch.topology import Link, Topology

MTU_BYTES = 4096  # RoCEv2 MTU: frames from bytes when a source counts no packets (as detectors/packet_loss.py)
GPU_HOT_C = 85.0  # the seeds' rule (GPU ≥ 85 °C); headroom is measured to it (detectors/config.py gpu_hot_c)


@dataclass(frozen=True, slots=True)
class Health:
    """Summaries of one window, each frame indexed by its entity id and sorted.

    ``links``: tier, rail, switch and peer_switch (:func:`switches_of`), margin_db (worst lane's rx
    power above its module's rx low alarm, both ends), pre_fec_ber (worse end), corruption_ratio
    (frames lost to CRC/FEC over frames received, worse end), up (1 when both ends report up).
    ``ports``: device, switch (the device when it is a switch, else ""), queue_depth_bytes,
    ecn_marked_per_s, pause_sent_per_s. ``gpus``: node, cooling_loop, temperature_c, power_w,
    throttled (thermal clock-event bits set), npo_temperature_c (hottest module on its NPO ports).
    ``loops``: gpu_temperature_max_c, headroom_c (to ``gpu_hot_c``), gpus_throttled. ``switches``:
    asic_temperature_c. ``lanes``: per (port, lane) rx/tx power and margin, with link; the exporter
    publishes only the lanes of links in focus.
    """

    end: float
    links: pd.DataFrame
    ports: pd.DataFrame
    gpus: pd.DataFrame
    loops: pd.DataFrame
    switches: pd.DataFrame
    lanes: pd.DataFrame


def _series(keyed: Keyed, values: np.ndarray) -> pd.Series:
    return pd.Series(values, index=keyed.index, dtype=np.float64)


def summarise(window: Window, config: EngineConfig | None = None, gpu_hot_c: float = GPU_HOT_C) -> Health:
    """The window's health, per entity of its topology (entities that sent nothing are NaN rows)."""
    cfg = config or EngineConfig()
    topo = window.topology
    lanes = _lanes(window, cfg, topo)
    ports = _ports(window, cfg, topo)
    links = _links(topo, lanes, ports)
    gpus = _gpus(window, cfg, topo, lanes)
    loops = _loops(gpus, gpu_hot_c)
    sw = recent(window, "switch", cfg.recent_s)
    switches = pd.DataFrame(
        {"asic_temperature_c": _series(sw, sw.last("asic_temp_c"))}
        if sw.n
        else {"asic_temperature_c": pd.Series(dtype=np.float64)}
    )
    switches = switches.reindex(sorted(s.name for s in topo.switches))
    switches.index.name = "switch"
    return Health(window.end, links, ports.drop(columns=["ber", "lost", "frames", "up"]), gpus, loops, switches, lanes)


def _lanes(window: Window, cfg: EngineConfig, topo: Topology) -> pd.DataFrame:
    opt = recent(window, "optical", cfg.recent_s)
    if not opt.n:
        return pd.DataFrame(
            {"link": [], "rx_power_dbm": [], "tx_power_dbm": [], "margin_db": [], "module_temperature_c": []},
            index=pd.MultiIndex.from_arrays([[], []], names=["port", "lane"]),
        )
    frame = pd.DataFrame(
        {
            "rx_power_dbm": opt.last("rx_power_dbm"),
            "tx_power_dbm": opt.last("tx_power_dbm"),
            "module_temperature_c": opt.last("module_temp_c"),
        },
        index=opt.index,
    )
    ports = frame.index.get_level_values("port").astype(str)
    modules = window.modules
    alarm = pd.Series(dtype=np.float64)
    if len(modules) and "rx_power_low_alarm_dbm" in modules.columns:
        alarm = pd.to_numeric(modules.set_index("port")["rx_power_low_alarm_dbm"], errors="coerce")
    frame["margin_db"] = frame["rx_power_dbm"].to_numpy() - alarm.reindex(ports).to_numpy(dtype=np.float64)
    frame["link"] = [topo.port_link[p].id if p in topo.port_link else "" for p in ports]
    return frame[frame["link"] != ""]  # spare ports (a module, no fibre) are no link's health


def _ports(window: Window, cfg: EngineConfig, topo: Topology) -> pd.DataFrame:
    port = recent(window, "port", cfg.recent_s)
    index = pd.Index(sorted(topo.ports), name="port")
    if not port.n:
        cols = ("queue_depth_bytes", "ecn_marked_per_s", "pause_sent_per_s", "ber", "lost", "frames", "up")
        frame = pd.DataFrame({c: np.nan for c in cols}, index=index)
    else:
        lost = np.fmax(port.increase("rx_crc_errors_total").total, port.increase("fec_uncorrectable_total").total)
        if port.has("rx_packets_total"):
            frames = port.increase("rx_packets_total").total
        else:
            frames = port.increase("rx_bytes_total").total / MTU_BYTES
        frame = pd.DataFrame(
            {
                "queue_depth_bytes": port.max("queue_depth_bytes"),
                "ecn_marked_per_s": port.increase("ecn_marked_total").rate(),
                "pause_sent_per_s": port.increase("tx_pause_total").rate(),
                "ber": port.max("pre_fec_ber"),
                "lost": lost,
                "frames": frames,
                "up": port.min("state"),
            },
            index=port.index,
        ).reindex(index)
    frame.insert(0, "device", [topo.port_device[p] for p in frame.index])
    frame.insert(1, "switch", [d if d in topo.switch_by_name else "" for d in frame["device"]])
    return frame


def switches_of(topo: Topology, link: Link) -> tuple[str, str]:
    """(switch, peer_switch) of a link: the switch it hangs off (a host link's leaf, a fabric link's
    leaf end) and the switch at its other end ("" for a host link). Alertmanager inhibits by them."""
    ends = [topo.port_device[p] for p in (link.a, link.b)]
    on_switch = [d for d in ends if d in topo.switch_by_name]
    if len(on_switch) == 2:
        leaf = [d for d in on_switch if topo.switch_by_name[d].tier == "leaf"]
        first = leaf[0] if leaf else on_switch[0]
        return first, next(d for d in on_switch if d != first) if on_switch[0] != on_switch[1] else first
    return (on_switch[0], "") if on_switch else ("", "")


def _links(topo: Topology, lanes: pd.DataFrame, ports: pd.DataFrame) -> pd.DataFrame:
    ids = [link.id for link in topo.links]
    a = [link.a for link in topo.links]
    b = [link.b for link in topo.links]
    margin = lanes.groupby("link")["margin_db"].min().reindex(ids).to_numpy(dtype=np.float64)
    pa, pb = ports.reindex(a), ports.reindex(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio_a = (pa["lost"] / (pa["frames"].fillna(0) + pa["lost"])).to_numpy(dtype=np.float64)
        ratio_b = (pb["lost"] / (pb["frames"].fillna(0) + pb["lost"])).to_numpy(dtype=np.float64)
    frame = pd.DataFrame(
        {
            "tier": [link.tier for link in topo.links],
            "rail": ["" if link.rail is None else str(link.rail) for link in topo.links],
            "switch": [switches_of(topo, link)[0] for link in topo.links],
            "peer_switch": [switches_of(topo, link)[1] for link in topo.links],
            "margin_db": margin,
            "pre_fec_ber": np.fmax(pa["ber"].to_numpy(dtype=np.float64), pb["ber"].to_numpy(dtype=np.float64)),
            "corruption_ratio": np.fmax(ratio_a, ratio_b),
            "up": np.fmin(pa["up"].to_numpy(dtype=np.float64), pb["up"].to_numpy(dtype=np.float64)),
        },
        index=pd.Index(ids, name="link"),
    )
    return frame.sort_index()


def _gpus(window: Window, cfg: EngineConfig, topo: Topology, lanes: pd.DataFrame) -> pd.DataFrame:
    gpu = recent(window, "gpu", cfg.recent_s)
    index = pd.Index(sorted(topo.gpus), name="gpu")
    if gpu.n:
        mask = gpu.last("throttle_mask")
        throttled = np.where(np.isnan(mask), np.nan, (np.nan_to_num(mask).astype(np.int64) & THERMAL_MASK) != 0)
        frame = pd.DataFrame(
            {
                "temperature_c": gpu.last("temp_c"),
                "power_w": gpu.last("power_w"),
                "throttled": throttled.astype(np.float64),
            },
            index=pd.Index(gpu.index, name="gpu"),
        ).reindex(index)
    else:
        frame = pd.DataFrame({"temperature_c": np.nan, "power_w": np.nan, "throttled": np.nan}, index=index)
    ports = lanes.index.get_level_values("port").astype(str)
    devices = pd.Series([p.rsplit(":p", 1)[0] for p in ports], index=lanes.index)
    npo = lanes["module_temperature_c"].groupby(devices.to_numpy()).max()
    frame["npo_temperature_c"] = npo.reindex(index).to_numpy(dtype=np.float64)
    frame.insert(0, "node", [topo.gpu_node[g] for g in index])
    frame.insert(1, "cooling_loop", [topo.cooling_loop_of(g) for g in index])
    return frame


def _loops(gpus: pd.DataFrame, gpu_hot_c: float) -> pd.DataFrame:
    grouped = gpus.groupby("cooling_loop")
    hottest = grouped["temperature_c"].max()
    return pd.DataFrame(
        {
            "gpu_temperature_max_c": hottest,
            "headroom_c": gpu_hot_c - hottest,
            "gpus_throttled": grouped["throttled"].sum(min_count=1),
        }
    ).sort_index()

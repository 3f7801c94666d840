"""What ``serve`` exports for the on-call engineer (METRICS.md): active incidents and health
summaries, as a prometheus-client collector with a bounded number of series.

:class:`OncallMetrics` keeps the latest :class:`~fabricwatch.dashboards.health.Health` and the open
incidents; each scrape renders them. Every family is bounded by the topology (one series per link,
port, GPU, cooling loop, switch) or by a constant (incidents, lanes of links in focus), so the total
is known before the fabric misbehaves: :func:`series_budget` states it and a test checks it on a
1024-GPU supernode.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from fabricwatch.dashboards.health import Health
from fabricwatch.incident import SEVERITIES, Incident
from fabricwatch.topology import Topology

MAX_INCIDENT_SERIES = 500  # beyond this many open incidents the most severe, then oldest, are exported
FOCUS_WORST_LINKS = 4  # lanes are exported for the links of open incidents plus this many worst by margin
MAX_FOCUS_LINKS = 16
MAX_LANES_PER_PORT = 8
INCIDENT_LABELS = ("incident", "type", "cause", "severity", "entity", "location")
LATENCY_BUCKETS = (5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600)

# family name → (help, frame attribute, column, labels); values in base units (METRICS.md)
HEALTH_FAMILIES: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "fabricwatch_link_optical_margin_db": (
        "Worst lane's rx power above its module's rx low alarm, over both ends (dB)",
        "links",
        "margin_db",
        ("link", "tier", "rail", "switch", "peer_switch"),
    ),
    "fabricwatch_link_pre_fec_ber": (
        "Pre-FEC bit error ratio, worse end",
        "links",
        "pre_fec_ber",
        ("link", "tier", "rail", "switch", "peer_switch"),
    ),
    "fabricwatch_link_corruption_ratio": (
        "Frames lost to CRC/FEC errors over frames received, worse end (CorrOpt: corrupting at ≥ 1e-8)",
        "links",
        "corruption_ratio",
        ("link", "tier", "rail", "switch", "peer_switch"),
    ),
    "fabricwatch_link_up": (
        "1 while both ends report the link up",
        "links",
        "up",
        ("link", "tier", "rail", "switch", "peer_switch"),
    ),
    "fabricwatch_port_queue_depth_bytes": (
        "Deepest egress queue seen recently on a switch port",
        "switch_ports",
        "queue_depth_bytes",
        ("port", "device", "switch"),
    ),
    "fabricwatch_port_ecn_marked_per_second": (
        "ECN marks per second on a switch port",
        "switch_ports",
        "ecn_marked_per_s",
        ("port", "device", "switch"),
    ),
    "fabricwatch_port_pause_frames_sent_per_second": (
        "PFC pause frames sent per second (a pause source sends many with no traffic behind them)",
        "ports",
        "pause_sent_per_s",
        ("port", "device", "switch"),
    ),
    "fabricwatch_gpu_temperature_celsius": (
        "GPU temperature",
        "gpus",
        "temperature_c",
        ("gpu", "node", "cooling_loop"),
    ),
    "fabricwatch_gpu_power_watts": ("GPU power draw", "gpus", "power_w", ("gpu", "node", "cooling_loop")),
    "fabricwatch_gpu_thermal_throttled": (
        "1 while the GPU reports thermal clock-event reasons (NVML 0x20 | 0x40)",
        "gpus",
        "throttled",
        ("gpu", "node", "cooling_loop"),
    ),
    "fabricwatch_gpu_npo_module_temperature_celsius": (
        "Hottest optical module on the GPU's near-package ports",
        "gpus",
        "npo_temperature_c",
        ("gpu", "node", "cooling_loop"),
    ),
    "fabricwatch_cooling_loop_gpu_temperature_max_celsius": (
        "Hottest GPU on the cooling loop",
        "loops",
        "gpu_temperature_max_c",
        ("cooling_loop",),
    ),
    "fabricwatch_cooling_loop_temperature_headroom_celsius": (
        "Degrees between the loop's hottest GPU and the 85 °C rule",
        "loops",
        "headroom_c",
        ("cooling_loop",),
    ),
    "fabricwatch_cooling_loop_gpus_thermal_throttled": (
        "GPUs of the loop reporting thermal throttling",
        "loops",
        "gpus_throttled",
        ("cooling_loop",),
    ),
    "fabricwatch_switch_asic_temperature_celsius": (
        "Switch ASIC temperature",
        "switches",
        "asic_temperature_c",
        ("switch",),
    ),
}
LANE_FAMILIES = {
    "fabricwatch_lane_rx_power_dbm": ("Received optical power of one lane (links in focus only)", "rx_power_dbm"),
    "fabricwatch_lane_tx_power_dbm": ("Transmitted optical power of one lane (links in focus only)", "tx_power_dbm"),
    "fabricwatch_lane_optical_margin_db": (
        "Lane rx power above its module's rx low alarm (links in focus only)",
        "margin_db",
    ),
}


def series_budget(topology: Topology) -> int:
    """The most series the on-call families can hold for this topology (pipeline metrics aside)."""
    switch_ports = sum(1 for p in topology.ports if topology.port_device[p] in topology.switch_by_name)
    by_frame = {
        "links": len(topology.links),
        "switch_ports": switch_ports,
        "ports": len(topology.ports),
        "gpus": len(topology.gpus),
        "loops": len(topology.cooling_loops),
        "switches": len(topology.switches),
    }
    health = sum(by_frame[frame] for _, frame, _, _ in HEALTH_FAMILIES.values())
    lanes = len(LANE_FAMILIES) * MAX_FOCUS_LINKS * 2 * MAX_LANES_PER_PORT
    incidents = MAX_INCIDENT_SERIES + len(SEVERITIES) * 2  # active + open counts by severity and status
    return health + lanes + incidents + 2


def _label(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


class OncallMetrics:
    """A prometheus-client collector over the latest health and the open incidents.

    ``update_health`` and ``update_incidents`` are called by the processing loop after each tick;
    ``collect`` runs on the HTTP thread of each scrape, so state is swapped under a lock, never mutated
    while a scrape reads it. Detection latency (``detected_at − first_seen`` of each new incident) is a
    histogram on the same registry.
    """

    def __init__(self, topology: Topology, registry: CollectorRegistry) -> None:
        self.topology = topology
        self._lock = threading.Lock()
        self._health: Health | None = None
        self._open: dict[str, Incident] = {}
        self._seen: set[str] = set()
        self.latency = Histogram(
            "fabricwatch_detection_latency_seconds",
            "Seconds from an incident's first evidence to its detection, by incident type",
            ["type"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        registry.register(self)  # type: ignore[arg-type]

    def describe(self) -> Iterable[Metric]:
        return []  # families vary with the data: no description at registration

    def update_health(self, health: Health) -> None:
        with self._lock:
            self._health = health

    def update_incidents(self, incidents: Iterable[Incident]) -> None:
        """Apply incidents that changed: open and unknown ones stay exported, resolved ones go."""
        with self._lock:
            open_ = dict(self._open)
            for inc in incidents:
                if inc.id not in self._seen and inc.status != "resolved":
                    self._seen.add(inc.id)
                    self.latency.labels(inc.type).observe(max(0.0, inc.detected_at - inc.first_seen))
                if inc.status == "resolved":
                    open_.pop(inc.id, None)
                    self._seen.discard(inc.id)
                else:
                    open_[inc.id] = inc
            self._open = open_

    # --- scrape -----------------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            health, open_ = self._health, list(self._open.values())
        yield from self._incidents(open_)
        if health is not None:
            yield from self._health_families(health)
            yield from self._lane_families(health, open_)
            end = GaugeMetricFamily(
                "fabricwatch_health_window_end_timestamp_seconds", "End of the window the health summaries describe"
            )
            end.add_metric([], health.end)
            yield end

    def _incidents(self, open_: list[Incident]) -> Iterator[Metric]:
        rank = {s: i for i, s in enumerate(SEVERITIES)}
        chosen = sorted(open_, key=lambda i: (rank.get(i.severity, len(rank)), i.first_seen, i.id))
        active = GaugeMetricFamily(
            "fabricwatch_incident_active",
            "1 while an incident is open (firing, or unknown while its source is silent); gone when resolved",
            labels=list(INCIDENT_LABELS),
        )
        for inc in chosen[:MAX_INCIDENT_SERIES]:
            active.add_metric(
                [inc.id, inc.type, inc.cause, inc.severity, inc.location["entity"], inc.location["id"]], 1
            )
        yield active
        counts = GaugeMetricFamily(
            "fabricwatch_open_incidents", "Open incidents by severity and status", labels=["severity", "status"]
        )
        for severity in SEVERITIES:
            for status in ("firing", "unknown"):
                n = sum(1 for i in open_ if i.severity == severity and i.status == status)
                counts.add_metric([severity, status], n)
        yield counts

    def _health_families(self, health: Health) -> Iterator[Metric]:
        frames = {
            "links": health.links,
            "ports": health.ports,
            "switch_ports": health.ports[health.ports["switch"] != ""],
            "gpus": health.gpus,
            "loops": health.loops,
            "switches": health.switches,
        }
        for name, (help_, attr, column, labels) in HEALTH_FAMILIES.items():
            frame = frames[attr]
            family = GaugeMetricFamily(name, help_, labels=list(labels))
            values = frame[column].to_numpy(dtype=np.float64)
            keep = np.flatnonzero(~np.isnan(values))
            label_columns = [frame.index.astype(str).to_numpy()] + [
                frame[label].map(_label).to_numpy() for label in labels[1:]
            ]
            for i in keep:
                family.add_metric([str(col[i]) for col in label_columns], float(values[i]))
            yield family

    def focus_links(self, health: Health, open_: list[Incident]) -> list[str]:
        """Links whose lanes are exported: those of open incidents, then the worst by margin."""
        topo = self.topology
        chosen: list[str] = []
        for inc in sorted(open_, key=lambda i: i.id):
            entity, ident = inc.location["entity"], inc.location["id"]
            link = ident if entity == "link" else topo.port_link[ident].id if ident in topo.port_link else None
            if link is None and entity == "gpu":
                link = next((topo.port_link[p].id for p in topo.ports if topo.port_device[p] == ident), None)
            if link in topo.link_by_id and link not in chosen:
                chosen.append(link)
        worst = health.links["margin_db"].dropna().sort_values(kind="stable")
        for link in worst.index[:FOCUS_WORST_LINKS]:
            if link not in chosen:
                chosen.append(str(link))
        return chosen[:MAX_FOCUS_LINKS]

    def _lane_families(self, health: Health, open_: list[Incident]) -> Iterator[Metric]:
        focus = self.focus_links(health, open_)
        lanes = health.lanes[health.lanes["link"].isin(focus)]
        lane_no = lanes.index.get_level_values("lane")
        lanes = lanes[lane_no < MAX_LANES_PER_PORT]
        ports = lanes.index.get_level_values("port").astype(str)
        lane_ids = lanes.index.get_level_values("lane").astype(int).astype(str)
        for name, (help_, column) in LANE_FAMILIES.items():
            family = GaugeMetricFamily(name, help_, labels=["link", "port", "lane"])
            values = lanes[column].to_numpy(dtype=np.float64)
            for link, port, lane, v in zip(lanes["link"], ports, lane_ids, values, strict=True):
                if not np.isnan(v):
                    family.add_metric([link, port, lane], float(v))
            yield family

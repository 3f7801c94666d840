"""The on-call metrics: health summaries are right, incidents come and go, cardinality stays bounded."""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fabricwatch import schema, topology
from fabricwatch.clock import VirtualClock
from fabricwatch.collectors.sim.simulator import Simulator
from fabricwatch.dashboards.alertmanager import AlertmanagerClient
from fabricwatch.dashboards.exporter import MAX_FOCUS_LINKS, MAX_INCIDENT_SERIES, OncallMetrics, series_budget
from fabricwatch.dashboards.health import summarise
from fabricwatch.incident import Incident
from fabricwatch.stream.metrics import PipelineMetrics
from fabricwatch.stream.window import WindowBuffer
from tests.detectors.synth import T0, Timeline


def scrape(registry: CollectorRegistry) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[s.name][tuple(sorted(s.labels.items()))] = s.value
    return out


def one(samples: dict[tuple[tuple[str, str], ...], float], **labels: str) -> float:
    hits = [v for k, v in samples.items() if all((name, value) in k for name, value in labels.items())]
    assert len(hits) == 1, (labels, len(hits))
    return hits[0]


def incident(n: int, status: str = "firing", severity: str = "major", **kw: object) -> Incident:
    base = dict(
        id=f"inc-{n:04d}",
        type="link_degradation",
        cause="connector_contamination",
        location={"entity": "link", "id": "L00003"},
        severity=severity,
        first_seen=T0 + 100,
        detected_at=T0 + 112,
        status=status,
    )
    base.update(kw)
    return Incident(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def small() -> topology.Topology:
    return topology.generate(64, rails=8, gpus_per_node=8)


def test_health_summaries_are_what_the_rows_say(small: topology.Topology) -> None:
    tl = Timeline(small, duration=120, seed=3)
    link = small.links[3]
    gpu = small.gpus[5]
    # one lane of the link's b end 1.4 dB above its module's -9.4 dBm alarm: the link's worst margin
    tl.put("optical", "rx_power_dbm", -8.0, port=link.b, lane=2)
    # 10 frames a second lost to CRC out of 1000 received: a corruption ratio of 10 / 1010
    tl.put("port", "rx_packets_total", lambda ts: np.round((ts - T0) * 1000).astype(np.int64), port=link.a)
    tl.count("port", "rx_crc_errors_total", 10.0, port=link.a)
    tl.put("port", "tx_pause_total", lambda ts: np.round((ts - T0) * 500).astype(np.int64), port=link.b)
    tl.put("port", "state", 0, start=100, port=small.links[4].a)
    tl.put("gpu", "temp_c", 90.0, device=gpu)
    tl.put("gpu", "throttle_mask", 0x40, device=gpu)
    tl.put("optical", "module_temp_c", 77.0, port=f"{gpu}:p0")
    no_alarm = small.links[6].a
    tl.modules.loc[tl.modules["port"] == no_alarm, "rx_power_low_alarm_dbm"] = np.nan
    health = summarise(tl.window(120))

    links = health.links
    assert links.loc[link.id, "margin_db"] == pytest.approx(1.4, abs=1e-9)
    assert links.loc[link.id, "corruption_ratio"] == pytest.approx(10 / 1010, rel=1e-3)
    assert links.loc[small.links[4].id, "up"] == 0 and links.loc[link.id, "up"] == 1
    assert health.ports.loc[link.b, "pause_sent_per_s"] == pytest.approx(500, rel=1e-3)
    healthy = links.drop(index=[link.id])["margin_db"]
    assert healthy.min() > 3  # the synthetic fabric's healthy lanes sit ~8 dB above the alarm
    # a module without a threshold gives that end no margin: the other end still does, never a guess
    lanes = health.lanes.xs(no_alarm, level="port")
    assert lanes["margin_db"].isna().all() and not np.isnan(links.loc[small.links[6].id, "margin_db"])

    g = health.gpus.loc[gpu]
    assert (g["temperature_c"], g["throttled"], g["npo_temperature_c"]) == (90.0, 1.0, 77.0)
    loop = health.loops.loc[small.cooling_loop_of(gpu)]
    assert (loop["gpu_temperature_max_c"], loop["headroom_c"], loop["gpus_throttled"]) == (90.0, -5.0, 1.0)

    registry = CollectorRegistry()
    metrics = OncallMetrics(small, registry)
    metrics.update_health(health)
    s = scrape(registry)
    assert one(s["fabricwatch_link_optical_margin_db"], link=link.id) == pytest.approx(1.4)
    assert one(s["fabricwatch_gpu_temperature_celsius"], gpu=gpu) == 90.0
    assert one(s["fabricwatch_cooling_loop_temperature_headroom_celsius"], cooling_loop=loop.name) == -5.0
    assert one(s["fabricwatch_port_pause_frames_sent_per_second"], port=link.b) == pytest.approx(500, rel=1e-3)
    # the worst link is in focus: its lanes are exported, each once
    assert one(s["fabricwatch_lane_rx_power_dbm"], link=link.id, port=link.b, lane="2") == -8.0
    # only switch ports carry queue and ECN series; every port carries pauses
    gpu_ports = [p for p in small.ports if small.port_device[p] in small.gpu_node]
    queue_ports = {dict(k)["port"] for k in s["fabricwatch_port_queue_depth_bytes"]}
    assert queue_ports.isdisjoint(gpu_ports) and len(queue_ports) == len(small.ports) - len(gpu_ports)
    assert len(s["fabricwatch_port_pause_frames_sent_per_second"]) == len(small.ports)


def test_incidents_are_exported_while_open_and_gone_when_resolved(small: topology.Topology) -> None:
    registry = CollectorRegistry()
    metrics = OncallMetrics(small, registry)
    metrics.update_incidents([incident(1), incident(2, severity="critical", location={"entity": "gpu", "id": "x"})])
    s = scrape(registry)
    labels = dict(next(iter(k for k in s["fabricwatch_incident_active"] if ("incident", "inc-0001") in k)))
    assert labels == {
        "incident": "inc-0001",
        "type": "link_degradation",
        "cause": "connector_contamination",
        "severity": "major",
        "entity": "link",
        "location": "L00003",
    }
    assert one(s["fabricwatch_open_incidents"], severity="critical", status="firing") == 1
    # an update of the same incident is not a second detection; a silent source keeps it open
    metrics.update_incidents([incident(1, status="unknown")])
    s = scrape(registry)
    assert one(s["fabricwatch_incident_active"], incident="inc-0001") == 1
    assert one(s["fabricwatch_open_incidents"], severity="major", status="unknown") == 1
    assert one(s["fabricwatch_detection_latency_seconds_count"], type="link_degradation") == 2
    assert one(s["fabricwatch_detection_latency_seconds_sum"], type="link_degradation") == 24
    metrics.update_incidents([incident(1, status="resolved", resolved_at=T0 + 300)])
    s = scrape(registry)
    assert [dict(k)["incident"] for k in s["fabricwatch_incident_active"]] == ["inc-0002"]


def _supernode_window(topo: topology.Topology, steps: int) -> tuple[WindowBuffer, float]:
    sim = Simulator(topo, seed=1, interval=5.0)
    buffer = WindowBuffer(topo)
    for _ in range(steps):
        by_kind: dict[str, list[schema.Message]] = defaultdict(list)
        for m in sim.step():
            by_kind[m.kind].append(m)
        for kind, messages in by_kind.items():
            buffer.add(kind, schema.to_table(kind, messages).table)
    return buffer, sim.ts


def test_a_1024_gpu_supernode_stays_within_the_cardinality_budget(topo1024: topology.Topology) -> None:
    """METRICS.md's budget: the whole of serve's /metrics ≤ 25,000 series on a 1024-GPU supernode, even with
    more incidents open than are exported (and the deprecated per-incident alias), lag on 60 partitions and
    alert counters; the on-call families within :func:`series_budget`; a scrape renders in ≤ 1 s."""
    assert series_budget(topo1024) <= 25_000
    buffer, end = _supernode_window(topo1024, 12)
    registry = CollectorRegistry()
    pipeline = PipelineMetrics(registry)  # as serve builds it
    AlertmanagerClient("http://127.0.0.1:9", topo1024, clock=VirtualClock(T0), registry=registry)
    metrics = OncallMetrics(topo1024, registry)
    metrics.update_health(summarise(buffer.window(end - 60, end)))
    links = [link.id for link in topo1024.links]
    opened = [
        incident(n, location={"entity": "link", "id": links[n % len(links)]}) for n in range(MAX_INCIDENT_SERIES + 200)
    ]
    metrics.update_incidents(opened)
    for i in opened:  # what the processor exports today under the old name (kept one release)
        pipeline.incident_firing.labels(i.id, i.type, i.cause, "link", i.location["id"], i.severity, "").set(1)
        pipeline.incidents_opened.labels(i.type, i.cause).inc()
    for topic in range(5):
        for partition in range(12):
            pipeline.lag.labels(f"fabricwatch.telemetry.{topic}", str(partition)).set(0)
    seconds = []
    for _ in range(3):
        started = time.perf_counter()
        text = generate_latest(registry)
        seconds.append(time.perf_counter() - started)
    assert min(seconds) <= 1.0
    samples = [line for line in text.decode().splitlines() if line and not line.startswith("#")]
    assert len(samples) <= 25_000
    oncall = [m.name for m in metrics.collect()]
    ours = [line for line in samples if line.split("{", 1)[0].split(" ", 1)[0] in oncall]
    assert len(ours) <= series_budget(topo1024)
    assert sum(1 for line in samples if line.startswith("fabricwatch_incident_active{")) == MAX_INCIDENT_SERIES
    lane_series = [line for line in samples if line.startswith("fabricwatch_lane_rx_power_dbm{")]
    assert 0 < len(lane_series) <= MAX_FOCUS_LINKS * 2 * 8
    # one series per link, GPU and loop: never one per raw lane value
    assert sum(1 for line in samples if line.startswith("fabricwatch_link_optical_margin_db{")) == len(links)
    assert sum(1 for line in samples if line.startswith("fabricwatch_gpu_temperature_celsius{")) == 1024
    assert sum(1 for line in samples if line.startswith("fabricwatch_cooling_loop_temperature_headroom_celsius{")) == 16

"""The surface around a real detection engine, over a stored capture: what /metrics and Alertmanager
see while an incident runs through the processor."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fabricwatch.clock import VirtualClock
from fabricwatch.dashboards.alertmanager import AlertmanagerClient
from fabricwatch.dashboards.surface import OncallSurface
from fabricwatch.detectors.engine import DetectionEngine
from fabricwatch.replay.run import replay
from fabricwatch.topology import generate
from tests.dashboards.httpserver import serving
from tests.dashboards.test_alertmanager import check_postable_alerts
from tests.detectors.synth import Timeline

LIBRARY = Path(__file__).resolve().parents[2] / "replay" / "library"


def test_a_replayed_incident_reaches_metrics_and_alertmanager_once() -> None:
    registry = CollectorRegistry()
    surfaces: list[OncallSurface] = []
    with serving(check_postable_alerts) as (url, server):

        def engine(topology):  # the same wrapping serve does
            alerts = AlertmanagerClient(url, topology, clock=VirtualClock(0.0), resend_s=3600)
            surfaces.append(OncallSurface(topology, registry, alerts=alerts))
            return surfaces[0].wrap(DetectionEngine(topology))

        result = replay(LIBRARY / "connector-contamination-4db.jsonl.gz", engine_factory=engine)
        surfaces[0].flush()
        assert server.problems == []
        posted = [a for r in server.requests for a in r.json()]
    assert [i.id for i in result.incidents] == ["inc-0001"]
    assert {a["labels"]["incident"] for a in posted} == {"inc-0001"}  # one root cause, one alert
    assert posted[0]["labels"]["location"] == "L00005" and "endsAt" not in posted[0]

    samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    active = samples["fabricwatch_incident_active"]
    assert [(labels["incident"], labels["cause"], labels["location"]) for labels, _ in active] == [
        ("inc-0001", "connector_contamination", "L00005")
    ]
    margins = {labels["link"]: v for labels, v in samples["fabricwatch_link_optical_margin_db"]}
    assert min(margins, key=margins.get) == "L00005"  # the dirty connector is the worst link
    assert {labels["link"] for labels, _ in samples["fabricwatch_lane_rx_power_dbm"]} >= {"L00005"}
    latency = samples["fabricwatch_detection_latency_seconds_sum"]
    assert latency == [({"type": "link_degradation"}, result.incidents[0].detected_at - result.incidents[0].first_seen)]


def test_a_step_tick_s_incident_reaches_the_surface_as_a_tick_s_does() -> None:
    """serve wraps the engine; the step tick (EngineConfig.step_tick) opens incidents too, and they must
    be exported and alerted when it opens them, not when a later tick happens to change them."""
    topo = generate(128, rails=8, gpus_per_node=8)
    link = topo.links[3]
    tl = Timeline(topo, duration=120, seed=1)
    tl.put("port", "state", 0, start=60, port=[link.a, link.b])
    surface = OncallSurface(topo, CollectorRegistry())
    engine = surface.wrap(DetectionEngine(topo))
    assert engine.step_kinds  # the processor runs step ticks through the wrapper
    (opened,) = engine.run_step(tl.window(75.0), now=tl.start + 76.0)
    assert opened.cause == "link_down"
    assert list(surface.metrics._open) == [opened.id]

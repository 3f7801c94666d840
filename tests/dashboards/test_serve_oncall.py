"""serve's on-call keys: checked like every other key (one line naming file:line), and wired around
the detection engine: the surface reports each tick, Alertmanager only when configured."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.cli import main
from fabricwatch.cli.serve import attach_oncall
from fabricwatch.clock import VirtualClock, WallClock
from fabricwatch.dashboards.surface import WatchedEngine

BASE = "bootstrap: h:9092\ndb: a.duckdb\n"


@pytest.mark.parametrize(
    ("extra", "line", "key"),
    [
        ("alertmanager: not-a-url\n", 3, "alertmanager"),
        ("grafana: ftp://x\n", 3, "grafana"),
        ("clock: virtual\n", 3, "clock"),
    ],
)
def test_a_bad_oncall_key_is_one_line(tmp_path: Path, capsys, extra: str, line: int, key: str) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(BASE + extra)
    assert main(["serve", "--config", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"fabricwatch serve: {path}:{line}: {key}"), err


class FakeService:
    """What attach_oncall needs of cli.process.Service: a processor and the metrics registry."""

    def __init__(self) -> None:
        from fabricwatch import topology
        from fabricwatch.detectors.engine import DetectionEngine
        from fabricwatch.stream.metrics import PipelineMetrics

        topo = topology.generate(16, rails=8, gpus_per_node=8)
        self.metrics = PipelineMetrics()
        self.processor = type("P", (), {})()
        self.processor.topology, self.processor.engine, self.processor.clock = topo, DetectionEngine(topo), WallClock()


def test_the_surface_wraps_the_engine_and_alerts_only_when_configured(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(BASE)
    plain = FakeService()
    surface = attach_oncall(path, plain)
    assert isinstance(plain.processor.engine, WatchedEngine) and surface.alerts is None
    assert isinstance(plain.processor.clock, WallClock) and surface.start(None) is None  # type: ignore[arg-type]
    path.write_text(BASE + "alertmanager: http://127.0.0.1:9093\ngrafana: https://grafana.example\nclock: telemetry\n")
    full = FakeService()
    surface = attach_oncall(path, full)
    assert surface.alerts is not None and surface.alerts.endpoint == "http://127.0.0.1:9093/api/v2/alerts"
    assert surface.alerts.links.grafana == "https://grafana.example"
    assert isinstance(full.processor.clock, VirtualClock)
    names = {m.name for m in full.metrics.registry.collect()}
    assert {"fabricwatch_alert_notifications", "fabricwatch_incident_active"} <= names

"""The alerting rules and the Alertmanager config: promtool's unit tests, amtool's check, and every
metric they name is one serve exports (dashboards/METRICS.md)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from fabricwatch import topology
from fabricwatch.dashboards.exporter import HEALTH_FAMILIES, LANE_FAMILIES
from fabricwatch.stream.metrics import PipelineMetrics
from tests.dashboards.tools import need

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "dashboards" / "prometheus-rules.yaml"
AM_CONFIG = ROOT / "dashboards" / "alertmanager.yaml"


def exported_names() -> set[str]:
    """Every sample name serve can export: the on-call families and the pipeline's own."""
    names = set(HEALTH_FAMILIES) | set(LANE_FAMILIES)
    names |= {
        "fabricwatch_incident_active",
        "fabricwatch_open_incidents",
        "fabricwatch_health_window_end_timestamp_seconds",
    }
    names |= {f"fabricwatch_detection_latency_seconds{s}" for s in ("_bucket", "_count", "_sum")}
    for metric in PipelineMetrics(CollectorRegistry()).registry.collect():
        names |= {s.name for s in metric.samples} | {metric.name, f"{metric.name}_total"}
    return names


def test_rules_name_only_metrics_that_serve_exports() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    used = {m for g in groups for r in g["rules"] for m in re.findall(r"fabricwatch_\w+", r["expr"])}
    assert used and used <= exported_names(), used - exported_names()


def test_every_alert_says_what_and_where() -> None:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            labels, notes = rule["labels"], rule["annotations"]
            assert labels["severity"] in ("critical", "major", "minor", "warning"), rule["alert"]
            assert ({"layer", "entity"} <= set(labels) and "location" in labels) or "location" in rule["expr"]
            assert {"summary", "runbook_url", "dashboard_url"} <= set(notes), rule["alert"]


@pytest.mark.prometheus
def test_promtool_unit_tests_pass() -> None:
    promtool = need("promtool")
    check = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    tests = ROOT / "tests" / "dashboards" / "promtool" / "rules_test.yaml"
    run = subprocess.run(
        [promtool, "test", "rules", tests.name], cwd=tests.parent, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.prometheus
def test_alertmanager_config_is_valid() -> None:
    amtool = need("amtool")
    run = subprocess.run([amtool, "check-config", str(AM_CONFIG)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "6 inhibit rules" in run.stdout


def test_a_switch_incident_inhibits_exactly_its_ports_and_links() -> None:
    """The inhibit rules' ``equal`` labels, evaluated as Alertmanager does, over generated topology labels."""
    from fabricwatch.dashboards.alertmanager import topology_labels

    topo = topology.generate(128, rails=8, gpus_per_node=8)
    rules = yaml.safe_load(AM_CONFIG.read_text())["inhibit_rules"]
    switch_rules = [r for r in rules if 'entity="switch"' in r["source_matchers"]]
    source = {"alertname": "FabricwatchIncident", "entity": "switch", **topology_labels(topo, "switch", "leaf0-0")}
    inhibited, kept = set(), set()
    for port in topo.ports:
        target = {"entity": "port", **topology_labels(topo, "port", port)}
        hit = any(all(source.get(k, "") == target.get(k, "") for k in r["equal"]) for r in switch_rules)
        (inhibited if hit else kept).add(port)
    on_leaf = {p for p in topo.ports if topo.port_device[p] == "leaf0-0"}
    # its own ports and the far ends of its links (GPU NPO ports, spine ports), nothing else
    assert inhibited == on_leaf | {topo.port_peer[p] for p in on_leaf}
    assert len(kept) == len(topo.ports) - len(inhibited) > 0

"""Incidents to Alertmanager's v2 API, checked request by request against a local server that answers
as Alertmanager does (400 for a body that breaks the API's postableAlerts schema)."""

from __future__ import annotations

import logging
import re
import socket
from datetime import datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from fabricwatch import topology
from fabricwatch.clock import VirtualClock
from fabricwatch.dashboards.alertmanager import AlertmanagerClient, Links, alert_of, topology_labels
from fabricwatch.incident import Incident
from tests.dashboards.httpserver import Request, serving

T0 = 1_764_400_000.0
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def check_postable_alerts(request: Request) -> tuple[int, Any]:
    """Alertmanager v2 ``POST /api/v2/alerts``: a JSON array of postableAlert."""
    assert (request.method, request.path) == ("POST", "/api/v2/alerts"), "only POST /api/v2/alerts"
    assert request.headers.get("content-type") == "application/json", "content-type must be application/json"
    alerts = request.json()
    assert isinstance(alerts, list) and alerts, "a non-empty array of alerts"
    for a in alerts:
        assert set(a) <= {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}, sorted(a)
        assert isinstance(a["labels"], dict) and a["labels"], "labels are required"
        for field in ("labels", "annotations"):
            for k, v in a.get(field, {}).items():
                assert LABEL_NAME.match(k) and isinstance(v, str) and v, f"{field}.{k}={v!r}"
        for field in ("startsAt", "endsAt"):
            if field in a:
                assert a[field].endswith("Z"), f"{field} must be RFC 3339 UTC"
                datetime.fromisoformat(a[field].replace("Z", "+00:00"))
    return 200, ""


def incident(ident: str = "inc-0001", status: str = "firing", **kw: Any) -> Incident:
    base: dict[str, Any] = dict(
        id=ident,
        type="link_degradation",
        cause="connector_contamination",
        location={"entity": "link", "id": "L00017"},
        severity="major",
        first_seen=T0 + 130,
        detected_at=T0 + 141,
        evidence=[{"metric": "rx_power_dbm", "port": "leaf0-0:p17", "lane": 1, "value": -7.9, "baseline": -3.1}],
        symptoms=["inc-0004"],
        runbook="clean-connector",
        status=status,
    )
    base.update(kw)
    return Incident(**base)


@pytest.fixture(scope="module")
def topo() -> topology.Topology:
    return topology.generate(128, rails=8, gpus_per_node=8)


def test_an_incident_is_one_alert_with_labels_and_annotations(topo: topology.Topology) -> None:
    link = topo.link_by_id["L00017"]
    gpu = topo.port_device[link.a]
    alert = alert_of(incident(), topo, Links(runbook_base="https://wiki/rb", grafana="https://grafana"))
    assert alert["labels"] == {
        "alertname": "FabricwatchIncident",
        "layer": "incident",
        "incident": "inc-0001",
        "type": "link_degradation",
        "cause": "connector_contamination",
        "severity": "major",
        "entity": "link",
        "location": "L00017",
        "link": "L00017",
        "switch": topo.port_device[link.b],
        "gpu": gpu,
        "node": topo.gpu_node[gpu],
        "cooling_loop": topo.cooling_loop_of(gpu),
    }
    assert alert["annotations"] == {
        "summary": "connector contamination on link L00017 (major); 1 symptoms folded in",
        "evidence": "rx_power_dbm at leaf0-0:p17 lane 1 = -7.9 (baseline -3.1)",
        "runbook_url": "https://wiki/rb/clean-connector",
        "dashboard_url": "https://grafana/d/fabricwatch-link?var-link=L00017",
    }
    assert alert["startsAt"] == "2025-11-29T07:08:50.000Z" and "endsAt" not in alert
    resolved = alert_of(incident(status="resolved", resolved_at=T0 + 600), topo)
    assert resolved["endsAt"] == "2025-11-29T07:16:40.000Z"


def test_topology_labels_say_which_switch_a_port_or_link_hangs_off(topo: topology.Topology) -> None:
    fabric = next(link for link in topo.links if link.tier == "fabric")
    leaf, spine = topo.port_device[fabric.a], topo.port_device[fabric.b]
    assert topology_labels(topo, "link", fabric.id) == {"link": fabric.id, "switch": leaf, "peer_switch": spine}
    # the spine's end of the same link: its own switch first, the leaf as the peer
    assert topology_labels(topo, "port", fabric.b) == {
        "port": fabric.b,
        "link": fabric.id,
        "switch": spine,
        "peer_switch": leaf,
    }
    # a GPU's NPO port: the leaf it plugs into, and where the GPU sits
    host = topo.links[0]
    gpu = topo.port_device[host.a]
    labels = topology_labels(topo, "port", host.a)
    assert labels["switch"] == topo.port_device[host.b] and "peer_switch" not in labels and labels["gpu"] == gpu
    assert topology_labels(topo, "switch", leaf) == {"switch": leaf, "peer_switch": leaf}
    assert topology_labels(topo, "cooling_loop", "cl03") == {"cooling_loop": "cl03"}


def test_firing_resent_then_resolved_until_it_is_old(topo: topology.Topology) -> None:
    clock = VirtualClock(T0)
    registry = CollectorRegistry()
    with serving(check_postable_alerts) as (url, server):
        client = AlertmanagerClient(url, topo, clock=clock, registry=registry, resend_s=60, resolved_resend_s=300)
        assert client.notify([incident("inc-0001"), incident("inc-0002", severity="warning")])
        assert [len(r.json()) for r in server.requests] == [2]
        clock.advance_to(T0 + 30)
        assert client.sync() and len(server.requests) == 1  # not due yet
        clock.advance_to(T0 + 61)
        assert client.sync() and [a["labels"]["incident"] for a in server.requests[-1].json()] == [
            "inc-0001",
            "inc-0002",
        ]
        assert client.notify([incident("inc-0001", status="resolved", resolved_at=T0 + 70)])
        assert server.requests[-1].json()[0]["endsAt"] == "2025-11-29T07:07:50.000Z"
        clock.advance_to(T0 + 200)
        assert client.sync()  # the open one again, and the resolved one repeated (a lost post heals)
        sent = server.requests[-1].json()
        assert {a["labels"]["incident"]: "endsAt" in a for a in sent} == {"inc-0001": True, "inc-0002": False}
        clock.advance_to(T0 + 500)  # resolved 430 s ago, past resolved_resend_s: only the open one is left
        client.sync()
        assert [a["labels"]["incident"] for a in server.requests[-1].json()] == ["inc-0002"]
        assert server.problems == []
    assert registry.get_sample_value("fabricwatch_alert_notifications_total", {"status": "resolved"}) == 2


def test_a_refusing_or_absent_alertmanager_is_counted_and_retried(
    topo: topology.Topology, caplog: pytest.LogCaptureFixture
) -> None:
    clock = VirtualClock(T0)
    answers = iter([(500, {"message": "boom"}), (500, {"message": "boom"}), (200, "")])

    def flaky(request: Request) -> tuple[int, Any]:
        check_postable_alerts(request)
        return next(answers)

    registry = CollectorRegistry()
    with serving(flaky) as (url, server), caplog.at_level(logging.WARNING, "fabricwatch.alertmanager"):
        client = AlertmanagerClient(url, topo, clock=clock, registry=registry, resend_s=60)
        assert not client.notify([incident()])
        assert not client.sync()  # a failing Alertmanager is retried at once, not after resend_s
        assert client.sync() and len(server.requests) == 3
    assert registry.get_sample_value("fabricwatch_alert_notification_failures_total") == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "HTTP 500" in warnings[0] and "/api/v2/alerts" in warnings[0]

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    client = AlertmanagerClient(f"http://127.0.0.1:{closed}", topo, clock=clock, timeout_s=2)
    assert not client.notify([incident()])


def test_an_escalated_incident_ends_its_old_alert(topo: topology.Topology) -> None:
    """Severity is a label: escalating would leave the minor alert firing beside the major one."""
    clock = VirtualClock(T0 + 200)
    with serving(check_postable_alerts) as (url, server):
        client = AlertmanagerClient(url, topo, clock=clock)
        assert client.notify([incident(severity="minor")])
        assert client.notify([incident(severity="minor")])  # an update that changes no label: nothing ends
        assert all("endsAt" not in a for r in server.requests for a in r.json())
        assert client.notify([incident(severity="major")])
        sent = {(a["labels"]["severity"], "endsAt" in a) for a in server.requests[-1].json()}
        assert sent == {("major", False), ("minor", True)}
        assert server.requests[-1].json()[1]["endsAt"] == "2025-11-29T07:10:00.000Z"
        assert client.notify([incident(severity="major")])
        assert [a["labels"]["severity"] for a in server.requests[-1].json()] == ["major"]  # ended once
        assert server.problems == []

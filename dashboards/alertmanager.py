"""Incidents to Alertmanager, directly, through its v2 API (``POST /api/v2/alerts``).

One incident is one alert: ``alertname="FabricwatchIncident"`` with the incident's own labels and the
topology labels Alertmanager's inhibition needs (the switch a port or link hangs off, the GPU's
cooling loop, ...), and annotations an engineer reads at 3 a.m.: summary, evidence, runbook link and
dashboard link. A firing alert is sent when the incident opens or changes and re-sent every
``resend_s`` (Alertmanager resolves an alert it has not heard of for ``resolve_timeout``). When an
incident's labels change (its severity escalates) the old label set is ended, so one incident is
never two firing alerts. A resolved incident is sent with ``endsAt`` and repeated for
``resolved_resend_s``, as Prometheus does, so a notification lost on the way is healed. Folded
symptoms are part of their incident, never alerts.

Grouping by incident, routing by severity and inhibition live in ``dashboards/alertmanager.yaml``.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from fabricwatch.clock import Clock
from fabricwatch.dashboards.health import switches_of
from fabricwatch.incident import Incident
from fabricwatch.topology import Topology

log = logging.getLogger("fabricwatch.alertmanager")

ALERTNAME = "FabricwatchIncident"
MAX_EVIDENCE = 5  # evidence lines in the annotation; the rest is in forensics


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def topology_labels(topology: Topology, entity: str, ident: str) -> dict[str, str]:
    """Where an entity sits, as labels: what inhibition rules compare (``equal``)."""
    labels: dict[str, str] = {}
    if entity == "link" and ident in topology.link_by_id:
        link = topology.link_by_id[ident]
        labels["link"] = ident
        labels["switch"], labels["peer_switch"] = switches_of(topology, link)
        for end in (link.a, link.b):
            labels.update(_gpu_labels(topology, topology.port_device[end]))
    elif entity == "port" and ident in topology.port_link:
        link = topology.port_link[ident]
        labels["port"], labels["link"] = ident, link.id
        device, peer = topology.port_device[ident], topology.port_device[topology.port_peer[ident]]
        switch = device if device in topology.switch_by_name else peer if peer in topology.switch_by_name else ""
        labels["switch"] = switch
        labels["peer_switch"] = peer if switch == device and peer in topology.switch_by_name else ""
        labels.update(_gpu_labels(topology, device))
    elif entity == "switch":
        labels["switch"] = labels["peer_switch"] = ident  # a switch inhibits links on either end
    elif entity == "gpu":
        labels.update(_gpu_labels(topology, ident))
    elif entity == "node" and ident in topology.node_by_name:
        labels["node"], labels["cooling_loop"] = ident, topology.node_by_name[ident].cooling_loop
    elif entity == "cooling_loop":
        labels["cooling_loop"] = ident
    elif entity == "rack":
        labels["rack"] = ident
    return {k: v for k, v in labels.items() if v}


def _gpu_labels(topology: Topology, device: str) -> dict[str, str]:
    if device not in topology.gpu_node:
        return {}
    return {"gpu": device, "node": topology.gpu_node[device], "cooling_loop": topology.cooling_loop_of(device)}


def _evidence_line(e: dict[str, Any]) -> str:
    where = next((str(e[k]) for k in ("port", "link", "gpu", "device", "switch", "cooling_loop") if k in e), "")
    text = f"{e.get('metric', '?')}"
    if where:
        text += f" at {where}"
    if "lane" in e:
        text += f" lane {e['lane']}"
    if "value" in e:
        text += f" = {e['value']}"
    for key in ("baseline", "threshold"):
        if key in e:
            text += f" ({key} {e[key]})"
    return text


@dataclass(frozen=True, slots=True)
class Links:
    """Where the annotations point: a runbook per name, the Grafana dashboards."""

    runbook_base: str = "https://fabricwatch.invalid/runbooks"
    grafana: str = "http://127.0.0.1:3000"

    def runbook(self, name: str | None) -> str:
        return f"{self.runbook_base.rstrip('/')}/{name}" if name else ""

    def dashboard(self, incident: Incident) -> str:
        entity, ident = incident.location["entity"], incident.location["id"]
        base = self.grafana.rstrip("/")
        if entity in ("link", "port"):
            return f"{base}/d/fabricwatch-link?var-link={urllib.parse.quote(ident)}"
        if entity in ("gpu", "node", "cooling_loop", "rack"):
            return f"{base}/d/fabricwatch-thermal"
        if incident.type in ("congestion_hotspot", "pfc_storm"):
            return f"{base}/d/fabricwatch-congestion"
        return f"{base}/d/fabricwatch-overview"


def alert_of(incident: Incident, topology: Topology, links: Links = Links()) -> dict[str, Any]:
    """The Alertmanager v2 ``postableAlert`` of an incident (resolved when the incident is)."""
    entity, ident = incident.location["entity"], incident.location["id"]
    labels = {
        **topology_labels(topology, entity, ident),
        "alertname": ALERTNAME,
        "layer": "incident",
        "incident": incident.id,
        "type": incident.type,
        "cause": incident.cause,
        "severity": incident.severity,
        "entity": entity,
        "location": ident,
    }
    summary = f"{incident.cause.replace('_', ' ')} on {entity} {ident} ({incident.severity})"
    if incident.symptoms:
        summary += f"; {len(incident.symptoms)} symptoms folded in"
    lines = [_evidence_line(e) for e in incident.evidence[:MAX_EVIDENCE]]
    if len(incident.evidence) > MAX_EVIDENCE:
        lines.append(f"... {len(incident.evidence) - MAX_EVIDENCE} more: fabricwatch forensics incident {incident.id}")
    dashboard = links.dashboard(incident)
    annotations = {
        "summary": summary,
        "evidence": "\n".join(lines),
        "runbook_url": links.runbook(incident.runbook),
        "dashboard_url": dashboard,
    }
    alert: dict[str, Any] = {
        "labels": labels,
        "annotations": {k: v for k, v in annotations.items() if v},
        "startsAt": rfc3339(incident.first_seen),
        "generatorURL": dashboard,
    }
    if incident.status == "resolved":
        alert["endsAt"] = rfc3339(incident.resolved_at if incident.resolved_at is not None else incident.detected_at)
    return alert


class AlertmanagerError(Exception):
    """Alertmanager could not be reached or refused the alerts (retriable: the next sync re-sends)."""


class AlertmanagerClient:
    """Keeps Alertmanager's view of fabricwatch's incidents current.

    ``notify(changed)`` sends what changed now; ``sync()`` (every few seconds, from the service loop)
    re-sends open incidents every ``resend_s`` and recently resolved ones for ``resolved_resend_s``.
    A failed post is counted and logged once, never raised into the processing loop; the incidents it
    carried are sent again on the next sync. Every request has a ``timeout_s`` limit.
    """

    def __init__(
        self,
        url: str,
        topology: Topology,
        *,
        clock: Clock,
        registry: CollectorRegistry | None = None,
        links: Links = Links(),
        timeout_s: float = 5.0,
        resend_s: float = 60.0,
        resolved_resend_s: float = 900.0,
    ) -> None:
        self.endpoint = url.rstrip("/") + "/api/v2/alerts"
        self.topology = topology
        self.clock = clock
        self.links = links
        self.timeout_s = timeout_s
        self.resend_s = resend_s
        self.resolved_resend_s = resolved_resend_s
        self._open: dict[str, Incident] = {}
        self._resolved: dict[str, tuple[Incident, float]] = {}  # id → (incident, resolved at, clock time)
        self._labels: dict[str, dict[str, str]] = {}  # id → the label set last sent firing
        self._retired: list[dict[str, Any]] = []  # label sets an incident left: sent once as ended
        self._last_sent: float | None = None
        self._failing = False
        r = registry or CollectorRegistry()
        self.sent = Counter(
            "fabricwatch_alert_notifications", "Alerts posted to Alertmanager, by status", ["status"], registry=r
        )
        self.failures = Counter(
            "fabricwatch_alert_notification_failures", "Posts to Alertmanager that failed", registry=r
        )
        for status in ("firing", "resolved"):
            self.sent.labels(status)

    def notify(self, changed: Iterable[Incident]) -> bool:
        """Send the incidents that changed in a tick; True when Alertmanager took them."""
        batch = []
        now = self.clock.now()
        for inc in changed:
            if inc.status == "resolved":
                self._open.pop(inc.id, None)
                self._labels.pop(inc.id, None)
                self._resolved[inc.id] = (inc, now)
            else:
                self._open[inc.id] = inc
                labels = alert_of(inc, self.topology, self.links)["labels"]
                old = self._labels.get(inc.id)
                if old is not None and old != labels:  # e.g. escalated: the old alert ends, the new one fires
                    self._retired.append({"labels": old, "endsAt": rfc3339(now)})
                self._labels[inc.id] = labels
            batch.append(inc)
        return self._post(batch) if batch else True

    def sync(self) -> bool:
        """Re-send every open incident and the recently resolved ones, once per ``resend_s``."""
        now = self.clock.now()
        if self._last_sent is not None and now - self._last_sent < self.resend_s and not self._failing:
            return True
        for ident, (_, at) in list(self._resolved.items()):
            if now - at > self.resolved_resend_s:
                del self._resolved[ident]
        batch = [*self._open.values(), *(inc for inc, _ in self._resolved.values())]
        return self._post(batch) if batch else True

    def _post(self, incidents: list[Incident]) -> bool:
        alerts = [alert_of(inc, self.topology, self.links) for inc in sorted(incidents, key=lambda i: i.id)]
        alerts += self._retired
        try:
            post_alerts(self.endpoint, alerts, self.timeout_s)
        except AlertmanagerError as exc:
            self.failures.inc()
            if not self._failing:
                log.warning("%s; incidents are re-sent on the next sync", exc)
            self._failing = True
            return False
        if self._failing:
            log.info("Alertmanager at %s takes alerts again", self.endpoint)
        self._failing = False
        self._retired = []
        self._last_sent = self.clock.now()
        for a in alerts:
            self.sent.labels("resolved" if "endsAt" in a else "firing").inc()
        return True


def post_alerts(endpoint: str, alerts: list[dict[str, Any]], timeout_s: float) -> None:
    """One ``POST /api/v2/alerts``; raises :class:`AlertmanagerError` with one line saying why."""
    body = json.dumps(alerts).encode()
    request = urllib.request.Request(endpoint, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode(errors="replace").strip()
        raise AlertmanagerError(
            f"Alertmanager {endpoint} refused {len(alerts)} alerts: HTTP {exc.code} {detail}"
        ) from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AlertmanagerError(f"Alertmanager {endpoint} not reached within {timeout_s:g} s: {reason}") from None

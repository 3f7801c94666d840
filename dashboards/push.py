"""``fabricwatch dashboards push --url URL``: the dashboards, the alert rule group and each incident
(as an annotation) into a running Grafana, through grafana-client.

Idempotent: the folder is created once, dashboards are overwritten by uid, the rule group is replaced,
and an incident's annotation is found by its tags (``fabricwatch`` + the incident id) and updated
rather than added twice. The token comes from the environment and is never printed or logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from fabricwatch.dashboards import grafana
from fabricwatch.errors import InputError
from fabricwatch.incident import Incident

log = logging.getLogger("fabricwatch.dashboards")
TOKEN_ENV = ("FABRICWATCH_GRAFANA_TOKEN", "GRAFANA_TOKEN")


def redact(url: str) -> str:
    """The URL without any user:password part, for messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def annotation_of(incident: Incident) -> dict[str, Any]:
    """An incident as a Grafana annotation: a region from first seen to resolved (a point while open)."""
    entity, ident = incident.location["entity"], incident.location["id"]
    text = f"<b>{incident.id}</b> {incident.cause} on {entity} {ident} ({incident.severity}, {incident.status})"
    if incident.runbook:
        text += f"; runbook {incident.runbook}"
    body: dict[str, Any] = {
        "time": round(incident.first_seen * 1000),
        "tags": ["fabricwatch", incident.id, incident.cause, incident.severity, f"{entity}:{ident}"],
        "text": text,
    }
    if incident.resolved_at is not None:
        body["timeEnd"] = round(incident.resolved_at * 1000)
    return body


class Pusher:
    """Uploads through a ``grafana_client.GrafanaApi``; every call has the client's timeout."""

    def __init__(self, api: Any, url: str, say: Callable[[str], None]) -> None:
        self.api = api
        self.url = redact(url)
        self.say = say

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        from grafana_client.client import GrafanaException

        try:
            return fn()
        except GrafanaException as exc:
            status = getattr(exc, "status_code", "?")
            message = str(getattr(exc, "message", "") or exc).splitlines()[0][:200]
            raise InputError("--url", f"Grafana {self.url} refused {what}: HTTP {status}: {message}") from None
        except Exception as exc:  # niquests' connection and timeout errors: one line, no traceback
            raise InputError("--url", f"Grafana {self.url} not reached ({what}): {type(exc).__name__}") from None

    def folder(self) -> None:
        from grafana_client.client import GrafanaClientError

        try:
            self.api.folder.get_folder(grafana.FOLDER_UID)
            return
        except GrafanaClientError as exc:
            if getattr(exc, "status_code", None) != 404:
                raise InputError(
                    "--url", f"Grafana {self.url} refused the folder look-up: HTTP {exc.status_code}"
                ) from None
        except Exception as exc:
            raise InputError("--url", f"Grafana {self.url} not reached: {type(exc).__name__}") from None
        self._call("the folder", lambda: self.api.folder.create_folder(grafana.FOLDER_TITLE, uid=grafana.FOLDER_UID))
        self.say(f"folder {grafana.FOLDER_TITLE} created")

    def dashboards(self) -> None:
        for uid, dashboard in grafana.dashboards().items():
            body = {"dashboard": dashboard, "folderUid": grafana.FOLDER_UID, "overwrite": True,
                    "message": "fabricwatch dashboards push"}  # fmt: skip
            self._call(f"dashboard {uid}", lambda body=body: self.api.dashboard.update_dashboard(body))
            self.say(f"dashboard {uid}")

    def rules(self) -> None:
        group = grafana.to_json(grafana.alert_rule_group())
        self._call(
            "the alert rule group",
            lambda: self.api.alertingprovisioning.update_rule_group(grafana.FOLDER_UID, group["title"], group),
        )
        self.say(f"alert rule group {group['title']} ({len(group['rules'])} rules)")

    def annotations(self, incidents: Iterable[Incident]) -> int:
        n = 0
        for incident in incidents:
            body = annotation_of(incident)
            found = self._call(
                f"the annotation look-up of {incident.id}",
                lambda incident=incident: self.api.annotations.find_annotations(tags=["fabricwatch", incident.id]),
            )
            if found:
                ident = found[0]["id"]
                self._call(
                    f"annotation {incident.id}",
                    lambda ident=ident, body=body: self.api.annotations.update_annotation(
                        ident, time_from=body["time"], time_to=body.get("timeEnd"), tags=body["tags"], text=body["text"]
                    ),
                )
            else:
                self._call(
                    f"annotation {incident.id}",
                    lambda body=body: self.api.annotations.add_annotation(
                        time_from=body["time"], time_to=body.get("timeEnd"), tags=body["tags"], text=body["text"]
                    ),
                )
            n += 1
        if n:
            self.say(f"{n} incident annotations")
        return n

"""The Grafana side: dashboards are valid for the SDK's model and query only what serve exports (on a
real scrape); export writes every file; push talks to Grafana's HTTP API as Grafana expects."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from grafana_foundation_sdk.models import alerting as alerting_model
from grafana_foundation_sdk.models import dashboard as model
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fabricwatch import topology
from fabricwatch.cli import main
from fabricwatch.clock import VirtualClock
from fabricwatch.dashboards import grafana
from fabricwatch.dashboards.alertmanager import AlertmanagerClient
from fabricwatch.dashboards.exporter import OncallMetrics
from fabricwatch.dashboards.grafana import to_json
from fabricwatch.dashboards.health import summarise
from fabricwatch.incident import Incident
from fabricwatch.stream.metrics import PipelineMetrics
from tests.dashboards.httpserver import Request, serving
from tests.detectors.synth import T0, Timeline

PROMETHEUS_OWN = {"up"}  # series Prometheus itself adds to every scrape target


def incident(ident: str = "inc-0001", **kw: Any) -> Incident:
    base: dict[str, Any] = dict(
        id=ident, type="link_degradation", cause="connector_contamination",
        location={"entity": "link", "id": "L00003"}, severity="major",
        first_seen=T0 + 100, detected_at=T0 + 112, runbook="clean-connector",
    )  # fmt: skip
    base.update(kw)
    return Incident(**base)


def exprs(dashboard: dict[str, Any]) -> list[str]:
    out = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    out += [v["query"] for v in dashboard.get("templating", {}).get("list", []) if v.get("type") == "query"]
    return out


@pytest.fixture(scope="module")
def scraped() -> set[str]:
    """The metric names of a real scrape of the registry serve builds: pipeline, on-call, alerting."""
    topo = topology.generate(64, rails=8, gpus_per_node=8)
    tl = Timeline(topo, duration=120, seed=5)
    registry = CollectorRegistry()
    PipelineMetrics(registry)
    AlertmanagerClient("http://127.0.0.1:9", topo, clock=VirtualClock(T0), registry=registry)
    metrics = OncallMetrics(topo, registry)
    metrics.update_health(summarise(tl.window(120)))
    metrics.update_incidents([incident()])
    names = set()
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        names.add(family.name)
        names |= {s.name for s in family.samples}
        if family.type == "counter":
            names.add(f"{family.name}_total")
        if family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"}
    return names


def test_every_dashboard_is_valid_for_the_sdk_model() -> None:
    boards = grafana.dashboards()
    assert set(boards) == set(grafana.UIDS.values())
    for uid, board in boards.items():
        again = to_json(model.Dashboard.from_json(json.loads(json.dumps(board))))
        assert again == board, uid  # nothing the model does not know, nothing lost
        assert board["uid"] == uid and board["panels"] and "fabricwatch" in board["tags"]
        for panel in board["panels"]:
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == grafana.DATASOURCE_UID, (uid, panel["title"])
                assert panel["targets"], (uid, panel["title"])
    link = boards["fabricwatch-link"]
    assert [v["name"] for v in link["templating"]["list"]] == ["link"]
    assert all('link="$link"' in e for e in exprs(link) if not e.startswith("label_values"))
    titles = {p["title"] for p in link["panels"]}
    assert {"Rx power per lane", "Tx power per lane", "Margin per lane", "Pre-FEC BER (worse end)"} <= titles


def test_every_query_names_a_metric_serve_exports(scraped: set[str]) -> None:
    used = {}
    for uid, board in grafana.dashboards().items():
        for e in exprs(board):
            for name in re.findall(r"\b(fabricwatch_\w+|up)\b", e):
                used[name] = uid
    group = to_json(grafana.alert_rule_group())
    for rule in group["rules"]:
        for name in re.findall(r"\bfabricwatch_\w+", rule["data"][0]["model"]["expr"]):
            used[name] = rule["uid"]
    missing = {name: where for name, where in used.items() if name not in scraped | PROMETHEUS_OWN}
    assert missing == {}
    assert len(used) >= 25


def test_alert_rules_are_valid_for_the_sdk_model() -> None:
    group = to_json(grafana.alert_rule_group())
    assert to_json(alerting_model.RuleGroup.from_json(json.loads(json.dumps(group)))) == group
    assert [r["title"] for r in group["rules"]] == ["GPU ≥ 85 °C", "Link loss ≥ 1 %"]
    thresholds = [r["data"][1]["model"]["conditions"][0]["evaluator"] for r in group["rules"]]
    assert thresholds == [{"params": [85.0], "type": "gte"}, {"params": [0.01], "type": "gte"}]


def test_export_writes_provisioning_rules_and_dashboards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboards", "export", str(tmp_path / "out"), "--prometheus-url", "http://prom:9090"]) == 0
    written = capsys.readouterr().out.split()
    out = tmp_path / "out"
    assert len(written) == 10 and all(Path(p).is_file() for p in written)
    for uid in grafana.UIDS.values():
        assert json.loads((out / "dashboards" / f"{uid}.json").read_text())["uid"] == uid
    ds = yaml.safe_load((out / "provisioning/datasources/fabricwatch.yaml").read_text())
    assert ds["datasources"][0]["uid"] == grafana.DATASOURCE_UID and ds["datasources"][0]["url"] == "http://prom:9090"
    provider = yaml.safe_load((out / "provisioning/dashboards/fabricwatch.yaml").read_text())["providers"][0]
    assert Path(provider["options"]["path"]) == (out / "dashboards").resolve()
    rules = yaml.safe_load((out / "provisioning/alerting/fabricwatch.yaml").read_text())
    assert rules["apiVersion"] == 1 and len(rules["groups"][0]["rules"]) == 2
    assert yaml.safe_load((out / "alertmanager/alertmanager.yaml").read_text())["inhibit_rules"]
    assert yaml.safe_load((out / "prometheus/fabricwatch-rules.yaml").read_text())["groups"]


class FakeGrafana:
    """Grafana 11's HTTP API for what push uses: checks method, path, auth and JSON of each request."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.folders: dict[str, str] = {}
        self.dashboards: dict[str, dict[str, Any]] = {}
        self.groups: dict[tuple[str, str], dict[str, Any]] = {}
        self.annotations: dict[int, dict[str, Any]] = {}

    def __call__(self, r: Request) -> tuple[int, Any]:
        if r.headers.get("authorization") != f"Bearer {self.token}":
            return 401, {"message": "Unauthorized"}
        url = urlsplit(r.path)
        path, query = url.path, parse_qs(url.query)
        if r.method == "GET" and (m := re.fullmatch(r"/api/folders/([\w-]+)", path)):
            uid = m[1]
            return (
                (200, {"uid": uid, "title": self.folders[uid]})
                if uid in self.folders
                else (404, {"message": "folder not found"})
            )
        if (r.method, path) == ("POST", "/api/folders"):
            body = r.json()
            assert set(body) <= {"uid", "title", "parentUid"} and body["title"], body
            self.folders[body["uid"]] = body["title"]
            return 200, {"uid": body["uid"], "title": body["title"], "id": len(self.folders)}
        if (r.method, path) == ("POST", "/api/dashboards/db"):
            body = r.json()
            assert set(body) <= {"dashboard", "folderUid", "overwrite", "message"}, sorted(body)
            assert body["folderUid"] in self.folders, "folder must exist first"
            board = body["dashboard"]
            assert to_json(model.Dashboard.from_json(board)) == board, "not a dashboard of the model"
            assert board["uid"] not in self.dashboards or body["overwrite"] is True, "exists: overwrite needed"
            self.dashboards[board["uid"]] = board
            return 200, {"status": "success", "uid": board["uid"], "version": 1}
        if r.method == "PUT" and (
            m := re.fullmatch(r"/api/v1/provisioning/folder/([\w-]+)/rule-groups/([\w-]+)", path)
        ):
            body = r.json()
            assert m[1] in self.folders and body["folderUid"] == m[1] and body["title"] == m[2], body
            for rule in body["rules"]:
                assert {"title", "condition", "data", "for", "uid"} <= set(rule), sorted(rule)
                assert rule["condition"] in {q["refId"] for q in rule["data"]}
            self.groups[(m[1], m[2])] = body
            return 200, body
        if (r.method, path) == ("GET", "/api/annotations"):
            tags = query.get("tags", [])
            hits = [dict(a, id=i) for i, a in self.annotations.items() if set(tags) <= set(a["tags"])]
            return 200, hits
        if (r.method, path) == ("POST", "/api/annotations") or (
            r.method == "PUT" and re.fullmatch(r"/api/annotations/\d+", path)
        ):
            body = r.json()
            assert isinstance(body["time"], int) and body["text"] and body["tags"], body
            assert body.get("timeEnd") is None or body["timeEnd"] >= body["time"]
            ident = int(path.rsplit("/", 1)[1]) if r.method == "PUT" else len(self.annotations) + 1
            assert r.method == "POST" or ident in self.annotations, "no such annotation"
            self.annotations[ident] = body
            return 200, {"message": "Annotation added", "id": ident}
        return 404, {"message": f"no route {r.method} {path}"}


def test_push_uploads_everything_once_and_updates_on_a_second_push(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "glsa_s3cr3t-token-value"
    monkeypatch.setenv("FABRICWATCH_GRAFANA_TOKEN", token)
    incidents = tmp_path / "incidents.json"
    incidents.write_text(
        json.dumps([incident().to_dict(), incident("inc-0002", resolved_at=T0 + 400, status="resolved").to_dict()])
    )
    fake = FakeGrafana(token)
    with serving(fake) as (url, server):
        assert main(["dashboards", "push", "--url", url, "--incidents", str(incidents), "--timeout", "5"]) == 0
        assert server.problems == []
        assert fake.folders == {"fabricwatch": "fabricwatch"}
        assert set(fake.dashboards) == set(grafana.UIDS.values())
        assert list(fake.groups) == [("fabricwatch", "fabricwatch")]
        assert sorted(a["tags"][1] for a in fake.annotations.values()) == ["inc-0001", "inc-0002"]
        resolved = next(a for a in fake.annotations.values() if "inc-0002" in a["tags"])
        assert (resolved["time"], resolved["timeEnd"]) == (round((T0 + 100) * 1000), round((T0 + 400) * 1000))
        # a second push: the incident resolved since; its annotation is updated, not added twice
        incidents.write_text(json.dumps([incident(resolved_at=T0 + 900, status="resolved").to_dict()]))
        assert main(["dashboards", "push", "--url", url, "--incidents", str(incidents)]) == 0
        assert len(fake.annotations) == 2 and fake.annotations[1]["timeEnd"] == round((T0 + 900) * 1000)
        assert [r.method for r in server.requests if r.path.startswith("/api/folders")] == ["GET", "POST", "GET"]
        assert server.problems == []
    out = capsys.readouterr()
    assert token not in out.out + out.err
    assert "dashboard fabricwatch-link" in out.err


def test_push_annotates_the_incidents_of_a_duckdb_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fabricwatch.replay.run import replay

    db = tmp_path / "fw.duckdb"
    library = Path(__file__).resolve().parents[2] / "replay/library"
    replay(library / "connector-contamination-4db.jsonl.gz", db=db)
    (expected,) = json.loads((library / "connector-contamination-4db.expected.json").read_text())
    monkeypatch.setenv("FABRICWATCH_GRAFANA_TOKEN", "t0k3n")
    fake = FakeGrafana("t0k3n")
    with serving(fake) as (url, server):
        assert main(["dashboards", "push", "--url", url, "--db", str(db)]) == 0, capsys.readouterr().err
        assert server.problems == []
    (note,) = fake.annotations.values()
    assert note["tags"][:2] == ["fabricwatch", "inc-0001"] and note["time"] == int(expected["first_seen"] * 1000)
    assert "connector_contamination on link L00005" in note["text"]


def test_push_fails_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FABRICWATCH_GRAFANA_TOKEN", raising=False)
    monkeypatch.delenv("GRAFANA_TOKEN", raising=False)
    assert main(["dashboards", "push", "--url", "http://127.0.0.1:9"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("no Grafana credentials: set FABRICWATCH_GRAFANA_TOKEN to an API token")
    )
    monkeypatch.setenv("GRAFANA_TOKEN", "wrong-token")
    with serving(FakeGrafana("right-token")) as (url, _):
        assert main(["dashboards", "push", "--url", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "HTTP 401" in err[0] and "wrong-token" not in err[0], err

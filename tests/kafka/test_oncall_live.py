"""Issue 11's integration test: a replayed incident runs through ``fabricwatch serve`` (real Kafka)
while a real Prometheus scrapes it and a real Alertmanager (Debian packages, on 127.0.0.1) receives
its incidents; the webhook receivers get exactly one firing and one resolved notification per incident."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fabricwatch import topology
from fabricwatch.collectors.sim.simulator import Simulator
from fabricwatch.dashboards import grafana
from fabricwatch.faults import parse_faults
from fabricwatch.stream.keys import outgoing_batched
from fabricwatch.stream.segments import open_forensic
from tests.dashboards.httpserver import Request, serving
from tests.dashboards.tools import ROOT, alertmanager, free_port, http_ok, prometheus, wait_until
from tests.kafka.helpers import produce_all, stop_process

pytestmark = [pytest.mark.kafka, pytest.mark.prometheus, pytest.mark.slow]


def queried_metrics() -> set[str]:
    """Every fabricwatch metric the dashboards, the Grafana rules and the Prometheus rules query."""
    texts = [json.dumps(grafana.dashboards()), json.dumps(grafana.to_json(grafana.alert_rule_group()))]
    texts.append((ROOT / "dashboards" / "prometheus-rules.yaml").read_text())
    return {m for t in texts for m in re.findall(r"\bfabricwatch_[a-z_]+[a-z]", t)} - NOT_METRICS


NOT_METRICS = {"fabricwatch_incidents"}  # a word in a description, not a metric


def promql(base: str, query: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


@pytest.mark.timeout(300)
def test_a_replayed_incident_pages_once_and_resolves_once(kafka, tmp_path: Path, processes) -> None:
    topo = topology.generate(16, rails=8, gpus_per_node=8)
    (tmp_path / "cluster.yaml").write_text(topo.to_yaml())
    # a host link goes dark from t+60 to t+150: one incident, opened then resolved (~t+280)
    faults = parse_faults([{"cause": "link_down", "link": "L00003", "start": 60, "end": 150}], topo, "test")
    sim = Simulator(topo, faults, seed=3, interval=5.0)
    scrapes = [sim.step() for _ in range(85)]  # t = 0 .. 420 s
    notifications: list[dict[str, Any]] = []

    def webhook(request: Request) -> tuple[int, Any]:
        assert request.method == "POST" and request.path in ("/page", "/ticket"), request.path
        notifications.append(request.json())
        return 200, {}

    def notified(status: str) -> Counter[str]:
        return Counter(
            a["labels"].get("incident", a["labels"]["alertname"])
            for n in notifications
            for a in n["alerts"]
            if a["status"] == status
        )

    serve_port = free_port()
    with (
        serving(webhook) as (hook, _),
        alertmanager(tmp_path, hook) as am,
        prometheus(tmp_path, f"127.0.0.1:{serve_port}", am) as prom,
    ):
        config = tmp_path / "serve.yaml"
        config.write_text(
            f"bootstrap: {kafka.bootstrap}\ndb: serve.duckdb\ngroup: {kafka.group}\ntopology: cluster.yaml\n"
            f"partitions: {kafka.partitions}\nhttp: {{listen: 127.0.0.1, port: {serve_port}}}\nalertmanager: {am}\n"
            "clock: telemetry\nrole: both\n"
        )
        log = (tmp_path / "serve.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "fabricwatch", "serve", "--config", str(config)],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        processes.append(proc)
        try:
            wait_until("serve's /healthz", lambda: http_ok(f"http://127.0.0.1:{serve_port}/healthz"), 60)
            # the fault's first 130 s: the incident opens and pages
            produce_all(kafka.bootstrap, [r for s in scrapes[:27] for r in outgoing_batched(s, topo)])
            wait_until("a firing notification", lambda: notified("firing"), 90)
            seen: list[list[str]] = [[]]

            def scraped_incident() -> bool:
                seen[0] = [r["metric"]["location"] for r in promql(prom, "fabricwatch_incident_active")]
                return seen[0] == ["L00003"]

            try:
                wait_until("Prometheus to scrape the incident", scraped_incident, 60)
            except AssertionError:
                raise AssertionError(f"Prometheus saw incidents at {seen[0]}, notified {notifications}") from None
            assert promql(prom, 'max_over_time(up{job="fabricwatch"}[1m])')[0]["value"][1] == "1"
            # every metric a dashboard or a rule queries is in serve's real scrape
            with urllib.request.urlopen(f"http://127.0.0.1:{serve_port}/metrics", timeout=10) as r:
                scraped = {f.name for f in text_string_to_metric_families(r.read().decode())}
            scraped |= {f"{n}{suffix}" for n in scraped for suffix in ("_total", "_bucket", "_sum", "_count")}
            assert queried_metrics() - scraped == set()
            assert promql(prom, 'fabricwatch_link_up{link="L00003"}')[0]["value"][1] == "0"
            # the rest: the link comes back, the incident resolves and stops being exported
            produce_all(kafka.bootstrap, [r for s in scrapes[27:] for r in outgoing_batched(s, topo)])
            wait_until("a resolved notification", lambda: notified("resolved"), 90)
            wait_until("the incident to leave /metrics", lambda: not promql(prom, "fabricwatch_incident_active"), 60)
        finally:
            assert stop_process(proc, 30) == 0, (tmp_path / "serve.log").read_text()[-3000:]
            log.close()

    con = open_forensic(tmp_path / "serve.duckdb").con  # stage 1's file (and any sealed segments): findings
    try:
        symptoms = con.execute("SELECT DISTINCT symptom, id FROM findings ORDER BY ALL").fetchall()
    finally:
        con.close()
    con = open_forensic(tmp_path / "serve.stage2.duckdb").con  # stage 2's file (role both): incidents
    try:
        incidents = [r[0] for r in con.execute("SELECT id FROM incidents ORDER BY id").fetchall()]
    finally:
        con.close()
    assert incidents == ["inc-serve-0001"]  # stage 2's ids: inc-<instance>-, the instance its file's name
    # the detectors saw several symptoms (link down and loss of light, at both ends): folded into one page
    assert len(symptoms) >= 3, symptoms
    # exactly one firing and one resolved notification per incident; nothing else paged or ticketed
    assert notified("firing") == {"inc-serve-0001": 1} and notified("resolved") == {"inc-serve-0001": 1}

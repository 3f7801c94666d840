"""The Grafana dashboards and Grafana-managed alert rules, generated in code with
grafana-foundation-sdk (pinned to Grafana 11.6 in pyproject.toml), over the names of METRICS.md only.

Five dashboards, each with a stable uid the alert annotations link to: fabric overview (incidents,
rail and leaf health), link detail (both ends, per-lane power and margin, BER, corruption; a ``link``
variable), congestion (ECN, PFC, queues by switch port), thermal (GPU temperature by cooling loop,
NPO module temperature beside its GPU) and pipeline health. Incidents appear on every dashboard as
annotations tagged ``fabricwatch`` (``fabricwatch dashboards push`` posts them).
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import alerting, expr, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import alerting as alerting_model
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import prometheus as prom_model

GRAFANA_VERSION = "11.6"
DATASOURCE_UID = "fabricwatch-prometheus"
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)
FOLDER_UID, FOLDER_TITLE = "fabricwatch", "fabricwatch"
UIDS = {
    "overview": "fabricwatch-overview",
    "link": "fabricwatch-link",
    "congestion": "fabricwatch-congestion",
    "thermal": "fabricwatch-thermal",
    "pipeline": "fabricwatch-pipeline",
}


def to_json(obj: Any) -> Any:
    """An SDK object → plain JSON data (the SDK's own encoder)."""
    return json.loads(json.dumps(obj, cls=JSONEncoder, sort_keys=True))


def _q(expr_: str, legend: str = "", ref: str = "A", instant: bool = False, table: bool = True) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr_).ref_id(ref).datasource(DATASOURCE)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant()
        if table:
            q = q.format(prom_model.PromQueryFormat.TABLE)
    return q


def _series(title: str, unit: str, *queries: prometheus.Dataquery, desc: str = "", w: int = 12) -> timeseries.Panel:
    p = timeseries.Panel().title(title).unit(unit).datasource(DATASOURCE).height(8).span(w)
    if desc:
        p = p.description(desc)
    for q in queries:
        p = p.with_target(q)
    return p


def _table(title: str, *queries: prometheus.Dataquery, desc: str = "", w: int = 24) -> table.Panel:
    p = table.Panel().title(title).datasource(DATASOURCE).height(8).span(w)
    if desc:
        p = p.description(desc)
    for q in queries:
        p = p.with_target(q)
    if len(queries) > 1:  # one row per entity: the instant queries' frames joined on their labels
        p = p.with_transformation(model.DataTransformerConfig(id_val="merge", options={}))
    return p


def _stat(title: str, query: prometheus.Dataquery, w: int = 6) -> stat.Panel:
    return stat.Panel().title(title).datasource(DATASOURCE).height(4).span(w).with_target(query)


def _variable(name: str, query: str, label: str, multi: bool = False) -> db.QueryVariable:
    v = (
        db.QueryVariable(name)
        .label(label)
        .query(query)
        .datasource(DATASOURCE)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
    )
    if multi:
        v = v.multi(True).include_all(True).all_value(".*")
    return v


def _base(key: str, title: str, description: str) -> db.Dashboard:
    incidents = (
        db.AnnotationQuery()
        .name("fabricwatch incidents")
        .datasource(model.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
        .enable(True)
        .icon_color("red")
        .target(db.AnnotationTarget().type("tags").tags(["fabricwatch"]).limit(100).match_any(False))
    )
    return (
        db.Dashboard(title)
        .uid(UIDS[key])
        .description(description)
        .tags(["fabricwatch"])
        .time("now-6h", "now")
        .refresh("30s")
        .timezone("utc")
        .annotation(incidents)
        .link(
            db.DashboardLink("fabricwatch")
            .type(model.DashboardLinkType.DASHBOARDS)
            .tags(["fabricwatch"])
            .as_dropdown(True)
        )
    )


def overview() -> db.Dashboard:
    return (
        _base("overview", "fabricwatch: fabric overview", "Open incidents, then rail and leaf health at a glance.")
        .with_row(db.Row("Incidents"))
        .with_panel(_stat("Critical", _q('sum(fabricwatch_open_incidents{severity="critical"})')))
        .with_panel(_stat("Major", _q('sum(fabricwatch_open_incidents{severity="major"})')))
        .with_panel(_stat("Minor", _q('sum(fabricwatch_open_incidents{severity="minor"})')))
        .with_panel(_stat("Warning (tickets)", _q('sum(fabricwatch_open_incidents{severity="warning"})')))
        .with_panel(
            _table(
                "Open incidents",
                _q("fabricwatch_incident_active", instant=True),
                desc="One row per root cause; its symptoms are folded in. `fabricwatch forensics incident ID` digs.",
            )
        )
        .with_row(db.Row("Rails"))
        .with_panel(
            _series(
                "Worst optical margin per rail",
                "dB",
                _q('min by (rail) (fabricwatch_link_optical_margin_db{tier="host"})', "rail {{rail}}"),
                desc="The worst lane of any host link of the rail, in dB above its module's rx low alarm.",
            )
        )
        .with_panel(
            _series(
                "Worst pre-FEC BER per rail",
                "sci",
                _q('max by (rail) (fabricwatch_link_pre_fec_ber{tier="host"})', "rail {{rail}}"),
            )
        )
        .with_row(db.Row("Leaves"))
        .with_panel(
            _series(
                "Worst corruption per switch",
                "percentunit",
                _q("max by (switch) (fabricwatch_link_corruption_ratio)", "{{switch}}"),
            )
        )
        .with_panel(
            _series("Links down per switch", "short", _q("count by (switch) (fabricwatch_link_up == 0)", "{{switch}}"))
        )
    )


def link_detail() -> db.Dashboard:
    sel = 'link="$link"'
    return (
        _base("link", "fabricwatch: link detail", "Both ends of one link: optics lane by lane, errors, state.")
        .with_variable(_variable("link", "label_values(fabricwatch_link_optical_margin_db, link)", "Link"))
        .with_panel(_series("Worst lane margin", "dB", _q(f"fabricwatch_link_optical_margin_db{{{sel}}}", "margin")))
        .with_panel(_series("Up (both ends)", "short", _q(f"fabricwatch_link_up{{{sel}}}", "up")))
        .with_panel(
            _series(
                "Rx power per lane",
                "dBm",
                _q(f"fabricwatch_lane_rx_power_dbm{{{sel}}}", "{{port}} lane {{lane}}"),
                desc="Per lane for links in focus: those of open incidents and the 4 worst by margin.",
            )
        )
        .with_panel(
            _series("Tx power per lane", "dBm", _q(f"fabricwatch_lane_tx_power_dbm{{{sel}}}", "{{port}} lane {{lane}}"))
        )
        .with_panel(
            _series(
                "Margin per lane", "dB", _q(f"fabricwatch_lane_optical_margin_db{{{sel}}}", "{{port}} lane {{lane}}")
            )
        )
        .with_panel(_series("Pre-FEC BER (worse end)", "sci", _q(f"fabricwatch_link_pre_fec_ber{{{sel}}}", "BER")))
        .with_panel(
            _series("Corruption (worse end)", "percentunit", _q(f"fabricwatch_link_corruption_ratio{{{sel}}}", "lost"))
        )
    )


def congestion() -> db.Dashboard:
    sel = 'switch=~"$switch"'
    return (
        _base("congestion", "fabricwatch: congestion", "ECN marks, PFC pauses and queues by switch port.")
        .with_variable(_variable("switch", "label_values(fabricwatch_port_queue_depth_bytes, switch)", "Switch", True))
        .with_panel(
            _series(
                "ECN marks (top 20 ports)",
                "short",
                _q(f"topk(20, fabricwatch_port_ecn_marked_per_second{{{sel}}})", "{{port}}"),
            )
        )
        .with_panel(
            _series(
                "PFC pauses sent (top 20 ports, GPU NICs included)",
                "short",
                _q("topk(20, fabricwatch_port_pause_frames_sent_per_second)", "{{port}}"),
                desc="A pause source sends pauses with no traffic behind them; bursty all-reduce pauses are brief.",
            )
        )
        .with_panel(
            _series(
                "Deepest queues (top 20 ports)",
                "bytes",
                _q(f"topk(20, fabricwatch_port_queue_depth_bytes{{{sel}}})", "{{port}}"),
                w=24,
            )
        )
    )


def thermal() -> db.Dashboard:
    sel = 'cooling_loop=~"$cooling_loop"'
    return (
        _base("thermal", "fabricwatch: thermal", "GPU temperature by cooling loop, NPO optics beside their GPU.")
        .with_variable(
            _variable(
                "cooling_loop",
                "label_values(fabricwatch_cooling_loop_temperature_headroom_celsius, cooling_loop)",
                "Cooling loop",
                True,
            )
        )
        .with_panel(
            _series(
                "Hottest GPU per cooling loop",
                "celsius",
                _q(f"fabricwatch_cooling_loop_gpu_temperature_max_celsius{{{sel}}}", "{{cooling_loop}}"),
            )
        )
        .with_panel(
            _series(
                "Headroom to 85 °C per loop",
                "celsius",
                _q(f"fabricwatch_cooling_loop_temperature_headroom_celsius{{{sel}}}", "{{cooling_loop}}"),
            )
        )
        .with_panel(
            _series(
                "GPUs throttling for heat",
                "short",
                _q(f"fabricwatch_cooling_loop_gpus_thermal_throttled{{{sel}}}", "{{cooling_loop}}"),
            )
        )
        .with_panel(
            _series(
                "Hottest GPUs (top 10)",
                "celsius",
                _q(f"topk(10, fabricwatch_gpu_temperature_celsius{{{sel}}})", "{{gpu}}"),
            )
        )
        .with_panel(
            _table(
                "GPU and its NPO module",
                _q(f"fabricwatch_gpu_temperature_celsius{{{sel}}}", ref="A", instant=True),
                _q(f"fabricwatch_gpu_npo_module_temperature_celsius{{{sel}}}", ref="B", instant=True),
                _q(f"fabricwatch_gpu_power_watts{{{sel}}}", ref="C", instant=True),
                desc="A hot GPU heats its near-package optics: the root is the GPU, not the link.",
            )
        )
    )


LATENCY = "sum by (le, type) (rate(fabricwatch_detection_latency_seconds_bucket[1h]))"


def pipeline() -> db.Dashboard:
    return (
        _base("pipeline", "fabricwatch: pipeline health", "Is fabricwatch itself keeping up?")
        .with_panel(_series("Scraped", "short", _q('up{job="fabricwatch"}', "{{instance}}")))
        .with_panel(
            _series("Telemetry age", "s", _q("time() - fabricwatch_telemetry_watermark_seconds", "newest telemetry"))
        )
        .with_panel(
            _series(
                "Messages received",
                "short",
                _q("sum by (kind) (rate(fabricwatch_received_messages_total[5m]))", "{{kind}}"),
            )
        )
        .with_panel(
            _series(
                "Dead letters and errors",
                "short",
                _q("sum by (code) (rate(fabricwatch_deadlettered_messages_total[5m]))", "dead letter: {{code}}"),
                _q("sum by (stage) (rate(fabricwatch_errors_total[5m]))", "error: {{stage}}", ref="B"),
            )
        )
        .with_panel(
            _series("Consumer lag", "short", _q("sum by (topic) (fabricwatch_consumer_lag_records)", "{{topic}}"))
        )
        .with_panel(
            _series(
                "Detection tick p95",
                "s",
                _q(
                    "histogram_quantile(0.95, sum by (le) (rate(fabricwatch_detection_tick_seconds_bucket[5m])))", "p95"
                ),
            )
        )
        .with_panel(
            _series(
                "Detection latency p50 / p95 by type",
                "s",
                _q(f"histogram_quantile(0.5, {LATENCY})", "p50 {{type}}"),
                _q(f"histogram_quantile(0.95, {LATENCY})", "p95 {{type}}", ref="B"),
            )
        )
        .with_panel(
            _series(
                "Alerts to Alertmanager",
                "short",
                _q("sum by (status) (rate(fabricwatch_alert_notifications_total[5m]))", "{{status}}"),
                _q("rate(fabricwatch_alert_notification_failures_total[5m])", "failed", ref="B"),
            )
        )
    )


def dashboards() -> dict[str, dict[str, Any]]:
    """Every dashboard as Grafana JSON, by uid."""
    built = [overview(), link_detail(), congestion(), thermal(), pipeline()]
    return {d.build().uid: to_json(d.build()) for d in built}


# --- Grafana-managed alert rules (the seeds' two, for sites that alert from Grafana) -----------------

RULES = (
    # uid, title, PromQL, threshold (fires at or above it), for, severity, summary
    ("fabricwatch-gpu-hot", "GPU ≥ 85 °C", "max by (gpu, cooling_loop) (fabricwatch_gpu_temperature_celsius)", 85.0,
     "1m", "major", "GPU {{ $labels.gpu }} is at or over 85 °C"),
    ("fabricwatch-link-loss", "Link loss ≥ 1 %", "max by (link, switch) (fabricwatch_link_corruption_ratio)", 0.01,
     "1m", "major", "Link {{ $labels.link }} loses ≥ 1 % of its frames: reroute"),
)  # fmt: skip


def alert_rule_group() -> alerting_model.RuleGroup:
    group = alerting.RuleGroup("fabricwatch").folder_uid(FOLDER_UID).interval(60)
    for uid, title, promql, at_least, for_, severity, summary in RULES:
        query = (
            alerting.Query("A")
            .datasource_uid(DATASOURCE_UID)
            .relative_time_range(alerting_model.RelativeTimeRange(from_val=600, to=0))
            .model(_q(promql, instant=True, table=False))
        )
        threshold = (
            alerting.Query("B")
            .datasource_uid("__expr__")
            .relative_time_range(alerting_model.RelativeTimeRange(from_val=0, to=0))
            .model(
                expr.TypeThreshold()
                .ref_id("B")
                .expression("A")
                .conditions(
                    [
                        expr.ExprTypeThresholdConditions().evaluator(
                            expr.ExprTypeThresholdConditionsEvaluator().type("gte").params([at_least])
                        )
                    ]
                )
            )
        )
        rule = (
            alerting.Rule(title)
            .uid(uid)
            .folder_uid(FOLDER_UID)
            .rule_group("fabricwatch")
            .condition("B")
            .queries([query, threshold])
            .for_val(for_)
            .no_data_state("OK")
            .exec_err_state("Error")
            .labels({"severity": severity, "layer": "health"})
            .annotations({"summary": summary, "runbook_url": f"https://fabricwatch.invalid/runbooks/{uid}"})
        )
        group = group.with_rule(rule)
    return group.build()


def alert_rules_provisioning() -> dict[str, Any]:
    """The rule group as a Grafana provisioning file (provisioning/alerting/*.yaml)."""
    group = to_json(alert_rule_group())
    keep = ("uid", "title", "condition", "data", "for", "noDataState", "execErrState", "labels", "annotations")
    return {
        "apiVersion": 1,
        "groups": [
            {
                "orgId": 1,
                "name": group["title"],
                "folder": FOLDER_TITLE,
                "interval": "1m",
                "rules": [{k: r[k] for k in keep if k in r} for r in group["rules"]],
            }
        ],
    }


def datasource_provisioning(prometheus_url: str = "http://127.0.0.1:9090") -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "fabricwatch Prometheus",
                "type": "prometheus",
                "uid": DATASOURCE_UID,
                "access": "proxy",
                "url": prometheus_url,
                "isDefault": False,
                "jsonData": {"timeInterval": "15s"},
            }
        ],
    }


def dashboards_provisioning(path: str) -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "fabricwatch",
                "folder": FOLDER_TITLE,
                "folderUid": FOLDER_UID,
                "type": "file",
                "disableDeletion": False,
                "allowUiUpdates": False,
                "options": {"path": path},
            }
        ],
    }

"""``fabricwatch dashboards export DIR``: every file a site needs to run the on-call surface.

Layout of DIR (Grafana's provisioning layout; copy ``provisioning/`` to /etc/grafana/provisioning and
``dashboards/`` to the path the dashboard provider names)::

    dashboards/<uid>.json                       the five dashboards
    provisioning/datasources/fabricwatch.yaml   the Prometheus data source (uid fabricwatch-prometheus)
    provisioning/dashboards/fabricwatch.yaml    the file provider for dashboards/
    provisioning/alerting/fabricwatch.yaml      Grafana-managed alert rules (the seeds' two)
    prometheus/fabricwatch-rules.yaml           Prometheus alerting rules
    alertmanager/alertmanager.yaml              Alertmanager routes, receivers and inhibition
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import yaml

from fabricwatch.dashboards import grafana


def export(out: Path, *, prometheus_url: str, dashboards_path: str | None = None) -> list[Path]:
    """Write every file under ``out``; returns the paths written, in order."""
    written: list[Path] = []

    def write(rel: str, text: str) -> None:
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)

    def dump(data: object) -> str:
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)

    for uid, dashboard in grafana.dashboards().items():
        write(f"dashboards/{uid}.json", json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n")
    where = dashboards_path or str((out / "dashboards").resolve())
    write("provisioning/datasources/fabricwatch.yaml", dump(grafana.datasource_provisioning(prometheus_url)))
    write("provisioning/dashboards/fabricwatch.yaml", dump(grafana.dashboards_provisioning(where)))
    write("provisioning/alerting/fabricwatch.yaml", dump(grafana.alert_rules_provisioning()))
    shipped = resources.files("fabricwatch.dashboards")
    write("prometheus/fabricwatch-rules.yaml", shipped.joinpath("prometheus-rules.yaml").read_text())
    write("alertmanager/alertmanager.yaml", shipped.joinpath("alertmanager.yaml").read_text())
    return written

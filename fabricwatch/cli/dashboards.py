"""``fabricwatch dashboards export DIR`` and ``fabricwatch dashboards push --url URL``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from fabricwatch.cli import positive_float
from fabricwatch.errors import InputError
from fabricwatch.incident import Incident


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dashboards",
        help="export or push the Grafana dashboards, alert rules and Alertmanager config",
        description="Grafana dashboards generated in code (grafana-foundation-sdk), Grafana's provisioning files, "
        "the Prometheus alerting rules and the Alertmanager config.",
    )
    how = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ex = how.add_parser("export", help="write every file into DIR", description="Write the dashboards (JSON), "
                        "Grafana provisioning files (data source, dashboards, alert rules), Prometheus rules and the "
                        "Alertmanager config into DIR.")  # fmt: skip
    ex.add_argument("dir", type=Path, metavar="DIR")
    ex.add_argument("--prometheus-url", default="http://127.0.0.1:9090", help="the data source's Prometheus URL")
    ex.add_argument(
        "--dashboards-path", metavar="PATH", help="where Grafana will read the dashboards (default DIR/dashboards)"
    )
    ex.set_defaults(run=run_export)
    push = how.add_parser(
        "push",
        help="upload the dashboards and alert rules to Grafana, incidents as annotations",
        description="Upload the dashboards and the alert rule group to a running Grafana (grafana-client) and post "
        "each incident as an annotation (updated, not duplicated, on a second push). The API token is read from "
        "FABRICWATCH_GRAFANA_TOKEN (or GRAFANA_TOKEN) and never printed.",
    )
    push.add_argument("--url", required=True, help="Grafana's base URL, e.g. http://127.0.0.1:3000")
    push.add_argument("--incidents", type=Path, metavar="FILE", help="incidents to annotate (JSON array or lines)")
    push.add_argument("--db", type=Path, metavar="FILE", help="or the incidents of a fabricwatch DuckDB file")
    push.add_argument("--timeout", type=positive_float, default=10.0, help="seconds per request (default 10)")
    push.set_defaults(run=run_push)


def run_export(args: argparse.Namespace) -> int:
    from fabricwatch.dashboards.export import export

    try:
        written = export(args.dir, prometheus_url=args.prometheus_url, dashboards_path=args.dashboards_path)
    except OSError as exc:
        raise InputError(str(args.dir), f"cannot write: {exc.strerror or exc}") from None
    for path in written:
        print(path)
    return 0


def load_incidents(path: Path) -> list[Incident]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None
    stripped = text.strip()
    try:
        if stripped.startswith("["):
            items = json.loads(stripped)
        else:
            items = [json.loads(line) for line in stripped.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}", f"not JSON: {exc.msg}") from None
    incidents = []
    for n, item in enumerate(items, 1):
        try:
            incidents.append(Incident.from_dict(item))
        except (TypeError, KeyError) as exc:
            raise InputError(f"{path}", f"incident {n} is not an incident (DESIGN §5): {exc}") from None
    return incidents


def incidents_of_db(db: Path) -> list[Incident]:
    """The incidents table of a DuckDB file (read-only; sealed segments while a processor writes it)."""
    import duckdb

    from fabricwatch.stream.segments import open_forensic

    if not db.exists():
        raise InputError("--db", f"{db}: no such file")
    try:
        con = open_forensic(db).con
        rows = con.execute(
            "SELECT id, type, cause, location_entity, location_id, severity, epoch(first_seen), epoch(detected_at), "
            "epoch(resolved_at), evidence, symptoms, runbook, status FROM incidents ORDER BY id"
        ).fetchall()
        con.close()
    except duckdb.Error as exc:
        raise InputError("--db", f"cannot read incidents from {db}: {str(exc).splitlines()[0]}") from None
    return [
        Incident(
            i, t, c, {"entity": e, "id": loc}, sev, first, det, res, json.loads(ev or "[]"), list(sym or []), rb, st
        )
        for i, t, c, e, loc, sev, first, det, res, ev, sym, rb, st in rows
    ]


def run_push(args: argparse.Namespace) -> int:
    from grafana_client import GrafanaApi

    from fabricwatch.dashboards.push import TOKEN_ENV, Pusher

    if args.incidents and args.db:
        raise InputError("--db", "give --incidents or --db, not both")
    incidents = load_incidents(args.incidents) if args.incidents else incidents_of_db(args.db) if args.db else []
    token = next((os.environ[k] for k in TOKEN_ENV if os.environ.get(k)), None)
    if token is None and "@" not in args.url.split("//", 1)[-1].split("/", 1)[0]:
        raise InputError("--url", f"no Grafana credentials: set {TOKEN_ENV[0]} to an API token")
    api = GrafanaApi.from_url(args.url, credential=token, timeout=args.timeout)

    def say(line: str) -> None:
        print(f"fabricwatch dashboards push: {line}", file=sys.stderr)

    pusher = Pusher(api, args.url, say)
    pusher.folder()
    pusher.dashboards()
    pusher.rules()
    pusher.annotations(incidents)
    say(f"done: {pusher.url}")
    return 0

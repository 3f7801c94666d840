"""Human-facing views of incidents: the table an on-call engineer reads first."""

from __future__ import annotations

from rich.table import Table

from fabricwatch.incident import Incident

SEVERITY_STYLE = {"critical": "bold red", "major": "red", "minor": "yellow", "warning": "cyan"}


def incidents_table(incidents: list[Incident], start_ts: float | None = None, title: str = "Incidents") -> Table:
    """Type, cause, location, when it started and how long detection took, and the runbook."""
    table = Table(title=title, title_justify="left", header_style="bold")
    for name, kw in (
        ("id", {}),
        ("severity", {}),
        ("type", {}),
        ("cause", {}),
        ("location", {}),
        ("started", {"justify": "right"}),
        ("detected after", {"justify": "right"}),
        ("runbook", {}),
        ("status", {}),
    ):
        table.add_column(name, **kw)
    for i in incidents:
        started = f"t+{i.first_seen - start_ts:.0f}s" if start_ts is not None else f"{i.first_seen:.0f}"
        table.add_row(
            i.id,
            f"[{SEVERITY_STYLE.get(i.severity, '')}]{i.severity}[/]",
            i.type,
            i.cause,
            f"{i.location['entity']} {i.location['id']}",
            started,
            f"{i.detected_at - i.first_seen:.0f} s",
            i.runbook or "-",
            i.status,
        )
    return table

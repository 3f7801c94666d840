"""From an incident to a plan: which runbook, on what, with which argv, after which diagnosis.

Selection: a runbook whose trigger carries a seed rule on the evidence (loss ≥ 1 % → reroute,
GPU ≥ 85 °C → throttle) comes first, because mitigation comes before repair; then the runbook the
incident names, if its trigger matches; then any other whose trigger matches. History may swap a
repair for a replacement: a component remediated N times in D days is not cleaned again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import duckdb

from fabricwatch.incident import Incident
from fabricwatch.runbooks.backends import Request
from fabricwatch.runbooks.config import ActionsConfig
from fabricwatch.runbooks.guards import Ledger, Refusal
from fabricwatch.runbooks.model import Action, Condition, Runbook
from fabricwatch.runbooks.render import SQL_PARAM, Missing, render
from fabricwatch.runbooks.targets import Target, resolve
from fabricwatch.runbooks.telemetry import Telemetry, as_timestamp
from fabricwatch.topology import Topology

DIAGNOSE_LOOKBACK_S = 1800.0  # diagnose SQL reads from half an hour before the incident began
DIAGNOSE_ROWS = 50  # rows of a diagnose result attached as evidence


@dataclass(slots=True)
class PlannedStep:
    kind: str  # diagnose, act, verify, rollback, escalate, validate, return
    name: str
    line: int = 0
    request: Request | None = None
    backend: str | None = None
    destructive: bool = False
    when: str | None = None
    conditions: list[Condition] = field(default_factory=list)
    timeout_s: float | None = None
    hold_s: float | None = None
    every_s: float | None = None
    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.request is not None:
            r = self.request
            d["backend"] = self.backend
            if r.argv:
                d["argv"] = list(r.argv)
                if r.env:
                    d["env"] = dict(sorted(r.env.items()))
            else:
                d[r.channel or "message"] = r.message
        if self.destructive:
            d["destructive"] = True
        if self.when:
            d["when"] = self.when
        if self.conditions:
            d["conditions"] = [c.describe() for c in self.conditions]
            d["timeout_s"] = self.timeout_s
            if self.hold_s:
                d["hold_s"] = self.hold_s
        if self.kind == "diagnose":
            d["columns"], d["rows"] = self.columns, self.rows
        if self.error:
            d["error"] = self.error
        return d


@dataclass(slots=True)
class Plan:
    incident: Incident
    runbook: Runbook | None
    reason: str
    target: Target | None = None
    steps: list[PlannedStep] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    replaced: str | None = None  # the runbook history replaced

    def of_kind(self, kind: str) -> list[PlannedStep]:
        return [s for s in self.steps if s.kind == kind]

    def to_dict(self) -> dict[str, Any]:
        t = self.target
        return {
            "incident": self.incident.id,
            "cause": self.incident.cause,
            "location": self.incident.location,
            "runbook": self.runbook.name if self.runbook else None,
            "reason": self.reason,
            "target": None
            if t is None
            else {
                "domain": t.domain,
                "takes_out": [f"{k}:{i}" for k, i in t.out],
                "links_out": len(t.links_out),
                "values": {k: v for k, v in sorted(t.values.items())},
            },
            "guards": [{"guard": r.guard, "reason": r.reason} for r in self.refusals],
            "steps": [s.to_dict() for s in self.steps],
        }

    def text(self) -> str:
        inc = self.incident
        loc = f"{inc.location.get('entity')} {inc.location.get('id')}"
        out = [f"incident {inc.id}: {inc.cause} at {loc} ({inc.severity})"]
        if self.runbook is None:
            return "\n".join([*out, f"  no runbook: {self.reason}"])
        out.append(f"  runbook {self.runbook.name}: {self.reason}")
        if self.target is not None and self.target.out:
            what = ", ".join(f"{k} {i}" for k, i in self.target.out)
            out.append(f"  takes out of service: {what} (fault domain {self.target.domain})")
        for s in self.steps:
            head = f"  {s.kind:<9} {s.name}"
            if s.request is not None:
                head += f" [{s.backend}{', destructive' if s.destructive else ''}"
                head += f"{', ' + s.when if s.when else ''}]: {s.request.describe()}"
            elif s.conditions:
                head += f": {' and '.join(c.describe() for c in s.conditions)} within {s.timeout_s:g} s"
                head += f", held {s.hold_s:g} s" if s.hold_s else ""
            out.append(head)
            if s.kind == "diagnose" and not s.error:
                out.append(f"            {len(s.rows)} row(s): {', '.join(s.columns)}")
                out.extend(f"            {row}" for row in s.rows[:5])
            if s.error:
                out.append(f"            cannot run: {s.error}")
        for r in self.refusals:
            out.append(f"  guard {r.guard} would refuse: {r.reason}")
        if not self.refusals and any(s.kind == "act" for s in self.steps):
            out.append("  guards: none would refuse")
        return "\n".join(out)


def select(incident: Incident, books: dict[str, Runbook]) -> tuple[Runbook | None, str]:
    seeds = [b for n, b in sorted(books.items()) if b.trigger.evidence_metric and b.trigger.matches(incident)]
    if seeds:
        t = seeds[0].trigger
        return seeds[0], f"the seeds' rule: {t.evidence_metric} ≥ {t.evidence_at_least:g} in the evidence"
    named = books.get(incident.runbook or "")
    if named is not None and named.trigger.matches(incident):
        return named, "named by the incident"
    if named is not None:
        return None, f"the incident names {named.name}, whose trigger does not match it"
    others = [b for n, b in sorted(books.items()) if b.trigger.matches(incident)]
    if others:
        return others[0], "its trigger matches"
    return None, f"no runbook's trigger matches {incident.type}/{incident.cause}/{incident.severity}"


def idempotency_key(incident: str, runbook: str, step: str, kind: str) -> str:
    return hashlib.sha256(f"{incident}\x00{runbook}\x00{step}\x00{kind}".encode()).hexdigest()[:32]


class Planner:
    def __init__(
        self,
        topology: Topology,
        books: dict[str, Runbook],
        config: ActionsConfig,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.topology = topology
        self.books = books
        self.config = config
        self.telemetry = telemetry

    def plan(self, incident: Incident, ledger: Ledger, now: float) -> Plan:
        book, reason = select(incident, self.books)
        if book is None:
            return Plan(incident, None, reason)
        plan = Plan(incident, book, reason)
        component = incident.location.get("id", "")
        cfg = self.config.guards
        recent = [
            r for ts, r in ledger.remediations.get(component, {}).values() if now - ts < cfg.history_days * 86400.0
        ]
        if book.replace_with and cfg.history_times and recent.count(book.name) >= cfg.history_times:
            plan.replaced = book.name
            plan.reason = (
                f"{component} needed {book.name} {recent.count(book.name)} times in {cfg.history_days:g} days: "
                f"escalated to {book.replace_with} instead"
            )
            book = plan.runbook = self.books[book.replace_with]
        power = self.telemetry.power_limit if self.telemetry else (lambda gpu: None)
        target = resolve(incident, self.topology, book.takes_out, book.params, power, self.config.interfaces)
        plan.target = target
        for step in book.steps:
            if step.kind == "diagnose":
                plan.steps.append(self._diagnose(step.name, step.line, step.sql or "", incident, target))
            elif step.kind == "verify":
                plan.steps.append(
                    PlannedStep(
                        "verify", step.name, step.line, conditions=[step.condition] if step.condition else [],
                        timeout_s=step.timeout_s, hold_s=step.hold_s, every_s=step.every_s,
                    )
                )  # fmt: skip
            else:
                ps = self._action(step.kind, step.name, step.action, book, incident, target)
                ps.line, ps.destructive = step.line, step.destructive
                ps.when = step.when if step.kind == "escalate" else None
                plan.steps.append(ps)
        if book.validation is not None and book.takes_out != "none":
            v = book.validation
            if v.action is not None:
                plan.steps.append(self._action("validate", "diagnostic", v.action, book, incident, target))
            if v.conditions:
                plan.steps.append(
                    PlannedStep(
                        "validate", "telemetry", v.line, conditions=list(v.conditions),
                        timeout_s=v.timeout_s, hold_s=v.hold_s, every_s=v.every_s,
                    )
                )  # fmt: skip
        if book.return_to_service is not None and book.takes_out != "none":
            plan.steps.append(
                self._action("return", "return-to-service", book.return_to_service, book, incident, target)
            )
        return plan

    def _action(
        self, kind: str, name: str, action: Action | None, book: Runbook, incident: Incident, target: Target
    ) -> PlannedStep:
        ps = PlannedStep(kind, name)
        if action is None:
            ps.error = "no action"
            return ps
        ps.backend = self.config.command_backend if action.is_command else self.config.message_backend
        try:
            argv = tuple(render(a, target.values) for a in action.argv)
            env = {k: render(v, target.values) for k, v in action.env}
            message = render(action.message, target.values) if action.message else None
        except Missing as exc:
            ps.error = f"{{{exc.args[0]}}} has no value for {incident.location.get('entity')} {target.values['target']}"
            return ps
        key = idempotency_key(incident.id, book.name, name, kind)
        ps.request = Request(
            incident.id, book.name, name, kind, str(target.values["target"]), argv, env, message, action.channel, key
        )
        return ps

    def _diagnose(self, name: str, line: int, sql: str, incident: Incident, target: Target) -> PlannedStep:
        ps = PlannedStep("diagnose", name, line)
        if self.telemetry is None:
            ps.error = "no telemetry database"
            return ps
        values: dict[str, Any] = {
            "since": as_timestamp(incident.first_seen - DIAGNOSE_LOOKBACK_S),
            "until": as_timestamp(incident.detected_at),
            "ports": list(target.ports),
            "gpus": list(target.gpus),
            **{k: str(v) for k, v in target.values.items()},
        }
        wanted = set(SQL_PARAM.findall(sql))
        missing = sorted(w for w in wanted if w not in values)
        if missing:
            ps.error = f"${missing[0]} has no value for {incident.location.get('entity')} {target.values['target']}"
            return ps
        try:
            ps.columns, rows = self.telemetry.query(sql, {k: values[k] for k in wanted})
        except duckdb.Error as exc:
            ps.error = str(exc).splitlines()[0]
            return ps
        ps.rows = rows[:DIAGNOSE_ROWS]
        return ps

"""The runbook model: what a runbook file says, validated once at load (:mod:`.loader`).

A runbook is data, never code: steps name a ready template or an argv list, verify conditions are
metric conditions, diagnose steps are forensic SQL with named parameters. Nothing from telemetry or
an incident is ever interpolated into a shell string or into SQL text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STEP_KINDS = ("diagnose", "act", "verify", "rollback", "escalate")
TAKES_OUT = ("none", "link", "port", "gpu", "node", "switch")
OPS = ("<", "<=", ">", ">=", "==", "!=")
AGGS = ("max", "min", "mean", "last", "increase")


@dataclass(frozen=True, slots=True)
class Trigger:
    """Which incidents a runbook answers: type, cause, severity; optionally a seed rule on evidence."""

    types: tuple[str, ...]
    causes: tuple[str, ...]  # empty: any cause of the types
    severities: tuple[str, ...]
    entity: str | None = None
    evidence_metric: str | None = None  # a seed rule: the incident's evidence has metric ≥ at_least
    evidence_at_least: float | None = None

    def matches(self, incident: Any) -> bool:
        if incident.type not in self.types or incident.severity not in self.severities:
            return False
        if self.causes and incident.cause not in self.causes:
            return False
        if self.entity and incident.location.get("entity") != self.entity:
            return False
        return self.evidence_metric is None or self.evidence_rule(incident)

    def evidence_rule(self, incident: Any) -> bool:
        values = [
            e.get("value") for e in incident.evidence if isinstance(e, dict) and e.get("metric") == self.evidence_metric
        ]
        return any(isinstance(v, int | float) and v >= (self.evidence_at_least or 0.0) for v in values)


@dataclass(frozen=True, slots=True)
class Condition:
    """A metric condition on live telemetry: ``agg(metric of the target's keys over window_s) op value``."""

    kind: str  # telemetry table: gpu, optical, port, switch
    metric: str
    of: str  # which keys of the target: gpu, gpus, ports, switch_port, source
    agg: str
    op: str
    value: float
    window_s: float = 60.0

    def describe(self) -> str:
        return f"{self.agg}({self.kind}.{self.metric} of {self.of}, last {self.window_s:g} s) {self.op} {self.value:g}"


@dataclass(frozen=True, slots=True)
class Action:
    """What an act, rollback, escalate or validation step does: an argv list (from a template or
    literal), or a message for a person (notify, ticket)."""

    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    template: str | None = None
    message: str | None = None  # notify / ticket text
    channel: str | None = None  # "notify" or "ticket" for escalate steps

    @property
    def is_command(self) -> bool:
        return bool(self.argv)


@dataclass(frozen=True, slots=True)
class Step:
    kind: str  # one of STEP_KINDS
    name: str
    line: int
    sql: str | None = None  # diagnose
    action: Action | None = None  # act, rollback, escalate
    destructive: bool = False
    condition: Condition | None = None  # verify
    timeout_s: float = 300.0
    every_s: float = 15.0
    hold_s: float = 0.0
    when: str = "failure"  # escalate: always or failure


@dataclass(frozen=True, slots=True)
class Validation:
    """Before a device returns to service: a diagnostic command and/or telemetry held in bounds."""

    action: Action | None
    conditions: tuple[Condition, ...]
    hold_s: float
    timeout_s: float
    every_s: float
    line: int


@dataclass(frozen=True, slots=True)
class Runbook:
    name: str
    summary: str
    trigger: Trigger
    takes_out: str  # what the act steps take out of service
    steps: tuple[Step, ...]
    params: dict[str, Any] = field(default_factory=dict)  # literal values for {placeholders}
    validation: Validation | None = None
    return_to_service: Action | None = None
    replace_with: str | None = None  # after repeated remediation, the runbook that replaces the part
    path: str = ""

    def of_kind(self, kind: str) -> list[Step]:
        return [s for s in self.steps if s.kind == kind]

    @property
    def destructive(self) -> bool:
        return any(s.destructive for s in self.steps)

"""Running a plan: guards, act, verify, roll back, escalate, validate, return to service; all audited.

Modes: ``dry-run`` (plan and guard verdicts recorded, nothing run), ``shadow`` (the same, plus what
the verify conditions read now without any action: the plan compared with what happened; the
default of ``serve``), ``execute`` (actions go to the configured backends, themselves ``dry-run``
unless the actions config says otherwise). Every wait is bounded by the runbook's timeout and
counted in polls, so a clock that does not move cannot hang it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb

from fabricwatch.clock import Clock, VirtualClock
from fabricwatch.incident import Incident
from fabricwatch.runbooks.audit import Audit, RunbookMetrics
from fabricwatch.runbooks.backends import Backend, DryRun, Outcome
from fabricwatch.runbooks.config import ActionsConfig
from fabricwatch.runbooks.guards import Approvals, Guards, Ledger
from fabricwatch.runbooks.model import Condition, Runbook
from fabricwatch.runbooks.planner import Plan, PlannedStep, Planner
from fabricwatch.runbooks.targets import Target
from fabricwatch.runbooks.telemetry import Telemetry, as_timestamp
from fabricwatch.topology import Topology

MODES = ("dry-run", "shadow", "execute")
LINK_STATE_WINDOW_S = 300.0  # a port whose last state in this window is 0 is down


def sleeper(clock: Clock) -> Callable[[float], None]:
    """How to wait ``s`` seconds on this clock: a virtual clock is moved, a wall clock slept."""
    if isinstance(clock, VirtualClock):
        return lambda s: clock.advance_to(clock.now() + s)
    return time.sleep


@dataclass(slots=True)
class Result:
    plan: Plan
    outcome: str  # planned, skipped, refused, failed, verify_failed, validation_failed, completed
    rows: list[dict[str, Any]] = field(default_factory=list)


class Executor:
    def __init__(
        self,
        topology: Topology,
        books: dict[str, Runbook],
        con: duckdb.DuckDBPyConnection,
        config: ActionsConfig,
        *,
        clock: Clock,
        mode: str = "dry-run",
        approvals: Approvals | None = None,
        sleep: Callable[[float], None] | None = None,
        metrics: RunbookMetrics | None = None,
        publish: Callable[[dict[str, Any]], None] | None = None,
        say: Callable[[str], None] | None = None,
        backends: dict[str, Backend] | None = None,
        read_only: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.topology = topology
        self.con = con
        self.config = config
        self.clock = clock
        self.mode = mode
        self.approvals = approvals or Approvals()
        self.sleep = sleep or sleeper(clock)
        self.telemetry = Telemetry(con)
        self.planner = Planner(topology, books, config, self.telemetry)
        self.audit = Audit(con, clock, metrics=metrics, publish=publish, read_only=read_only)
        self.metrics = metrics
        self.guards = Guards(topology, config.guards)
        self.ledger = Ledger.from_audit(self.audit.ledger_rows())
        self._gauge()
        backends = backends or {}
        self.backends = {
            "command": backends.get("command") or config.backend("command", say),
            "message": backends.get("message") or config.backend("message", say),
        }

    # --- state -------------------------------------------------------------------------------------

    def links_down(self, now: float) -> set[str]:
        rows = self.con.execute(
            "SELECT port FROM port WHERE ts > ? AND ts <= ? GROUP BY port HAVING arg_max(state, ts) = 0",
            [as_timestamp(now - LINK_STATE_WINDOW_S), as_timestamp(now)],
        ).fetchall()
        return {self.topology.port_link[p].id for (p,) in rows if p in self.topology.port_link}

    def plan(self, incident: Incident) -> Plan:
        """The plan with the guards' verdict, as things stand; records nothing."""
        now = self.clock.now()
        plan = self.planner.plan(incident, self.ledger, now)
        if plan.runbook is not None and plan.target is not None and plan.of_kind("act"):
            approver = self.approvals.approver(incident.id, plan.runbook.name, now)
            destructive = any(s.destructive for s in plan.of_kind("act"))
            plan.refusals = self.guards.check(
                incident.id, plan.runbook.name, plan.target, destructive, approver, self.ledger,
                self.links_down(now), now,
            )  # fmt: skip
        return plan

    # --- running -----------------------------------------------------------------------------------

    def run(self, incident: Incident) -> Result:
        plan = self.plan(incident)
        result = Result(plan, "planned")
        book, target = plan.runbook, plan.target
        if book is None or target is None:
            self._rec(result, "skipped", reason=plan.reason)
            result.outcome = "skipped"
            return result
        approver = self.approvals.approver(incident.id, book.name, self.clock.now())
        result.rows.clear()
        if plan.replaced:
            self._rec(result, "replaced", reason=plan.reason)
        for step in plan.of_kind("diagnose"):
            self._diagnosed(result, step)
        for step in plan.steps:
            if step.kind != "diagnose":
                self._rec(result, "planned", step, reason=step.error)
        if self.mode != "execute":
            for r in plan.refusals:
                self._rec(result, "refused", guard=r.guard, reason=f"would refuse: {r.reason}")
            if self.mode == "shadow":
                self._observe(result)
            result.outcome = "refused" if plan.refusals else "planned"
            return result
        if plan.refusals:
            for r in plan.refusals:
                self._rec(result, "refused", guard=r.guard, reason=r.reason)
            return self._fail(result, "refused")
        acts = plan.of_kind("act")
        broken = [s for s in acts if s.request is None]
        if broken:
            self._rec(result, "failed", broken[0], reason=f"cannot run: {broken[0].error}")
            return self._fail(result, "failed")
        dry = True
        for step in acts:
            outcome = self._perform(result, step, approver)
            if not outcome.ok:
                self._rollback(result)
                return self._fail(result, "failed")
            dry = dry and not outcome.executed
        if not dry:
            for kind, ident in target.out:
                self._rec(result, "out_of_service", component=f"{kind}:{ident}")
        for step in plan.of_kind("verify"):
            if dry:
                self._rec(result, "not_verified", step, reason="dry-run backend: nothing was executed")
                continue
            ok, why = self._wait(step.conditions, target, step.timeout_s or 0, step.every_s or 15, step.hold_s or 0)
            self._rec(result, "verified" if ok else "verify_failed", step, reason=why)
            if not ok:
                self._rollback(result)
                return self._fail(result, "verify_failed")
        for step in plan.of_kind("escalate"):
            if step.when == "always":
                self._perform(result, step, approver)
        if target.out and not dry and book.validation is not None and not self._validate(result, approver):
            return self._fail(result, "validation_failed", escalate_always=False)
        result.outcome = "completed"
        return result

    # --- pieces ------------------------------------------------------------------------------------

    def _rec(self, result: Result, outcome: str, step: PlannedStep | None = None, **fields: Any) -> dict[str, Any]:
        plan = result.plan
        target = plan.target
        req = step.request if step is not None else None
        fields.setdefault("dry_run", self.mode != "execute")
        fields.setdefault("backend", step.backend if step else None)
        row = self.audit.record(
            plan.incident.id,
            plan.runbook.name if plan.runbook else "",
            outcome,
            action=step.name if step else None,
            kind=step.kind if step else None,
            argv=list(req.argv) if req and req.argv else None,
            target=plan.incident.location.get("id"),
            mode=self.mode,
            domain=target.domain if target else None,
            **fields,
        )
        self.ledger.apply(
            row["ts"], row["incident_id"], row["runbook"], row["action"] or "", outcome, row["component"],
            row["domain"], row["dry_run"],
        )  # fmt: skip
        if outcome in ("out_of_service", "returned_to_service", "rolled_back"):
            self._gauge()
        result.rows.append(row)
        return row

    def _gauge(self) -> None:
        if self.metrics is not None:
            for kind in ("link", "gpu", "node", "switch"):
                self.metrics.out_of_service.labels(kind).set(sum(1 for k, _ in self.ledger.out if k == kind))

    def _diagnosed(self, result: Result, step: PlannedStep) -> None:
        if step.error:
            self._rec(result, "failed", step, reason=f"diagnose: {step.error}")
            return
        evidence = {"metric": "diagnose", "runbook": result.plan.runbook.name, "step": step.name}  # type: ignore[union-attr]
        evidence.update(columns=step.columns, rows=step.rows)  # type: ignore[arg-type]
        self._rec(result, "diagnosed", step, output=json.dumps(evidence, default=str, sort_keys=True))
        inc = result.plan.incident
        if self.mode != "dry-run" and not any(e.get("step") == step.name for e in inc.evidence):
            inc.evidence.append(evidence)
            try:
                self.con.execute(
                    "UPDATE incidents SET evidence = ? WHERE id = ?", [json.dumps(inc.evidence, default=str), inc.id]
                )
            except duckdb.TransactionException as exc:  # the processor wrote the incident meanwhile
                self._rec(result, "failed", step, reason=f"evidence not attached: {str(exc).splitlines()[0]}")

    def _backend(self, step: PlannedStep) -> Backend:
        req = step.request
        return self.backends["command" if req is not None and req.argv else "message"]

    def _perform(self, result: Result, step: PlannedStep, approver: str | None) -> Outcome:
        if step.request is None:
            self._rec(result, "failed", step, reason=f"cannot run: {step.error}")
            return Outcome(False, step.error or "", None, 0, False)
        backend = self._backend(step)
        dry = isinstance(backend, DryRun)
        common = {"approved_by": approver, "dry_run": dry, "backend": backend.name}
        loc = result.plan.incident.location
        out = result.plan.target.out if result.plan.target else []
        self._rec(result, "started", step, **common)  # on disk before anything runs
        outcome = backend.execute(step.request)
        done = {"act": "executed", "rollback": "rolled_back", "escalate": "escalated", "return": "returned_to_service"}
        name = done.get(step.kind, "executed") if outcome.ok else "failed"
        component = None
        if outcome.ok and step.kind == "act":
            component = f"{loc.get('entity')}:{loc.get('id')}"  # what history counts remediations of
        elif outcome.ok and step.kind in ("rollback", "return") and out:
            component = f"{out[0][0]}:{out[0][1]}"  # back in service
        self._rec(
            result, name, step, exit_code=outcome.exit_code, output=outcome.output, component=component,
            reason=None if outcome.ok else outcome.output, **common,
        )  # fmt: skip
        return outcome

    def _rollback(self, result: Result) -> None:
        for step in result.plan.of_kind("rollback"):
            self._perform(result, step, None)

    def _fail(self, result: Result, outcome: str, escalate_always: bool = True) -> Result:
        for step in result.plan.of_kind("escalate"):
            if step.when != "always" or escalate_always:
                self._perform(result, step, None)
        result.outcome = outcome
        return result

    def _validate(self, result: Result, approver: str | None) -> bool:
        plan = result.plan
        target = plan.target
        assert target is not None
        for step in plan.of_kind("validate"):
            if step.conditions:
                ok, why = self._wait(step.conditions, target, step.timeout_s or 0, step.every_s or 30, step.hold_s or 0)
            else:
                outcome = self._perform(result, step, approver)
                ok, why = outcome.ok, f"{step.request.describe() if step.request else step.name}: {outcome.output}"
            if not ok:
                self._rec(result, "validation_failed", step, reason=f"{why}; stays out of service")
                return False
            self._rec(result, "validated", step, reason=why)
        return all(self._perform(result, step, approver).ok for step in plan.of_kind("return"))

    def _wait(
        self, conditions: list[Condition], target: Target, timeout_s: float, every_s: float, hold_s: float
    ) -> tuple[bool, str]:
        """Poll until every condition holds (for ``hold_s``), at most ``timeout_s``."""
        start = since = self.clock.now()
        held_from: float | None = None
        polls = math.ceil(timeout_s / every_s) + 1
        text = ""
        for _ in range(polls):
            now = self.clock.now()
            results = [self.telemetry.evaluate(c, target, now, since) for c in conditions]
            text = "; ".join(
                f"{c.describe()}: {v if v is not None else 'no data'}"
                for c, (_, v) in zip(conditions, results, strict=True)
            )
            if all(ok for ok, _ in results):
                held_from = now if held_from is None else held_from
                if now - held_from >= hold_s:
                    return True, f"held {now - held_from:g} s after {held_from - start:g} s: {text}"
            else:
                held_from = None
            if now - start >= timeout_s:
                break
            self.sleep(every_s)
        return False, f"not met within {timeout_s:g} s: {text}"

    def _observe(self, result: Result) -> None:
        """Shadow mode: what the verify conditions read now, with nothing done."""
        target = result.plan.target
        now = self.clock.now()
        for step in result.plan.of_kind("verify"):
            for c in step.conditions:
                ok, value = self.telemetry.evaluate(c, target, now, now - c.window_s)  # type: ignore[arg-type]
                state = "no data" if ok is None else ("already holds" if ok else "does not hold")
                self._rec(result, "observed", step, reason=f"without action: {c.describe()} {state} (value {value})")

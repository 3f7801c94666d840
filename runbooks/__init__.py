"""Guarded remediation: one YAML runbook per cause, planned, guarded, executed, verified and audited.

The fault flow is detect → root cause → mitigate → verify. Detection ends with an incident that names
a runbook; this package turns the runbook into a plan for that incident (:mod:`.planner`), checks the
plan against the guards that keep one bad link from becoming an outage (:mod:`.guards`), runs it
through an action backend registered by name (:mod:`.backends`; ``dry-run`` by default everywhere),
verifies the effect on live telemetry, rolls back or escalates, validates before a device returns to
service, and records every decision in the ``runbook_audit`` table (:mod:`.audit`).
"""

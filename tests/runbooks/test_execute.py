"""Executing runbooks: verify succeeding, verify timing out and rolling back, validation keeping a
device out of service, shadow mode executing nothing, history escalating to replacement, the audit
going out as metrics and to the actions topic."""

from __future__ import annotations

import json

from prometheus_client import generate_latest

from fabricwatch.runbooks.audit import ACTIONS_TOPIC, RunbookMetrics, kafka_publisher
from fabricwatch.runbooks.guards import GuardConfig
from fabricwatch.stream.bus import MemoryBus
from fabricwatch.topology import Topology
from tests.runbooks.support import T0, Rig, incident, put

LOOSE = GuardConfig(
    fabric_max=1000, fabric_percent=100, domain_max=1000, domain_percent=100, rate_per_domain_per_hour=1000
)


def hot_gpu(rig: Rig, temp_after: float) -> None:
    gpu = "node001/gpu1"
    put(rig.con, "gpu", T0 - 10, device=gpu, temp_c=82.0, power_limit_w=700.0, util_pct=90.0)
    rig.tick = lambda now: put(rig.con, "gpu", now, device=gpu, temp_c=temp_after, power_limit_w=560.0)


def test_verify_succeeds_and_nothing_is_rolled_back(topo128: Topology) -> None:
    rig = Rig(topo128)
    hot_gpu(rig, temp_after=71.0)
    result = rig.executor.run(incident("inc-1", "gpu_thermal", "gpu", "node001/gpu1", "throttle-gpu"))
    assert result.outcome == "completed"
    assert rig.commands.argvs() == [["nvidia-smi", "-i", "1", "-pl", "560"]]  # 80 % of its 700 W limit
    outcomes = [o for o, _, _ in rig.audit("inc-1")]
    assert "verified" in outcomes and "rolled_back" not in outcomes and "escalated" in outcomes


def test_verify_timing_out_rolls_back_and_escalates(topo128: Topology) -> None:
    rig = Rig(topo128)
    hot_gpu(rig, temp_after=90.0)
    start = rig.clock.now()
    result = rig.executor.run(incident("inc-1", "gpu_thermal", "gpu", "node001/gpu1", "throttle-gpu"))
    assert result.outcome == "verify_failed"
    assert 600 <= rig.clock.now() - start <= 600 + 30  # waited the runbook's timeout, not forever
    assert rig.commands.argvs() == [["nvidia-smi", "-i", "1", "-pl", "560"], ["nvidia-smi", "-i", "1", "-pl", "700"]]
    outcomes = [o for o, _, _ in rig.audit("inc-1")]
    assert outcomes.index("verify_failed") < outcomes.index("rolled_back")
    assert [r.channel for r in rig.messages.requests] == ["ticket"]


def xid(rig: Rig) -> None:
    gpu = "node001/gpu0"
    put(rig.con, "gpu", T0 - 10, device=gpu, util_pct=95.0, xid=79)
    rig.tick = lambda now: put(rig.con, "gpu", now, device=gpu, util_pct=0.0, xid=79)


def test_validation_failing_keeps_the_node_out_of_service(topo128: Topology) -> None:
    rig = Rig(topo128, fail={"dcgmi"})
    xid(rig)
    result = rig.executor.run(incident("inc-1", "gpu_xid", "gpu", "node001/gpu0", "drain-gpu", severity="critical"))
    assert result.outcome == "validation_failed"
    assert [a[:2] for a in rig.commands.argvs()] == [["kubectl", "cordon"], ["kubectl", "drain"], ["dcgmi", "diag"]]
    assert ("node", "node001") in rig.executor.ledger.out  # no uncordon: it stays out
    outcomes = [o for o, _, _ in rig.audit("inc-1")]
    assert "validation_failed" in outcomes and "returned_to_service" not in outcomes


def test_validation_passing_returns_the_node_to_service(topo128: Topology) -> None:
    rig = Rig(topo128)
    xid(rig)
    result = rig.executor.run(incident("inc-1", "gpu_xid", "gpu", "node001/gpu0", "drain-gpu", severity="critical"))
    assert result.outcome == "completed"
    assert rig.commands.argvs()[-2:] == [["dcgmi", "diag", "-r", "1"], ["kubectl", "uncordon", "node001"]]
    assert rig.executor.ledger.out == {}
    outcomes = [o for o, _, _ in rig.audit("inc-1")]
    assert outcomes.index("out_of_service") < outcomes.index("validated") < outcomes.index("returned_to_service")


def test_link_validation_needs_clean_counters_for_the_hold_time(topo128: Topology) -> None:
    """A repaired link returns after ten minutes in budget and clean; errors restart the hold."""
    rig = Rig(topo128, guards=LOOSE, site=False)
    link = next(link for link in topo128.links if link.tier == "fabric")
    ticks = []

    def tick(now: float) -> None:
        """Shut for the first ticks (verify sees it down); then repaired and up, its CRC count still
        rising until the 20th tick, flat after: the hold must start then."""
        ticks.append(now)
        n = len(ticks)
        for k, port in enumerate((link.a, link.b)):
            put(
                rig.con,
                "port",
                now,
                port=port,
                state=0 if n < 3 else 1,
                rx_crc_errors_total=float(min(n, 20) * 7),
                fec_uncorrectable_total=0.0,
            )
            for lane in range(4):
                put(rig.con, "optical", now, port=port, lane=lane, rx_power_dbm=-2.0 - k)

    rig.tick = tick
    result = rig.executor.run(incident("inc-1", "connector_contamination", "link", link.id, "clean-connector"))
    assert result.outcome == "completed", rig.audit("inc-1")
    validated = next(r for r in result.rows if r["outcome"] == "validated")
    assert "held 600 s" in validated["reason"]
    flat_from = ticks[19]
    assert rig.clock.now() >= flat_from + 600  # not before ten clean minutes
    assert rig.executor.ledger.out == {}


def test_shadow_mode_records_the_plan_and_what_telemetry_shows_and_runs_nothing(topo128: Topology) -> None:
    rig = Rig(topo128, mode="shadow")
    hot_gpu(rig, temp_after=71.0)
    put(rig.con, "gpu", T0, device="node001/gpu1", temp_c=86.0)
    result = rig.executor.run(incident("inc-1", "gpu_thermal", "gpu", "node001/gpu1", "throttle-gpu"))
    assert result.outcome == "planned" and rig.commands.requests == [] and rig.messages.requests == []
    observed = [r for r in result.rows if r["outcome"] == "observed"]
    assert observed and "does not hold" in observed[0]["reason"] and observed[0]["mode"] == "shadow"


def test_a_component_remediated_n_times_in_d_days_is_escalated_to_replacement(topo128: Topology) -> None:
    rig = Rig(topo128, guards=GuardConfig(history_times=3, history_days=30, **_loose()))
    link = next(link for link in topo128.links if link.tier == "fabric").id
    for n in range(3):
        result = rig.executor.run(incident(f"inc-{n}", "connector_contamination", "link", link, "clean-connector"))
        assert result.outcome == "completed" and result.plan.runbook.name == "clean-connector"  # type: ignore[union-attr]
        rig.sleep(86400.0)
    plan = rig.executor.plan(incident("inc-9", "connector_contamination", "link", link, "clean-connector"))
    assert plan.runbook is not None and plan.runbook.name == "replace-fiber"
    assert "3 times in 30 days" in plan.reason
    rig.sleep(31 * 86400.0)  # the first two fall out of the 30 days
    plan = rig.executor.plan(incident("inc-10", "connector_contamination", "link", link, "clean-connector"))
    assert plan.runbook.name == "clean-connector"  # type: ignore[union-attr]


def _loose() -> dict[str, float]:
    return {"fabric_max": 1000, "fabric_percent": 100, "domain_max": 1000, "domain_percent": 100}


def test_every_decision_goes_to_the_audit_metrics_and_actions_topic(topo128: Topology) -> None:
    bus = MemoryBus()
    metrics = RunbookMetrics()
    rig = Rig(topo128, approve=False, metrics=metrics, publish=kafka_publisher(bus))
    link = next(link for link in topo128.links if link.tier == "fabric").id
    rig.executor.run(incident("inc-1", "connector_contamination", "link", link, "clean-connector"))
    rows = rig.audit()
    assert ("refused", None, "approval") in rows
    published = [json.loads(r.value) for r in bus.records(ACTIONS_TOPIC)]
    assert [p["outcome"] for p in published] == [o for o, _, _ in rows]
    assert {r.key for r in bus.records(ACTIONS_TOPIC)} == {"leaf0-0"}  # keyed by fault domain
    text = generate_latest(metrics.registry).decode()
    assert 'fabricwatch_runbook_refusals_total{guard="approval"} 1.0' in text
    assert 'fabricwatch_runbook_decisions_total{mode="execute",outcome="refused",runbook="clean-connector"} 1.0' in text

"""Each guard refusing, with the guard and the reason audited and nothing executed; and a storm of
1,000 link incidents in one minute that never breaches the capacity constraint nor the breaker."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from fabricwatch.runbooks.guards import Approvals, GuardConfig
from fabricwatch.topology import Topology
from tests.runbooks.support import Rig, incident, put

STORM = Path(__file__).resolve().parent / "storm"
OPEN = {"fabric_max": 1000, "fabric_percent": 100, "domain_max": 1000, "domain_percent": 100}


def uplinks(topo: Topology, leaf: str) -> list[str]:
    return [link.id for link in topo.links if link.tier == "fabric" and topo.port_device[link.a] == leaf]


def contaminated(rig: Rig, ident: str, link: str) -> str:
    """Run clean-connector on a link; the outcome."""
    return rig.executor.run(incident(ident, "connector_contamination", "link", link, "clean-connector")).outcome


def refusal(rig: Rig, ident: str) -> tuple[str, str]:
    rows = [r for r in rig.con.execute(
        "SELECT guard, reason FROM runbook_audit WHERE incident_id = ? AND outcome = 'refused'", [ident]
    ).fetchall()]  # fmt: skip
    assert rows, f"{ident} was not refused"
    return rows[0]


def executed(rig: Rig, ident: str) -> bool:
    return bool(rig.con.execute(
        "SELECT count(*) FROM runbook_audit WHERE incident_id = ? AND outcome IN ('started', 'executed') "
        "AND kind = 'act'", [ident]
    ).fetchone()[0])  # fmt: skip


def test_capacity_refuses_the_uplink_that_would_leave_a_leaf_below_its_floor(topo128: Topology) -> None:
    rig = Rig(topo128, guards=GuardConfig(rate_per_domain_per_hour=100, **OPEN))
    links = uplinks(topo128, "leaf0-0")  # 16 uplinks: a 75 % floor lets 4 go
    put(rig.con, "port", rig.clock.now(), port=topo128.link_by_id[links[0]].a, state=0)  # one is down already
    assert [contaminated(rig, f"inc-{i}", links[i + 1]) for i in range(3)] == ["completed"] * 3
    assert contaminated(rig, "inc-9", links[9]) == "refused"
    guard, why = refusal(rig, "inc-9")
    assert (
        guard == "capacity" and "leaf leaf0-0 uplinks: 11 of 16 would stay up" in why and "(4 already down)" in why
    )  # 1 dark + 3 shut
    assert not executed(rig, "inc-9")
    # shutting the link that is down already costs nothing
    assert contaminated(rig, "inc-10", links[0]) == "completed"


def test_capacity_refuses_a_nodes_last_path_on_its_rail(topo128: Topology) -> None:
    rig = Rig(topo128)
    host = next(link for link in topo128.links if link.tier == "host")
    assert contaminated(rig, "inc-1", host.id) == "refused"
    guard, why = refusal(rig, "inc-1")
    assert (guard, why) == (
        "capacity",
        f"node node000 rail {host.rail} would lose its last path (1 link(s), 0 already down)",
    )


@pytest.mark.parametrize(
    ("guards", "expected"),
    [
        # 2 % of 256 links = 5 by percentage; the absolute cap of 3 binds first
        ({"fabric_percent": 2, "fabric_max": 3},
         ("breaker_absolute", "4 links of the fabric would be out of service, cap 3")),
        # 1 % of 256 links = 2 by percentage, under the absolute cap of 16
        ({"fabric_percent": 1, "fabric_max": 16},
         ("breaker_percent", "3 of 256 links of the fabric would be out of service, over 1 % (2)")),
    ],
    ids=["absolute", "percent"],
)  # fmt: skip
def test_breaker_refuses_by_absolute_cap_and_by_percentage(topo128: Topology, guards: dict, expected: tuple) -> None:
    cfg = GuardConfig(**{**OPEN, **guards})
    rig = Rig(topo128, guards=cfg)
    leaves = [f"leaf{r}-0" for r in range(8)]
    outcomes = [contaminated(rig, f"inc-{i}", uplinks(topo128, leaf)[0]) for i, leaf in enumerate(leaves[:4])]
    allowed = outcomes.count("completed")
    assert outcomes == ["completed"] * allowed + ["refused"] * (4 - allowed)
    assert refusal(rig, f"inc-{allowed}") == expected


def test_breaker_per_fault_domain(topo128: Topology) -> None:
    rig = Rig(topo128, guards=GuardConfig(**{**OPEN, "domain_max": 2}))
    links = uplinks(topo128, "leaf3-0")
    assert [contaminated(rig, f"inc-{i}", links[i]) for i in range(3)] == ["completed", "completed", "refused"]
    assert refusal(rig, "inc-2") == (
        "breaker_absolute",
        "3 links of fault domain leaf3-0 would be out of service, cap 2",
    )
    assert contaminated(rig, "inc-9", uplinks(topo128, "leaf4-0")[0]) == "completed"  # another domain


def test_rate_limit_per_fault_domain_per_hour(topo128: Topology) -> None:
    rig = Rig(topo128, guards=GuardConfig(**{**OPEN, "rate_per_domain_per_hour": 2}))
    links = uplinks(topo128, "leaf1-0")
    assert [contaminated(rig, f"inc-{i}", links[i]) for i in range(3)] == ["completed", "completed", "refused"]
    guard, why = refusal(rig, "inc-2")
    assert guard == "rate" and why.startswith("2 actions in fault domain leaf1-0 in the last hour")
    rig.sleep(3600.0)
    assert contaminated(rig, "inc-3", links[3]) == "completed"


def test_blast_radius_refuses_draining_a_spine(topo128: Topology) -> None:
    rig = Rig(topo128, guards=GuardConfig(**OPEN))
    result = rig.executor.run(incident("inc-1", "switch_fault", "switch", "spine00", "drain-switch"))
    assert result.outcome == "refused"
    guard, why = refusal(rig, "inc-1")
    assert guard == "blast_radius" and "more than the blast radius of 16" in why
    assert rig.messages.requests and all(r.channel != "request" for r in rig.messages.requests)  # only escalations


def test_destructive_actions_need_approval(topo128: Topology, tmp_path: Path) -> None:
    rig = Rig(topo128, approve=False)
    link = uplinks(topo128, "leaf2-0")[0]
    assert contaminated(rig, "inc-1", link) == "refused"
    assert refusal(rig, "inc-1")[0] == "approval" and rig.commands.requests == []
    approvals = tmp_path / "approvals.yaml"
    now = rig.clock.now()
    approvals.write_text(
        "approvals:\n"
        f"  - {{incident: inc-2, by: alice, until: {now + 600}}}\n"
        f"  - {{incident: inc-3, by: bob, until: {now - 1}}}\n"
    )
    rig.executor.approvals = Approvals.load(approvals)
    assert contaminated(rig, "inc-2", link) == "completed"
    approved = rig.con.execute("SELECT approved_by FROM runbook_audit WHERE incident_id='inc-2' AND outcome='executed'")
    assert approved.fetchone()[0] == "alice"
    assert contaminated(rig, "inc-3", uplinks(topo128, "leaf2-0")[1]) == "refused"  # its approval expired


def test_one_incident_one_execution(topo128: Topology) -> None:
    rig = Rig(topo128)
    link = uplinks(topo128, "leaf5-0")[0]
    assert contaminated(rig, "inc-1", link) == "completed"
    assert contaminated(rig, "inc-1", link) == "refused"
    assert refusal(rig, "inc-1")[0] == "idempotence"
    assert len([a for a in rig.commands.argvs() if a[-1] == "false"]) == 1


@pytest.mark.parametrize("binding", ["breaker", "capacity"])
def test_a_storm_of_1000_link_incidents_in_one_minute_never_breaches_capacity_nor_breaker(
    topo1024: Topology, binding: str
) -> None:
    cfg = GuardConfig() if binding == "breaker" else GuardConfig(rate_per_domain_per_hour=10_000, **OPEN)
    rig = Rig(topo1024, guards=cfg, site=False)
    from fabricwatch.runbooks.loader import load_library

    rig.executor.planner.books = load_library(STORM)
    fabric = [link for link in topo1024.links if link.tier == "fabric"]
    leaf_of = {link.id: topo1024.port_device[link.a] for link in fabric}
    per_leaf = Counter(leaf_of.values())
    start = rig.clock.now()
    outcomes = Counter()
    for i, link in enumerate(fabric[:1000]):
        rig.clock.advance_to(start + i * 0.06)
        outcomes[contaminated(rig, f"inc-{i:04d}", link.id)] += 1
        out = [ident for kind, ident in rig.executor.ledger.out if kind == "link"]
        down = Counter(leaf_of[x] for x in out)
        assert all(per_leaf[leaf] - n >= 0.75 * per_leaf[leaf] for leaf, n in down.items()), down
        assert len(out) <= min(cfg.fabric_max, max(1, int(len(topo1024.links) * cfg.fabric_percent / 100)))
        assert all(n <= cfg.domain_max for n in down.values())
    assert rig.clock.now() - start < 60.0
    executed_acts = len([a for a in rig.commands.argvs() if a[-1] == "false"])
    if binding == "breaker":
        assert outcomes == {"completed": 16, "refused": 984} and executed_acts == 16  # the absolute cap, exactly
    else:
        # capacity alone: 16 of each leaf's 64 uplinks; 1,000 links cover 15 leaves and part of a 16th
        assert outcomes["completed"] == 16 * 16 == executed_acts
    reasons = Counter(
        g for (g,) in rig.con.execute("SELECT guard FROM runbook_audit WHERE outcome='refused'").fetchall()
    )
    assert set(reasons) <= {"breaker_absolute", "breaker_percent", "capacity", "rate"}

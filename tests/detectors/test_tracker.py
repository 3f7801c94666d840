"""The incident tracker: debounce, stable ids, refinement, folding, resolution, snapshot/restore.

Ticks are every 10 s; ``open_after_s`` is 30 s and ``resolve_after_s`` 120 s (the defaults).
"""

from __future__ import annotations

import json

import pytest

from fabricwatch.detectors.config import EngineConfig
from fabricwatch.detectors.correlate import Diagnosis
from fabricwatch.detectors.tracker import IncidentTracker
from fabricwatch.records import Finding


def diag(cause: str, entity: str, ident: str, anchor: str, severity: str = "minor", first_seen: float = 0.0,
         covers: set[str] | None = None) -> Diagnosis:  # fmt: skip
    finding = Finding("test", "x", "port", "p", first_seen, first_seen, severity, ({"metric": "m", "value": 1.0},))
    return Diagnosis(cause, entity, ident, anchor, [finding], [], covers or set())


DIRTY = diag("connector_contamination", "link", "L1", "link:L1", first_seen=-5.0)
FIBRE = diag("fiber_damage", "link", "L1", "link:L1")
DIRTY_MAJOR = diag("connector_contamination", "link", "L1", "link:L1", severity="major")
OTHER = diag("gpu_xid", "gpu", "n0/gpu1", "gpu:n0/gpu1", severity="critical")


def run(tracker: IncidentTracker, ticks: list[tuple[float, list[Diagnosis]]]) -> list[list[dict]]:
    """Feed (now, diagnoses) ticks; per tick, the changed incidents as dicts."""
    return [[i.to_dict() for i in tracker.update(ds, now)] for now, ds in ticks]


DEBOUNCE_ROWS = [
    # comment, ticks (now, present?), the tick index at which the incident opens (None: never)
    ("present on 4 ticks spanning 30 s opens on the 4th", [(0, 1), (10, 1), (20, 1), (30, 1)], 3),
    ("present 20 s then gone: noise, never opens", [(0, 1), (10, 1), (20, 1), (30, 0), (40, 0)], None),
    ("a gap restarts the count", [(0, 1), (10, 1), (20, 0), (30, 1), (40, 1), (50, 1), (60, 1)], 6),
    ("ticks further apart still need 30 s", [(0, 1), (25, 1), (50, 1)], 2),
]


@pytest.mark.parametrize(("comment", "ticks", "opens_at"), DEBOUNCE_ROWS, ids=[r[0] for r in DEBOUNCE_ROWS])
def test_debounce_rows(comment: str, ticks: list[tuple[float, int]], opens_at: int | None) -> None:
    out = run(IncidentTracker(), [(now, [DIRTY] if present else []) for now, present in ticks])
    opened = [i for i, changed in enumerate(out) if changed]
    assert opened == ([] if opens_at is None else [opens_at]), comment
    if opens_at is not None:
        (inc,) = out[opens_at]
        assert inc["id"] == "inc-0001" and inc["detected_at"] == ticks[opens_at][0]
        assert inc["first_seen"] == -5.0 and inc["status"] == "firing" and inc["runbook"] == "clean-connector"


def test_refinement_keeps_the_id_and_needs_to_hold() -> None:
    t = IncidentTracker()
    run(t, [(s, [DIRTY]) for s in (0, 10, 20, 30)])
    flicker = run(t, [(40, [FIBRE]), (50, [DIRTY])])  # one tick of fibre: not enough to change the cause
    assert flicker == [[], []]
    out = run(t, [(s, [FIBRE]) for s in (60, 70, 80, 90)])
    assert [len(c) for c in out] == [0, 0, 0, 1]
    (inc,) = out[3]
    assert (inc["id"], inc["cause"], inc["runbook"], inc["type"]) == (
        "inc-0001", "fiber_damage", "replace-fiber", "link_degradation"
    )  # fmt: skip


def test_severity_escalates_but_never_drops_while_firing() -> None:
    t = IncidentTracker()
    run(t, [(s, [DIRTY]) for s in (0, 10, 20, 30)])
    (up,) = run(t, [(40, [DIRTY_MAJOR])])[0]
    assert up["severity"] == "major"
    assert run(t, [(50, [DIRTY])]) == [[]]  # back to minor evidence: unchanged, not re-emitted
    assert t.roots()[0].severity == "major"


def test_unchanged_incident_is_not_re_emitted() -> None:
    t = IncidentTracker()
    out = run(t, [(s, [DIRTY]) for s in range(0, 200, 10)])
    assert [len(c) for c in out].count(1) == 1


def test_resolution_after_quiet_period_and_a_return_long_after_is_a_new_incident() -> None:
    t = IncidentTracker(EngineConfig(recur_within_s=600))
    run(t, [(s, [DIRTY]) for s in (0, 10, 20, 30, 40)])
    quiet = run(t, [(s, []) for s in range(50, 170, 10)])
    resolved = [c for c in quiet if c]
    assert len(resolved) == 1 and resolved[0][0]["status"] == "resolved" and resolved[0][0]["resolved_at"] == 160
    again = run(t, [(s, [DIRTY]) for s in (700, 710, 720, 730)])
    assert again[3][0]["id"] == "inc-0002"
    assert [i.id for i in t.roots()] == ["inc-0001", "inc-0002"]


def test_an_intermittent_fault_is_one_incident_held_open_through_its_quiet_spells() -> None:
    """Episodes of 40 s every 5 minutes (quiet 260 s, longer than resolve_after_s): the first quiet
    spell resolves it, the return re-opens the same incident, and from then on the hold (twice the
    longest quiet spell) keeps it open; it resolves once the fault stays away longer than that."""
    t = IncidentTracker()
    changes = []
    for episode in range(4):
        start = episode * 300
        ticks = [(s, [DIRTY]) for s in range(start, start + 40, 10)]
        ticks += [(s, []) for s in range(start + 40, start + 300, 10)]
        changes += [c for tick in run(t, ticks) for c in tick]
    assert {c["id"] for c in changes} == {"inc-0001"}
    statuses = [c["status"] for c in changes]
    # opened; the first spell resolves it; back (re-opened), then held: episodes 3 and 4 are updates
    assert statuses == ["firing", "resolved", "firing", "firing", "firing"]
    (inc,) = t.roots()
    assert inc.status == "firing" and {"metric": "episodes", "value": 4, "quiet_s": 270.0} in inc.evidence
    after = run(t, [(s, []) for s in range(1200, 1900, 10)])  # gone for good: resolves after 2 × 270 s
    (closed,) = [c for tick in after for c in tick]
    assert closed["status"] == "resolved" and closed["resolved_at"] == 900 + 30 + 540


def test_a_root_folds_an_incident_it_explains() -> None:
    t = IncidentTracker()
    link = diag("transceiver_fault", "port", "leaf1-0:p02", "link:L7", severity="minor")
    run(t, [(s, [link]) for s in (0, 10, 20, 30)])  # opens first: inc-0001
    gpu = diag("npo_thermal_coupling", "gpu", "n2/gpu1", "gpu:n2/gpu1", severity="major", covers={"link:L7"})
    out = run(t, [(s, [gpu]) for s in (40, 50, 60, 70)])
    folded = {i["id"]: i for i in out[3]}
    assert folded["inc-0001"]["status"] == "resolved" and folded["inc-0001"]["resolved_at"] == 70
    assert folded["inc-0002"]["symptoms"] == ["inc-0001"] and folded["inc-0002"]["status"] == "firing"
    assert [i.id for i in t.roots()] == ["inc-0002"]


def test_a_root_over_a_link_folds_both_of_its_problems() -> None:
    t = IncidentTracker()
    laser = diag("laser_degradation", "port", "leaf1-0:p02", "link:L7")
    dirt = diag("connector_contamination", "link", "L7", "link:L7>n2/gpu1:p0")  # the other way (correlate rule 6)
    out = run(t, [(s, [laser, dirt]) for s in (0, 10, 20, 30)])
    assert sorted(i["cause"] for i in out[3]) == ["connector_contamination", "laser_degradation"]
    gpu = diag("npo_thermal_coupling", "gpu", "n2/gpu1", "gpu:n2/gpu1", severity="major", covers={"link:L7"})
    run(t, [(s, [gpu]) for s in (40, 50, 60, 70)])
    (root,) = t.roots()
    assert root.cause == "npo_thermal_coupling" and root.symptoms == ["inc-0001", "inc-0002"]


def test_a_gpus_own_xid_is_never_folded_into_a_root_that_covers_the_gpu() -> None:
    t = IncidentTracker()
    loop = diag("cooling_failure", "cooling_loop", "cl00", "cooling_loop:cl00", covers={"gpu:n1/gpu3"})
    run(t, [(s, [loop]) for s in (0, 10, 20, 30)])
    xid = diag("gpu_xid", "gpu", "n1/gpu3", "gpu:n1/gpu3", severity="critical")
    hot = diag("gpu_thermal", "gpu", "n1/gpu3", "gpu:n1/gpu3", severity="major")
    run(t, [(s, [loop, xid, hot]) for s in (40, 50, 60, 70)])
    assert sorted(i.cause for i in t.roots()) == ["cooling_failure", "gpu_xid"]  # the heat folded, the XID not


def test_ids_follow_key_order_within_a_tick() -> None:
    t = IncidentTracker()
    out = run(t, [(s, [OTHER, DIRTY]) for s in (0, 10, 20, 30)])
    assert [(i["id"], i["cause"]) for i in out[3]] == [("inc-0001", "gpu_xid"), ("inc-0002", "connector_contamination")]


def test_snapshot_restore_continues_exactly() -> None:
    ticks = [(s, ([DIRTY] if s < 100 else []) + ([OTHER] if 20 <= s < 300 else [])) for s in range(0, 400, 10)]
    uninterrupted = IncidentTracker()
    whole = run(uninterrupted, ticks)
    first = IncidentTracker()
    head = run(first, ticks[:5])  # DIRTY just opened, OTHER still debouncing
    state = json.loads(json.dumps(first.snapshot()))
    second = IncidentTracker()
    second.restore(state)
    assert second.snapshot() == first.snapshot()
    assert head + run(second, ticks[5:]) == whole
    assert [i.to_dict() for i in second.roots()] == [i.to_dict() for i in uninterrupted.roots()]


def test_config_timers_are_used() -> None:
    t = IncidentTracker(EngineConfig(open_after_s=10.0, resolve_after_s=20.0))
    out = run(t, [(0, [DIRTY]), (10, [DIRTY]), (20, []), (30, []), (40, [])])
    assert [len(c) for c in out] == [0, 1, 0, 1, 0]


def step(cause: str, symptom: str, anchor: str = "link:L1") -> Diagnosis:
    finding = Finding("test", symptom, "port", "p", 0.0, 0.0, "critical", ({"metric": "state", "value": 0},))
    entity, ident = ("port", "p") if cause == "transceiver_fault" else ("link", "L1")
    return Diagnosis(cause, entity, ident, anchor, [finding])


def xid(severity: str) -> Diagnosis:
    finding = Finding("gpu_xid", "gpu_xid", "gpu", "n0/gpu1", 0.0, 0.0, severity, ({"metric": "xid", "value": 79},))
    return Diagnosis("gpu_xid", "gpu", "n0/gpu1", "gpu:n0/gpu1", [finding])


STEP_ROWS = [
    # comment, diagnosis, the tick index at which it opens (ticks every 10 s from 0)
    ("a link reading down opens on the first tick", step("link_down", "link_down"), 0),
    ("light lost opens on the first tick", step("fiber_damage", "loss_of_light"), 0),
    ("a dark lane opens on the first tick", step("transceiver_fault", "tx_dark"), 0),
    ("a critical XID the driver logged opens on the first tick", xid("critical"), 0),
    ("an XID that is an application's fault keeps the debounce", xid("major"), 3),
    ("a noisy judgement keeps its 30 s debounce", DIRTY, 3),
]


@pytest.mark.parametrize(("comment", "d", "opens_at"), STEP_ROWS, ids=[r[0] for r in STEP_ROWS])
def test_step_faults_open_at_once_noisy_judgements_wait(comment: str, d: Diagnosis, opens_at: int) -> None:
    out = run(IncidentTracker(), [(s, [d]) for s in (0, 10, 20, 30)])
    assert next(i for i, changed in enumerate(out) if changed) == opens_at, comment


def test_a_link_found_down_then_its_dark_lane_is_one_incident_refined() -> None:
    t = IncidentTracker()
    run(t, [(0, [step("link_down", "link_down")]), (10, [step("link_down", "link_down")])])
    run(t, [(s, [step("transceiver_fault", "tx_dark")]) for s in (20, 30, 40, 50)])
    (inc,) = t.roots()
    assert (inc.id, inc.type, inc.cause, inc.detected_at) == ("inc-0001", "link_degradation", "transceiver_fault", 0)


def test_a_link_flapping_takes_the_path_part_seen_with_its_downs_at_once_and_keeps_it() -> None:
    """An intermittent connector whose episodes drop the link: the light lost one way shows only while
    an episode lasts, the flaps in between too; the incident names the connector from the first
    episode it is seen in, and the flaps between episodes never turn it back into a flap."""
    t = IncidentTracker()
    flap, dirty = step("link_flap", "link_flap"), step("connector_contamination", "rx_power_low_alarm")
    run(t, [(0, [step("link_down", "link_down")]), (10, [dirty])])
    (inc,) = t.roots()
    assert inc.cause == "connector_contamination", "adopted at once: no 30 s debounce for what explains the downs"
    run(t, [(s, [flap]) for s in (20, 30, 40, 50, 60, 70)])
    (inc,) = t.roots()
    assert (inc.id, inc.cause) == ("inc-0001", "connector_contamination")


def test_a_collector_incident_resolves_with_the_first_fresh_data() -> None:
    silent = Finding("liveness", "collector_silent", "collector", "node001", 0.0, 70.0, "major")
    from fabricwatch.detectors.liveness import CollectorDiagnosis

    d = CollectorDiagnosis("collector_silent", "collector", "node001", "collector:node001", [silent])
    t = IncidentTracker()
    (opened,) = t.update([d], 70.0)
    assert (opened.type, opened.location, opened.runbook) == (
        "collector_silent",
        {"entity": "collector", "id": "node001"},
        "collector-silent",
    )
    (closed,) = t.update([], 80.0)
    assert closed.status == "resolved" and closed.resolved_at == 80.0


# --- a live stage 2's tracker forgets what can no longer change (prune=True) ----------------------------


def faults_every(spacing_s: float, count: int, present_s: float) -> list[tuple[float, list[Diagnosis]]]:
    """Ticks every 10 s: fault ``i`` (on its own link) present for ``present_s`` from ``i * spacing_s``,
    then the run goes on past the last one's ``recur_within_s`` (the default's 1800 s), so it can be pruned."""
    faults = [diag("connector_contamination", "link", f"X{i}", f"link:X{i}") for i in range(count)]
    end = int(count * spacing_s + EngineConfig().recur_within_s + EngineConfig().resolve_after_s + 20)
    return [
        (float(s), [d for i, d in enumerate(faults) if i * spacing_s <= s < i * spacing_s + present_s])
        for s in range(0, end, 10)
    ]


def test_a_pruning_tracker_stays_bounded_over_hours_and_returns_exactly_what_a_full_one_does() -> None:
    """A fault every 5 minutes for 6 simulated hours (72 incidents, each open a minute): the full
    tracker keeps all 72; the pruning one keeps those open or resolved within ``recur_within_s``."""
    spacing = 300.0
    ticks = faults_every(spacing, 72, present_s=60.0)
    full, pruned = IncidentTracker(), IncidentTracker(prune=True)
    most = {"incidents": 0, "meta": 0, "resolved": 0}
    for now, ds in ticks:
        assert [i.to_dict() for i in pruned.update(ds, now)] == [i.to_dict() for i in full.update(ds, now)]
        snap = pruned.snapshot()
        most = {k: max(most[k], len(snap[k])) for k in most}
    # within recur_within_s of its last sighting an incident may come back: 1800 / 300 = 6 such, +1 for
    # the one a tick may be past its window and not yet forgotten, +1 open
    bound = int(EngineConfig().recur_within_s // spacing) + 2
    assert 0 < most["incidents"] <= bound and most["meta"] <= bound and most["resolved"] <= bound
    assert len(full.snapshot()["incidents"]) == 72
    final = pruned.snapshot()
    assert final["incidents"] == [] and final["meta"] == {} and final["resolved"] == {} and final["next"] == 73
    assert pruned.roots() == [] and len(full.roots()) == 72


def test_an_intermittent_fault_re_attaches_after_a_pruned_snapshot_and_restore() -> None:
    """DIRTY (on L1) last seen at 40 s comes back at 900 s while faults on other links come and go: the
    same incident, across a snapshot and restore of the pruning tracker taken while it was resolved.
    Last seen again at 940 s, it returns with its debounce starting 10 s inside ``recur_within_s`` and
    opening past it: the pending return keeps it, and it re-attaches again (across a second snapshot
    and restore, taken once the first other faults are forgotten), as in a tracker that keeps all."""
    recur = EngineConfig().recur_within_s
    others = faults_every(300.0, 12, present_s=60.0)  # 12 incidents on links X0..X11, one every 5 minutes
    dirty = [(0, 50), (900, 950), (int(940 + recur - 10), int(940 + recur + 60))]  # present over [start, end)
    ticks = [(now, ds + ([DIRTY] if any(a <= now < b for a, b in dirty) else [])) for now, ds in others]
    whole = run(IncidentTracker(), ticks)
    tracker, out = IncidentTracker(prune=True), []
    for lo, hi in [(0, 600), (600, 2400), (2400, float("inf"))]:  # DIRTY resolved at 600, held open at 2400
        state = json.loads(json.dumps(tracker.snapshot()))
        tracker = IncidentTracker(prune=True)
        tracker.restore(state)
        kept = {i["location"]["id"] for i in state["incidents"]}
        assert lo == 0 or "L1" in kept  # it may come back: kept
        assert lo < 2400 or not {"X0", "X1"} & kept  # last seen over recur_within_s ago: forgotten
        out += run(tracker, [(now, ds) for now, ds in ticks if lo <= now < hi])
    assert out == whole
    dirty_changes = [c for tick in whole for c in tick if c["location"]["id"] == "L1"]
    assert {c["id"] for c in dirty_changes} == {"inc-0001"}  # one incident through both returns
    assert [c["status"] for c in dirty_changes] == ["firing", "resolved", "firing", "resolved", "firing", "resolved"]


def test_a_fault_back_after_recur_within_s_is_new_and_its_old_incident_was_forgotten() -> None:
    t = IncidentTracker(EngineConfig(recur_within_s=600), prune=True)
    run(t, [(s, [DIRTY]) for s in (0, 10, 20, 30, 40)])
    run(t, [(s, []) for s in range(50, 650, 10)])  # resolved at 160; last seen 40: 600 s later, still kept
    assert [i["id"] for i in t.snapshot()["incidents"]] == ["inc-0001"]
    run(t, [(650, [])])  # 610 s after its last sighting it cannot come back
    assert t.snapshot()["incidents"] == []
    again = run(t, [(s, [DIRTY]) for s in (700, 710, 720, 730)])
    assert again[3][0]["id"] == "inc-0002"

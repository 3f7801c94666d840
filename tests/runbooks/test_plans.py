"""Every runbook against a replayed incident of its cause: the dry-run plan is a golden file.

Each case replays a stored capture of replay/library into DuckDB, takes the incident detection
found, and plans it as of its detection time (the silent collector's incident comes from the
library's collector-outage capture, as detection reports it). Two incidents are not produced by
detection today and are stated here instead: a switch_fault (detection reports its ports: see the
library's expected files) and a link losing ≥ 1 % of frames (the seeds' rule); each is planned over
the replayed telemetry of a capture with that fault.
Regenerate with FABRICWATCH_UPDATE_GOLDEN=1 after a deliberate change, and read the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fabricwatch.clock import VirtualClock
from fabricwatch.incident import Incident
from fabricwatch.replay.capture import open_capture
from fabricwatch.replay.run import replay
from fabricwatch.runbooks import cli as rcli
from fabricwatch.runbooks.config import ActionsConfig
from fabricwatch.runbooks.executor import Executor
from fabricwatch.runbooks.loader import load_library
from fabricwatch.stream.store import Store

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "replay" / "library"
GOLDEN = ROOT / "tests" / "golden" / "runbooks"

# runbook → (capture, how to get the incident: "inc-0001" from detection, or a stated one)
CASES = {
    "clean-connector": ("connector-contamination-4db", None),
    "replace-fiber": ("fiber-damage-step", None),
    "replace-transceiver": ("transceiver-errors", None),
    "reseat-transceiver": ("link-flap-fast", None),
    "check-link": ("link-down-host", None),
    "drain-switch": ("switch-fault-leaf", "switch_fault"),
    "rebalance-traffic": ("incast-hotspot", None),
    "isolate-pfc-source": ("pfc-storm-host", None),
    "check-cooling-loop": ("cooling-failure-mild", None),
    "throttle-gpu": ("gpu-thermal-mild", None),
    "throttle-hot-gpu": ("gpu-thermal", None),
    "drain-gpu": ("gpu-xid-79", None),
    "reroute": ("transceiver-errors", "loss"),
    "collector-silent": ("collector-outage", None),
}


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("replayed")
    out = {}
    for capture in sorted({c for c, _ in CASES.values()}):
        db = folder / f"{capture}.duckdb"
        replay(LIB / f"{capture}.jsonl.gz", db=db)
        out[capture] = db
    return out


def stated(kind: str, detected: Incident | None, capture: str) -> Incident:
    truth = open_capture(LIB / f"{capture}.jsonl.gz").truth or []
    if kind == "switch_fault":
        switch = next(f["switch"] for f in truth if f["cause"] == "switch_fault")
        base = detected
        assert base is not None
        return Incident(
            "inc-0100", "switch_fault", "switch_fault", {"entity": "switch", "id": switch}, "critical",
            base.first_seen, base.detected_at, runbook="drain-switch",
        )  # fmt: skip
    if kind == "loss":
        assert detected is not None
        detected.evidence.append({"metric": "loss_ratio", "port": detected.location["id"], "value": 0.02})
        detected.runbook = "reroute"
        return detected
    raise AssertionError(f"no stated incident of kind {kind!r}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_runbook_plan_on_a_replayed_incident_matches_golden(name: str, replayed: dict[str, Path]) -> None:
    capture, kind = CASES[name]
    topo = open_capture(LIB / f"{capture}.jsonl.gz").topology
    with Store(replayed[capture]) as store:
        ids = [r[0] for r in store.con.execute("SELECT id FROM incidents ORDER BY id").fetchall()]
        detected = rcli.incident(store.con, ids[0]) if ids else None
        inc = stated(kind, detected, capture) if kind else detected
        assert inc is not None
        clock = VirtualClock(inc.detected_at)
        ex = Executor(topo, load_library(), store.con, ActionsConfig(), clock=clock, read_only=True)
        plan = ex.plan(inc)
    assert plan.runbook is not None and plan.runbook.name == name, plan.reason
    got = json.dumps(plan.to_dict(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    path = GOLDEN / f"{name}.plan.json"
    if os.environ.get("FABRICWATCH_UPDATE_GOLDEN") == "1":
        path.write_text(got)
    assert got == path.read_text()
    steps = plan.to_dict()["steps"]
    assert all("error" not in s for s in steps), [s for s in steps if "error" in s]
    diagnose = [s for s in steps if s["kind"] == "diagnose"]
    assert diagnose and all(s["rows"] for s in diagnose), "forensic SQL finds the fault's telemetry"

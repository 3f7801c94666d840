"""Every runbook against a replayed incident of its cause: the dry-run plan is a golden file.

Each case replays a stored capture of replay/library into DuckDB, takes the incident detection
found, and plans it as of its detection time: every incident here is one detection reports.
Regenerate with FABRICWATCH_UPDATE_GOLDEN=1 after a deliberate change, and read the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fabricwatch.clock import VirtualClock
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

# runbook → the library capture whose replayed incident it is planned on (detection's, never stated)
CASES = {
    "clean-connector": "connector-contamination-4db",
    "replace-fiber": "fiber-damage-step",
    "replace-transceiver": "transceiver-errors",
    "reseat-transceiver": "link-flap-fast",
    "check-link": "link-down-host",
    "drain-switch": "switch-fault-leaf",
    "rebalance-traffic": "incast-hotspot",
    "isolate-pfc-source": "pfc-storm-host",
    "check-cooling-loop": "cooling-failure-mild",
    "throttle-gpu": "gpu-thermal-mild",
    "throttle-hot-gpu": "gpu-thermal",
    "drain-gpu": "gpu-xid-79",
    "reroute": "transceiver-lossy",
    "collector-silent": "collector-outage",
}


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("replayed")
    out = {}
    for capture in sorted(set(CASES.values())):
        db = folder / f"{capture}.duckdb"
        replay(LIB / f"{capture}.jsonl.gz", db=db)
        out[capture] = db
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_runbook_plan_on_a_replayed_incident_matches_golden(name: str, replayed: dict[str, Path]) -> None:
    capture = CASES[name]
    topo = open_capture(LIB / f"{capture}.jsonl.gz").topology
    with Store(replayed[capture]) as store:
        ids = [r[0] for r in store.con.execute("SELECT DISTINCT id FROM incidents ORDER BY id").fetchall()]
        plans = []  # the first incident the library plans with this runbook (a capture may hold others)
        for inc_id in ids:
            inc = rcli.incident(store.con, inc_id)
            ex = Executor(topo, load_library(), store.con, ActionsConfig(), clock=VirtualClock(inc.detected_at),
                          read_only=True)  # fmt: skip
            plans.append(ex.plan(inc))
            if plans[-1].runbook is not None and plans[-1].runbook.name == name:
                break
    assert plans, f"replaying {capture} gives no incident"
    plan = plans[-1]
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

"""``fabricwatch runbook``: list, show, plan, run and history, on a replayed incident."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabricwatch.cli import main
from fabricwatch.replay.run import replay
from fabricwatch.runbooks.guards import GuardConfig
from fabricwatch.stream.store import Store
from fabricwatch.topology import Topology
from tests.runbooks.support import Rig, incident

CAPTURE = Path(__file__).resolve().parents[2] / "replay" / "library" / "link-down-host.jsonl.gz"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "fw.duckdb"
    replay(CAPTURE, db=path)
    return path


def test_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runbook", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 14 and any(line.startswith("reroute ") and "loss_ratio ≥ 0.01" in line for line in lines)
    assert main(["runbook", "show", "drain-gpu"]) == 0
    assert "template: dcgmi-diag" in capsys.readouterr().out
    assert main(["runbook", "show", "nope"]) == 2
    assert "fabricwatch runbook: NAME: no runbook 'nope'" in capsys.readouterr().err


def test_plan_run_and_guarded_run(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--db", str(db), "--topology", str(CAPTURE)]
    assert main(["runbook", "plan", "inc-0001", *common, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["runbook"] == "check-link" and [g["guard"] for g in plan["guards"]] == ["approval"]
    # a link that is down already costs no capacity to shut, even as its node's only path on the rail
    assert main(["runbook", "run", "inc-0001", *common, "--execute"]) == 1
    out = capsys.readouterr().out
    assert "outcome (execute): refused" in out and "[approval] check-link is destructive" in out
    assert main(["runbook", "run", "inc-0001", *common, "--execute", "--approve"]) == 0
    out = capsys.readouterr().out
    assert "outcome (execute): completed" in out and "not_verified" in out  # dry-run backends: nothing ran
    assert main(["runbook", "history", "--db", str(db)]) == 0
    assert "no remediation recorded" in capsys.readouterr().out  # dry-run executions are not remediations
    assert main(["runbook", "plan", "inc-0999", *common]) == 2
    assert "no incident 'inc-0999'" in capsys.readouterr().err


def test_a_bad_actions_config_is_one_line_with_file_and_line(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "actions.yaml"
    bad.write_text(
        "backends: {command: command}\ncommand: {allowlist: {kubectl: /usr/bin/kubectl}}\nguards:\n  blast: 3\n"
    )
    assert main(["runbook", "plan", "inc-0001", "--db", str(db), "--topology", str(CAPTURE), "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"fabricwatch runbook: {bad}:4: guards: unknown key 'blast' (known: min_uplink_fraction, fabric_percent, "
        "fabric_max, domain_percent, domain_max, rate_per_domain_per_hour, blast_radius, history_times, history_days)"
    )


def test_history_shows_repeated_remediation_and_the_escalation(
    topo128: Topology, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "fw.duckdb"
    loose = GuardConfig(fabric_max=99, fabric_percent=100, domain_max=99, domain_percent=100)
    with Store(path) as store:
        rig = Rig(topo128, guards=loose, con=store.con)
        for n in range(4):
            rig.executor.run(incident(f"inc-{n}", "connector_contamination", "link", "L00128", "clean-connector"))
            rig.sleep(3600.0)
    assert main(["runbook", "history", "--db", str(path), "--component", "L00128"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("L00128               clean-connector      3× from")
    assert out[0].endswith("inc-0 inc-1 inc-2")
    assert "escalated: L00128 needed clean-connector 3 times in 30 days: escalated to replace-fiber instead" in out[-1]


def test_real_backends_never_execute_on_a_recorded_database(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "actions.yaml"
    config.write_text("backends: {command: command}\ncommand: {allowlist: {gnmic: /bin/true}}\n")
    args = ["runbook", "run", "inc-0001", "--db", str(db), "--topology", str(CAPTURE), "--config", str(config)]
    assert main([*args, "--execute", "--approve"]) == 2
    assert "is a recording" in capsys.readouterr().err

"""Inert text end to end, webhooks that fail, and a crash between executing and auditing.

The command test runs real processes: an allowlisted test program records the argv and environment
it was given, so what reaches a real kubectl or scontrol is checked, not what we meant to send.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from fabricwatch.clock import VirtualClock
from fabricwatch.runbooks.backends import Http
from fabricwatch.runbooks.config import ActionsConfig
from fabricwatch.runbooks.executor import Executor
from fabricwatch.runbooks.guards import Approvals
from fabricwatch.runbooks.loader import load_library
from fabricwatch.stream.store import Store
from fabricwatch.topology import Topology, generate
from tests.runbooks.support import T0, Rig, argv_recorder, incident, put

EVIL_NODE = "n`touch${IFS}PWNED1`;$(touch${IFS}PWNED2)\"'|&>PWNED3"
EVIL_ID = "inc-1\n; rm -rf / ; $(touch PWNED4) `touch PWNED5` 'quoted' \"dq\""
SITE_RUNBOOK = """name: evil-drain
trigger: {type: gpu_fault, cause: gpu_xid}
takes_out: node
steps:
  - act: drain
    template: slurm-drain
  - act: cordon
    argv: [kubectl, cordon, "{node}", "--reason={incident_id}"]
    env: {FW_INCIDENT: "{incident_id}", FW_NODE: "{node}"}
"""


def evil_topology() -> Topology:
    d = json.loads(json.dumps(generate(16, 8, 8).to_dict()).replace("node001", json.dumps(EVIL_NODE)[1:-1]))
    return Topology.from_dict(d)


def test_metacharacters_stay_inert_text_through_a_real_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # where any injected `touch` would land
    log = tmp_path / "argv.jsonl"
    recorder = argv_recorder(tmp_path, log)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "evil-drain.yaml").write_text(SITE_RUNBOOK)
    topo = evil_topology()
    gpu = f"{EVIL_NODE}/gpu0"
    config = ActionsConfig(command_backend="command", allowlist={"kubectl": str(recorder), "scontrol": str(recorder)})
    with Store(":memory:") as store:
        ex = Executor(
            topo, load_library(tmp_path / "site"), store.con, config, clock=VirtualClock(T0), mode="execute",
            approvals=Approvals("tester"), say=lambda line: None,
        )  # fmt: skip
        inc = incident(EVIL_ID, "gpu_xid", "gpu", gpu, "evil-drain", severity="critical")
        result = ex.run(inc)
        audit = store.con.execute("SELECT argv FROM runbook_audit WHERE outcome = 'executed'").fetchall()
    assert result.outcome == "completed", result.rows
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["argv"] for c in calls] == [
        ["update", f"NodeName={EVIL_NODE}", "State=DRAIN", f"Reason=fabricwatch {EVIL_ID} gpu_xid"],
        ["cordon", EVIL_NODE, f"--reason={EVIL_ID}"],
    ]
    assert calls[1]["env"] == {"FW_INCIDENT": EVIL_ID, "FW_NODE": EVIL_NODE}
    assert [row[0][1:] for row in audit] == [c["argv"] for c in calls]  # the audit says what ran
    assert not list(tmp_path.glob("PWNED*")) and not list(Path.cwd().glob("PWNED*"))


def test_an_executable_outside_the_allowlist_is_not_run(tmp_path: Path, topo128: Topology) -> None:
    log = tmp_path / "argv.jsonl"
    config = ActionsConfig(command_backend="command", allowlist={"kubectl": str(argv_recorder(tmp_path, log))})
    with Store(":memory:") as store:
        put(store.con, "gpu", T0 - 10, device="node001/gpu1", temp_c=82.0, power_limit_w=700.0)
        ex = Executor(topo128, load_library(), store.con, config, clock=VirtualClock(T0), mode="execute")
        result = ex.run(incident("inc-1", "gpu_thermal", "gpu", "node001/gpu1", "throttle-gpu"))
        failed = store.con.execute("SELECT reason FROM runbook_audit WHERE outcome = 'failed'").fetchone()
    assert result.outcome == "failed" and not log.exists()
    assert failed is not None and "'nvidia-smi' is not in the allowlist (kubectl)" in failed[0]


class Hook(BaseHTTPRequestHandler):
    script: ClassVar[list[int]] = []
    seen: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen.append({"body": json.loads(body), "headers": dict(self.headers)})
        code = type(self).script.pop(0) if type(self).script else 200
        self.send_response(code)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def hook() -> object:
    Hook.script, Hook.seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def test_webhook_failures_are_retried_with_one_idempotency_key(
    hook: str, topo128: Topology, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FW_TEST_TOKEN", "s3cret-token")
    Hook.script = [503, 502]
    waits: list[float] = []
    http = Http(hook, token_env="FW_TEST_TOKEN", timeout_s=5, retries=3, backoff_s=0.5, sleep=waits.append)
    rig = Rig(topo128, mode="execute")
    rig.executor.backends["message"] = http
    link = next(link for link in topo128.links if link.tier == "fabric").id
    assert (
        rig.executor.run(incident("inc-1", "connector_contamination", "link", link, "clean-connector")).outcome
        == "completed"
    )
    assert len(Hook.seen) == 3 and waits == [0.5, 1.0]
    keys = {s["headers"]["Idempotency-Key"] for s in Hook.seen}
    assert len(keys) == 1 and {s["body"]["idempotency_key"] for s in Hook.seen} == keys
    assert Hook.seen[0]["headers"]["Authorization"] == "Bearer s3cret-token"
    assert Hook.seen[0]["body"]["channel"] == "ticket"
    assert Hook.seen[0]["body"]["message"] == f"Clean link {link}; incident inc-1"
    dump = json.dumps(rig.con.execute("SELECT * FROM runbook_audit").fetchall(), default=str)
    assert "s3cret" not in dump


def test_webhook_that_keeps_failing_is_recorded_as_failed(hook: str, topo128: Topology) -> None:
    Hook.script = [500] * 10
    rig = Rig(topo128, mode="execute")
    rig.executor.backends["message"] = Http(hook, retries=2, backoff_s=0, sleep=lambda s: None)
    link = next(link for link in topo128.links if link.tier == "fabric").id
    rig.executor.run(incident("inc-1", "connector_contamination", "link", link, "clean-connector"))
    row = rig.con.execute(
        "SELECT reason FROM runbook_audit WHERE outcome = 'failed' AND action = 'clean-ticket'"
    ).fetchone()
    assert len(Hook.seen) == 3 and row is not None and row[0] == "HTTP 500 Internal Server Error (after 3 attempts)"


def test_a_4xx_is_not_retried(hook: str) -> None:
    from fabricwatch.runbooks.backends import Request

    Hook.script = [400]
    outcome = Http(hook, retries=3, sleep=lambda s: None).execute(Request("i", "r", "s", "escalate", "t", message="m"))
    assert not outcome.ok and outcome.attempts == 1 and len(Hook.seen) == 1


CRASH = """
import os, sys
from fabricwatch.clock import VirtualClock
from fabricwatch.runbooks import audit
from fabricwatch.runbooks.config import ActionsConfig
from fabricwatch.runbooks.executor import Executor
from fabricwatch.runbooks.guards import Approvals, GuardConfig
from fabricwatch.runbooks.loader import load_library
from fabricwatch.stream.store import Store
from fabricwatch.topology import generate
from tests.runbooks.support import SITE, T0, incident

record = audit.Audit.record
def crash_after_executing(self, incident_id, runbook, outcome, **fields):
    if outcome == "executed":
        os._exit(9)  # killed between the command and its audit row
    return record(self, incident_id, runbook, outcome, **fields)
audit.Audit.record = crash_after_executing
topo = generate(128, 8, 8)
config = ActionsConfig(command_backend="command", allowlist={"gnmic": sys.argv[2]})
with Store(sys.argv[1]) as store:
    ex = Executor(topo, load_library(SITE), store.con, config, clock=VirtualClock(T0), mode="execute",
                  approvals=Approvals("tester"))
    ex.run(incident("inc-1", "connector_contamination", "link", "L00128", "clean-connector"))
"""


def test_a_crash_between_execute_and_audit_does_not_execute_twice_on_restart(tmp_path: Path) -> None:
    db, log = tmp_path / "fw.duckdb", tmp_path / "argv.jsonl"
    recorder = argv_recorder(tmp_path, log)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", CRASH, str(db), str(recorder)], cwd=root, capture_output=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert done.returncode == 9, done.stderr.decode()[-2000:]
    assert len(log.read_text().splitlines()) == 1  # it ran once, then the process died
    config = ActionsConfig(command_backend="command", allowlist={"gnmic": str(recorder)})
    with Store(db) as store:
        ex = Executor(
            generate(128, 8, 8), load_library(Path(__file__).parent / "site"), store.con, config,
            clock=VirtualClock(T0 + 5), mode="execute", approvals=Approvals("tester"),
        )  # fmt: skip
        result = ex.run(incident("inc-1", "connector_contamination", "link", "L00128", "clean-connector"))
        refused = store.con.execute("SELECT guard, reason FROM runbook_audit WHERE outcome = 'refused'").fetchall()
    assert result.outcome == "refused"
    assert refused[0][0] == "idempotence" and "check the device by hand" in refused[0][1]
    assert len(log.read_text().splitlines()) == 1  # not executed twice

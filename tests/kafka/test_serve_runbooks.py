"""serve with ``runbooks: {enabled: true}``: each new incident is planned in shadow mode (nothing
executed), and its decisions reach the fabricwatch.actions topic and the runbook_audit table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import duckdb
import pytest

from fabricwatch.collectors.sim import Simulator
from fabricwatch.faults import Fault
from fabricwatch.runbooks.audit import ACTIONS_TOPIC
from fabricwatch.stream.kafka import KafkaBus
from fabricwatch.stream.keys import outgoing_batched
from fabricwatch.topology import generate
from tests.kafka.helpers import ROOT, stop_process, wait_until

pytestmark = pytest.mark.kafka


@pytest.mark.timeout(300)
def test_serve_plans_incidents_in_shadow_mode_and_publishes_the_decisions(kafka, tmp_path: Path) -> None:
    topo = generate(64, 8, 8)
    (tmp_path / "cluster.yaml").write_text(topo.to_yaml())
    db = tmp_path / "serve.duckdb"
    (tmp_path / "serve.yaml").write_text(
        f"bootstrap: {kafka.bootstrap}\ndb: serve.duckdb\ngroup: {kafka.group}\ntopology: cluster.yaml\n"
        f"partitions: {kafka.partitions}\nhttp: {{port: 0}}\nrunbooks: {{enabled: true}}\n"
    )
    start = time.time()
    # serve detects on the wall clock: telemetry is produced as it happens, one scrape a second
    fault = Fault("gpu_xid", "node003/gpu1", 20.0, options={"xid": 48})
    sim = Simulator(topo, [fault], seed=9, interval=1.0, start_ts=start)
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - the child owns it until it exits
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabricwatch", "serve", "--config", str(tmp_path / "serve.yaml")],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    reader = KafkaBus(kafka.bootstrap, group_id=f"test-{uuid.uuid4().hex[:8]}", topics=[ACTIONS_TOPIC])
    producer = KafkaBus(kafka.bootstrap, partitions=kafka.partitions)
    got: list[dict] = []
    try:
        reader.subscribe([ACTIONS_TOPIC])

        def planned() -> bool:
            if start + sim._k * sim.interval <= time.time():  # the next scrape is due
                producer.produce(outgoing_batched(sim.step(), topo))
                producer.flush(10)
            got.extend(json.loads(r.value) for r in reader.poll(max_records=1000, timeout_s=0.2))
            return any(g["runbook"] == "drain-gpu" and g["outcome"] == "planned" and g["ts"] >= start - 1 for g in got)

        wait_until(planned, 150, "a drain-gpu plan on fabricwatch.actions")
    finally:
        reader.close()
        producer.close()
        code = stop_process(proc, timeout_s=30)
        log.close()
    assert code == 0, (tmp_path / "serve.log").read_text()[-2000:]
    mine = [g for g in got if g["ts"] >= start - 1 and g["runbook"] == "drain-gpu"]
    assert {g["mode"] for g in mine} == {"shadow"}
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT outcome, mode FROM runbook_audit WHERE runbook = 'drain-gpu'").fetchall()
    assert rows and {m for _, m in rows} == {"shadow"}
    assert not any(o in ("started", "executed") for o, _ in rows)  # shadow: nothing executed

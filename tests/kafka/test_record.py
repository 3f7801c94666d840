"""``fabricwatch record`` on the real broker: record live telemetry, replay it, get the same rows."""

from __future__ import annotations

import os
import subprocess
import sys

import duckdb
import pytest

from fabricwatch import schema
from fabricwatch.collectors.sim import Simulator
from fabricwatch.replay.capture import open_capture
from fabricwatch.replay.run import replay
from fabricwatch.stream.bus import Outgoing
from fabricwatch.topology import generate
from tests.kafka.helpers import ROOT, wait_until

pytestmark = pytest.mark.kafka


def _gpu_rows(db) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT source, epoch(ts), device, temp_c, power_w FROM gpu ORDER BY ALL").fetchall()
    finally:
        con.close()


def test_record_then_replay_gives_the_rows_that_were_produced(kafka, tmp_path, processes) -> None:
    from fabricwatch.stream.kafka import KafkaBus

    topo = generate(64, 8, 8)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(topo.to_yaml())
    out = tmp_path / "incident.jsonl.gz"
    sim = Simulator(topo, [], seed=5, interval=5.0)
    messages = [m for _ in range(4) for m in sim.step()]
    log = open(tmp_path / "record.log", "w+")  # noqa: SIM115 - the child writes it until it exits
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "fabricwatch", "record", "--bootstrap", kafka.bootstrap, "--out", str(out)),
            *("--topology", str(cluster), "--duration", "60", "--max-records", str(len(messages))),
            *("--notes", "rail 2 slow"),
        ],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    processes.append(proc)

    def ready() -> bool:
        log.seek(0)
        text = log.read()
        assert proc.poll() is None, f"the recorder exited: {text}"
        return "reading" in text

    wait_until(ready, 60, "the recorder to be assigned its partitions")

    bus = KafkaBus(kafka.bootstrap, partitions=kafka.partitions)
    bus.produce(Outgoing(schema.topic_of(m.kind), m.source, schema.encode(m), m.ts) for m in messages)
    bus.flush(60)
    bus.close()

    stdout, _ = proc.communicate(timeout=60)
    log.seek(0)
    assert proc.returncode == 0, log.read()
    assert f"wrote {len(messages):,} messages" in stdout

    cap = open_capture(out)
    assert cap.truth is None and cap.extra["notes"] == "rail 2 slow" and cap.topology.name == topo.name
    cap.close()
    result = replay(out, db=tmp_path / "replayed.duckdb")
    assert result.deadletters == 0 and result.rows == sum(schema.row_count(m) for m in messages)

    # the same messages stored directly: row for row what the recording replayed
    direct = tmp_path / "direct.jsonl"
    from fabricwatch.replay.capture import CaptureWriter

    with CaptureWriter(direct, topo) as w:
        for m in messages:
            w.write(schema.topic_of(m.kind), m.source, m.ts, m)
    replay(direct, db=tmp_path / "direct.duckdb")
    assert _gpu_rows(tmp_path / "replayed.duckdb") == _gpu_rows(tmp_path / "direct.duckdb")


def test_record_refuses_an_unreachable_broker_and_an_existing_file(tmp_path, capsys) -> None:
    from fabricwatch.cli import main

    existing = tmp_path / "x.jsonl"
    existing.write_text("")
    assert main(["record", "--bootstrap", "127.0.0.1:1", "--out", str(tmp_path / "y.jsonl"), "--duration", "1"]) == 2
    assert "cannot be reached" in capsys.readouterr().err
    assert main(["record", "--bootstrap", "127.0.0.1:1", "--out", str(existing), "--duration", "1"]) == 2
    assert "exists already" in capsys.readouterr().err

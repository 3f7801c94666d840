"""Forensic SQL on a processor's DuckDB file while the processor keeps writing it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fabricwatch import topology
from fabricwatch.collectors.sim import Simulator
from fabricwatch.stream.keys import outgoing
from tests.kafka.helpers import ROOT, committed_total, start_process, stop_process, wait_until

pytestmark = pytest.mark.kafka


def query(db, sql: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fabricwatch", "query", "--db", str(db), "--format", "csv", sql],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_query_reads_sealed_rows_while_the_processor_writes(kafka, tmp_path, processes) -> None:
    from fabricwatch.stream.kafka import KafkaBus

    topo = topology.generate(64, 8, 8)
    sim = Simulator(topo, seed=4, interval=5.0)
    bus = KafkaBus(kafka.bootstrap, partitions=kafka.partitions)
    produced = 0
    for _ in range(24):  # two minutes of telemetry
        records = [r for m in sim.step() for r in outgoing(m, topo)]
        bus.produce(records)
        produced += len(records)
    bus.flush(30)
    bus.close()

    db = tmp_path / "live.duckdb"
    proc = start_process(kafka.bootstrap, db, kafka.group, "--seal-every", "0.5", "--seal-horizon", "30")
    processes.append(proc)
    wait_until(lambda: committed_total(kafka.bootstrap, kafka.group) == produced, 120, "every record stored")
    # the processor still runs and holds the file: the query sees the sealed part (sealing runs every
    # 0.5 s, so it may follow the last commit by that much), and says so
    sql = "SELECT count(DISTINCT ts) AS scrapes, count(*) > 0 AS rows FROM gpu"
    wait_until(lambda: query(db, sql).returncode == 0, 30, "a first sealed segment", 0.5)
    sealed = query(db, sql)
    assert proc.poll() is None
    assert sealed.returncode == 0, sealed.stderr
    assert "sealed segments only" in sealed.stderr
    scrapes = int(sealed.stdout.splitlines()[1].split(",")[0])
    assert 15 <= scrapes < 24  # all but the newest 30 s (5 s scrapes; the last seal may lag a batch)
    assert stop_process(proc) == 0
    # stopped: the hot file and the segments together hold every scrape exactly once
    done = query(db, "SELECT count(DISTINCT ts), count(*) FROM gpu")
    assert done.returncode == 0 and done.stdout.splitlines()[1] == f"24,{24 * len(topo.gpus)}"

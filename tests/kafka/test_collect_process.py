"""``fabricwatch collect --source sim --bootstrap`` into ``fabricwatch process``: the live path end to end."""

from __future__ import annotations

import re
import subprocess
import sys

import duckdb
import pytest

from fabricwatch import schema, topology
from tests.kafka.helpers import ROOT, committed_total, start_process, stop_process, wait_until
from tests.kafka.test_kafka_bus import drain

pytestmark = pytest.mark.kafka


def test_simulated_collector_to_processor_through_kafka(kafka, tmp_path, processes) -> None:
    from fabricwatch.stream.kafka import KafkaBus

    cluster = tmp_path / "cluster.yaml"
    topo = topology.generate(64, 8, 8)
    cluster.write_text(topo.to_yaml())
    collect = subprocess.run(
        [
            *(sys.executable, "-m", "fabricwatch", "collect", "--source", "sim", "--topology", str(cluster)),
            *("--interval", "0.5", "--duration", "3", "--bootstrap", kafka.bootstrap),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert collect.returncode == 0, collect.stderr
    assert re.search(r"^fabricwatch collect: sim: \d+ scrapes, 0 failed, \d+ messages$", collect.stderr, re.M)

    # keyed by fault domain: both ends of every host link in one partition of the optical topic
    reader = KafkaBus(kafka.bootstrap, group_id=kafka.group + "-read")
    reader.subscribe(list(schema.TELEMETRY_TOPICS))
    records = drain(reader, 10**9, timeout_s=5)
    reader.close()
    partition_of = {
        port: r.partition
        for r in records
        if r.topic == schema.topic_of("optical")
        for m in schema.record_messages(r.value)
        for port in m.rows["port"]
    }
    host = [lk for lk in topo.links if lk.tier == "host"]
    assert all(partition_of[lk.a] == partition_of[lk.b] for lk in host)

    db = tmp_path / "p.duckdb"
    proc = start_process(kafka.bootstrap, db, kafka.group, "--topology", str(cluster))
    processes.append(proc)
    wait_until(lambda: committed_total(kafka.bootstrap, kafka.group) == len(records), 120, "every record stored")
    assert stop_process(proc) == 0
    con = duckdb.connect(str(db), read_only=True)
    counts = {kind: con.execute(f"SELECT count(*) FROM {kind}").fetchall()[0][0] for kind in schema.KINDS}
    ((deadletters,),) = con.execute("SELECT count(*) FROM deadletters").fetchall()
    con.close()
    stored = sum(counts.values())
    expected = sum(schema.record_rows(r.value) for r in records)
    assert stored == expected and all(counts.values()) and deadletters == 0

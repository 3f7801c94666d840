"""Issue 7 part 3 on the real broker: two stage-1 processors (a consumer group of two) and one stage 2.

A cooling loop whose nodes hash to every partition (so its GPUs are split over both processors) fails,
and a spine's links go bad on several leaves; stage 2, killed with SIGKILL in the middle and restarted,
opens one incident for each, and the incidents topic and its DuckDB file hold every incident change
exactly once: the same changes, ids included, as one uninterrupted stage 2 over the same findings.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from fabricwatch.collectors.sim import Simulator
from fabricwatch.detectors.stage import Stage2
from fabricwatch.faults import Fault
from fabricwatch.schema import TOPIC_FINDINGS, TOPIC_INCIDENTS
from fabricwatch.stream.bus import partition_for
from fabricwatch.stream.findings import TickMark, decode
from fabricwatch.stream.keys import outgoing_batched
from fabricwatch.stream.stage2 import Joiner
from fabricwatch.topology import generate
from tests.kafka.helpers import ROOT, committed_total, produce_all, start_process, stop_process, wait_until

pytestmark = pytest.mark.kafka
LOOP, SPINE = "cl00", "spine01"
STEPS = 60  # 300 s of telemetry every 5 s
STALL_S = 300.0  # the default: stage 2 paces its partitions, so a restart on a backlog drops nothing as late


def read_topic(bootstrap: str, topic: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of everything on ``topic`` now, in partition and offset order."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as TP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        wait_until(lambda: topic in consumer.topics(), 30, f"the broker to list {topic}", 0.2)
        tps = [TP(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        out = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < end[tp] for tp in tps):
            assert time.monotonic() < deadline, f"reading {topic} took over 60 s"
            for batch in consumer.poll(timeout_ms=500).values():
                out += [(r.partition, r.offset, r.value) for r in batch]
        return sorted(out)
    finally:
        consumer.close()


def group_members(bootstrap: str, group: str) -> int:
    """Members of a stable consumer group (0 while it rebalances, or while a new broker has no group
    coordinator yet)."""
    from kafka import KafkaAdminClient
    from kafka.errors import CoordinatorNotAvailableError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fabricwatch-tests")
    try:
        info = admin.describe_groups([group])[group]
        return len(info["members"]) if info["group_state"] == "Stable" else 0
    except CoordinatorNotAvailableError:
        return 0
    finally:
        admin.close()


def start_correlate(bootstrap: str, db: Path, cluster: Path, group: str) -> subprocess.Popen:
    log = open(db.with_suffix(".log"), "ab")  # noqa: SIM115 - the child owns it until it exits
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "fabricwatch", "correlate", "--bootstrap", bootstrap),
            *("--topology", str(cluster), "--db", str(db), "--group", group, "--instance", "t"),
            *("--max-records", "20"),  # many small transactions: the kill lands between two of them
            # a restart reads a backlog whose partitions drift apart by minutes of telemetry; bounded
            # lateness (--stall) must cover that, or a late finding is dropped (counted and logged)
            *("--stall", str(STALL_S)),
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def test_two_processors_and_a_killed_stage_2_find_a_split_cooling_loop_and_a_switch_fault_once(
    kafka, tmp_path, processes
) -> None:
    topo = generate(128, 8, 8)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(topo.to_yaml())
    loop_nodes = [n.name for n in topo.nodes if n.cooling_loop == LOOP]
    assert {partition_for(n, kafka.partitions) for n in loop_nodes} == set(range(kafka.partitions))

    p1, p2 = tmp_path / "p1.duckdb", tmp_path / "p2.duckdb"
    for db, name in ((p1, "A"), (p2, "B")):
        processes.append(start_process(kafka.bootstrap, db, kafka.group, "--topology", str(cluster), "--name", name))

    def both_in_group() -> bool:
        dead = [p.args for p in processes if p.poll() is not None]
        assert not dead, f"a processor exited: {dead} (see its .log in {tmp_path})"
        return group_members(kafka.bootstrap, kafka.group) == 2

    wait_until(both_in_group, 120, "both processors in the group", 0.5)

    sim = Simulator(topo, [Fault("cooling_failure", LOOP, 60.0, 60.0), Fault("switch_fault", SPINE, 60.0)], seed=3)
    telemetry = [o for _ in range(STEPS) for o in outgoing_batched(sim.step(), topo)]
    chunks = [telemetry[i : i + len(telemetry) // 10] for i in range(0, len(telemetry), len(telemetry) // 10)]
    # telemetry arrives over ~20 s, so stage 2 works live and the kill lands in the middle of the run
    feeding = threading.Thread(target=lambda: [produce_all(kafka.bootstrap, c, kafka.partitions) or time.sleep(2.0)
                                               for c in chunks])  # fmt: skip
    feeding.start()

    stage2_group = kafka.group + "-correlate"
    s2 = tmp_path / "stage2.duckdb"
    proc = start_correlate(kafka.bootstrap, s2, cluster, stage2_group)
    processes.append(proc)
    wait_until(lambda: read_topic(kafka.bootstrap, TOPIC_INCIDENTS), 120, "a first incident", 0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    feeding.join(120)

    wait_until(lambda: committed_total(kafka.bootstrap, kafka.group) == len(telemetry), 180, "stage 1 to finish")
    findings_end = len(read_topic(kafka.bootstrap, TOPIC_FINDINGS))
    assert committed_total(kafka.bootstrap, stage2_group) < findings_end, "stage 2 finished before it was killed"
    proc = start_correlate(kafka.bootstrap, s2, cluster, stage2_group)
    processes.append(proc)
    wait_until(lambda: committed_total(kafka.bootstrap, stage2_group) == findings_end, 180, "stage 2 to catch up")
    assert stop_process(proc) == 0
    for p in processes[:2]:
        assert stop_process(p) == 0

    # the loop really was split: both processors stored (and judged) some of its GPUs
    for db in (p1, p2):
        with duckdb.connect(str(db), read_only=True) as con:
            gpus = {g for (g,) in con.execute("SELECT DISTINCT device FROM gpu").fetchall()}
        assert 0 < len({g for g in gpus if g.split("/")[0] in loop_nodes}) < len(loop_nodes) * 8

    published = [value for _, _, value in read_topic(kafka.bootstrap, TOPIC_INCIDENTS)]
    assert len(set(published)) == len(published)  # no change twice

    # one uninterrupted stage 2 over the same findings, in tick order (each tick's marks after its
    # findings), gives the same changes
    items = sorted((decode(value) for _, _, value in read_topic(kafka.bootstrap, TOPIC_FINDINGS)),
                   key=lambda item: (item.ts, isinstance(item, TickMark)))  # fmt: skip
    joiner = Joiner(Stage2(topo, id_prefix="inc-t-"), stall_s=STALL_S)
    expected = []
    for item in items:
        joiner.add(item)
        expected += [json.dumps(i.to_dict(), sort_keys=True) for i in joiner.close_due()]
    assert sorted(json.dumps(json.loads(v), sort_keys=True) for v in published) == sorted(expected)

    final = {}
    for v in published:
        i = json.loads(v)
        final[i["id"]] = i
    roots = {(i["cause"], i["location"]["id"]) for i in final.values() if i["status"] == "firing"}
    assert {("cooling_failure", LOOP), ("switch_fault", SPINE)} <= roots
    with duckdb.connect(str(s2), read_only=True) as con:
        stored = dict(con.execute("SELECT id, status FROM incidents").fetchall())
        assert con.execute("SELECT count(*) FROM incident_outbox").fetchone() == (0,)
    assert stored == {k: i["status"] for k, i in final.items()}

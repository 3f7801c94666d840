"""Helpers for the processor's fault tests: telemetry with countable rows, and processor processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb

from fabricwatch import schema
from fabricwatch.stream.bus import Outgoing
from fabricwatch.stream.kafka import KafkaBus

ROOT = Path(__file__).resolve().parents[2]
T0 = 1764400000.0
GPUS_PER_MESSAGE = 8


def gpu_message(node: int, seq: int) -> schema.Message:
    """One node's GPU scrape: 8 rows whose (source, seq, device) is unique across a test."""
    devices = [f"node{node:03d}/gpu{g}" for g in range(GPUS_PER_MESSAGE)]
    rows = {
        "device": devices,
        "util_pct": [float((seq * 7 + g) % 100) for g in range(GPUS_PER_MESSAGE)],
        "temp_c": [55.0 + (seq + g) % 20 for g in range(GPUS_PER_MESSAGE)],
        "ecc_dbe_total": [0] * GPUS_PER_MESSAGE,
    }
    return schema.make("gpu", f"node{node:03d}", T0 + seq, seq, rows)


def gpu_records(messages: int, nodes: int = 32, first_seq: int = 0) -> list[Outgoing]:
    """``messages`` GPU scrapes round-robin over ``nodes`` nodes, keyed by node (their fault domain)."""
    out = []
    for i in range(messages):
        node, seq = i % nodes, first_seq + i // nodes
        out.append(Outgoing(schema.topic_of("gpu"), f"node{node:03d}", schema.encode(gpu_message(node, seq)), T0 + seq))
    return out


def produce_all(bootstrap: str, records: list[Outgoing], partitions: int = 4) -> None:
    bus = KafkaBus(bootstrap, partitions=partitions, buffer_max=len(records) + 1)
    bus.produce(records)
    bus.flush(120)
    assert bus.stats.sent == len(records), bus.stats
    bus.close()


def start_process(bootstrap: str, db: Path, group: str, *extra: str, log: Path | None = None) -> subprocess.Popen:
    """``fabricwatch process`` as a separate process (its own consumer, its own DuckDB file)."""
    out = open(log or db.with_suffix(".log"), "ab")  # noqa: SIM115 - the child owns it until it exits
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fabricwatch",
            "process",
            "--bootstrap",
            bootstrap,
            "--db",
            str(db),
            "--group",
            group,
            *extra,
        ],
        cwd=ROOT,
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def stop_process(proc: subprocess.Popen, timeout_s: float = 10.0) -> int:
    """SIGTERM, and the exit status (fails the test if it takes longer than ``timeout_s``: issue 3 item 2)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"the processor did not exit within {timeout_s} s of SIGTERM") from None


def committed_total(bootstrap: str, group: str) -> int:
    """Sum of the group's committed offsets (records it has stored and committed); -1 while the broker
    cannot say (a coordinator moving), so that neither ``== 0`` nor ``>= n`` holds by accident."""
    from kafka import KafkaAdminClient
    from kafka import errors as kerr

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fabricwatch-tests")
    try:
        offsets = admin.list_group_offsets({group: None}).get(group, {})
    except kerr.KafkaError:
        return -1
    finally:
        admin.close()
    return sum(o.offset for o in offsets.values() if o.offset >= 0)


def wait_until(predicate, timeout_s: float, what: str, every_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


def gpu_rows(*dbs: Path) -> tuple[int, int]:
    """(rows, distinct (source, seq, device)) over the gpu tables of the given DuckDB files together."""
    con = duckdb.connect()
    try:
        parts = []
        for i, db in enumerate(dbs):
            con.execute(f"ATTACH '{db}' AS d{i} (READ_ONLY)")
            parts.append(f"SELECT source, seq, device FROM d{i}.gpu")
        union = " UNION ALL ".join(parts)
        ((total, distinct),) = con.execute(
            f"SELECT count(*), count(DISTINCT (source, seq, device)) FROM ({union})"
        ).fetchall()
        return int(total), int(distinct)
    finally:
        con.close()

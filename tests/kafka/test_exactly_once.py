"""Issue 3 item 7a and 7d: a killed processor, and a rebalance, store every row exactly once."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from tests.kafka.helpers import (
    GPUS_PER_MESSAGE,
    committed_total,
    gpu_records,
    gpu_rows,
    produce_all,
    start_process,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.kafka
ROWS = 200_000
MESSAGES = ROWS // GPUS_PER_MESSAGE


def test_kill_9_in_the_middle_then_restart_stores_every_row_once(kafka, tmp_path, processes) -> None:
    produce_all(kafka.bootstrap, gpu_records(MESSAGES))
    db = tmp_path / "p.duckdb"
    # small batches: many store transactions, so the kill lands between two of them
    proc = start_process(kafka.bootstrap, db, kafka.group, "--max-records", "100")
    processes.append(proc)
    wait_until(lambda: committed_total(kafka.bootstrap, kafka.group) >= MESSAGES // 5, 120, "a fifth to be stored")
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    at_kill = committed_total(kafka.bootstrap, kafka.group)
    assert at_kill < MESSAGES, "the processor finished before it was killed: nothing was tested"
    rows_at_kill, _ = gpu_rows(db)
    assert 0 < rows_at_kill < ROWS

    proc = start_process(kafka.bootstrap, db, kafka.group)
    processes.append(proc)
    wait_until(lambda: committed_total(kafka.bootstrap, kafka.group) == MESSAGES, 180, "every record committed")
    assert stop_process(proc) == 0
    assert gpu_rows(db) == (ROWS, ROWS)  # every row, none twice


def test_a_rebalance_between_two_processors_loses_and_duplicates_nothing(kafka, tmp_path, processes) -> None:
    """P1 runs alone; P2 joins (rebalance); P1 leaves on SIGTERM (rebalance); records keep arriving."""
    first, second = tmp_path / "p1.duckdb", tmp_path / "p2.duckdb"
    batches = [gpu_records(2_000, first_seq=k * 1_000) for k in range(6)]  # 12,000 messages, 96,000 rows
    total = sum(len(b) for b in batches)
    feeding = threading.Thread(target=lambda: [produce_all(kafka.bootstrap, b) or time.sleep(1.0) for b in batches])
    feeding.start()
    p1 = start_process(kafka.bootstrap, first, kafka.group, "--max-records", "200")
    processes.append(p1)
    wait_until(lambda: committed_total(kafka.bootstrap, kafka.group) >= 2_000, 120, "P1 to store some")
    p2 = start_process(kafka.bootstrap, second, kafka.group, "--max-records", "200")
    processes.append(p2)
    wait_until(lambda: committed_total(kafka.bootstrap, kafka.group) >= 6_000, 120, "both to store more")
    assert stop_process(p1) == 0
    feeding.join()
    wait_until(lambda: committed_total(kafka.bootstrap, kafka.group) == total, 180, "P2 to store the rest")
    assert stop_process(p2) == 0
    rows_first, _ = gpu_rows(first)
    rows_second, _ = gpu_rows(second)
    assert rows_first > 0 and rows_second > 0  # both really took part
    assert gpu_rows(first, second) == (total * GPUS_PER_MESSAGE, total * GPUS_PER_MESSAGE)


def test_a_crash_between_storing_and_committing_does_not_store_twice(kafka, tmp_path) -> None:
    """The window kill -9 rarely hits: rows and offsets stored, the Kafka commit never made."""
    from fabricwatch.clock import WallClock
    from fabricwatch.stream.consume import ProcessingLoop
    from fabricwatch.stream.kafka import KafkaBus
    from fabricwatch.stream.processor import Processor
    from fabricwatch.stream.store import Store
    from fabricwatch.topology import Topology

    produce_all(kafka.bootstrap, gpu_records(4_000))
    db = tmp_path / "p.duckdb"
    empty = Topology("t", [], [], [])
    with Store(db, group=kafka.group) as store:
        crashed = KafkaBus(kafka.bootstrap, group_id=kafka.group)
        crashed.subscribe(["fabricwatch.telemetry.gpu"])
        first: list = []
        wait_until(lambda: first.extend(crashed.poll(1_500, 0.5)) or len(first) >= 1_500, 60, "a first batch")
        Processor(empty, store, clock=WallClock()).handle(first)  # stored with its offsets ...
        crashed.close()  # ... and never committed to Kafka
    assert committed_total(kafka.bootstrap, kafka.group) == 0

    with Store(db, group=kafka.group) as store:
        bus = KafkaBus(kafka.bootstrap, group_id=kafka.group)
        loop = ProcessingLoop(bus, Processor(empty, store, clock=WallClock()))
        stop = threading.Event()
        runner = threading.Thread(target=loop.run, args=(stop,))
        runner.start()
        try:
            wait_until(lambda: committed_total(kafka.bootstrap, kafka.group) == 4_000, 120, "every record committed")
        finally:
            stop.set()
            runner.join(15)
        assert loop.stats.records == 4_000 - len(first)  # it resumed where the store was, not where Kafka was
    assert gpu_rows(db) == (4_000 * GPUS_PER_MESSAGE, 4_000 * GPUS_PER_MESSAGE)

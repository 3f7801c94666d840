"""Kafka throughput: what the live path sustains through a real broker, against its bare limits.

Load: the simulator's 1024-GPU 8-rail supernode at a 1 s interval (every scrape of every node and
switch, cut by fault domain as collectors send them), then 2×, 5× and 10× that rate: one collector
process sends k seconds' worth of scrapes each second (pre-generated, so the simulator's own speed is
not measured), one ``fabricwatch process`` process stores them (decode, validate, DuckDB with offsets
in the same transaction, commit; ingest only: detection is measured by the detectors' benchmark).

Per rate: rows/s and samples/s stored (a sample = one value of one column of one row), the processor's
CPU (% of one core, from /proc), consumer lag sampled every 0.5 s (records behind, median and max) and
how long the processor needed after the collector's last scrape to have it all stored ("drain"). A
rate the processor cannot keep up with shows as lag growing over the run and a long drain.

In the same run, the limits it is compared with: the processor draining a backlog (its top speed),
a bare kafka-python consumer reading the same records, and DuckDB's Arrow insert of the same rows.

Modes: (default) the above; ``--compression`` every codec kafka-python can use here (produce rate,
bytes on the broker's disk, bare consume rate: the default compression of stream.kafka comes from
this); ``--bare`` just the bare produce and consume rates.

Run: ``.venv/bin/python -m bench.kafka_throughput [--bootstrap HOST:PORT] [--compression|--bare]``;
without ``--bootstrap`` a throwaway broker is started (scripts/kafka-broker's, in a temporary directory).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
from rich.console import Console
from rich.table import Table

from bench.common import median_seconds
from fabricwatch import schema
from fabricwatch.stream.bus import Outgoing
from fabricwatch.stream.kafka import DEFAULT_COMPRESSION, KafkaBus
from fabricwatch.stream.keys import outgoing_batched
from fabricwatch.topology import Topology, generate
from tests.kafka.localbroker import LocalBroker

CODECS = (None, "gzip", "snappy", "lz4", "zstd")


def supernode_scrapes(topology: Topology, seconds: int, seed: int = 3) -> list[list[Outgoing]]:
    """``seconds`` one-second scrapes of the whole supernode, as keyed bus records (one list per second)."""
    from fabricwatch.collectors.sim import Simulator

    sim = Simulator(topology, seed=seed, interval=1.0)
    return [outgoing_batched(sim.step(), topology) for _ in range(seconds)]


def rows_of(records: list[Outgoing]) -> int:
    return sum(schema.record_rows(r.value) for r in records)


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalBroker.create(Path(tmp) / "broker").start()
        try:
            yield local.bootstrap
        finally:
            local.stop()


def fresh_topics(bootstrap: str, partitions: int) -> None:
    """Recreate fabricwatch's topics empty, so sizes and rates are of this run's records only."""
    from kafka import KafkaAdminClient

    from fabricwatch.stream.kafka import ensure_topics

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        present = [t for t in admin.list_topics() if t in schema.ALL_TOPICS]
        if present:
            admin.delete_topics(present)
        while any(t in schema.ALL_TOPICS for t in admin.list_topics()):
            time.sleep(0.05)
        ensure_topics(admin, schema.ALL_TOPICS, partitions=partitions)
    finally:
        admin.close()


def bytes_on_disk(bootstrap: str) -> int:
    """Sum of the telemetry partitions' log sizes (describe_log_dirs), i.e. after compression."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        total = 0
        for broker_dirs in admin.describe_log_dirs():
            for log_dir in broker_dirs["log_dirs"]:
                for topic in log_dir["topics"]:
                    if topic["name"] in schema.TELEMETRY_TOPICS:
                        total += sum(p["partition_size"] for p in topic["partitions"])
        return total
    finally:
        admin.close()


def produce_rate(bootstrap: str, batches: list[list[Outgoing]], compression: str | None) -> tuple[float, float]:
    """(records/s, CPU s per wall s) producing every batch through KafkaBus and waiting for acks."""
    bus = KafkaBus(bootstrap, compression=compression, buffer_max=10_000_000)
    bus.ensure_topics()
    n = sum(len(b) for b in batches)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for batch in batches:
        bus.produce(batch)
    bus.flush(600)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    assert bus.stats.sent == n, bus.stats
    bus.close()
    return n / wall, cpu / wall


BACKLOG_COPIES = 10  # the backlog is this many copies of the generated scrapes
BACKLOG_BATCH = 2000  # records a poll may return while draining: ~230k rows, the raw insert's transaction size


def bare_consume_rate(bootstrap: str, expected: int) -> float:
    """Records/s of a bare kafka-python consumer reading the telemetry topics from the start (no decoding)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=f"bench-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=BACKLOG_BATCH,
        max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_wait_ms=100,
    )
    consumer.subscribe(list(schema.TELEMETRY_TOPICS))
    got, started = 0, None
    deadline = time.monotonic() + 300
    counted = 0
    while got < expected and time.monotonic() < deadline:
        polled = consumer.poll(timeout_ms=500, max_records=BACKLOG_BATCH)
        n = sum(len(v) for v in polled.values())
        if n and started is None:
            started = time.perf_counter()  # after the first batch: group join is not throughput
        elif n:
            counted += n
        got += n
    elapsed = time.perf_counter() - (started or time.perf_counter())
    consumer.close()
    if got < expected:
        raise SystemExit(f"bench: consumed {got} of {expected} records within 300 s")
    return counted / elapsed if elapsed else float("inf")


def available(codec: str | None) -> bool:
    from kafka import codec as kc

    return {None: True, "gzip": True, "snappy": kc.has_snappy(), "lz4": kc.has_lz4(), "zstd": kc.has_zstd()}[codec]


def compression_table(bootstrap: str, batches: list[list[Outgoing]], partitions: int, repeat: int) -> Table:
    n = sum(len(b) for b in batches)
    raw = sum(len(r.value) for b in batches for r in b)
    table = Table(title=f"compression: {n:,} records, {raw / 1e6:.1f} MB of MessagePack ({len(batches)} s of scrapes)")
    for col in ("codec", "produce rec/s", "producer CPU/wall", "on broker MB", "ratio", "bare consume rec/s"):
        table.add_column(col, justify="left" if col == "codec" else "right")
    for codec in CODECS:
        if not available(codec):
            table.add_row(str(codec), "not installed", "", "", "", "")
            continue
        rates, cpus, consumes, size = [], [], [], 0
        for _ in range(repeat):
            fresh_topics(bootstrap, partitions)
            rate, cpu = produce_rate(bootstrap, batches, codec)
            rates.append(rate)
            cpus.append(cpu)
            size = bytes_on_disk(bootstrap)
            consumes.append(bare_consume_rate(bootstrap, n))
        table.add_row(
            codec or "none",
            f"{statistics.median(rates):,.0f}",
            f"{statistics.median(cpus):.2f}",
            f"{size / 1e6:.1f}",
            f"{raw / size:.2f}" if size else "?",
            f"{statistics.median(consumes):,.0f}",
        )
    return table


def bare_table(bootstrap: str, batches: list[list[Outgoing]], partitions: int, repeat: int) -> Table:
    n = sum(len(b) for b in batches)
    rows = sum(rows_of(b) for b in batches)
    produce, consume = [], []
    for _ in range(repeat):
        fresh_topics(bootstrap, partitions)
        produce.append(produce_rate(bootstrap, batches, DEFAULT_COMPRESSION)[0])
        consume.append(bare_consume_rate(bootstrap, n))
    p, c = statistics.median(produce), statistics.median(consume)
    table = Table(title=f"bare rates, compression {DEFAULT_COMPRESSION}: {n:,} records / {rows:,} rows (medians)")
    for col in ("path", "records/s", "rows/s", "supernodes at 1 s"):
        table.add_column(col, justify="left" if col == "path" else "right")
    per_s = n / len(batches)
    table.add_row("KafkaBus produce (acks=all)", f"{p:,.0f}", f"{p * rows / n:,.0f}", f"{p / per_s:.1f}")
    table.add_row("kafka-python consume (bare)", f"{c:,.0f}", f"{c * rows / n:,.0f}", f"{c / per_s:.1f}")
    return table


# --- the full run: a collector process and a processor process ---------------------------------------


def samples_of(records: list[Outgoing]) -> int:
    """Values carried: per message, rows × its value columns (keys, ts and source are not samples)."""
    total = 0
    for r in records:
        for m in schema.record_messages(r.value):
            keys = {c.name for c in schema.KINDS[m.kind].keys}
            total += schema.row_count(m) * sum(1 for name in m.rows if name not in keys)
    return total


def write_load(batches: list[list[Outgoing]], path: Path) -> None:
    path.write_bytes(msgspec.msgpack.encode([[(r.topic, r.key, r.value, r.ts) for r in b] for b in batches]))


def collector(args: argparse.Namespace) -> None:
    """--role collector: send ``rate`` scrape batches per second for ``seconds`` s, like a collector."""
    raw = msgspec.msgpack.decode(Path(args.load).read_bytes())
    batches = [[Outgoing(t, k, v, ts) for t, k, v, ts in b] for b in raw]
    bus = KafkaBus(args.bootstrap, client_id="bench-collector")
    bus.ensure_topics()
    period = 1.0 / args.rate
    started = time.perf_counter()
    sent = 0
    for i in range(round(args.seconds * args.rate)):
        due = started + i * period
        if (wait := due - time.perf_counter()) > 0:
            time.sleep(wait)
        bus.produce(batches[i % len(batches)])
        bus.flush()  # as collectors.runner.BusSink does after every scrape
        sent += 1
    bus.flush(120)
    print(msgspec.json.encode({"batches": sent, "dropped": bus.stats.dropped, "sent": bus.stats.sent}).decode())
    bus.close()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Lag:
    """The group's committed offsets against the end of the telemetry partitions."""

    def __init__(self, bootstrap: str, group: str) -> None:
        from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

        self.group = group
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-lag")
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="bench-lag")
        self.partitions = [
            TopicPartition(topic, p)
            for topic in schema.TELEMETRY_TOPICS
            for p in sorted(self.consumer.partitions_for_topic(topic) or ())
        ]

    def committed(self) -> int:
        offsets = self.admin.list_group_offsets({self.group: None}).get(self.group, {})
        return sum(o.offset for o in offsets.values() if o.offset >= 0)

    def end(self) -> int:
        return sum(self.consumer.end_offsets(self.partitions).values())

    def behind(self) -> int:
        return self.end() - self.committed()

    def close(self) -> None:
        self.admin.close()
        self.consumer.close()


def start_processor(bootstrap: str, db: Path, group: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fabricwatch", "process", "--bootstrap", bootstrap, "--db", str(db), "--group", group],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class RateResult:
    scale: float
    rows_s: float
    samples_s: float
    cpu_pct: float
    lag_median: float  # records behind
    lag_max: int
    drain_s: float
    dropped: int


def run_rate(
    bootstrap: str, load: Path, per_s: tuple[int, int, int], scale: float, seconds: int, tmp: Path
) -> RateResult:
    """One rate: fresh topics, the processor, then the collector for ``seconds`` s; sample lag; drain."""
    fresh_topics(bootstrap, 12)
    group = f"bench-{uuid.uuid4().hex[:8]}"
    proc = start_processor(bootstrap, tmp / f"{group}.duckdb", group)
    lag = Lag(bootstrap, group)
    time.sleep(3)  # the processor joins its group before the load starts
    cpu0, wall0 = cpu_seconds(proc.pid), time.perf_counter()
    coll = subprocess.Popen(
        [
            *(sys.executable, "-m", "bench.kafka_throughput", "--role", "collector", "--bootstrap", bootstrap),
            *("--load", str(load), "--rate", str(scale), "--seconds", str(seconds)),
        ],
        stdout=subprocess.PIPE,
    )
    samples = []
    while coll.poll() is None:
        samples.append(lag.behind())
        time.sleep(0.5)
    produced_at = time.perf_counter()
    report = msgspec.json.decode(coll.stdout.read() if coll.stdout else b"{}")
    deadline = time.monotonic() + 300
    while lag.behind() > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    drained_at = time.perf_counter()
    cpu = cpu_seconds(proc.pid) - cpu0
    lag.close()
    stop(proc)
    _, rows, samples_n = per_s
    batches = report["batches"]
    wall = drained_at - wall0
    return RateResult(
        scale,
        rows * batches / wall,
        samples_n * batches / wall,
        100 * cpu / wall,
        statistics.median(samples) if samples else 0.0,
        max(samples, default=0),
        drained_at - produced_at,
        report["dropped"],
    )


def backlog_rate(bootstrap: str, batches: list[list[Outgoing]], rows: int, tmp: Path) -> tuple[float, dict[str, float]]:
    """Rows/s of the processing loop storing a backlog (its top speed: rows over its busy seconds), and
    the seconds it spent per stage. In this process (stream.consume.ProcessingLoop, as ``fabricwatch
    process`` runs it) so that the bench's own polling of the group does not share the measurement."""
    from fabricwatch.clock import WallClock
    from fabricwatch.stream.consume import ProcessingLoop
    from fabricwatch.stream.processor import Processor
    from fabricwatch.stream.store import Store

    fresh_topics(bootstrap, 12)
    produce_rate(bootstrap, batches, DEFAULT_COMPRESSION)
    total = sum(len(b) for b in batches)
    with Store(tmp / "backlog.duckdb", group="bench-backlog") as store:
        processor = Processor(Topology("t", [], [], []), store, clock=WallClock())
        bus = KafkaBus(bootstrap, group_id=f"bench-{uuid.uuid4().hex[:8]}")
        loop = ProcessingLoop(bus, processor, max_records=BACKLOG_BATCH)
        stop = threading.Event()

        def watch() -> None:
            while loop.stats.records < total:
                time.sleep(0.005)
            stop.set()

        threading.Thread(target=watch, daemon=True).start()
        loop.run(stop)
        stages = {
            sample.labels["stage"]: sample.value
            for family in loop.stage_seconds.collect()
            for sample in family.samples
            if sample.name.endswith("_total")
        }
        started = time.perf_counter()
        store.checkpoint()  # what is still in the WAL: durable work the raw limit pays too
        stages["checkpoint"] = time.perf_counter() - started
    # top speed: rows over the loop's busy seconds (its idle waits for the broker are not counted)
    return rows / sum(stages.values()), stages


def duckdb_arrow_rate(batches: list[list[Outgoing]], copies: int, tmp: Path) -> float:
    """Rows/s of DuckDB's Arrow insert of the same rows (all kinds) as the backlog: ``copies`` times
    one transaction of the scrapes' rows, then a checkpoint (as the backlog's processor is charged),
    through stream.store.Store so the DuckDB settings are the processor's; median of 3."""
    from fabricwatch.stream.store import Store

    by_kind: dict[str, list[schema.Message | schema.MessageBatch]] = {}
    for b in batches:
        for r in b:
            m = schema.decode_record(r.value)
            by_kind.setdefault(m.kind, []).append(m)
    tables = {k: schema.to_table(k, ms).table for k, ms in by_kind.items()}
    rows = sum(t.num_rows for t in tables.values())
    runs = iter(range(3))

    def sustained() -> None:
        with Store(tmp / f"raw-{next(runs, 9)}.duckdb") as store:
            for _ in range(copies):
                store.write_batch(tables)
            store.checkpoint()

    return copies * rows / median_seconds(sustained, repeat=3, warmup=0)


def full_run(bootstrap: str, topology: Topology, args: argparse.Namespace, out: Console) -> None:
    batches = supernode_scrapes(topology, args.seconds)[1:]  # the first scrape carries every module once
    per_s = (
        round(statistics.mean(len(b) for b in batches)),
        round(statistics.mean(rows_of(b) for b in batches)),
        round(statistics.mean(samples_of(b) for b in batches)),
    )
    results = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        load = tmp / "load.msgpack"
        write_load(batches, load)
        for scale in args.scales:
            out.print(f"rate {scale:g}× ...", style="dim")
            results.append(run_rate(bootstrap, load, per_s, scale, args.run_seconds, tmp))
        backlog, stages = backlog_rate(
            bootstrap, batches * BACKLOG_COPIES, BACKLOG_COPIES * sum(rows_of(b) for b in batches), tmp
        )
        bare = statistics.median(
            bare_consume_rate(bootstrap, sum(len(b) for b in batches) * BACKLOG_COPIES) for _ in range(3)
        )
        arrow = duckdb_arrow_rate(batches, BACKLOG_COPIES, tmp)
    bare_rows = bare * per_s[1] / per_s[0]
    table = Table(
        title=f"Kafka live path, 1024-GPU 8-rail supernode at 1 s = {per_s[0]:,} records, {per_s[1]:,} rows, "
        f"{per_s[2]:,} samples per second; {args.run_seconds} s per rate"
    )
    for col in ("rate", "rows/s", "samples/s", "processor CPU", "lag median", "lag max", "drain", "dropped"):
        table.add_column(col, justify="right")
    for r in results:
        per_s_now = per_s[0] * r.scale  # records arriving per second: lag in seconds of telemetry
        table.add_row(
            f"{r.scale:g}×",
            f"{r.rows_s:,.0f}",
            f"{r.samples_s:,.0f}",
            f"{r.cpu_pct:.0f} % of a core",
            f"{r.lag_median / per_s_now:.2f} s",
            f"{r.lag_max / per_s_now:.2f} s",
            f"{r.drain_s:.1f} s",
            f"{r.dropped:,}",
        )
    out.print(table)
    work = sum(stages.values())
    out.print(
        "processing loop, draining the backlog: "
        + ", ".join(f"{stage} {100 * sec / work:.0f} %" for stage, sec in stages.items())
        + " of its busy time (process = decode, validate, store: stream.processor)"
    )
    limits = Table(title="top speeds in the same run (rows/s) and the processor's share of them")
    for col in ("path", "rows/s", "processor backlog / this"):
        limits.add_column(col, justify="left" if col == "path" else "right")
    limits.add_row("processing loop, draining a backlog", f"{backlog:,.0f}", "1.00")
    limits.add_row("bare kafka-python consume, same records", f"{bare_rows:,.0f}", f"{backlog / bare_rows:.2f}")
    limits.add_row("DuckDB Arrow insert, same rows", f"{arrow:,.0f}", f"{backlog / arrow:.2f}")
    out.print(limits)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.kafka_throughput", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="a broker to use (default: start a throwaway one)")
    parser.add_argument("--seconds", type=int, default=10, help="seconds of distinct scrapes generated (default 10)")
    parser.add_argument("--run-seconds", type=int, default=20, help="seconds the collector runs per rate (default 20)")
    parser.add_argument("--scales", type=lambda t: [float(x) for x in t.split(",")], default=[1.0, 2.0, 5.0, 10.0])
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compression", action="store_true", help="compare codecs")
    parser.add_argument("--bare", action="store_true", help="bare produce and consume rates only")
    parser.add_argument("--role", choices=("bench", "collector"), default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--load", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=1.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "collector":
        collector(args)
        return
    topology = generate(1024, 8, 8)
    out = Console(width=150)
    with broker(args.bootstrap) as bootstrap:
        if args.compression or args.bare:
            batches = supernode_scrapes(topology, args.seconds)
            make = compression_table if args.compression else bare_table
            out.print(make(bootstrap, batches, args.partitions, args.repeat))
        else:
            full_run(bootstrap, topology, args, out)


if __name__ == "__main__":
    main()

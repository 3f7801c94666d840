"""Kafka throughput: what the live path sustains through a real broker, against its bare limits.

Load: the simulator's 1024-GPU 8-rail supernode at a 1 s interval (every scrape of every node and
switch, cut by fault domain as collectors send them), then 2×, 5× and 10× that rate.

Modes (each prints a table; the machine is noisy, so rates are medians of repeats where they repeat):

``--compression``  every codec kafka-python can use here: produce rate, bytes on the broker's disk,
                   bare consume rate. The default compression of stream.kafka comes from this.
(default)          bare kafka-python produce and consume rates of the same records.

Run: ``.venv/bin/python -m bench.kafka_throughput [--bootstrap HOST:PORT] [--compression]``; without
``--bootstrap`` a throwaway broker is started (scripts/kafka-broker's, in a temporary directory).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console
from rich.table import Table

from fabricwatch import schema
from fabricwatch.topology import Topology, generate
from stream.bus import Outgoing
from stream.kafka import KafkaBus
from stream.keys import outgoing
from stream.localbroker import LocalBroker

CODECS = (None, "gzip", "snappy", "lz4", "zstd")


def supernode_scrapes(topology: Topology, seconds: int, seed: int = 3) -> list[list[Outgoing]]:
    """``seconds`` one-second scrapes of the whole supernode, as keyed bus records (one list per second)."""
    from collectors.sim import Simulator

    sim = Simulator(topology, seed=seed, interval=1.0)
    return [[r for m in sim.step() for r in outgoing(m, topology)] for _ in range(seconds)]


def rows_of(records: list[Outgoing]) -> int:
    return sum(schema.row_count(schema.decode(r.value)) for r in records)


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

    from stream.kafka import ensure_topics

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


def bare_consume_rate(bootstrap: str, expected: int) -> float:
    """Records/s of a bare kafka-python consumer reading the telemetry topics from the start (no decoding)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=f"bench-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=10_000,
        max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_wait_ms=100,
    )
    consumer.subscribe(list(schema.TELEMETRY_TOPICS))
    got, started = 0, None
    deadline = time.monotonic() + 300
    while got < expected and time.monotonic() < deadline:
        polled = consumer.poll(timeout_ms=500, max_records=10_000)
        if polled and started is None:
            started = time.perf_counter()  # from the first records: group join is not throughput
        got += sum(len(v) for v in polled.values())
    elapsed = time.perf_counter() - (started or time.perf_counter())
    consumer.close()
    if got < expected:
        raise SystemExit(f"bench: consumed {got} of {expected} records within 300 s")
    return got / elapsed if elapsed else float("inf")


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
    from stream.kafka import DEFAULT_COMPRESSION

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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.kafka_throughput", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="a broker to use (default: start a throwaway one)")
    parser.add_argument("--seconds", type=int, default=10, help="seconds of scrapes to send (default 10)")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compression", action="store_true", help="compare codecs")
    args = parser.parse_args(argv)
    topology = generate(1024, 8, 8)
    batches = supernode_scrapes(topology, args.seconds)
    out = Console()
    with broker(args.bootstrap) as bootstrap:
        if args.compression:
            out.print(compression_table(bootstrap, batches, args.partitions, args.repeat))
        else:
            out.print(bare_table(bootstrap, batches, args.partitions, args.repeat))


if __name__ == "__main__":
    main()

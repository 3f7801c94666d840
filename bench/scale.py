"""Scale: four supernodes through the real broker into 2 and then 4 stage-1 processors and one stage 2.

Load: ``generate(4096, 8, 8)`` (4,096 GPUs, four 1024-GPU supernodes' worth) scraped every second,
with step faults (``link_down`` and ``gpu_xid``) at known telemetry times spread over the detection
tick's phase. The scrapes are generated before the run (the simulator's speed is not measured) and one
collector process sends each second's scrapes on the wall-clock second, recording when it did.
``fabricwatch process --topology`` ×N (one consumer group) runs stage 1, ``fabricwatch correlate`` runs
stage 2; the bench reads the findings and incidents topics as they fill and notes each record's
arrival wall time.

Per run: each processor's CPU and stage 2's (% of one core, from /proc/<pid>/stat over the load),
consumer lag (records behind, sampled every 0.5 s), and per fault: wall seconds from its first bad
scrape being sent to its first finding on ``fabricwatch.findings`` and to its incident on
``fabricwatch.incidents``; plus the pipeline's own share of the latter (incident arrival − the send of
the scrape at the incident's ``detected_at``: the telemetry the decision needed). Then the capacity
each processor core has (GPUs at 1 s), bytes per row in DuckDB and in sealed Parquet, and a capacity
model for 100,000 GPUs.

Run: ``.venv/bin/python -m bench.scale [--bootstrap HOST:PORT] [--seconds 90] [--processors 2 4]``;
without ``--bootstrap`` a throwaway broker is started (other traffic on a shared broker would disturb
the figures, and the fabricwatch topics are recreated empty for each run).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table

from fabricwatch import schema
from fabricwatch.errors import InputError
from fabricwatch.faults import Fault
from fabricwatch.stream.bus import Outgoing
from fabricwatch.topology import Topology, generate

GPUS = 4096
SUPERNODE_GPUS = 1024
INTERVAL_S = 1.0
FIRST_FAULT_S = 12.0  # after the first detection tick has a window to look at
OPEN_MARGIN_S = 45.0  # a fault needs ≤ one tick + grace + open_after_s (30 s) of telemetry to open
FAULTS = 6
# targets (issue 7 part 7)
TARGET_GPUS_PER_CORE = 10 * SUPERNODE_GPUS  # 10 supernodes at 1 s per stage-1 processor core
TARGET_STAGE2_PCT = 10.0  # stage 2, at that load, under 10 % of a core
FRAME = struct.Struct(">I")


# --- pure helpers (tests/test_bench_scale.py) ----------------------------------------------------------


def plan_faults(topology: Topology, seconds: float, count: int = FAULTS) -> list[Fault]:
    """``count`` step faults, link_down and gpu_xid alternating, on nodes spread over the cluster (never
    two on one node or leaf, so no correlation merges them), at whole seconds spread over
    [FIRST_FAULT_S, seconds − OPEN_MARGIN_S] so they fall on different phases of the 10 s tick."""
    last = seconds - OPEN_MARGIN_S
    if last < FIRST_FAULT_S:
        raise InputError(
            "--seconds", f"{seconds:g} leaves no room for faults: use at least {FIRST_FAULT_S + OPEN_MARGIN_S:g}"
        )
    nodes = [n.name for n in topology.nodes]
    host_links: dict[str, list[Any]] = {}
    for link in topology.links:
        if link.tier == "host":
            host_links.setdefault(link.a.split("/")[0], []).append(link)
    step = (last - FIRST_FAULT_S) / (count - 1) if count > 1 else 0.0
    faults, used_leaves = [], set()
    for i in range(count):
        start = float(round(FIRST_FAULT_S + i * step))
        node = nodes[(i * len(nodes)) // count]
        if i % 2 == 0:
            link = next(lk for lk in host_links[node] if lk.b.split(":")[0] not in used_leaves)
            used_leaves.add(link.b.split(":")[0])
            faults.append(Fault("link_down", link.id, start))
        else:
            faults.append(Fault("gpu_xid", f"{node}/gpu{i % 8}", start))
    return faults


def first_bad_scrape(fault: Fault, interval: float = INTERVAL_S) -> int:
    """Index of the first scrape that shows a step fault (scrape k reads the plant at k × interval)."""
    return math.ceil(fault.start / interval - 1e-9)


def fault_entities(topology: Topology, fault: Fault) -> set[str]:
    """Ids a finding or incident about ``fault`` may carry: a link and both its port ends, or the GPU."""
    for link in topology.links:
        if link.id == fault.target:
            return {link.id, link.a, link.b}
    return {fault.target}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between the closest ranks; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class FaultLatency:
    fault: Fault
    finding_s: float | None  # first bad scrape sent → first finding about it on the findings topic
    incident_s: float | None  # first bad scrape sent → its incident on the incidents topic
    pipeline_s: float | None  # scrape at the incident's detected_at sent → incident on the topic


def latencies(
    topology: Topology,
    faults: Sequence[Fault],
    sent_at: Sequence[float],
    findings: Sequence[tuple[float, str, float]],
    incidents: Sequence[tuple[float, dict[str, Any]]],
    start_ts: float,
    interval: float = INTERVAL_S,
) -> list[FaultLatency]:
    """Per fault, from the wall times scrapes were sent (``sent_at[k]``: scrape k) and the arrival wall
    times of findings ``(wall, entity id, tick ts)`` and incidents ``(wall, incident JSON)``."""
    out = []
    for fault in faults:
        k = first_bad_scrape(fault, interval)
        if k >= len(sent_at):
            out.append(FaultLatency(fault, None, None, None))
            continue
        ids = fault_entities(topology, fault)
        bad_tick_from = start_ts + k * interval  # a finding of an earlier tick is not about this fault
        found = [w for w, entity, tick in findings if entity in ids and tick >= bad_tick_from]
        inc = [(w, i) for w, i in incidents if i.get("location", {}).get("id") in ids]
        pipeline = None
        if inc:
            w, first = min(inc, key=lambda x: x[0])
            j = math.ceil((first["detected_at"] - start_ts) / interval - 1e-9)
            pipeline = w - sent_at[j] if 0 <= j < len(sent_at) else None
        out.append(
            FaultLatency(
                fault,
                min(found) - sent_at[k] if found else None,
                min(w for w, _ in inc) - sent_at[k] if inc else None,
                pipeline,
            )
        )
    return out


@dataclass
class Measured:
    """What the capacity model is built from (per 1024-GPU supernode at a 1 s interval where it says)."""

    records_per_sn_s: float
    bytes_per_sn_s: float  # MessagePack as produced
    broker_bytes_per_sn_s: float  # on the broker's disk, compressed
    rows_per_sn_s: float
    gpus_per_core: float  # stage-1 capacity: GPUs at 1 s one processor core keeps up with
    stage2_pct_per_sn: float  # stage 2's % of a core per supernode of load
    duckdb_bytes_per_row: float
    parquet_bytes_per_row: float


def capacity_model(m: Measured, gpus: int = 100_000, retention_days: float = 7.0) -> list[tuple[str, str]]:
    """(item, figure) for ``gpus`` GPUs at 1 s, scaled linearly from the measurement (each line says how)."""
    sn = gpus / SUPERNODE_GPUS
    cores = math.ceil(gpus / m.gpus_per_core) if m.gpus_per_core > 0 else 0
    processors = max(cores, 1)
    partitions = 12 * math.ceil(2 * processors / 12)  # two per processor: a lost one's move to the others
    rows_s = m.rows_per_sn_s * sn
    day = 86_400
    return [
        ("supernodes (1024 GPUs) at 1 s", f"{sn:.1f}"),
        ("broker in: records/s", f"{m.records_per_sn_s * sn:,.0f}"),
        ("broker in: MB/s produced (MessagePack)", f"{m.bytes_per_sn_s * sn / 1e6:,.1f}"),
        ("broker in: MB/s on disk (zstd)", f"{m.broker_bytes_per_sn_s * sn / 1e6:,.1f}"),
        (
            f"broker disk for {retention_days:g} days' retention (replication 1)",
            f"{m.broker_bytes_per_sn_s * sn * day * retention_days / 1e12:,.2f} TB",
        ),
        ("rows/s stored", f"{rows_s:,.0f}"),
        ("stage-1 processor cores (measured GPUs per core)", f"{cores}"),
        ("partitions per telemetry topic (2 per processor, multiple of 12)", f"{partitions}"),
        ("stage 2: % of one core (linear in supernodes)", f"{m.stage2_pct_per_sn * sn:.0f} %"),
        (
            "DuckDB hot files (300 s seal horizon), all processors",
            f"{rows_s * 300 * m.duckdb_bytes_per_row / 1e9:,.1f} GB",
        ),
        ("DuckDB volume per day, if nothing were sealed", f"{rows_s * day * m.duckdb_bytes_per_row / 1e12:,.2f} TB"),
        ("sealed Parquet per day", f"{rows_s * day * m.parquet_bytes_per_row / 1e12:,.2f} TB"),
        ("sealed Parquet for 30 days' retention", f"{rows_s * day * 30 * m.parquet_bytes_per_row / 1e12:,.1f} TB"),
    ]


# --- load -----------------------------------------------------------------------------------------------


@dataclass
class Load:
    path: Path
    seconds: int
    start_ts: float
    records_per_s: float
    bytes_per_s: float
    rows_per_s: float


def write_load(topology: Topology, faults: Sequence[Fault], seconds: int, path: Path, seed: int = 3) -> Load:
    """Generate ``seconds`` one-second scrapes with ``faults``; one length-prefixed MessagePack frame each."""
    from fabricwatch.collectors.sim import Simulator
    from fabricwatch.stream.keys import outgoing_batched

    sim = Simulator(topology, list(faults), seed=seed, interval=INTERVAL_S)
    records = size = rows = 0
    with path.open("wb") as out:
        for k in range(seconds):
            batch = outgoing_batched(sim.step(), topology)
            if k:  # the first scrape carries every module once: not the steady rate
                records += len(batch)
                size += sum(len(r.value) for r in batch)
                rows += sum(schema.record_rows(r.value) for r in batch)
            frame = msgspec.msgpack.encode([(r.topic, r.key, r.value, r.ts) for r in batch])
            out.write(FRAME.pack(len(frame)) + frame)
    n = max(seconds - 1, 1)
    return Load(path, seconds, sim.start_ts, records / n, size / n, rows / n)


def read_load(path: Path) -> list[list[Outgoing]]:
    data, batches, pos = path.read_bytes(), [], 0
    while pos < len(data):
        (n,) = FRAME.unpack_from(data, pos)
        raw = msgspec.msgpack.decode(data[pos + FRAME.size : pos + FRAME.size + n])
        batches.append([Outgoing(t, k, v, ts) for t, k, v, ts in raw])
        pos += FRAME.size + n
    return batches


def collector(args: argparse.Namespace) -> None:
    """--role collector: load every scrape, say ready, wait for go, then send one scrape per second
    (flushing each, as collectors.runner.BusSink does); prints the wall time each was sent."""
    from fabricwatch.stream.kafka import KafkaBus

    batches = read_load(Path(args.load))
    bus = KafkaBus(args.bootstrap, client_id="bench-scale-collector")
    bus.ensure_topics()
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("bench collector: no go")
    cpu0, started = time.process_time(), time.perf_counter()
    wall0 = time.time() - started
    sent_at, behind = [], 0.0
    for i, batch in enumerate(batches):
        due = started + i * INTERVAL_S
        if (wait := due - time.perf_counter()) > 0:
            time.sleep(wait)
        now = time.perf_counter()
        behind = max(behind, now - due)
        sent_at.append(wall0 + now)
        bus.produce(batch)
        bus.flush(60)
    bus.flush(120)
    cpu_s = time.process_time()
    report = {"sent_at": sent_at, "dropped": bus.stats.dropped, "behind_max": behind, "cpu_s": cpu_s - cpu0}
    print(msgspec.json.encode(report).decode(), flush=True)
    bus.close()


# --- one run ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[tuple[str, int | None]]:
    """(bootstrap, the broker JVM's pid when it is ours to measure)."""
    if bootstrap:
        yield bootstrap, None
        return
    from tests.kafka.localbroker import LocalBroker

    with tempfile.TemporaryDirectory() as tmp:
        local = LocalBroker.create(Path(tmp) / "broker").start()
        try:
            yield local.bootstrap, local.pid()
        finally:
            local.stop()


def group_members(admin: Any, group: str) -> int:
    """Members of a stable consumer group (0 while it forms or rebalances, or its coordinator is not up)."""
    from kafka import errors as kerr

    try:
        info = admin.describe_groups([group])[group]
    except kerr.KafkaError:
        return 0
    return len(info["members"]) if info["group_state"] == "Stable" else 0


class Watch(threading.Thread):
    """Reads the findings and incidents topics from the start, noting each record's arrival wall time."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        from kafka import KafkaConsumer
        from kafka import TopicPartition as TP

        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        topics = (schema.TOPIC_FINDINGS, schema.TOPIC_INCIDENTS)
        deadline = time.monotonic() + 30
        while not all(self.consumer.partitions_for_topic(t) for t in topics):
            if time.monotonic() > deadline:
                raise SystemExit(f"bench: the broker did not list {' and '.join(topics)} within 30 s")
            time.sleep(0.2)
            self.consumer.topics()  # refreshes the metadata
        tps = [TP(topic, p) for topic in topics for p in sorted(self.consumer.partitions_for_topic(topic) or ())]
        self.consumer.assign(tps)
        self.consumer.seek_to_beginning(*tps)
        self.findings: list[tuple[float, str, float]] = []  # (wall, entity id, tick ts)
        self.marks: dict[str, float] = {}  # source -> newest tick mark
        self.incidents: list[tuple[float, dict[str, Any]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        import orjson

        from fabricwatch.stream.findings import Found, decode

        while not self.stop.is_set():
            polled = self.consumer.poll(timeout_ms=100)
            now = time.time()
            for records in polled.values():
                for r in records:
                    if r.topic == schema.TOPIC_INCIDENTS:
                        self.incidents.append((now, orjson.loads(r.value)))
                        continue
                    item = decode(r.value)
                    if isinstance(item, Found):
                        self.findings.append((now, item.finding.id, item.ts))
                    else:
                        self.marks[item.source] = max(self.marks.get(item.source, item.ts), item.ts)
        self.consumer.close()


@dataclass
class RunResult:
    processors: int
    proc_pct: list[float]
    stage2_pct: float
    collector_pct: float
    broker_pct: float | None
    lag_median: float
    lag_max: int
    wall_s: float
    behind_max: float
    dropped: int
    faults: list[FaultLatency]
    duckdb_bytes: int = 0
    rows: int = 0
    parquet_bytes: int = 0
    sealed_rows: int = 0
    broker_bytes: int = 0
    logs: list[Path] = field(default_factory=list)


def spawn(argv: list[str], log: Path, **kw: Any) -> subprocess.Popen:
    out = log.open("ab")
    try:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, **kw)
    finally:
        out.close()


def run_once(
    bootstrap: str,
    broker_pid: int | None,
    topology_file: Path,
    topology: Topology,
    load: Load,
    faults: Sequence[Fault],
    n: int,
    tmp: Path,
    out: Console,
) -> RunResult:
    from kafka import KafkaAdminClient

    from bench.kafka_throughput import Lag, bytes_on_disk, cpu_seconds, fresh_topics, stop

    fresh_topics(bootstrap, 12)
    group = f"bench-scale-{uuid.uuid4().hex[:8]}"
    run_dir = tmp / f"run-{n}-{group}"
    run_dir.mkdir()
    fw = [sys.executable, "-m", "fabricwatch"]
    procs = [
        spawn(
            [
                *fw,
                "process",
                "--bootstrap",
                bootstrap,
                "--db",
                str(run_dir / f"p{i}.duckdb"),
                "--group",
                group,
                "--topology",
                str(topology_file),
                "--name",
                f"p{i}",
            ],
            run_dir / f"p{i}.log",
        )
        for i in range(n)
    ]
    stage2 = spawn(
        [
            *fw,
            "correlate",
            "--bootstrap",
            bootstrap,
            "--topology",
            str(topology_file),
            "--db",
            str(run_dir / "stage2.duckdb"),
            "--group",
            f"{group}-correlate",
            "--instance",
            "scale",
        ],
        run_dir / "stage2.log",
    )
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-scale")
    coll = None
    try:
        deadline = time.monotonic() + 180
        while group_members(admin, group) != n or group_members(admin, f"{group}-correlate") != 1:
            if time.monotonic() > deadline:
                raise SystemExit(f"bench: {n} processors and stage 2 did not join their groups within 180 s")
            if any(p.poll() is not None for p in [*procs, stage2]):
                tails = "\n".join(f"{log.name}: {log.read_text()[-600:]}" for log in sorted(run_dir.glob("*.log")))
                raise SystemExit(f"bench: a processor or stage 2 exited at start:\n{tails}")
            time.sleep(0.5)
        watch = Watch(bootstrap)
        watch.start()
        lag = Lag(bootstrap, group)
        coll = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.scale",
                "--role",
                "collector",
                "--bootstrap",
                bootstrap,
                "--load",
                str(load.path),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert coll.stdin is not None and coll.stdout is not None
        if coll.stdout.readline().strip() != "ready":
            raise SystemExit("bench: the collector did not start")
        pids = [p.pid for p in procs] + [stage2.pid] + ([broker_pid] if broker_pid else [])
        cpu0, wall0 = {pid: cpu_seconds(pid) for pid in pids}, time.perf_counter()
        coll.stdin.write("go\n")
        coll.stdin.flush()
        samples: list[int] = []
        while coll.poll() is None:
            samples.append(lag.behind())
            time.sleep(0.5)
        report = msgspec.json.decode(coll.stdout.read() or "{}")
        deadline = time.monotonic() + 120
        while lag.behind() > 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        cpu = {pid: cpu_seconds(pid) - cpu0[pid] for pid in pids}
        wall = time.perf_counter() - wall0
        # stage 2 closes the last ticks once every processor has marked them: wait for the incidents
        wanted = [fault_entities(topology, f) for f in faults]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
            any(i.get("location", {}).get("id") in ids for _, i in watch.incidents) for ids in wanted
        ):
            time.sleep(0.5)
        time.sleep(1.0)
        watch.stop.set()
        watch.join(10)
        lag.close()
        lat = latencies(topology, faults, report["sent_at"], watch.findings, watch.incidents, load.start_ts)
        result = RunResult(
            n,
            [100 * cpu[p.pid] / wall for p in procs],
            100 * cpu[stage2.pid] / wall,
            100 * report["cpu_s"] / wall,
            100 * cpu[broker_pid] / wall if broker_pid else None,
            statistics.median(samples) if samples else 0.0,
            max(samples, default=0),
            wall,
            report["behind_max"],
            report["dropped"],
            lat,
        )
        result.broker_bytes = bytes_on_disk(bootstrap)
    finally:
        admin.close()
        if coll is not None and coll.poll() is None:
            coll.kill()
        for p in [*procs, stage2]:
            if p.poll() is None:
                stop(p)
    storage(result, run_dir)
    return result


def storage(result: RunResult, run_dir: Path) -> None:
    """Bytes per stored telemetry row: the processors' DuckDB files (checkpointed at stop), then a copy
    of each with every row sealed to Parquet (stream.segments, as a processor seals)."""
    import duckdb

    from fabricwatch.stream import segments

    for db in sorted(run_dir.glob("p*.duckdb")):
        with duckdb.connect(str(db), read_only=True) as con:
            result.rows += sum(con.execute(f"SELECT count(*) FROM {k}").fetchone()[0] for k in schema.KINDS)  # type: ignore[index]
        result.duckdb_bytes += db.stat().st_size
        copy = run_dir / f"sealed-{db.name}"
        shutil.copy(db, copy)
        with duckdb.connect(str(copy)) as con:
            result.sealed_rows += segments.seal(con, copy, before=4e9)
        folder = segments.segments_dir(copy)
        result.parquet_bytes += sum(p.stat().st_size for k in schema.KINDS for p in (folder / k).glob("*.parquet"))
        shutil.rmtree(folder)
        copy.unlink()


# --- tables --------------------------------------------------------------------------------------------


def fmt_s(values: Sequence[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "none"
    missing = len(values) - len(got)
    return f"{percentile(got, 50):.1f} / {percentile(got, 95):.1f} s" + (f" ({missing} missing)" if missing else "")


def print_runs(out: Console, results: list[RunResult], load: Load) -> None:
    sn = GPUS / SUPERNODE_GPUS
    table = Table(
        title=f"{GPUS:,} GPUs ({sn:g} supernodes) at 1 s: {load.records_per_s:,.0f} records, "
        f"{load.rows_per_s:,.0f} rows, {load.bytes_per_s / 1e6:.1f} MB per second; {load.seconds} s; "
        f"{os.cpu_count()} CPU cores"
    )
    cols = (
        "processors",
        "each, % of a core",
        "total",
        "GPUs per core",
        "stage 2",
        "collector",
        "broker",
        "lag median / max",
        "fault→finding p50/p95",
        "fault→incident p50/p95",
        "pipeline p50/p95",
    )
    for c in cols:
        table.add_column(c, justify="right")
    for r in results:
        total = sum(r.proc_pct)
        table.add_row(
            str(r.processors),
            " ".join(f"{p:.0f}" for p in r.proc_pct),
            f"{total:.0f} %",
            f"{GPUS / (total / 100):,.0f}" if total else "?",
            f"{r.stage2_pct:.1f} %",
            f"{r.collector_pct:.0f} %",
            f"{r.broker_pct:.0f} %" if r.broker_pct is not None else "?",
            f"{r.lag_median / load.records_per_s:.2f} / {r.lag_max / load.records_per_s:.2f} s",
            fmt_s([f.finding_s for f in r.faults]),
            fmt_s([f.incident_s for f in r.faults]),
            fmt_s([f.pipeline_s for f in r.faults]),
        )
    out.print(table)
    per = Table(title="per fault (s): first bad scrape sent → first finding / incident; pipeline share")
    for c in ("processors", "fault", "at", "finding", "incident", "pipeline"):
        per.add_column(c, justify="right")
    for r in results:
        for f in r.faults:
            per.add_row(
                str(r.processors),
                f"{f.fault.cause} {f.fault.target}",
                f"{f.fault.start:g}",
                *(f"{v:.1f}" if v is not None else "none" for v in (f.finding_s, f.incident_s, f.pipeline_s)),
            )
    out.print(per)


def measured(results: list[RunResult], load: Load) -> Measured:
    sn = GPUS / SUPERNODE_GPUS
    med = statistics.median
    return Measured(
        records_per_sn_s=load.records_per_s / sn,
        bytes_per_sn_s=load.bytes_per_s / sn,
        broker_bytes_per_sn_s=med(r.broker_bytes / load.seconds for r in results) / sn,
        rows_per_sn_s=load.rows_per_s / sn,
        gpus_per_core=med(GPUS / (sum(r.proc_pct) / 100) for r in results),
        stage2_pct_per_sn=med(r.stage2_pct for r in results) / sn,
        duckdb_bytes_per_row=med(r.duckdb_bytes / r.rows for r in results if r.rows),
        parquet_bytes_per_row=med(r.parquet_bytes / r.sealed_rows for r in results if r.sealed_rows),
    )


def print_targets(out: Console, results: list[RunResult], m: Measured) -> None:
    from fabricwatch.detectors.config import EngineConfig

    engine = EngineConfig()  # the defaults that process and correlate run with
    target_latency = 2 * INTERVAL_S + engine.every_s
    p95 = statistics.median(
        percentile([f.incident_s for f in r.faults if f.incident_s is not None], 95) for r in results
    )
    p95_finding = statistics.median(
        percentile([f.finding_s for f in r.faults if f.finding_s is not None], 95) for r in results
    )
    s2_at_target = m.stage2_pct_per_sn * TARGET_GPUS_PER_CORE / SUPERNODE_GPUS
    table = Table(title="targets (medians over runs)")
    for c in ("target", "measured", "ratio (measured / target)"):
        table.add_column(c, justify="right")
    table.add_row(
        f"≥ {TARGET_GPUS_PER_CORE:,} GPUs at 1 s per stage-1 core",
        f"{m.gpus_per_core:,.0f}",
        f"{m.gpus_per_core / TARGET_GPUS_PER_CORE:.2f}",
    )
    table.add_row(
        f"stage 2 < {TARGET_STAGE2_PCT:g} % of a core at 10 supernodes (linear)",
        f"{s2_at_target:.1f} %",
        f"{s2_at_target / TARGET_STAGE2_PCT:.2f}",
    )
    table.add_row(f"p95 fault→incident < {target_latency:g} s", f"{p95:.1f} s", f"{p95 / target_latency:.2f}")
    table.add_row(
        f"p95 fault→finding < {target_latency:g} s (before the {engine.open_after_s:g} s debounce)",
        f"{p95_finding:.1f} s",
        f"{p95_finding / target_latency:.2f}",
    )
    table.add_row(
        "DuckDB bytes per row / sealed Parquet bytes per row",
        f"{m.duckdb_bytes_per_row:.1f} / {m.parquet_bytes_per_row:.1f}",
        "",
    )
    out.print(table)
    cap = Table(title="capacity model: 100,000 GPUs at 1 s (linear in the measured per-supernode figures)")
    cap.add_column("item")
    cap.add_column("figure", justify="right")
    for item, figure in capacity_model(m):
        cap.add_row(item, figure)
    out.print(cap)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.scale", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--bootstrap", help="a broker to use (default: start a throwaway one)")
    parser.add_argument("--seconds", type=int, default=90, help="seconds of telemetry per run (default 90)")
    parser.add_argument("--processors", type=int, nargs="+", default=[2, 4], help="stage-1 processors per run")
    parser.add_argument("--repeat", type=int, default=1, help="runs per processor count (default 1)")
    parser.add_argument("--keep", type=Path, help="copy each run's logs and DuckDB files into this folder")
    parser.add_argument("--role", choices=("bench", "collector"), default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--load", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "collector":
        collector(args)
        return
    if any(n < 1 for n in args.processors) or args.repeat < 1:
        raise SystemExit("bench.scale: --processors and --repeat must be at least 1")
    out = Console(width=170)
    topology = generate(GPUS, 8, 8)
    faults = plan_faults(topology, args.seconds)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        topology_file = tmp / "cluster.yaml"
        topology_file.write_text(topology.to_yaml())
        out.print(f"generating {args.seconds} s of scrapes with {len(faults)} faults ...", style="dim")
        load = write_load(topology, faults, args.seconds, tmp / "load.bin")
        results = []
        with broker(args.bootstrap) as (bootstrap, broker_pid):
            for n in args.processors:
                for _ in range(args.repeat):
                    out.print(f"{n} processors ...", style="dim")
                    results.append(run_once(bootstrap, broker_pid, topology_file, topology, load, faults, n, tmp, out))
                    if args.keep is not None:
                        kept = max(tmp.glob("run-*"), key=lambda d: d.stat().st_mtime)
                        shutil.copytree(kept, args.keep / kept.name, ignore=shutil.ignore_patterns("sealed-*"))
                    if len(results) < len(args.processors) * args.repeat:
                        print_runs(out, results[-1:], load)  # so far (a later run that fails keeps this one)
        print_runs(out, results, load)
        print_targets(out, results, measured(results, load))


if __name__ == "__main__":
    main()

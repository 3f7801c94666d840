"""The demo: a simulated supernode with injected faults through the whole pipeline.

Simulator → bus (in memory, or Kafka) → the processing loop and processor the live service runs
(stream.consume.ProcessingLoop: validation, DuckDB, detection on the data's own clock) → incidents,
scored against the injected ground truth. Each simulated scrape is produced keyed as collectors key
(stream.keys), then the loop drains the bus before the next scrape. The demo counts what it produced
and what the bus delivered, so a bus that loses records cannot pass unnoticed. The default faults are
picked from the topology itself so the demo runs on any standard supernode size.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fabricwatch.app.score import Score, score
from fabricwatch.clock import VirtualClock
from fabricwatch.faults import Fault
from fabricwatch.incident import Incident
from fabricwatch.pathologies import Pathology
from fabricwatch.schema import row_count
from fabricwatch.stream.bus import Bus, MemoryBus
from fabricwatch.stream.consume import ProcessingLoop
from fabricwatch.stream.keys import outgoing_batched
from fabricwatch.stream.metrics import PipelineMetrics
from fabricwatch.stream.processor import Processor
from fabricwatch.stream.store import Store
from fabricwatch.topology import Topology


def default_faults(topology: Topology) -> list[Fault]:
    """Five faults of different causes, each at a place every standard supernode has, kept apart so
    that none of them explains another (the hot GPU and the faulty port are outside the failing loop)."""
    host = [link for link in topology.links if link.tier == "host"]
    fabric = [link for link in topology.links if link.tier == "fabric"]
    leaves = [s.name for s in topology.switches if s.tier == "leaf"]
    loop = topology.cooling_loops[-1]

    def outside_loop(port_or_gpu: str) -> bool:
        device = topology.port_device.get(port_or_gpu, port_or_gpu)
        return device not in topology.gpu_node or topology.cooling_loop_of(device) != loop

    contaminated = host[min(len(host) - 1, 29)]  # node003/gpu5 on 8-GPU nodes
    cool_gpus = [g for g in topology.gpus if outside_loop(g)] or topology.gpus
    hot_gpu = cool_gpus[min(len(cool_gpus) - 1, 82)]  # node010/gpu2 at 1024 GPUs
    dead_uplink = fabric[min(len(fabric) - 1, 3 * len(fabric) // 8 + 5)]
    faulty_leaf = leaves[len(leaves) * 5 // 8]
    candidates = [p for p in topology.ports_of_device(faulty_leaf) if outside_loop(topology.port_peer[p])]
    faulty_port = candidates[min(len(candidates) - 1, 10)]  # leaf5-0:p10 at 1024 GPUs
    return [
        Fault("connector_contamination", contaminated.id, 60.0, 60.0, options={"direction": "a_to_b", "loss_db": 5.0}),
        Fault("gpu_thermal", hot_gpu, 90.0, 120.0),
        Fault("link_down", dead_uplink.id, 150.0),
        Fault("transceiver_fault", faulty_port, 200.0, 30.0, options={"mode": "errors"}),
        Fault("cooling_failure", loop, 240.0, 120.0),
    ]


@dataclass
class DemoResult:
    incidents: list[Incident]
    score: Score
    rows: int  # stored
    messages: int  # simulated scrapes' messages
    wall_s: float
    sim_s: float
    start_ts: float
    db: str
    produced_rows: int = 0
    produced_records: int = 0  # bus records (a message's parts, batched per kind and key)
    delivered_records: int = 0  # records the bus returned to the loop (each once)
    deadletters: int = 0

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.wall_s if self.wall_s else 0.0

    def shortfall(self) -> str | None:
        """What went wrong between the simulator and the store, in one line; None when nothing did:
        records lost on the way, or records of another producer on the same topics mixed in."""
        if self.delivered_records != self.produced_records:
            what = "lost" if self.delivered_records < self.produced_records else "mixed in from another producer"
            return (
                f"records {what}: the bus delivered {self.delivered_records:,} of the {self.produced_records:,} "
                f"records produced; {self.rows:,} of {self.produced_rows:,} rows stored"
            )
        if self.rows != self.produced_rows:
            stored = f"{self.rows:,} of the {self.produced_rows:,} rows produced were stored"
            return f"rows lost: {stored} ({self.deadletters} dead letters)"
        return None


@dataclass
class Progress:
    sim_t: float
    duration: float
    rows: int
    wall_s: float
    incidents: int


def run_demo(
    topology: Topology,
    faults: list[Fault],
    *,
    duration: float,
    interval: float,
    seed: int,
    db: str | Path,
    bus: Bus | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    pathologies: Sequence[Pathology] = (),
) -> DemoResult:
    from fabricwatch.app.library import maintenance_tickets
    from fabricwatch.collectors.sim import Simulator
    from fabricwatch.detectors.config import EngineConfig
    from fabricwatch.detectors.engine import DetectionEngine

    bus = bus or MemoryBus()
    sim = Simulator(topology, faults, seed=seed, interval=interval, pathologies=pathologies)
    # the demo plans its maintenance windows, so it files their change tickets
    engine = DetectionEngine(topology, EngineConfig(maintenance=maintenance_tickets(pathologies, sim.start_ts)))
    opened: set[str] = set()
    started = time.perf_counter()
    messages = produced_rows = produced_records = 0
    with Store(db) as store:
        processor = Processor(
            topology,
            store,
            clock=VirtualClock(),
            engine=engine,
            metrics=PipelineMetrics(),
            on_incident=lambda i: opened.add(i.id),
        )
        loop = ProcessingLoop(bus, processor, max_records=50_000, poll_timeout_s=0.0)
        loop.subscribe()  # before the first scrape: a Kafka group reads from the end, only this run
        steps = int(duration // interval) + 1
        for _ in range(steps):
            batch = sim.step()
            messages += len(batch)
            produced_rows += sum(row_count(m) for m in batch)
            records = outgoing_batched(batch, topology)  # keyed by fault domain, as collectors send (DESIGN §1)
            produced_records += len(records)
            bus.produce(records)
            bus.flush()
            loop.drain()
            if isinstance(bus, MemoryBus):
                bus.trim()
            if on_progress is not None:
                on_progress(
                    Progress(sim.t, duration, processor.rows_stored, time.perf_counter() - started, len(opened))
                )
        loop.finish()
        incidents = sorted(engine.incidents(), key=lambda i: i.id)
        store.write_batch(incidents=incidents)
        store.checkpoint()
    wall = time.perf_counter() - started
    truth = [f.to_dict() for f in faults]
    stats = loop.stats
    return DemoResult(
        incidents,
        score(truth, incidents, sim.start_ts),
        processor.rows_stored,
        messages,
        wall,
        sim.t,
        sim.start_ts,
        str(db),
        produced_rows=produced_rows,
        produced_records=produced_records,
        delivered_records=stats.records,
        deadletters=stats.deadletters,
    )


def example_queries(result: DemoResult, topology: Topology) -> list[tuple[str, str]]:
    """Two forensic queries to paste, aimed at what the demo found."""
    link = next((i for i in result.incidents if i.location["entity"] == "link"), None)
    queries = []
    if link is not None and link.location["id"] in topology.link_by_id:
        ends = topology.link_by_id[link.location["id"]]
        queries.append(
            (
                f"received and transmitted power on both ends of {ends.id}, minute by minute",
                "SELECT time_bucket(INTERVAL 1 MINUTE, ts) AS minute, port, round(avg(rx_power_dbm), 2) AS rx_dbm, "
                f"round(avg(tx_power_dbm), 2) AS tx_dbm FROM optical WHERE port IN ('{ends.a}', '{ends.b}') "
                "GROUP BY ALL ORDER BY ALL",
            )
        )
    queries.append(
        (
            "the hottest GPUs and their throttle reasons",
            "SELECT device, max(temp_c) AS max_temp_c, bit_or(throttle_mask) AS throttle_bits, "
            "min(sm_clock_mhz) AS min_clock_mhz FROM gpu GROUP BY device ORDER BY max_temp_c DESC LIMIT 8",
        )
    )
    return queries

"""Two-stage detection on the in-memory bus: findings round-trip, stage 2's clock, and exactly once.

Two stage-1 processors each take half of the partitions (as a consumer group of two would), so a
cooling loop's GPUs and a spine's links are split over both; stage 2 joins their findings.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pytest

from fabricwatch.clock import VirtualClock
from fabricwatch.collectors.sim import Simulator
from fabricwatch.detectors.cooling_loop import SAMPLE
from fabricwatch.detectors.stage import CLUSTER_DETECTORS, Stage1, Stage2
from fabricwatch.faults import Fault
from fabricwatch.incident import Incident
from fabricwatch.records import Finding
from fabricwatch.schema import TOPIC_FINDINGS, TOPIC_INCIDENTS
from fabricwatch.stream.bus import MemoryBus, Outgoing, Record, partition_for
from fabricwatch.stream.findings import FindingError, Found, TickMark, decode, encode, tick_records
from fabricwatch.stream.keys import outgoing_batched
from fabricwatch.stream.processor import Processor
from fabricwatch.stream.stage2 import Joiner
from fabricwatch.stream.stage2_loop import CorrelateLoop
from fabricwatch.stream.store import Store
from fabricwatch.topology import generate
from tests.stream.buses import PartitionAtATimeBus

TOPO = generate(128, 8, 8)  # two cooling loops of 8 nodes, 8 leaves, spines
LOOP, SPINE = "cl00", "spine01"
PARTITIONS = 4


def finding(**over) -> Finding:
    base = dict(detector="gpu_temp", symptom="gpu_hot", entity="gpu", id="node000/gpu0", first_seen=100.0,
                last_seen=110.0, severity="major", evidence=({"metric": "temp_c", "value": 91.0},))  # fmt: skip
    return Finding(**{**base, **over})


# --- the records --------------------------------------------------------------------------------------


def test_a_finding_round_trips_with_its_tick_and_source() -> None:
    f = finding(attrs={"lanes": (0, 2), "lanes_total": np.int64(4), "excess_c": np.float64(3.5)}, cause="gpu_thermal")
    got = decode(encode(120.0, f, "p1"))
    assert isinstance(got, Found) and (got.ts, got.source) == (120.0, "p1")
    assert got.finding == finding(attrs={"lanes": [0, 2], "lanes_total": 4, "excess_c": 3.5}, cause="gpu_thermal")
    (mark,) = [decode(o.value) for o in tick_records([(120.0, f)], [120.0], "p1") if o.key == "p1"]
    assert mark == TickMark(120.0, "p1", 1)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (b"{", "not JSON"),
        (b"[]", "a finding must be a JSON object"),
        (b'{"mark": "tick", "ts": 1, "source": "p"}', "findings must be a count"),
        (json.dumps({**json.loads(encode(1.0, finding())), "severity": "bad"}).encode(), "severity: must be one of"),
        (json.dumps({**json.loads(encode(1.0, finding())), "ts": "x"}).encode(), "ts: must be a number"),
    ],
)
def test_a_bad_findings_record_says_why(value: bytes, why: str) -> None:
    with pytest.raises(FindingError, match=why):
        decode(value)


# --- stage 2's clock ------------------------------------------------------------------------------------


@dataclass
class Recorder:
    """A correlation stand-in that records each tick it is given."""

    every_s: float = 10.0

    def __post_init__(self) -> None:
        self.ticks: list[tuple[float, list[str]]] = []

    def run(self, findings: list[Finding], now: float) -> list[Incident]:
        self.ticks.append((now, [f.id for f in findings]))
        return []

    def snapshot(self) -> dict:
        return {"ticks": self.ticks}

    def restore(self, state: dict) -> None:
        self.ticks = [(t, list(ids)) for t, ids in state["ticks"]]


def test_ticks_close_on_marks_alone_and_wait_for_the_findings_a_mark_announced() -> None:
    rec = Recorder()
    j = Joiner(rec, grace_s=1.0, stall_s=60.0)
    for t in (10.0, 20.0):  # a healthy cluster: marks, no findings
        j.add(TickMark(t, "a", 0))
        j.add(TickMark(t, "b", 0))
    j.close_due()
    assert rec.ticks == [(11.0, []), (21.0, [])]
    j.add(TickMark(30.0, "a", 0))
    j.add(TickMark(30.0, "b", 2))  # b announces two findings; one has arrived
    j.add(Found(30.0, "b", finding(id="node001/gpu1")))
    assert j.close_due() == [] and len(rec.ticks) == 2
    j.add(Found(30.0, "b", finding(id="node001/gpu0")))
    j.close_due()
    assert rec.ticks[-1] == (31.0, ["node001/gpu0", "node001/gpu1"])  # in one order, whatever the arrival
    j.add(Found(20.0, "a", finding()))  # its tick is closed
    assert j.late == 1


def test_a_quiet_processor_holds_stage_2_back_for_stall_s_at_most() -> None:
    rec = Recorder()
    j = Joiner(rec, stall_s=30.0)
    j.add(TickMark(10.0, "a", 0))
    j.add(TickMark(10.0, "b", 0))
    j.close_due()
    for t in (20.0, 30.0, 40.0):  # b stops (killed, or its partitions moved)
        j.add(TickMark(t, "a", 0))
        j.close_due()
    assert [now for now, _ in rec.ticks] == [11.0]  # tick 20 waits for b while b is within 30 s ...
    j.add(TickMark(50.0, "a", 0))
    j.close_due()
    assert [now for now, _ in rec.ticks] == [11.0, 21.0, 31.0, 41.0, 51.0]  # ... then b is quiet


def test_a_processor_a_tick_behind_the_first_is_waited_for_from_its_first_mark_on() -> None:
    """bench/scale.py: b started a tick behind a, so each of b's marks came after a had closed its tick.
    They were dropped as late, b never became known, no tick waited for it, and every finding of b came
    late (three of six faults never opened). Its first mark, late or not, makes it known."""
    rec = Recorder()
    j = Joiner(rec, stall_s=60.0)
    j.add(TickMark(10.0, "a", 0))
    j.close_due()  # only a is known: tick 10 closes on a alone
    j.add(Found(10.0, "b", finding(id="node001/gpu1")))
    j.add(TickMark(10.0, "b", 1))  # late: its tick is closed
    assert j.late == 1
    j.add(TickMark(20.0, "a", 0))
    assert j.close_due() == [] and [now for now, _ in rec.ticks] == [11.0]  # tick 20 waits for b
    j.add(Found(20.0, "b", finding(id="node001/gpu1")))
    j.add(TickMark(20.0, "b", 1))
    j.close_due()
    assert rec.ticks[-1] == (21.0, ["node001/gpu1"]) and j.late == 1


def test_the_joiners_state_resumes_where_it_stopped() -> None:
    j = Joiner(Recorder())
    j.add(TickMark(10.0, "a", 1))
    j.add(Found(20.0, "a", finding()))
    j.close_due()
    again = Joiner(Recorder())
    again.restore(json.loads(json.dumps(j.snapshot())))
    assert again.snapshot() == j.snapshot()
    for joiner in (j, again):
        joiner.add(Found(10.0, "a", finding(id="node002/gpu2")))
        joiner.add(TickMark(20.0, "a", 1))
        joiner.close_due()
    assert again.engine.ticks == j.engine.ticks == [(11.0, ["node002/gpu2"]), (21.0, ["node000/gpu0"])]


def down(port: str, first_seen: float, last_seen: float) -> Finding:
    return Finding("link_state", "link_down", "port", port, first_seen, last_seen, "critical",
                   ({"metric": "state", "port": port, "value": 0},))  # fmt: skip


def test_a_step_tick_closes_between_two_ticks_and_opens_its_step_incident_there() -> None:
    """Stage 2's step tick: processor a found a link down at its step tick 15 (both ends, and a GPU hot,
    no step); b ran its step tick with nothing. Stage 2 opens the link at 16, not at the tick 20, and
    the tick 20 that sees the same link down refreshes that incident: one incident, opened once."""
    link = TOPO.links[3]
    j = Joiner(Stage2(TOPO), stall_s=60.0)
    for source in "ab":
        j.add(TickMark(10.0, source, 0))
    assert j.close_due() == []
    step = [down(link.a, 12.0, 15.0), down(link.b, 13.0, 15.0), finding(first_seen=12.0, last_seen=15.0)]
    for f in step:
        j.add(Found(15.0, "a", f, step=True))
    j.add(TickMark(15.0, "a", len(step), step=True))
    assert j.close_due() == []  # b has not marked 15 yet
    j.add(TickMark(15.0, "b", 0, step=True))
    (opened,) = j.close_due()
    assert (opened.cause, opened.location["id"]) == ("link_down", link.id)
    assert (opened.detected_at, opened.first_seen) == (16.0, 12.0)
    for f in (down(link.a, 12.0, 20.0), down(link.b, 13.0, 20.0)):
        j.add(Found(20.0, "a", f))
    j.add(TickMark(20.0, "a", 2))
    j.add(TickMark(20.0, "b", 0))
    j.close_due()
    assert [(i.id, i.detected_at) for i in j.engine.incidents()] == [(opened.id, 16.0)]
    j.add(Found(15.0, "a", down(link.a, 12.0, 15.0), step=True))  # its step tick, and the tick after, closed
    assert j.late == 1


def test_step_ticks_resume_from_the_joiners_state_and_a_state_without_them_still_loads() -> None:
    j = Joiner(Stage2(TOPO), stall_s=60.0)
    j.add(TickMark(10.0, "a", 0))
    j.add(Found(15.0, "a", down(TOPO.links[3].a, 12.0, 15.0), step=True))
    j.add(TickMark(15.0, "a", 2, step=True))  # one of its two findings is still to come
    j.close_due()
    state = json.loads(json.dumps(j.snapshot()))
    again = Joiner(Stage2(TOPO), stall_s=60.0)
    again.restore(state)
    assert again.snapshot() == state
    for joiner in (j, again):
        joiner.add(Found(15.0, "a", down(TOPO.links[3].b, 13.0, 15.0), step=True))
        assert [i.detected_at for i in joiner.close_due()] == [16.0]
    old = {k: v for k, v in state.items() if not k.startswith("step_")}  # saved before step ticks
    Joiner(Stage2(TOPO)).restore(old)


def test_a_step_finding_and_mark_round_trip_and_records_without_the_flag_are_a_ticks() -> None:
    f = down("node000/gpu3:p0", 12.0, 15.0)
    records = tick_records([(15.0, f)], [15.0], "p1", step=True)
    assert [decode(o.value) for o in records] == [Found(15.0, "p1", f, step=True), TickMark(15.0, "p1", 1, step=True)]
    assert b"step" not in b"".join(o.value for o in tick_records([(10.0, f)], [10.0], "p1"))
    assert decode(encode(10.0, f, "p1")).step is False


# --- two processors, one stage 2 ---------------------------------------------------------------------


@dataclass
class Split:
    findings: list[Outgoing]  # what the two processors published, in order
    gpu_sources: dict[str, set[str]]  # a hot GPU of the loop -> processors that found it hot
    stores: dict[str, Store]  # each processor's store


@pytest.fixture(scope="module")
def split() -> Split:
    """Two stage-1 processors, A (partitions 0, 1) and B (2, 3), over a simulated cooling failure of
    cl00 and a switch fault of spine01."""
    faults = [Fault("cooling_failure", LOOP, 60.0, 60.0), Fault("switch_fault", SPINE, 60.0)]
    sim = Simulator(TOPO, faults, seed=3, interval=5.0)
    procs = {name: Processor(TOPO, Store(), clock=VirtualClock(), engine=Stage1(TOPO, split=True)) for name in "AB"}
    offsets: dict[tuple[str, int], int] = {}
    out: list[Outgoing] = []
    for _ in range(60):  # 300 s of telemetry
        share: dict[str, list[Record]] = {"A": [], "B": []}
        for o in outgoing_batched(sim.step(), TOPO):
            p = partition_for(o.key, PARTITIONS)
            n = offsets[(o.topic, p)] = offsets.get((o.topic, p), -1) + 1
            share["A" if p < 2 else "B"].append(Record(o.topic, o.key, o.value, o.ts, p, n))
        for name, proc in procs.items():
            res = proc.handle(share[name])
            out += tick_records(res.findings, res.ticks, name)
    sources: dict[str, set[str]] = {}
    for o in out:
        item = decode(o.value)
        hot = isinstance(item, Found) and item.finding.symptom == "gpu_hot"
        if hot and TOPO.cooling_loop_of(item.finding.id) == LOOP:
            sources.setdefault(item.finding.id, set()).add(item.source or "")
    return Split(out, sources, {name: proc.store for name, proc in procs.items()})


def correlate(split: Split, db: Path | str = ":memory:", bus: MemoryBus | None = None) -> tuple[MemoryBus, Store]:
    bus = bus or MemoryBus(PARTITIONS)
    if not bus.records(TOPIC_FINDINGS):
        bus.produce(split.findings)
    store = Store(db, group="stage2")
    loop = new_loop(bus, store)
    drive(loop)
    return bus, store


def new_loop(bus: MemoryBus, store: Store, batch: int = 40) -> CorrelateLoop:
    joiner = Joiner(Stage2(TOPO, id_prefix="inc-t-"))
    delivered = lambda: {r.value for r in bus.records(TOPIC_INCIDENTS)}  # noqa: E731
    return CorrelateLoop(bus, store, joiner, delivered=delivered, max_records=batch)


def drive(loop: CorrelateLoop) -> None:
    """What ``CorrelateLoop.run`` does (in batches of its ``max_records``), until the bus is read."""
    loop.drain()


def published(bus: MemoryBus) -> list[dict]:
    return [json.loads(r.value) for r in bus.records(TOPIC_INCIDENTS)]


def test_a_cooling_loop_split_over_two_processors_and_a_switch_fault_become_one_incident_each(split) -> None:
    assert not CLUSTER_DETECTORS  # cooling_loop runs split too: its loop-vs-loop judgement is stage 2's
    both = {g for g, s in split.gpu_sources.items() if s}
    by = {s for srcs in split.gpu_sources.values() for s in srcs}
    assert len(both) >= 4 and by == {"A", "B"}  # the loop's hot GPUs were seen by both processors
    bus, store = correlate(split)
    final = {i["id"]: i for i in published(bus)}
    roots = {(i["cause"], i["location"]["id"]) for i in final.values() if i["status"] == "firing"}
    assert ("cooling_failure", LOOP) in roots and ("switch_fault", SPINE) in roots
    assert all(i["id"].startswith("inc-t-") for i in final.values())
    assert store.count("incidents") == len(final)
    assert store.con.execute("SELECT count(*) FROM incident_outbox").fetchone() == (0,)


def test_a_split_stage_1_publishes_its_loop_samples_and_stores_only_its_findings(split) -> None:
    """``cooling_loop_sample`` is transport for stage 2's judge (a loop per processor per tick): on the
    findings topic, not in a processor's findings table (the GPU rows it summarises are in the processor's
    ``gpu`` table). Every other finding is both published and stored; what the judge makes of the samples
    (``cooling_loop_warm``) stage 2 stores, as one process stores it."""
    published: dict[str, list[Finding]] = {"A": [], "B": []}
    for item in (decode(o.value) for o in split.findings):
        if isinstance(item, Found):
            published[item.source or ""].append(item.finding)
    for name, store in split.stores.items():
        samples = [f for f in published[name] if f.symptom == SAMPLE]
        assert len(samples) >= 50  # each processor sees part of both loops, each tick
        rows = store.con.execute("SELECT symptom, id FROM findings ORDER BY ALL").fetchall()
        assert rows and SAMPLE not in {symptom for symptom, _ in rows}
        assert rows == sorted((f.symptom, f.id) for f in published[name] if f.symptom != SAMPLE)
    _, stage2 = correlate(split)
    verdicts = stage2.con.execute("SELECT symptom, id, epoch(ts) FROM findings ORDER BY ts").fetchall()
    assert {(symptom, id_) for symptom, id_, _ in verdicts} == {("cooling_loop_warm", LOOP)}
    start = min(f.first_seen for f in published["A"])
    assert min(ts for _, _, ts in verdicts) > start + 60.0  # the failure starts at 60 s


class Crash(Exception):
    pass


class CrashingBus(MemoryBus):
    """Dies once: before the incidents of a batch reach the bus ("produce"), or after ("flush")."""

    def __init__(self, partitions: int, crash: str, after: int) -> None:
        super().__init__(partitions)
        self.crash, self.after = crash, after

    def produce(self, records) -> None:
        records = list(records)
        incidents = any(r.topic == TOPIC_INCIDENTS for r in records)
        if incidents and self.crash == "produce" and self._due():
            raise Crash
        super().produce(records)

    def flush(self, timeout_s: float | None = None) -> None:
        if self.crash == "flush" and self._due():
            raise Crash

    def _due(self) -> bool:
        self.after -= 1
        if self.after < 0:
            self.crash = ""
            return True
        return False


# 40 records a batch: a tick or two each, the second batch with incidents dies; 1000: each batch closes
# many ticks (stage 2 catching up), the first with incidents (both of them) dies
@pytest.mark.parametrize(("batch", "after"), [(40, 1), (1000, 0)])
@pytest.mark.parametrize("crash", ["produce", "flush"])
def test_stage_2_killed_between_store_and_publish_loses_and_repeats_no_incident(
    split, tmp_path, crash, batch, after
) -> None:
    reference, _ = correlate(split)  # batches of 40 records
    expected = [r.value for r in reference.records(TOPIC_INCIDENTS)]
    assert len(expected) >= 2

    bus = CrashingBus(PARTITIONS, crash, after=after)
    bus.produce(split.findings)
    db = tmp_path / "stage2.duckdb"
    store = Store(db, group="stage2")
    with pytest.raises(Crash):
        drive(new_loop(bus, store, batch))
    store.close()  # the process is gone; what was committed is in the file
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM incident_outbox").fetchone()[0] > 0  # stored, not confirmed
    store = Store(db, group="stage2")
    drive(new_loop(bus, store, batch))
    got = [r.value for r in bus.records(TOPIC_INCIDENTS)]
    assert got == expected  # every change once, in order, with the same ids
    ids = {json.loads(v)["id"] for v in expected}
    assert store.count("incidents") == len(ids)
    store.close()


def test_findings_are_keyed_by_their_fault_domain() -> None:
    from fabricwatch.records import Finding
    from fabricwatch.stream.findings import finding_key
    from fabricwatch.topology import generate

    topo = generate(16, 8, 8)
    host = next(lk for lk in topo.links if lk.tier == "host")

    def key(entity: str, id_: str) -> str:
        return finding_key(Finding("d", "s", entity, id_, 0.0, 0.0, "major"), topo)

    assert key("gpu", "node001/gpu3") == "node001"
    assert key("link", host.id) == topo.fault_domain(host.b) == topo.fault_domain(host.a)
    assert key("port", host.a) == key("port", host.b)  # both ends of a link: one partition
    assert key("switch", "spine01") == "spine01"
    assert key("cooling_loop", "cl00") == "cl00"
    assert finding_key(Finding("d", "s", "gpu", "node001/gpu3", 0.0, 0.0, "major"), None) == "node001/gpu3"


@pytest.mark.parametrize("pacing", [True, False])
def test_partitions_read_far_apart_are_paced_so_no_finding_arrives_after_its_tick_closed(split, pacing) -> None:
    reference, _ = correlate(split)
    expected = [r.value for r in reference.records(TOPIC_INCIDENTS)]
    bus = PartitionAtATimeBus(PARTITIONS)
    bus.produce(split.findings)
    loop = CorrelateLoop(
        bus,
        Store(group="stage2"),
        Joiner(Stage2(TOPO, id_prefix="inc-t-"), stall_s=60.0),  # 300 s of findings: partitions drift 5 stalls
        delivered=lambda: set(),
        max_records=40,
    )
    if not pacing:  # what stage 2 did before it paced: feed every record it reads
        loop.pacer.ahead_s = math.inf
    loop.drain()
    assert sum(bus.lag().values()) == 0 and not loop.held
    if pacing:
        assert loop.joiner.late == 0
        assert [r.value for r in bus.records(TOPIC_INCIDENTS)] == expected
    else:
        assert loop.joiner.late > 0  # the failure pacing prevents


def test_a_partition_not_read_yet_holds_the_ticks_its_unknown_sources_may_fill() -> None:
    """Processor "d" publishes to partition 0 and "a" to partition 1; the bus serves partition 0's
    backlog first. Until partition 1 is read, stage 2 has never heard of "a": ticks closed on "d"'s
    marks alone would drop every finding of "a" as late, and a pacer whose floor moved with those
    closed ticks would never hold partition 0 back for it."""
    out: list[Outgoing] = []
    for t in range(10, 310, 10):
        for source, gpu in (("d", "node000/gpu0"), ("a", "node001/gpu0")):
            out += tick_records([(float(t), finding(id=gpu))], [float(t)], source)
    assert [partition_for(k, 2) for k in ("d", "node000/gpu0", "a", "node001/gpu0")] == [0, 0, 1, 1]
    bus = PartitionAtATimeBus(2)
    bus.produce(out)
    joiner = Joiner(Recorder(), stall_s=60.0)
    loop = CorrelateLoop(bus, Store(group="stage2"), joiner, delivered=lambda: set(), max_records=10)
    loop.drain()
    assert joiner.late == 0
    ticks = joiner.engine.ticks  # type: ignore[attr-defined]
    assert [now for now, _ in ticks] == [t + 1.0 for t in range(10, 310, 10)]
    assert all(ids == ["node000/gpu0", "node001/gpu0"] for _, ids in ticks)


def test_ticks_from_until_on_stay_open() -> None:
    rec = Recorder()
    j = Joiner(rec, stall_s=30.0)
    for t in (10.0, 20.0, 30.0):
        j.add(TickMark(t, "a", 0))
    j.close_due(until=20.0)
    assert [now for now, _ in rec.ticks] == [11.0]
    j.add(TickMark(100.0, "a", 0))  # past stall_s: still held by until
    j.close_due(until=20.0)
    assert [now for now, _ in rec.ticks] == [11.0]
    j.close_due()
    assert [now for now, _ in rec.ticks][:3] == [11.0, 21.0, 31.0]


# --- a stage 2 that runs for months: its saved state stays bounded ---------------------------------------


def test_the_joiners_state_keeps_open_ticks_and_active_sources_only() -> None:
    """Six simulated hours of ticks from two processors, one of them renamed every hour (a restart under
    another name): closed ticks leave found/received/expected, and quiet names leave ``latest``."""
    rec = Recorder()
    j = Joiner(rec, stall_s=60.0)
    most = {"found": 0, "received": 0, "expected": 0, "latest": 0}
    for t in range(10, 6 * 3600, 10):
        for source in ("a", f"b{t // 3600}"):
            j.add(Found(float(t), source, finding(id=f"node00{len(source)}/gpu0")))
            j.add(TickMark(float(t), source, 1))
        j.close_due()
        snap = j.snapshot()
        most = {k: max(most[k], len(snap[k])) for k in most}
    assert [now for now, _ in rec.ticks] == [t + 1.0 for t in range(10, 6 * 3600, 10)] and j.late == 0
    # a renamed processor's old name holds ticks back until it is quiet (stall_s = 6 ticks of 10 s, two
    # sources each); then they close and leave the state, and the old name is forgotten: at most one
    # old name besides the two live ones, whatever the number of renames
    assert most == {"found": 6, "received": 2 * 6, "expected": 2 * 6, "latest": 3}
    snap = j.snapshot()
    assert snap["found"] == snap["received"] == snap["expected"] == [] and sorted(snap["latest"]) == ["a", "b5"]


def gpu_hot_every(spacing_s: float, count: int, present_s: float, end_s: float) -> list[Outgoing]:
    """One processor's findings: GPU ``i`` hot for ``present_s`` from ``i * spacing_s``, a mark every 10 s."""
    out: list[Outgoing] = []
    for t in range(10, int(end_s), 10):
        hot = [i for i in range(count) if i * spacing_s <= t < i * spacing_s + present_s]
        found = [(float(t), finding(id=TOPO.gpus[i], first_seen=float(t), last_seen=float(t))) for i in hot]
        out += tick_records(found, [float(t)], "A", TOPO)
    return out


def live_stage_2(findings: list[Outgoing], prune: bool) -> tuple[MemoryBus, Store, Joiner, int]:
    """The live loop over ``findings``; also the most incidents its stored state held after a batch."""
    bus = MemoryBus(PARTITIONS)
    bus.produce(findings)
    store = Store(group="stage2")
    joiner = Joiner(Stage2(TOPO, id_prefix="inc-t-", prune=prune))
    loop = CorrelateLoop(bus, store, joiner, delivered=lambda: set(), max_records=40)
    most = 0
    while loop.step(0.0) or loop.held or loop.pacer.pending:
        most = max(most, len(json.loads(store.engine_state() or "{}")["engine"]["tracker"]["incidents"]))
    return bus, store, joiner, most


def test_a_pruning_stage_2_publishes_the_same_and_its_store_keeps_every_incident() -> None:
    """A GPU hot for a minute every 10 minutes for two hours through the live loop: stage 2 with
    ``prune`` publishes exactly what one without does, its stored state holds only the incidents
    that may still come back (``recur_within_s``), and the incidents table holds all twelve, resolved."""
    recur = Stage2(TOPO).config.recur_within_s
    spacing, count = 600.0, 12
    findings = gpu_hot_every(spacing, count, present_s=60.0, end_s=count * spacing + recur + 300)
    full_bus, _, full, full_most = live_stage_2(findings, prune=False)
    bus, store, joiner, most = live_stage_2(findings, prune=True)
    assert [r.value for r in bus.records(TOPIC_INCIDENTS)] == [r.value for r in full_bus.records(TOPIC_INCIDENTS)]
    changes = [json.loads(r.value) for r in bus.records(TOPIC_INCIDENTS)]
    assert len({c["id"] for c in changes}) == count
    rows = store.con.execute("SELECT id, status FROM incidents ORDER BY id").fetchall()
    assert rows == [(f"inc-t-{i:04d}", "resolved") for i in range(1, count + 1)]  # pruned, still stored
    # within recur_within_s of its last sighting an incident may come back: 1800 / 600 = 3 such, +1 for
    # one a tick past its window and not yet forgotten, +1 open; at the end every one is past it
    assert full_most == count and len(full.engine.incidents()) == count
    assert 0 < most <= recur // spacing + 2
    state = json.loads(store.engine_state() or "{}")
    assert state["engine"]["tracker"]["incidents"] == [] and state["engine"]["tracker"]["next"] == count + 1
    assert joiner.engine.incidents() == []
    assert state["found"] == state["received"] == state["expected"] == []


# --- a batch that closes many ticks publishes every change of each --------------------------------------


def stage_2_in_batches(findings: list[Outgoing], batch: int) -> tuple[list[bytes], list[Incident], CorrelateLoop]:
    """Stage 2 over ``findings`` read ``batch`` records at a time: what it published, what it told
    ``on_incident``, and the loop."""
    bus = MemoryBus(PARTITIONS)
    bus.produce(findings)
    told: list[Incident] = []
    joiner = Joiner(Stage2(TOPO, id_prefix="inc-t-", prune=True))
    loop = CorrelateLoop(bus, Store(group="stage2"), joiner, delivered=lambda: set(), max_records=batch,
                         on_incident=told.append)  # fmt: skip
    loop.drain()
    return [r.value for r in bus.records(TOPIC_INCIDENTS)], told, loop


def test_an_incident_that_opens_and_resolves_within_one_catch_up_batch_is_published_opened_then_resolved() -> None:
    """Two GPUs hot for a minute, ten minutes apart, then healthy until both incidents resolve. Read a
    record at a time (a tick a batch, as live), and all at once (one batch: a stage 2 restarted on the
    backlog), stage 2 publishes the same changes in the same order, each incident firing, then resolved."""
    findings = gpu_hot_every(600.0, 2, present_s=60.0, end_s=2 * 600.0 + 900.0)
    live, live_told, _ = stage_2_in_batches(findings, batch=1)
    caught_up, told, loop = stage_2_in_batches(findings, batch=100_000)
    assert loop.stats.batches == 1 and loop.joiner.ticks > 200  # one batch closed every tick
    assert caught_up == live
    assert [json.dumps(i.to_dict()) for i in told] == [json.dumps(i.to_dict()) for i in live_told]
    changes = [json.loads(v) for v in caught_up]
    assert [json.loads(v) for v in caught_up] == [i.to_dict() for i in told]
    for iid in ("inc-t-0001", "inc-t-0002"):
        statuses = [c["status"] for c in changes if c["id"] == iid]
        assert statuses[0] == "firing" and statuses[-1] == "resolved", statuses
    # in the order the ticks made them: the first incident resolved before the second opened
    order = [(c["id"], c["status"]) for c in changes]
    assert order.index(("inc-t-0001", "resolved")) < order.index(("inc-t-0002", "firing"))
    assert loop.stats.incidents == loop.stats.published == len(changes)
    rows = loop.store.con.execute("SELECT id, status FROM incidents ORDER BY id").fetchall()
    assert rows == [("inc-t-0001", "resolved"), ("inc-t-0002", "resolved")]  # each incident's last state


def test_a_stage_2_restarted_on_a_backlog_read_partition_by_partition_drops_nothing_and_repeats_nothing(
    split, tmp_path
) -> None:
    """Killed mid-backlog (what its pacer held is lost, never stored) and restarted on a fetcher that
    drains one partition before the next: partitions not read yet stand at the first open tick, so
    no finding comes after its tick closed, and the incidents are the uninterrupted stage 2's, once.
    (With the pacer's default, a partition not read yet standing at the batch's start, the first
    partition read runs ahead of the joiner and findings of spine01's ports come late: measured.)"""
    reference, _ = correlate(split)
    expected = [r.value for r in reference.records(TOPIC_INCIDENTS)]
    db = tmp_path / "stage2.duckdb"

    def restarted(published: list[Outgoing]) -> tuple[PartitionAtATimeBus, CorrelateLoop]:
        bus = PartitionAtATimeBus(PARTITIONS)  # a new consumer: nothing paused, read from stored offsets
        bus.produce(split.findings + published)
        joiner = Joiner(Stage2(TOPO, id_prefix="inc-t-"), stall_s=60.0)
        delivered = lambda: {r.value for r in bus.records(TOPIC_INCIDENTS)}  # noqa: E731
        loop = CorrelateLoop(bus, Store(db, group="stage2"), joiner, delivered=delivered, max_records=40)
        return bus, loop

    bus, first = restarted([])
    while first.stats.batches < 40:
        first.step(0.0)
    assert first.held  # killed while a partition waits for the others
    first.store.close()
    published = [Outgoing(TOPIC_INCIDENTS, r.key, r.value, r.ts) for r in bus.records(TOPIC_INCIDENTS)]
    bus, second = restarted(published)
    second.drain()
    assert second.joiner.late == 0 and second.stats.skipped == 0
    assert [r.value for r in bus.records(TOPIC_INCIDENTS)] == expected


def test_one_batch_that_opens_and_resolves_an_incident_publishes_both_keyed_by_its_id_and_once(tmp_path) -> None:
    """One GPU hot for a minute, read by stage 2 in one batch (a restart on its backlog): the incident's
    opening and its resolution are both published, in that order, keyed by the incident's id (so one
    partition keeps them in order); a stage 2 restarted after the batch finds its offsets with its
    state and publishes nothing again."""
    findings = gpu_hot_every(600.0, 1, present_s=60.0, end_s=600.0)
    bus = MemoryBus(PARTITIONS)
    bus.produce(findings)
    db = tmp_path / "stage2.duckdb"
    store = Store(db, group="stage2")
    first = new_loop(bus, store, batch=100_000)
    first.drain()
    assert first.stats.batches == 1
    records = bus.records(TOPIC_INCIDENTS)
    changes = [(r.key, json.loads(r.value)["id"], json.loads(r.value)["status"]) for r in records]
    assert changes[0] == ("inc-t-0001", "inc-t-0001", "firing")
    assert changes[-1] == ("inc-t-0001", "inc-t-0001", "resolved")
    assert {key for key, _, _ in changes} == {"inc-t-0001"} and len({r.partition for r in records}) == 1
    assert first.stats.published == len(records) == first.stats.incidents
    ticks = first.joiner.ticks
    store.close()

    store = Store(db, group="stage2")
    again = new_loop(bus, store, batch=100_000)
    again.drain()
    assert [r.value for r in bus.records(TOPIC_INCIDENTS)] == [r.value for r in records]  # nothing again
    assert again.stats.records == again.stats.published == 0 and again.joiner.ticks == ticks
    assert store.con.execute("SELECT id, status FROM incidents").fetchall() == [("inc-t-0001", "resolved")]
    assert store.con.execute("SELECT count(*) FROM incident_outbox").fetchone() == (0,)
    store.close()

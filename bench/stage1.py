"""Stage-1 CPU per second of telemetry, by stage, without the broker: what one processor core can carry.

Load: ``generate(GPUS, 8, 8)`` scraped every second by the tidy simulator (the scale bench's load),
keyed and batched as collectors send it (stream/keys.py), generated before the run. The processor is
the live one (split ``Stage1`` engine, DuckDB file, ProcessingLoop) over an in-memory bus that gets one
second of scrapes at a time and is drained after each, as a consumer keeping up would be. The first
``--warm`` seconds fill the detection window and are not counted.

Prints CPU seconds per second of telemetry for each stage (decode, source clocks, validation, DuckDB,
window cut, detectors, the rest), the GPUs one core carries at 1 s (GPUs ÷ CPU per second) and its
ratio to issue 7's target of 10,240. CPU time, this process only (Arrow's threads included): a busy
shared machine distorts it less than wall time. Medians over ``--repeat`` runs, with their spread.
Beside them, the raw limit measured in the same run (:func:`raw_insert`: DuckDB's insert of the same
rows) and stage 1's ratio to it, which compares runs on machines of different speeds.

    .venv/bin/python -m bench.stage1 [--gpus 2048] [--seconds 100] [--warm 40] [--repeat 3]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_GPUS_PER_CORE = 10_240  # issue 7: ten 1024-GPU supernodes at 1 s per stage-1 core

STAGES = (  # (label, owner, method): the calls timed; nested calls are not among them
    ("decode", "fabricwatch.stream.processor:Processor", "decode"),
    ("source clocks", "fabricwatch.stream.processor:Processor", "_observe"),
    ("source clocks", "fabricwatch.stream.sources:SourceClocks", "watermark"),
    ("validate", "fabricwatch.schema.validate", "to_table"),
    ("DuckDB", "fabricwatch.stream.store:Store", "write_batch"),
    ("window cut", "fabricwatch.stream.window:WindowBuffer", "window"),
    ("detectors", "fabricwatch.detectors.stage:Stage1", "detect"),
)


def _timed(spent: Counter, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timed(*args: Any, **kw: Any) -> Any:
        started = time.process_time()
        try:
            return fn(*args, **kw)
        finally:
            spent[label] += time.process_time() - started

    return timed


def instrument(spent: Counter) -> Callable[[], None]:
    """Time each stage's calls into ``spent``; returns what undoes it."""
    import importlib

    from fabricwatch import schema

    undo: list[tuple[Any, str, Any]] = [(schema, "to_table", schema.to_table)]
    for label, owner, method in STAGES:
        module_name, _, cls = owner.partition(":")
        target = importlib.import_module(module_name)
        holder = getattr(target, cls) if cls else target
        undo.append((holder, method, getattr(holder, method)))
        setattr(holder, method, _timed(spent, label, getattr(holder, method)))
    schema.to_table = importlib.import_module("fabricwatch.schema.validate").to_table  # the processor's name for it

    def restore() -> None:
        for holder, name, original in reversed(undo):
            setattr(holder, name, original)

    return restore


def run_once(batches: list[list[Any]], topo: Any, warm: int, spent: Counter) -> float:
    from fabricwatch.clock import VirtualClock
    from fabricwatch.collectors.sim.simulator import DEFAULT_START_TS
    from fabricwatch.detectors.stage import Stage1
    from fabricwatch.stream.bus import MemoryBus
    from fabricwatch.stream.consume import ProcessingLoop
    from fabricwatch.stream.processor import Processor
    from fabricwatch.stream.store import Store

    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "stage1.duckdb") as store:
        processor = Processor(topo, store, clock=VirtualClock(DEFAULT_START_TS), engine=Stage1(topo, split=True))
        bus = MemoryBus()
        loop = ProcessingLoop(bus, processor, poll_timeout_s=0.0)
        started = 0.0
        for k, batch in enumerate(batches):
            if k == warm:
                spent.clear()
                started = time.process_time()
            bus.produce(batch)
            while loop.step(0.0):
                pass
        return time.process_time() - started


def validated(batches: list[list[Any]]) -> list[dict[str, Any]]:
    """Each second's records decoded and validated into one Arrow table per kind (the raw limit's rows)."""
    from fabricwatch import schema

    seconds = []
    for batch in batches:
        by_kind: dict[str, list[Any]] = {}
        for record in batch:
            message = schema.decode_record(record.value)
            by_kind.setdefault(message.kind, []).append(message)
        seconds.append({kind: schema.to_table(kind, messages).table for kind, messages in by_kind.items()})
    return seconds


def raw_insert(seconds: list[dict[str, Any]], warm: int) -> float:
    """The raw limit, CPU s per s of telemetry: DuckDB's Arrow insert of the counted seconds' rows,
    one transaction a second as the processor commits them, through stream.store.Store so that the
    DuckDB settings are the processor's. The rows come decoded and validated (:func:`validated`,
    untimed): the least a processor does with its telemetry is store it. Its ratio to stage 1 travels
    between machines; CPU seconds do not (bench/detect_tick.py's raw limit, likewise)."""
    from fabricwatch.stream.store import Store

    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "raw.duckdb") as store:
        for tables in seconds[:warm]:  # the file holds what the processor's held when counting began
            store.write_batch(tables)
        started = time.process_time()
        for tables in seconds[warm:]:
            store.write_batch(tables)
        return (time.process_time() - started) / len(seconds[warm:])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2048)
    parser.add_argument("--seconds", type=int, default=100, help="seconds of telemetry per run")
    parser.add_argument("--warm", type=int, default=40, help="seconds before counting (the window fills)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if not 0 < args.warm < args.seconds:
        parser.error("--warm must be between 0 and --seconds")

    from fabricwatch.collectors.sim import Simulator
    from fabricwatch.stream.keys import outgoing_batched
    from fabricwatch.topology import generate

    topo = generate(args.gpus, 8, 8)
    sim = Simulator(topo, [], seed=3, interval=1.0)
    print(f"generating {args.seconds} s of {args.gpus:,} GPUs at 1 s ...", file=sys.stderr)
    batches = [outgoing_batched(sim.step(), topo) for _ in range(args.seconds)]
    counted = args.seconds - args.warm
    spent: Counter = Counter()
    restore = instrument(spent)
    runs: list[tuple[float, Counter]] = []
    try:
        for r in range(args.repeat):
            cpu = run_once(batches, topo, args.warm, spent)
            runs.append((cpu / counted, Counter({k: v / counted for k, v in spent.items()})))
            print(f"run {r + 1}/{args.repeat}: {cpu / counted:.3f} CPU s per s of telemetry", file=sys.stderr)
    finally:
        restore()
    seconds = validated(batches)  # once, untimed
    raw = [raw_insert(seconds, args.warm) for _ in range(args.repeat)]

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"

    totals = [t for t, _ in runs]
    print(f"\n{args.gpus:,} GPUs at 1 s, {counted} s counted, {args.repeat} runs: CPU s per s of telemetry")
    labels = list(dict.fromkeys(label for label, _, _ in STAGES))
    for label in labels:
        values = [s[label] for _, s in runs]
        print(f"  {label:<14} {spread(values)}  {100 * statistics.median(values) / statistics.median(totals):4.1f} %")
    rest = [t - sum(s.values()) for t, s in runs]
    print(f"  {'the rest':<14} {spread(rest)}  {100 * statistics.median(rest) / statistics.median(totals):4.1f} %")
    print(f"  {'total':<14} {spread(totals)}")
    ratios = [t / r for t, r in zip(totals, raw, strict=True)]
    print(
        f"raw limit (DuckDB's insert of the same rows, a transaction a second): {spread(raw)} CPU s per s; "
        f"stage 1 / raw {statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})"
    )
    per_core = [args.gpus / t for t in totals]
    median = statistics.median(per_core)
    print(
        f"GPUs per stage-1 core at 1 s: {median:,.0f} ({min(per_core):,.0f}–{max(per_core):,.0f}), "
        f"{median / TARGET_GPUS_PER_CORE:.2f} of the {TARGET_GPUS_PER_CORE:,} target (no broker: "
        "bench/scale.py measures it through Kafka)"
    )


if __name__ == "__main__":
    main()

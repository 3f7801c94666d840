"""``fabricwatch demo``: the main job — a simulated supernode with injected faults, end to end.

Exit status 1 when the bus lost records (fewer delivered, or rows stored, than the simulator produced),
mixed in records of another producer, or a Kafka broker stopped answering: a demo that stored nothing
must never look like a run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fabricwatch.cli import non_negative_int, positive_float
from fabricwatch.cli.output import console


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="simulate a supernode with injected faults through the whole pipeline",
        description="Simulate a 1024-GPU supernode (by default) shaped like a production fleet, with a few "
        "injected faults of different causes, run it through the whole pipeline on the in-memory bus "
        "(validation, DuckDB, detection), and report the incidents against the injected ground truth.",
    )
    p.add_argument("--gpus", type=int, default=1024, help="GPUs in the supernode (default 1024)")
    p.add_argument("--rails", type=int, choices=(4, 8), default=8, help="rails (default 8)")
    p.add_argument("--gpus-per-node", type=int, choices=(8, 16), default=8)
    p.add_argument("--duration", type=positive_float, default=420.0, help="simulated seconds (default 420)")
    p.add_argument("--interval", type=positive_float, default=5.0, help="scrape interval, s (default 5)")
    p.add_argument("--seed", type=non_negative_int, default=7, help="random seed (default 7)")
    p.add_argument("--faults", type=Path, metavar="FILE", help="fault spec YAML instead of the default faults")
    world = p.add_mutually_exclusive_group()
    world.add_argument(
        "--realistic",
        action="store_true",
        help="shape the telemetry like a production fleet: every pathology of DESIGN §4b (fabricwatch.realistic); "
        "the default, unless the fault file has pathologies of its own (then added to them)",
    )
    world.add_argument(
        "--tidy",
        action="store_true",
        help="the simulator's tidy world: one clock, every column, no pathology (unit tests' world)",
    )
    p.add_argument("--db", type=Path, default=Path("out/demo.duckdb"), help="DuckDB file (default out/demo.duckdb)")
    p.add_argument(
        "--bootstrap", metavar="HOST:PORT", help="run through this Kafka broker instead of the in-memory bus"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.live import Live
    from rich.text import Text

    from fabricwatch import topology
    from fabricwatch.app.demo import Progress, default_faults, example_queries, run_demo
    from fabricwatch.app.report import incidents_table
    from fabricwatch.app.score import fault_location
    from fabricwatch.faults import load_plan

    topo = topology.generate(args.gpus, args.rails, args.gpus_per_node)
    plan = load_plan(args.faults, topo) if args.faults else None
    faults = list(plan.faults) if plan else default_faults(topo)
    pathologies = list(plan.pathologies) if plan else []
    if args.realistic or not (args.tidy or pathologies):
        from fabricwatch.realistic import realistic

        pathologies += realistic(topo, args.seed, horizon=args.duration)
    for path in (args.db, Path(f"{args.db}.wal")):
        path.unlink(missing_ok=True)
    out = console()
    out.print(f"[bold]fabricwatch demo[/]: {topo.summary()}")
    for f in faults:
        out.print(f"  injecting [bold]{f.cause}[/] at {f.spec.located_at} {f.target} from t+{f.start:.0f}s")
    if pathologies:
        kinds = sorted({q.kind for q in pathologies})
        out.print(f"  shaped like production: {len(pathologies)} pathologies ({', '.join(kinds)})")

    def line(p: Progress) -> Text:
        rate = p.rows / p.wall_s if p.wall_s else 0.0
        return Text.from_markup(
            f"simulated [bold]t+{p.sim_t:.0f}s[/] of {p.duration:.0f}s · {p.rows:,} rows · "
            f"{rate:,.0f} rows/s · [bold]{p.incidents}[/] incidents · {p.wall_s:.1f}s wall"
        )

    bus = None
    broker_failed: tuple[type[Exception], ...] = ()
    if args.bootstrap:
        from fabricwatch.stream.kafka import KafkaUnavailable
        from fabricwatch.stream.lockstep import demo_bus

        broker_failed = (KafkaUnavailable,)
        bus = demo_bus(args.bootstrap)
        out.print(f"  through Kafka at {args.bootstrap}")
    try:
        with Live(Text("starting…"), console=out, transient=False, refresh_per_second=8) as live:
            result = run_demo(
                topo,
                faults,
                duration=args.duration,
                interval=args.interval,
                seed=args.seed,
                db=args.db,
                bus=bus,
                on_progress=lambda p: live.update(line(p)),
                pathologies=pathologies,
            )
    except broker_failed as exc:
        print(f"fabricwatch demo: {exc}", file=sys.stderr)
        return 1
    finally:
        if bus is not None:
            bus.close()
    out.print()
    out.print(incidents_table(result.incidents, result.start_ts))
    s = result.score
    out.print(
        f"ground truth: {s.detected}/{len(s.matches)} injected faults found at the right place with the right "
        f"cause; {len(s.false_alarms)} incidents match no injected fault"
    )
    for m in s.matches:
        mark = "[green]✓[/]" if m.located and m.cause_ok else "[red]✗[/]"
        got = f"{m.incident.id} ({m.incident.cause}) after {m.latency_s:.0f}s" if m.incident else "not found"
        entity, target = fault_location(m.fault)
        out.print(f"  {mark} {m.fault['cause']} at {entity} {target} → {got}")
    out.print(
        f"{result.rows:,} of {result.produced_rows:,} rows produced stored in {result.wall_s:.1f}s wall "
        f"({result.rows_per_s:,.0f} rows/s, {result.sim_s / result.wall_s:.0f}× real time)"
    )
    out.print(f"DuckDB file: [bold]{result.db}[/]. Try:")
    for title, sql in example_queries(result, topo):
        out.print(f"  # {title}")
        out.print(f'  .venv/bin/fabricwatch query --db {result.db} "{sql}"', soft_wrap=True)
    if (problem := result.shortfall()) is not None:
        via = f"Kafka at {args.bootstrap}" if args.bootstrap else "the in-memory bus"
        print(f"fabricwatch demo: through {via}: {problem}", file=sys.stderr)
        return 1
    return 0

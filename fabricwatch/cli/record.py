"""``fabricwatch record``: live telemetry from Kafka into a capture file, to keep and replay a real incident.

The recorder joins a consumer group of its own (never a processor's), starts at the end of every
partition unless ``--from-beginning``, and writes every message it reads until ``--duration``,
``--max-records`` or Ctrl-C (replay/record.py). Replaying the capture stores the same rows.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path

from fabricwatch.cli import non_negative_int, positive_float
from fabricwatch.errors import InputError

CONNECT_TIMEOUT_S = 10.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "record",
        help="record live telemetry from Kafka into a capture (to keep and replay an incident)",
        description="Read the telemetry topics from Kafka and write every message to a capture file (DESIGN §6) "
        "with no ground truth, until --duration, --max-records or Ctrl-C. `fabricwatch capture label` adds the "
        "faults afterwards; `fabricwatch replay` runs detection over it.",
    )
    p.add_argument("--bootstrap", required=True, metavar="HOST:PORT", help="Kafka bootstrap server(s)")
    p.add_argument("--out", required=True, type=Path, metavar="CAPTURE", help="capture file (.jsonl or .jsonl.gz)")
    p.add_argument("--duration", type=positive_float, metavar="S", help="stop after S seconds (default: Ctrl-C)")
    p.add_argument("--max-records", type=non_negative_int, metavar="N", help="stop after N bus records")
    p.add_argument("--topology", type=Path, metavar="FILE", help="cluster YAML for the header (replay needs it)")
    p.add_argument("--kinds", nargs="+", metavar="KIND", help="telemetry kinds to record (default: all)")
    p.add_argument("--notes", metavar="TEXT", help="a note for whoever replays it (what happened, ticket, ...)")
    p.add_argument(
        "--from-beginning", action="store_true", help="read each topic from its oldest retained record, not from now"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fabricwatch import schema, topology
    from fabricwatch.replay.record import record
    from fabricwatch.stream.kafka import KafkaBus, KafkaUnavailable
    from fabricwatch.stream.kafka.errors import reachable

    kinds = args.kinds or list(schema.KINDS)
    for kind in kinds:
        if kind not in schema.KINDS:
            raise InputError("--kinds", f"unknown kind {kind!r} (known: {', '.join(schema.KINDS)})")
    if args.duration is None and args.max_records is None and not sys.stdin.isatty():
        raise InputError("record", "give --duration or --max-records (nothing could stop it with Ctrl-C here)")
    topo = (
        topology.load(args.topology)
        if args.topology
        else topology.Topology.from_dict({"name": "recorded", "nodes": [], "switches": [], "links": []})
    )
    if args.out.exists():
        raise InputError(str(args.out), "exists already; a recording never overwrites a capture")
    try:
        reachable(args.bootstrap, CONNECT_TIMEOUT_S)
    except KafkaUnavailable as exc:
        raise InputError("--bootstrap", str(exc)) from None

    def assigned(partitions: list) -> None:
        bus.positions()  # resolved now: what is produced from here on is recorded
        where = "their oldest record" if args.from_beginning else "now"
        print(f"record: reading {len(partitions)} partitions from {where}", file=sys.stderr, flush=True)

    bus = KafkaBus(
        args.bootstrap,
        on_assign=assigned,
        client_id="fabricwatch-record",
        group_id=f"fabricwatch-record-{uuid.uuid4().hex[:12]}",
        consumer_config={
            "auto_offset_reset": "earliest" if args.from_beginning else "latest",
            "fetch_min_bytes": 1,
            "fetch_max_wait_ms": 100,
        },
    )

    def progress(stats) -> None:
        print(f"\rrecord: {stats.records:,} records, {stats.rows:,} rows", end="", file=sys.stderr, flush=True)

    try:
        stats = record(
            bus,
            args.out,
            topo,
            kinds=kinds,
            duration_s=args.duration,
            max_records=args.max_records,
            notes=args.notes,
            progress=progress if sys.stderr.isatty() else None,
        )
    except KafkaUnavailable as exc:
        raise InputError("--bootstrap", str(exc)) from None
    finally:
        bus.close()
    if sys.stderr.isatty():
        print(file=sys.stderr)  # end the progress line
    span = f"{stats.last_ts - stats.first_ts:.0f} s of telemetry" if stats.first_ts is not None else "no telemetry"
    print(
        f"wrote {stats.messages:,} messages ({stats.rows:,} rows, {span}) from {stats.records:,} records to {args.out}"
    )
    for reason in stats.reasons:
        print(f"fabricwatch record: undecodable record skipped: {reason}", file=sys.stderr)
    if stats.undecodable > len(stats.reasons):
        print(f"fabricwatch record: {stats.undecodable - len(stats.reasons)} more undecodable records", file=sys.stderr)
    return 0

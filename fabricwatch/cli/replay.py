"""``fabricwatch replay``: the whole pipeline over a capture on a virtual clock."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fabricwatch.cli.output import console
from fabricwatch.errors import InputError

MAX_ERROR_LINES = 20


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="run processing and detection over a capture and write the incidents",
        description="Replay a capture (DESIGN §6) through validation, storage and detection on a virtual "
        "clock, and write the incidents as a JSON array. Bad lines are reported with their line number and "
        "skipped; every good line is still processed (exit status 2 if any line was bad).",
    )
    p.add_argument("capture", type=Path, help="capture file (.jsonl or .jsonl.gz)")
    p.add_argument("--incidents-out", type=Path, metavar="FILE", help="write the incidents here (JSON array)")
    p.add_argument("--db", type=Path, metavar="FILE", help="keep the DuckDB file here (default: in memory)")
    p.add_argument("--quiet", action="store_true", help="no progress and no table")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from fabricwatch.app.report import incidents_table
    from fabricwatch.replay.capture import open_capture
    from fabricwatch.replay.run import incidents_json, replay

    if args.db is not None and args.db.exists():
        raise InputError("--db", f"{args.db} exists; replay writes a fresh file (remove it or pick another name)")
    cap = open_capture(args.capture)
    err = Console(stderr=True)
    with Progress(
        TextColumn("replay"),
        BarColumn(),
        TextColumn("{task.fields[records]:,} records · telemetry t+{task.fields[sim]:.0f}s"),
        TimeElapsedColumn(),
        console=err,
        disable=args.quiet,
        transient=True,
    ) as bar:
        task = bar.add_task("replay", total=None, records=0, sim=0.0)
        start: list[float] = []

        def progress(records: int, watermark: float) -> None:
            if not start and watermark:
                start.append(watermark)
            bar.update(task, records=records, sim=watermark - start[0] if start else 0.0)

        result = replay(cap, db=args.db or ":memory:", progress=progress)
    if args.incidents_out:
        try:
            args.incidents_out.write_bytes(incidents_json(result.incidents))
        except OSError as exc:
            raise InputError("--incidents-out", f"cannot write {args.incidents_out}: {exc.strerror}") from None
    if not args.quiet:
        console().print(incidents_table(result.incidents, result.first_ts, title=f"Incidents in {args.capture.name}"))
        where = f"; DuckDB file {args.db}" if args.db else ""
        err.print(
            f"{result.records:,} records, {result.rows:,} rows, {result.deadletters:,} dead letters, "
            f"{len(result.incidents)} incidents{where}"
        )
    for e in result.errors[:MAX_ERROR_LINES]:
        print(f"fabricwatch replay: {e}", file=sys.stderr)
    if len(result.errors) > MAX_ERROR_LINES:
        print(f"fabricwatch replay: … and {len(result.errors) - MAX_ERROR_LINES} more bad lines", file=sys.stderr)
    return 2 if result.errors else 0

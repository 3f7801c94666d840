"""``fabricwatch forensics``: an incident's evidence timeline (table, or a plot), a link's recent
history, the worst entities by a measure, and a time range exported to Parquet. Read-only; works
while ``serve`` writes the file (sealed segments)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from fabricwatch.cli.output import console
from fabricwatch.errors import InputError


def duration(text: str) -> float:
    """argparse type: ``90``, ``90s``, ``15m``, ``2h``, ``1d`` → seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    scale = units.get(text[-1:], 1)
    try:
        value = float(text[:-1] if text[-1:] in units else text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 90s, 15m, 2h)") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "forensics",
        help="an incident's evidence timeline, a link's history, the worst entities, Parquet export",
        description="Dig after the page: read-only over a fabricwatch DuckDB file and its sealed segments, also "
        "while serve writes it.",
    )
    how = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--db", type=Path, required=True, metavar="FILE", help="the DuckDB file")

    inc = how.add_parser("incident", help="the evidence timeline of one incident")
    inc.add_argument("id", metavar="ID")
    common(inc)
    inc.add_argument("--topology", type=Path, metavar="FILE", help="cluster YAML: both ends, peers, NPO GPUs")
    inc.add_argument("--around", type=duration, default=300.0, help="time shown before and after (default 5m)")
    inc.add_argument("--bucket", type=duration, default=30.0, help="one row per this much time (default 30s)")
    inc.add_argument("--plot", type=Path, metavar="FILE.png", help="also draw the timeline (matplotlib)")
    inc.set_defaults(run=run_incident)

    link = how.add_parser("link", help="one link's recent history, both ends")
    link.add_argument("id", metavar="LINK")
    common(link)
    link.add_argument("--topology", type=Path, required=True, metavar="FILE", help="cluster YAML")
    link.add_argument("--since", type=duration, default=7200.0, help="how far back from the newest data (2h)")
    link.add_argument("--bucket", type=duration, default=60.0, help="one row per this much time (default 60s)")
    link.add_argument("--plot", type=Path, metavar="FILE.png", help="also draw the timeline (matplotlib)")
    link.set_defaults(run=run_link)

    top = how.add_parser("top", help="the worst ports or GPUs by corruption, margin or temperature")
    common(top)
    top.add_argument("--by", required=True, choices=("corruption", "margin", "temperature"))
    top.add_argument("--since", type=duration, default=3600.0, help="how far back from the newest data (1h)")
    top.add_argument("--limit", type=int, default=10, help="rows (default 10)")
    top.set_defaults(run=run_top)

    ex = how.add_parser("export", help="a time range of every table to Parquet files")
    common(ex)
    ex.add_argument("--out", type=Path, required=True, metavar="DIR")
    ex.add_argument("--since", type=duration, default=3600.0, help="how far back from the newest data (1h)")
    ex.add_argument("--from", dest="start", type=float, metavar="EPOCH", help="start (epoch seconds)")
    ex.add_argument("--to", dest="end", type=float, metavar="EPOCH", help="end (epoch seconds)")
    ex.set_defaults(run=run_export)


def _open(db: Path):  # -> Forensic
    import duckdb

    from fabricwatch.stream.segments import open_forensic

    if not db.exists():
        raise InputError("--db", f"{db}: no such file")
    try:
        forensic = open_forensic(db)
    except duckdb.Error as exc:
        raise InputError("--db", f"cannot open {db}: {str(exc).splitlines()[0]}") from None
    if forensic.note:
        print(f"fabricwatch forensics: note: {forensic.note}", file=sys.stderr)
    return forensic


def _topology(path: Path | None):
    from fabricwatch import topology

    return topology.load(path) if path else None


def _print_timeline(table, title: str) -> None:
    import pandas as pd
    from rich.table import Table

    out = console()
    if table.empty:
        out.print(f"{title}: no telemetry in that time")
        return
    t = Table(title=title, title_justify="left", header_style="bold")
    t.add_column("time (UTC)")
    for col in table.columns:
        t.add_column(col, justify="right")
    for ts, row in table.iterrows():
        cells = ["" if pd.isna(v) else f"{v:.3g}" if abs(v) < 1e-3 and v else f"{v:.2f}" for v in row]
        t.add_row(str(pd.Timestamp(ts, unit="s")), *cells)
    out.print(t)


def run_incident(args: argparse.Namespace) -> int:
    from fabricwatch.app import forensics as fx

    topo = _topology(args.topology)
    forensic = _open(args.db)
    try:
        inc = fx.incident(forensic.con, args.id)
        scope = fx.scope_of(inc, topo)
        end = inc["resolved_at"] if inc["resolved_at"] is not None else fx.newest(forensic.con)
        table = fx.timeline(forensic.con, scope, inc["first_seen"] - args.around, end + args.around, args.bucket)
    finally:
        forensic.con.close()
    title = (
        f"{inc['id']}: {inc['cause']} on {inc['entity']} {inc['location']} ({inc['severity']}, {inc['status']}); "
        f"ports {', '.join(scope.ports) or '-'}; GPUs {', '.join(scope.gpus) or '-'}"
    )
    _print_timeline(table, title)
    if args.plot and not table.empty:
        fx.plot(table, inc, args.plot, title)
        print(f"fabricwatch forensics: plot written to {args.plot}", file=sys.stderr)
    return 0


def run_link(args: argparse.Namespace) -> int:
    from fabricwatch.app import forensics as fx

    topo = _topology(args.topology)
    assert topo is not None
    if args.id not in topo.link_by_id:
        raise InputError("LINK", f"no link {args.id!r} in {args.topology}")
    forensic = _open(args.db)
    try:
        inc = {"entity": "link", "location": args.id, "evidence": []}
        scope = fx.scope_of(inc, topo)
        end = fx.newest(forensic.con)
        table = fx.timeline(forensic.con, scope, end - args.since, end, args.bucket)
    finally:
        forensic.con.close()
    title = f"link {args.id}: {' ↔ '.join(scope.ports)}; GPUs {', '.join(scope.gpus) or '-'}"
    _print_timeline(table, title)
    if args.plot and not table.empty:
        fx.plot(table, None, args.plot, title)
        print(f"fabricwatch forensics: plot written to {args.plot}", file=sys.stderr)
    return 0


def run_top(args: argparse.Namespace) -> int:
    from rich.table import Table

    from fabricwatch.app import forensics as fx

    if args.limit < 1:
        raise InputError("--limit", "must be at least 1")
    forensic = _open(args.db)
    try:
        end = fx.newest(forensic.con)
        df = fx.top(forensic.con, args.by, end - args.since, end, args.limit)
    finally:
        forensic.con.close()
    t = Table(title=f"worst by {args.by}", title_justify="left", header_style="bold")
    for col in df.columns:
        t.add_column(str(col))
    for row in df.itertuples(index=False):
        t.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row))
    console().print(t)
    return 0


def run_export(args: argparse.Namespace) -> int:
    from fabricwatch.app import forensics as fx

    forensic = _open(args.db)
    try:
        end = args.end if args.end is not None else fx.newest(forensic.con)
        start = args.start if args.start is not None else end - args.since
        if start > end:
            raise InputError("--from", f"{start:g} is after --to {end:g}")
        try:
            counts = fx.export_parquet(forensic.con, args.out, start, end)
        except OSError as exc:
            raise InputError("--out", f"cannot write {args.out}: {exc.strerror or exc}") from None
    finally:
        forensic.con.close()
    for table, n in counts.items():
        print(f"{args.out / (table + '.parquet')}\t{n} rows")
    return 0

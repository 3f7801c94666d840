"""``fabricwatch capture``: look inside a capture, cut a time range out of it, or filter it."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from fabricwatch.cli.output import console
from fabricwatch.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "capture",
        help="inspect, cut or filter a capture file",
        description="Inspect, cut or filter a capture (DESIGN §6).",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True, parser_class=type(p))
    info = verbs.add_parser("info", help="what a capture holds: topology, ground truth, time span, topics")
    info.add_argument("capture", type=Path)
    info.set_defaults(run=run_info)
    cut = verbs.add_parser("cut", help="keep the records between two times (seconds from the first record)")
    cut.add_argument("capture", type=Path)
    cut.add_argument("--from", dest="start", type=float, default=0.0, metavar="S")
    cut.add_argument("--to", dest="end", type=float, default=float("inf"), metavar="S")
    cut.add_argument("--out", type=Path, required=True)
    cut.set_defaults(run=run_cut)
    flt = verbs.add_parser("filter", help="keep the records of some kinds and/or sources")
    flt.add_argument("capture", type=Path)
    flt.add_argument("--kind", action="append", default=[], help="a telemetry kind to keep (repeatable)")
    flt.add_argument("--source", action="append", default=[], help="a source to keep (repeatable)")
    flt.add_argument("--out", type=Path, required=True)
    flt.set_defaults(run=run_filter)
    label = verbs.add_parser(
        "label",
        help="add ground truth (faults) to a capture, e.g. one recorded live",
        description="Add faults to a capture's ground truth (DESIGN §4 fault spec; start, ramp and end in "
        "seconds from the capture's first record), so `fabricwatch score` can judge a replay of it.",
    )
    label.add_argument("capture", type=Path)
    label.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="YAML",
        help="one fault as a YAML mapping, e.g. '{cause: link_down, link: L00017, start: 120}' (repeatable)",
    )
    label.add_argument("--faults", type=Path, metavar="FILE", help="a fault file whose faults are added")
    label.add_argument("--replace", action="store_true", help="replace the capture's ground truth, not add to it")
    label.add_argument("--out", type=Path, help="write here (default: rewrite the capture in place)")
    label.set_defaults(run=run_label)


def run_info(args: argparse.Namespace) -> int:
    from rich.table import Table

    from fabricwatch.replay.capture import open_capture

    cap = open_capture(args.capture)
    topics: Counter[str] = Counter()
    first = last = None
    for rec in cap.records():
        topics[rec.topic] += 1
        first = rec.ts if first is None else min(first, rec.ts)
        last = rec.ts if last is None else max(last, rec.ts)
    out = console()
    out.print(f"[bold]{args.capture}[/]: {cap.topology.summary()}")
    span = f"{last - first:.0f} s" if first is not None else "empty"
    out.print(f"records: {sum(topics.values()):,} over {span}; bad lines: {len(cap.errors)}")
    table = Table("topic", "records")
    for topic, n in sorted(topics.items()):
        table.add_row(topic, f"{n:,}")
    out.print(table)
    if cap.truth:
        truth = Table("cause", "target", "start", "ramp", "end", title="ground truth")
        for f in cap.truth:
            target = next((f[k] for k in ("link", "port", "gpu", "switch", "cooling_loop") if k in f), "?")
            truth.add_row(
                str(f.get("cause")), str(target), str(f.get("start", 0)), str(f.get("ramp", 0)), str(f.get("end", "-"))
            )
        out.print(truth)
    return _report_errors(cap.errors)


def _copy(args: argparse.Namespace, keep) -> int:
    from fabricwatch.replay.capture import CaptureWriter, open_capture

    if args.out.resolve() == args.capture.resolve():
        raise InputError("--out", "must differ from the input capture")
    cap = open_capture(args.capture)
    kept = 0
    with CaptureWriter(args.out, cap.topology, cap.truth, cap.extra) as w:
        first = None
        for rec in cap.records():
            first = rec.ts if first is None else first
            if keep(rec, rec.ts - first):
                w.write(rec.topic, rec.key, rec.ts, rec.value)
                kept += 1
    print(f"wrote {kept:,} records to {args.out}")
    return _report_errors(cap.errors)


def run_cut(args: argparse.Namespace) -> int:
    if args.end <= args.start:
        raise InputError("--to", f"must be after --from ({args.start:g})")
    return _copy(args, lambda rec, t: args.start <= t <= args.end)


def run_filter(args: argparse.Namespace) -> int:
    from fabricwatch.schema import KINDS, topic_of

    for kind in args.kind:
        if kind not in KINDS:
            raise InputError("--kind", f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
    topics = {topic_of(k) for k in args.kind}
    sources = set(args.source)
    return _copy(
        args,
        lambda rec, t: (not topics or rec.topic in topics) and (not sources or rec.value.get("source") in sources),
    )


def run_label(args: argparse.Namespace) -> int:
    import os

    import yaml

    from fabricwatch.faults import load_plan, parse_faults
    from fabricwatch.replay.capture import CaptureWriter, open_capture

    if not args.fault and args.faults is None:
        raise InputError("capture label", "name at least one --fault or a --faults FILE")
    cap = open_capture(args.capture)
    try:
        entries = []
        for i, text in enumerate(args.fault, 1):
            try:
                entries.append(yaml.safe_load(text))
            except yaml.YAMLError as exc:
                raise InputError(f"--fault {i}", f"not YAML: {' '.join(str(exc).split())}") from None
        faults = [f.to_dict() for f in parse_faults(entries, cap.topology, "--fault")]
        if args.faults is not None:
            faults += load_plan(args.faults, cap.topology).to_list()
    except InputError:
        cap.close()
        raise
    truth = faults if args.replace else [*(cap.truth or []), *faults]
    out = args.out or args.capture
    tmp = out.with_name(out.name + ".labelling" + "".join(out.suffixes[-1:]))
    with CaptureWriter(tmp, cap.topology, truth, cap.extra) as w:
        for rec in cap.records():
            w.write(rec.topic, rec.key, rec.ts, rec.value)
    if cap.errors:  # never replace a capture with a shorter copy of it
        tmp.unlink()
        return _report_errors(cap.errors)
    os.replace(tmp, out)
    print(f"{out}: ground truth now holds {len(truth)} fault(s)")
    return 0


def _report_errors(errors: list[InputError]) -> int:
    import sys

    for e in errors[:20]:
        print(f"fabricwatch capture: {e}", file=sys.stderr)
    return 2 if errors else 0

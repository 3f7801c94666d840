"""``fabricwatch score``: incidents against ground truth (found, placed, caused right, how fast)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fabricwatch.cli.output import console
from fabricwatch.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "score",
        help="score incidents against a capture's ground truth",
        description="Match incidents (a replay's --incidents-out) to the ground truth in a capture's header: "
        "for each injected fault, was an incident raised at its location with its cause, and after how long; "
        "incidents that match no fault are false alarms.",
    )
    p.add_argument("incidents", type=Path, nargs="?", help="incidents JSON array")
    p.add_argument("--truth", type=Path, metavar="CAPTURE", help="capture whose header has truth")
    p.add_argument(
        "--library",
        type=Path,
        metavar="DIR",
        help="replay every scenario of a stored library (replay/library) and print a table per scenario and totals",
    )
    p.add_argument("--json", action="store_true", help="print the score as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.library is not None:
        if args.incidents is not None or args.truth is not None:
            raise InputError("--library", "replays its own captures: give no incidents file or --truth with it")
        return run_library(args)
    if args.incidents is None or args.truth is None:
        raise InputError("score", "give an incidents file and --truth CAPTURE, or --library DIR")
    return run_one(args)


def run_library(args: argparse.Namespace) -> int:
    import sys

    from rich.console import Console
    from rich.table import Table

    from fabricwatch.app import library

    err = Console(file=sys.stderr)
    results = []
    with err.status("") as status:
        for r in library.run_library(
            args.library, progress=lambda s: status.update(f"replaying {s.name}") if err.is_terminal else None
        ):
            results.append(r)
    totals = library.totals(results)
    if args.json:
        print(json.dumps({"scenarios": [r.to_dict() for r in results], "totals": totals}, indent=2))
        return 0
    table = Table("scenario", "faults", "found", "missed", "wrong cause", "false incidents", "delay", "verdict")
    for r in results:
        d = r.to_dict()
        delays = d["delays_s"]
        table.add_row(
            r.scenario.name,
            str(d["faults"]),
            str(d["found"]),
            "\n".join(d["missed"]) or "-",
            "\n".join(d["wrong_cause"]) or "-",
            "\n".join(d["false_incidents"]) or "-",
            " ".join(f"{x:.0f}s" for x in delays) or "-",
            "pass" if r.passed else ("[yellow]known failure[/]" if r.scenario.known_failure else "[red]FAIL[/]"),
        )
    out = console()
    out.print(table)
    t = totals
    out.print(
        f"{t['passed']}/{t['scenarios']} scenarios pass · precision {t['precision']:.3f} · recall {t['recall']:.3f} · "
        f"cause accuracy {t['cause_accuracy']:.3f} · {t['false_incidents']} false incidents"
    )
    delay = Table("cause", "n", "delay p50", "delay p95", title="detection delay by cause")
    for cause, v in t["delay_s"].items():
        delay.add_row(cause, str(v["n"]), f"{v['p50']:.0f} s", f"{v['p95']:.0f} s")
    out.print(delay)
    return 0


def run_one(args: argparse.Namespace) -> int:
    from rich.table import Table

    from fabricwatch.app.score import fault_location, score
    from fabricwatch.incident import Incident
    from fabricwatch.replay.capture import open_capture

    try:
        raw = json.loads(args.incidents.read_text())
        incidents = [Incident.from_dict(d) for d in raw]
    except FileNotFoundError:
        raise InputError(str(args.incidents), "no such file") from None
    except (json.JSONDecodeError, TypeError, KeyError, AttributeError) as exc:
        raise InputError(str(args.incidents), f"not an incidents JSON array: {exc}") from None
    cap = open_capture(args.truth)
    if cap.truth is None:
        raise InputError(f"{args.truth}:1", "the capture header has no ground truth ('truth')")
    first = next((rec.ts for rec in cap.records()), None)
    cap.close()
    result = score(cap.truth, incidents, first or 0.0)
    if args.json:
        print(
            json.dumps(
                {
                    "faults": len(result.matches),
                    "detected": result.detected,
                    "recall": result.recall,
                    "precision": result.precision,
                    "false_alarms": [i.id for i in result.false_alarms],
                    "matches": [
                        {
                            "cause": m.fault["cause"],
                            "location": list(fault_location(m.fault)),
                            "incident": m.incident.id if m.incident else None,
                            "cause_ok": m.cause_ok,
                            "latency_s": m.latency_s,
                        }
                        for m in result.matches
                    ],
                },
                indent=2,
            )
        )
        return 0
    table = Table("cause", "located at", "incident", "cause right", "detected after", title="ground truth")
    for m in result.matches:
        entity, target = fault_location(m.fault)
        table.add_row(
            m.fault["cause"],
            f"{entity} {target}",
            m.incident.id if m.incident else "[red]missed[/]",
            "yes" if m.cause_ok else "[red]no[/]",
            f"{m.latency_s:.0f} s" if m.latency_s is not None else "-",
        )
    out = console()
    out.print(table)
    out.print(
        f"recall {result.recall:.0%} · precision {result.precision:.0%} · "
        f"{len(result.false_alarms)} false alarms {' '.join(i.id for i in result.false_alarms)}"
    )
    return 0

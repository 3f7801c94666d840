"""``fabricwatch score``: incidents against ground truth (found, placed, caused right, how fast)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fabricwatch.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "score",
        help="score incidents against a capture's ground truth",
        description="Match incidents (a replay's --incidents-out) to the ground truth in a capture's header: "
        "for each injected fault, was an incident raised at its location with its cause, and after how long; "
        "incidents that match no fault are false alarms.",
    )
    p.add_argument("incidents", type=Path, help="incidents JSON array")
    p.add_argument("--truth", type=Path, required=True, metavar="CAPTURE", help="capture whose header has truth")
    p.add_argument("--json", action="store_true", help="print the score as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
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
    out = Console()
    out.print(table)
    out.print(
        f"recall {result.recall:.0%} · precision {result.precision:.0%} · "
        f"{len(result.false_alarms)} false alarms {' '.join(i.id for i in result.false_alarms)}"
    )
    return 0

"""``fabricwatch runbook``: list, show, plan, run and history of guarded remediation runbooks."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fabricwatch.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "runbook",
        help="remediation runbooks: list, show, plan, run, history",
        description="Guarded remediation: one runbook per cause. `plan` shows what would be done for an incident; "
        "`run` records it (dry-run), or with --execute carries it out through the backends of the actions config "
        "(dry-run unless it says otherwise), behind the guards; destructive steps need --approve or an approval file.",
    )
    rs = p.add_subparsers(dest="runbook_command", metavar="SUBCOMMAND", required=True, parser_class=type(p))
    lst = rs.add_parser("list", help="the runbooks and what triggers them")
    show = rs.add_parser("show", help="one runbook's file")
    show.add_argument("name")
    plan = rs.add_parser("plan", help="the plan for an incident (nothing is run or recorded)")
    run = rs.add_parser("run", help="run a runbook for an incident (dry-run unless --execute)")
    hist = rs.add_parser("history", help="remediations per component, and escalations to replacement")
    for q in (lst, show, plan, run):
        q.add_argument(
            "--dir", type=Path, metavar="DIR", help="a folder of the site's own runbooks (beside the library)"
        )
    for q in (plan, run):
        q.add_argument("incident", metavar="INCIDENT_ID")
        q.add_argument("--db", type=Path, required=True, metavar="FILE", help="the DuckDB file with the incident")
        q.add_argument("--topology", type=Path, metavar="FILE", help="cluster YAML or capture (default: the demo's)")
        q.add_argument("--gpus", type=int, default=1024, help="without --topology: the standard supernode's GPUs")
        q.add_argument("--rails", type=int, choices=(4, 8), default=8)
        q.add_argument("--gpus-per-node", type=int, choices=(8, 16), default=8)
        q.add_argument("--config", type=Path, metavar="FILE", help="actions config (backends, allowlist, guards)")
        q.add_argument("--approval-file", type=Path, metavar="FILE", help="approvals for destructive steps")
        q.add_argument("--approve", action="store_true", help="approve destructive steps of this run (as $USER)")
        q.add_argument("--json", action="store_true", help="JSON instead of text")
    run.add_argument("--execute", action="store_true", help="carry the plan out (through the configured backends)")
    run.add_argument("--shadow", action="store_true", help="shadow mode: record the plan and what telemetry shows")
    hist.add_argument("--db", type=Path, required=True, metavar="FILE")
    hist.add_argument("--component", metavar="ID", help="one link, port, GPU or switch")
    hist.add_argument("--json", action="store_true")
    p.set_defaults(run=main)


def main(args: argparse.Namespace) -> int:
    from fabricwatch.runbooks.loader import load_library

    cmd = args.runbook_command
    if cmd == "history":
        return _history(args)
    books = load_library(args.dir)
    if cmd == "list":
        for name, rb in sorted(books.items()):
            t = rb.trigger
            what = "/".join(t.causes or t.types)
            if t.evidence_metric:
                what += f" with {t.evidence_metric} ≥ {t.evidence_at_least:g}"
            flags = ("destructive, " if rb.destructive else "") + f"takes out {rb.takes_out}"
            print(f"{name:<20} {what:<48} {flags:<28} {rb.summary}")
        return 0
    if cmd == "show":
        if args.name not in books:
            raise InputError("NAME", f"no runbook {args.name!r} (known: {', '.join(sorted(books))})")
        rb = books[args.name]
        print(f"# {rb.path}")
        print(Path(rb.path).read_text(), end="")
        return 0
    return _plan_or_run(args, books)


def _plan_or_run(args: argparse.Namespace, books: dict) -> int:
    from fabricwatch.clock import VirtualClock
    from fabricwatch.runbooks import cli as rcli
    from fabricwatch.runbooks.config import ActionsConfig, load
    from fabricwatch.runbooks.executor import Executor
    from fabricwatch.runbooks.guards import Approvals

    config = load(args.config) if args.config else ActionsConfig()
    topo = rcli.topology_from(args.topology, args.gpus, args.rails, args.gpus_per_node)
    running = args.runbook_command == "run"
    con = rcli.connect(args.db, read_only=not running)
    try:
        approvals = Approvals(rcli.who() if args.approve else None)
        if args.approval_file:
            approvals = Approvals.load(args.approval_file, rcli.who() if args.approve else None)
        inc = rcli.incident(con, args.incident)
        mode = "dry-run"
        if running and args.execute:
            mode = "execute"
        elif running and args.shadow:
            mode = "shadow"
        say = None if args.json else (lambda line: print(f"  {line}", file=sys.stderr))
        clock = rcli.clock_for(con)
        real = config.command_backend != "dry-run" or config.message_backend != "dry-run"
        if mode == "execute" and real and isinstance(clock, VirtualClock):
            raise InputError(
                "--execute",
                f"{args.db} is a recording (its newest telemetry is old): verify would read no new telemetry; "
                "execute through real backends only on a live database",
            )
        ex = Executor(
            topo, books, con, config, clock=clock, mode=mode, approvals=approvals, say=say,
            read_only=not running,
        )  # fmt: skip
        if not running:
            plan = ex.plan(inc)
            print(json.dumps(plan.to_dict(), indent=1, default=str) if args.json else plan.text())
            return 0
        result = ex.run(inc)
        if args.json:
            print(json.dumps({"outcome": result.outcome, "audit": result.rows}, indent=1, default=str))
        else:
            print(result.plan.text())
            print(f"outcome ({mode}): {result.outcome}")
            for row in result.rows:
                if row["outcome"] in ("planned", "diagnosed", "started"):
                    continue
                extra = f" [{row['guard']}]" if row.get("guard") else ""
                what = row.get("action") or ""
                why = row.get("reason") or ""
                print(f"  {row['outcome']:<20} {what:<20}{extra} {why}".rstrip())
        return 0 if result.outcome in ("completed", "planned") else 1
    finally:
        con.close()


def _history(args: argparse.Namespace) -> int:
    from fabricwatch.runbooks import cli as rcli

    con = rcli.connect(args.db, read_only=True)
    try:
        rows = rcli.history(con, args.component)
    finally:
        con.close()
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
        return 0
    if not rows:
        print("no remediation recorded" + (f" for {args.component}" if args.component else ""))
    for r in rows:
        if r["times"] is None:
            print(f"{r['component']:<20} escalated: {r['reason']}")
        else:
            span = f"from {r['first']} to {r['last']}"
            print(f"{r['component']:<20} {r['runbook']:<20} {r['times']}× {span}: {r['incidents']}")
    return 0

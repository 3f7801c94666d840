"""Test support: a small fabric whose telemetry lives in DuckDB, backends that record what they are
asked, and a 'world' that answers actions the way a switch or a GPU would."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from fabricwatch.clock import VirtualClock
from fabricwatch.incident import Incident
from fabricwatch.runbooks.backends import Backend, Outcome, Request
from fabricwatch.runbooks.config import ActionsConfig
from fabricwatch.runbooks.executor import Executor
from fabricwatch.runbooks.guards import Approvals, GuardConfig
from fabricwatch.runbooks.loader import load_library
from fabricwatch.runbooks.telemetry import as_timestamp
from fabricwatch.stream.store import Store
from fabricwatch.topology import Topology, split_port

SITE = Path(__file__).resolve().parent / "site"
T0 = 1_764_400_000.0


def put(con: duckdb.DuckDBPyConnection, kind: str, ts: float, **columns: Any) -> None:
    """One telemetry row (source = the device or port's device)."""
    key = columns.get("device") or columns.get("port")
    source = str(key).split("/")[0].split(":")[0]
    names = ["ts", "source", *columns]
    con.execute(
        f"INSERT INTO {kind} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
        [as_timestamp(ts), source, *columns.values()],
    )


def incident(ident: str, cause: str, entity: str, target: str, runbook: str, **kw: Any) -> Incident:
    from fabricwatch.faults import CAUSES

    return Incident(
        ident, CAUSES[cause].incident_type, cause, {"entity": entity, "id": target}, kw.pop("severity", "major"),
        T0 - 60, T0, runbook=runbook, **kw,
    )  # fmt: skip


class Recorder(Backend):
    """Records every request; fails those whose argv[0] is in ``fail``; ``world`` reacts to each."""

    name = "recorder"

    def __init__(self, fail: set[str] = frozenset(), world: Callable[[Request], None] | None = None) -> None:
        self.requests: list[Request] = []
        self.fail = set(fail)
        self.world = world

    def execute(self, request: Request) -> Outcome:
        self.requests.append(request)
        head = request.argv[0] if request.argv else request.channel
        if head in self.fail:
            return Outcome(False, f"{head} failed", 1)
        if self.world is not None:
            self.world(request)
        return Outcome(True, "ok", 0 if request.argv else None)

    def argvs(self) -> list[list[str]]:
        return [list(r.argv) for r in self.requests if r.argv]


class Rig:
    """An executor over an in-memory store on a virtual clock; ``tick`` runs on every wait."""

    def __init__(
        self,
        topology: Topology,
        *,
        guards: GuardConfig | None = None,
        site: bool = True,
        mode: str = "execute",
        approve: bool = True,
        fail: set[str] = frozenset(),
        con: duckdb.DuckDBPyConnection | None = None,
        clock: VirtualClock | None = None,
        **kw: Any,
    ) -> None:
        self.topology = topology
        self.store = None if con is not None else Store(":memory:")
        self.con = con if con is not None else self.store.con  # type: ignore[union-attr]
        self.clock = clock or VirtualClock(T0)
        self.books = load_library(SITE if site else None)
        self.config = ActionsConfig(guards=guards or GuardConfig())
        self.commands = Recorder(fail, self.react)
        self.messages = Recorder()
        self.tick: Callable[[float], None] | None = None
        self.executor = Executor(
            topology, self.books, self.con, self.config, clock=self.clock, mode=mode,
            approvals=Approvals("tester" if approve else None), sleep=self.sleep,
            backends={"command": self.commands, "message": self.messages}, **kw,
        )  # fmt: skip

    def sleep(self, s: float) -> None:
        self.clock.advance_to(self.clock.now() + s)
        if self.tick is not None:
            self.tick(self.clock.now())

    def react(self, request: Request) -> None:
        """A switch answers `gnmic set enabled=false/true` by reporting the port's state."""
        argv = request.argv
        m = re.search(r"name=Ethernet(\d+)\]", argv[7]) if argv and argv[0] == "gnmic" else None
        if m is not None:
            switch, number = argv[2], int(m[1])
            port = next(p for p in self.topology.ports_of_device(switch) if split_port(p)[1] == number)  # type: ignore[index]
            put(self.con, "port", self.clock.now() + 1, port=port, state=0 if argv[-1] == "false" else 1)

    def audit(self, incident_id: str | None = None) -> list[tuple[str, str | None, str | None]]:
        where = "WHERE incident_id = ?" if incident_id else ""
        return self.con.execute(
            f"SELECT outcome, action, guard FROM runbook_audit {where} ORDER BY ts, rowid",
            [incident_id] if incident_id else [],
        ).fetchall()


def argv_recorder(folder: Path, log: Path) -> Path:
    """An executable that appends its argv and FW_* environment to ``log`` as one JSON line."""
    path = folder / "record-argv"
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    env = {k: v for k, v in os.environ.items() if k.startswith('FW_')}\n"
        "    f.write(json.dumps({'argv': sys.argv[1:], 'env': env}) + '\\n')\n"
        "sys.exit(int(os.environ.get('FW_EXIT', '0')))\n"
    )
    path.chmod(0o755)
    return path

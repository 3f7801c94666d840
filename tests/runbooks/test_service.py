"""Runbooks in ``serve``: off unless the config enables them, shadow mode by default, a worker thread
of their own fed by the processor's incidents."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from fabricwatch.cli.serve import load_config, start_runbooks
from fabricwatch.errors import InputError
from fabricwatch.runbooks.service import RunbookWorker
from fabricwatch.stream.store import Store
from fabricwatch.topology import Topology
from tests.runbooks.support import T0, incident, put


def service(topo: Topology, store: Store) -> SimpleNamespace:
    return SimpleNamespace(
        store=store,
        processor=SimpleNamespace(topology=topo, on_incident=None),
        metrics=SimpleNamespace(registry=CollectorRegistry()),
        settings=SimpleNamespace(bootstrap="127.0.0.1:1"),
    )


def test_serve_config_checks_the_runbooks_section(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text("bootstrap: x:1\ndb: a.duckdb\nrunbooks: {enabled: true, mode: yolo}\n")
    with pytest.raises(InputError) as err:
        load_config(path)
    assert str(err.value) == f"{path}:3: runbooks.mode: must be one of shadow, execute, not 'yolo'"
    path.write_text("bootstrap: x:1\ndb: a.duckdb\n")
    load_config(path)
    assert start_runbooks(path, None) is None  # off unless enabled


def test_the_worker_runs_incidents_in_shadow_mode_and_executes_nothing(topo128: Topology, tmp_path: Path) -> None:
    with Store(tmp_path / "fw.duckdb") as store:
        svc = service(topo128, store)
        put(store.con, "gpu", T0, device="node001/gpu1", temp_c=88.0, power_limit_w=700.0)
        worker = RunbookWorker(svc, {"enabled": True}, tmp_path)
        assert worker.mode == "shadow"
        inc = incident("inc-1", "gpu_thermal", "gpu", "node001/gpu1", "throttle-gpu")
        svc.processor.on_incident(inc)
        svc.processor.on_incident(inc)  # the same incident again (an update): one run
        deadline = time.monotonic() + 30
        rows: list = []
        while time.monotonic() < deadline and not any(r[0] == "observed" for r in rows):
            time.sleep(0.05)
            rows = store.con.cursor().execute("SELECT outcome, mode, dry_run FROM runbook_audit").fetchall()
        worker.stop()
    assert any(r[0] == "observed" for r in rows), rows
    assert {m for _, m, _ in rows} == {"shadow"} and all(dry for _, _, dry in rows)
    assert not any(r[0] in ("started", "executed") for r in rows)
    assert [r[0] for r in rows].count("planned") == 4  # one run: act, verify, rollback, escalate

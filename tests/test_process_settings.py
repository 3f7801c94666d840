"""``fabricwatch process`` hands every option to its Settings by name (no broker needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.cli import main
from fabricwatch.cli import process as process_cli


def test_name_and_topology_reach_the_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[process_cli.Settings] = []

    class Recording:
        loop = None

        def __init__(self, settings: process_cli.Settings) -> None:
            seen.append(settings)

        def run(self, stop: object) -> None:
            pass

        def close(self) -> None:
            pass

    monkeypatch.setattr(process_cli, "Service", Recording)
    monkeypatch.setattr(process_cli, "stop_on_signals", lambda stop: None)
    db, cluster = tmp_path / "p.duckdb", tmp_path / "cluster.yaml"
    argv = ["process", "--bootstrap", "h:1", "--db", str(db), "--topology", str(cluster), "--name", "p7"]
    assert main([*argv, "--seal-every", "5", "--seal-horizon", "7"]) == 0
    (s,) = seen
    assert (s.name, s.topology, s.engine) == ("p7", cluster, None)
    assert (s.seal_every, s.seal_horizon, s.db) == (5.0, 7.0, db)

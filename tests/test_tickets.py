"""Change tickets filed while stage 2 runs (fabricwatch/app/tickets.py): read with file and line, re-read
when the file changes, a bad rewrite keeps the tickets in force, and a filed ticket holds an outage."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from fabricwatch.app.tickets import TicketsFile, read, watch
from fabricwatch.cli.serve import load_config
from fabricwatch.detectors.config import EngineConfig, MaintenanceWindow
from fabricwatch.detectors.stage import Stage2
from fabricwatch.errors import InputError
from fabricwatch.records import Finding
from fabricwatch.topology import generate

TOPO = generate(64, 8, 8)
LEAF = "leaf1-0"


def write(path, text: str, bump: int = 0) -> None:
    path.write_text(text)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump * 1_000_000_000))  # a new mtime, whatever the clock


def test_tickets_read_epoch_seconds_and_timestamps_with_or_without_a_zone(tmp_path) -> None:
    path = tmp_path / "tickets.yaml"
    write(
        path,
        "- {switch: leaf00, start: 1796162400, end: 1796164200}\n"
        "- {switch: spine01, start: 2026-12-01T22:00:00Z, end: 2026-12-01T23:45:00+01:00}\n"
        "- {switch: leaf01, start: 2026-12-01 22:00:00, end: 2026-12-02}\n",
    )
    got = read(path)
    assert got[0] == MaintenanceWindow(switch="leaf00", start=1796162400.0, end=1796164200.0)
    assert (got[1].start, got[1].end) == (1796162400.0, 1796162400.0 + 45 * 60)
    assert (got[2].start, got[2].end) == (1796162400.0, 1796169600.0)  # no zone: UTC (YAML 1.1)
    write(path, "")
    assert read(path) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("switch: leaf00\n", ": must be a list of tickets"),
        ("- {switch: leaf00, start: 10}\n", ":1: end: missing (required)"),
        ("- {switch: leaf00, start: 10, end: 20}\n- {switch: leaf01, start: 30, end: 20}\n", ":2: maintenance of"),
        ("- {switch: leaf00, start: soon, end: 20}\n", ":1: start: must be a number"),
        ("- [unclosed\n", ":2: invalid YAML"),
    ],
)
def test_a_bad_tickets_file_is_one_line_with_file_and_line(tmp_path, text: str, expected: str) -> None:
    path = tmp_path / "tickets.yaml"
    write(path, text)
    with pytest.raises(InputError) as err:
        read(path)
    assert str(err.value).startswith(f"{path}{expected}") and "\n" not in str(err.value), str(err.value)


def test_the_file_is_reread_when_it_changes_and_a_bad_rewrite_keeps_the_tickets(tmp_path, caplog) -> None:
    path = tmp_path / "tickets.yaml"
    write(path, "- {switch: leaf00, start: 10, end: 20}\n")
    tickets = TicketsFile(path)
    assert [t.switch for t in tickets.tickets] == ["leaf00"]
    assert tickets.changed() is None  # unchanged: not read again
    write(path, "- {switch: leaf00, start: 10, end: 20}\n- {switch: leaf01, start: 30, end: 40}\n", bump=1)
    assert [t.switch for t in tickets.changed() or []] == ["leaf00", "leaf01"]
    with caplog.at_level(logging.ERROR, logger="fabricwatch.tickets"):
        write(path, "- {switch: leaf02, start: 50\n", bump=2)  # half written
        assert tickets.changed() is None
        assert tickets.changed() is None  # logged once, not at every look
    (line,) = [r.getMessage() for r in caplog.records]
    assert "the 2 read before stay" in line and str(path) in line
    assert [t.switch for t in tickets.tickets] == ["leaf00", "leaf01"]
    path.unlink()  # gone: the last good tickets stay too
    assert tickets.changed() is None and len(tickets.tickets) == 2


def silent(switch: str, at: float) -> Finding:
    return Finding("liveness", "collector_silent", "collector", switch, at, at, "major",
                   ({"metric": "silent_s", "source": switch, "value": 90},), attrs={"incident": True})  # fmt: skip


def test_a_ticket_filed_while_running_holds_the_outage_it_covers_and_keeps_the_configs_own(tmp_path) -> None:
    other = "leaf2-0"
    fixed = MaintenanceWindow(switch=other, start=0.0, end=1000.0)
    stage2 = Stage2(TOPO, EngineConfig(maintenance=[fixed]))
    findings = [silent(LEAF, 100.0), silent(other, 100.0)]
    stage2.run(findings, 110.0)
    assert [d.id for d in stage2.diagnoses] == [LEAF]  # the config's ticket holds the other leaf only
    path = tmp_path / "tickets.yaml"
    write(path, f"- {{switch: {LEAF}, start: 90, end: 400}}\n")
    stop = threading.Event()
    tickets = TicketsFile(path)
    write(path, f"- {{switch: {LEAF}, start: 90, end: 400}}\n- {{switch: {other}, start: 0, end: 1000}}\n", bump=1)
    thread = watch(tickets, stage2.file_tickets, stop, every_s=0.01)
    try:
        for _ in range(500):  # the watcher's first look: at most a few hundredths of a second
            if len(stage2.config.maintenance) == 2:
                break
            stop.wait(0.01)
    finally:
        stop.set()
        thread.join(timeout=5)
    assert stage2.config.maintenance == [fixed, MaintenanceWindow(switch=LEAF, start=90.0, end=400.0)]
    stage2.run(findings, 120.0)
    assert stage2.diagnoses == [] and sorted(d.id for d in stage2.correlator.held) == sorted([LEAF, other])


def test_serve_reads_tickets_relative_to_its_config_and_only_for_stage_2(tmp_path) -> None:
    (tmp_path / "t.yaml").write_text("- {switch: leaf00, start: 10, end: 20}\n")
    path = tmp_path / "serve.yaml"
    base = "bootstrap: h:9092\ndb: a.duckdb\ntopology: cluster.yaml\ntickets: t.yaml\n"
    path.write_text(base + "role: correlate\n")
    assert load_config(path).correlate.tickets == tmp_path / "t.yaml"
    path.write_text(base + "role: process\n")
    with pytest.raises(InputError, match=r"serve.yaml:4: tickets: stage 2 reads them"):
        load_config(path)

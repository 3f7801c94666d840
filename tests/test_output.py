"""Output for people: whole tables in pipes and files, and forensic SQL that cannot write."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from fabricwatch.app.report import incidents_table
from fabricwatch.cli import main
from fabricwatch.cli.output import console
from fabricwatch.incident import Incident
from fabricwatch.stream.store import Store


def test_tables_are_not_cut_at_80_columns_when_piped() -> None:
    incidents = [
        Incident(
            id=f"inc-{n:04d}",
            type="link_degradation",
            cause="npo_thermal_coupling",
            location={"entity": "link", "id": f"L{n:05d}"},
            severity="major",
            first_seen=100.0 + n,
            detected_at=112.0 + n,
            runbook="cool-gpu-then-check-optics",
        )
        for n in range(3)
    ]
    buffer = io.StringIO()  # not a terminal, as `fabricwatch demo | cat` is
    console(buffer).print(incidents_table(incidents, 0.0))
    rows = [line for line in buffer.getvalue().splitlines() if "inc-000" in line]
    assert len(rows) == 3 and max(len(r) for r in buffer.getvalue().splitlines()) > 80
    for row in rows:
        assert "…" not in row and "npo_thermal_coupling" in row and "cool-gpu-then-check-optics" in row


def test_a_piped_command_prints_whole_rows(tmp_path: Path) -> None:
    db = tmp_path / "fw.duckdb"
    with Store(db):
        pass
    sql = "SELECT repeat('x', 150) AS wide, 'tail-marker' AS last"
    proc = subprocess.run(
        [sys.executable, "-m", "fabricwatch", "query", "--db", str(db), sql],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "tail-marker" in line)
    assert "x" * 150 in row


@pytest.mark.parametrize(
    "sql, word",
    [
        ("INSERT INTO gpu (device) VALUES ('x')", "INSERT"),
        ("COPY (SELECT 1) TO '{out}'", "COPY"),
        ("CREATE TABLE t AS SELECT 1", "CREATE"),
        ("SELECT 1; DELETE FROM incidents", "DELETE"),  # every statement of a script is checked
        ("EXPLAIN ANALYZE UPDATE incidents SET status = 'resolved'", "UPDATE"),  # ANALYZE would run it
        ("-- a note\nATTACH '{out}' AS w", "ATTACH"),
        ("INSTALL httpfs", "INSTALL"),
    ],
)
def test_query_refuses_sql_that_writes_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sql: str, word: str
) -> None:
    db = tmp_path / "fw.duckdb"
    with Store(db):
        pass
    out = tmp_path / "written"
    assert main(["query", "--db", str(db), sql.format(out=out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"fabricwatch query: sql: refused: {word} writes or changes the session; fabricwatch query runs only "
        "SELECT (WITH, FROM, SHOW, DESCRIBE, SUMMARIZE) and EXPLAIN"
    ]
    assert not out.exists()
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM gpu").fetchone() == (0,)
        assert "t" not in {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    finally:
        con.close()


@pytest.mark.parametrize("sql", ["WITH a AS (SELECT 1 AS n) SELECT n FROM a", "FROM incidents", "SHOW TABLES",
                                 "DESCRIBE gpu", "EXPLAIN SELECT 1"])  # fmt: skip
def test_query_runs_what_only_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str], sql: str) -> None:
    db = tmp_path / "fw.duckdb"
    with Store(db):
        pass
    assert main(["query", "--db", str(db), "--format", "csv", sql]) == 0, capsys.readouterr().err

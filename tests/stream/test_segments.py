"""Forensic queries on a DuckDB file while a processor in another process keeps writing it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from fabricwatch import schema
from fabricwatch.stream import segments
from fabricwatch.stream.segments import open_forensic
from fabricwatch.stream.store import Store

T0 = 1764400000.0


def gpu_table(t: float, n: int = 4):
    m = schema.make(
        "gpu", "node000", T0 + t, int(t), {"device": [f"node000/gpu{i}" for i in range(n)], "temp_c": [60.0] * n}
    )
    return schema.to_table("gpu", [m]).table


def test_seal_moves_old_rows_and_queries_see_all(tmp_path):
    db = tmp_path / "fw.duckdb"
    with Store(db) as store:
        for t in range(0, 100, 10):
            store.write_batch({"gpu": gpu_table(t)})
        assert store.seal(T0 + 50) == 20
        assert store.count("gpu") == 20
        assert store.seal(T0 + 50) == 0  # sealing is idempotent
    forensic = open_forensic(db)
    assert not forensic.live
    assert forensic.con.execute("SELECT count(*) FROM gpu").fetchone() == (40,)


def test_crash_between_copy_and_delete_counts_nothing_twice(tmp_path):
    db = tmp_path / "fw.duckdb"
    with Store(db) as store:
        for t in range(0, 40, 10):
            store.write_batch({"gpu": gpu_table(t)})
        # copy to a segment but "crash" before deleting the hot rows
        folder = segments.segments_dir(db) / "gpu"
        folder.mkdir(parents=True)
        cutoff = round((T0 + 20) * 1e6)
        store.con.execute(
            f"COPY (SELECT * FROM gpu WHERE ts < make_timestamp({cutoff})) TO '{folder}/gpu-{cutoff}.parquet'"
        )
    with Store(db) as store:
        assert store.count("gpu") == 8
    assert open_forensic(db).con.execute("SELECT count(*) FROM gpu").fetchone() == (16,)


WRITER = textwrap.dedent(
    """
    import sys, time
    from tests.stream.test_segments import gpu_table, T0
    from fabricwatch.stream.store import Store
    with Store(sys.argv[1]) as store:
        for t in range(0, 100, 10):
            store.write_batch({"gpu": gpu_table(t)})
        store.seal(T0 + 50)
        print("sealed", flush=True)
        sys.stdin.readline()   # hold the file open until the test has queried
    """
)


def test_query_while_another_process_writes(tmp_path):
    db = tmp_path / "fw.duckdb"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout.readline().strip() == "sealed"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "fabricwatch",
                "query",
                "--db",
                str(db),
                "--format",
                "csv",
                "SELECT count(*) AS n, max(ts) < make_timestamp(CAST((1764400050) * 1e6 AS BIGINT)) AS old FROM gpu",
            ],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == ["n,old", "20,True"]
        assert "sealed segments only" in proc.stderr
    finally:
        writer.communicate("done\n", timeout=30)
    assert writer.returncode == 0


def port_table(t: float, **extra: list):
    rows = {"port": ["leaf0-0:p00"], "rx_pause_total": [10 + int(t)], **extra}
    return schema.to_table("port", [schema.make("port", "leaf0-0", T0 + t, int(t), rows)]).table


def test_a_file_from_before_the_per_priority_pause_columns_opens_and_takes_them(tmp_path):
    """DESIGN §3 extends the port kind; a DuckDB file (and its sealed segments) written before the
    per-priority PFC columns existed still opens, old rows read null there (unknown, never 0)."""
    db = tmp_path / "fw.duckdb"
    new = {c for p in schema.LOSSLESS_PRIORITIES for c in schema.pause_columns(p)}
    with Store(db) as store:  # make it an old file: the port table as it was, one row, sealed
        old = [f"{c.name} {c.duckdb_type}" for c in schema.KINDS["port"].columns if c.name not in new]
        store.con.execute("DROP TABLE port")
        store.con.execute(f"CREATE TABLE port (ts TIMESTAMP NOT NULL, source VARCHAR, {', '.join(old)}, seq BIGINT)")
        for t in (0, 10):
            store.con.register("old_rows", port_table(t).drop(sorted(new)))
            store.con.execute("INSERT INTO port SELECT * FROM old_rows")
            store.con.unregister("old_rows")
        assert store.seal(T0 + 5) == 1
    with Store(db) as store:
        store.write_batch({"port": port_table(20, rx_pause_duration_p3_us_total=[4_900_000])})
        assert store.count("port") == 2
        columns = [r[0] for r in store.con.execute("DESCRIBE port").fetchall()]
        assert new <= set(columns)
    with Store(db) as store:  # opened again, upgraded already: its columns are still out of the schema's order
        store.write_batch({"port": port_table(30, rx_pause_duration_p3_us_total=[9_800_000])})
    got = open_forensic(db).con.execute(
        "SELECT epoch(ts) - $t0, rx_pause_total, rx_pause_duration_p3_us_total FROM port ORDER BY ts", {"t0": T0}
    )
    assert got.fetchall() == [(0.0, 10, None), (10.0, 20, None), (20.0, 30, 4_900_000), (30.0, 40, 9_800_000)]

"""fabricwatch forensics over a replayed capture's DuckDB file: the dirty connector's evidence timeline,
the link's history, the worst ports, and a Parquet export of a time range."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from fabricwatch import topology
from fabricwatch.cli import main
from fabricwatch.replay.run import replay

LIBRARY = Path(__file__).resolve().parents[1] / "replay" / "library"
T0 = 1764400000.0


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A dirty connector on L00005 (leaf5-0:p00 receives 4 dB less from t+60 over a minute)."""
    base = tmp_path_factory.mktemp("forensics")
    path = base / "fw.duckdb"
    replay(LIBRARY / "connector-contamination-4db.jsonl.gz", db=path)
    cluster = base / "cluster.yaml"
    cluster.write_text(topology.generate(16, rails=8, gpus_per_node=8).to_yaml())
    return path, cluster


def rows_of(out: str, marker: str) -> list[list[str]]:
    return [[c.strip() for c in line.replace("┃", "│").split("│")[1:-1]] for line in out.splitlines() if marker in line]


def test_incident_timeline_shows_both_ends_lanes_and_the_gpu(db, tmp_path, capsys) -> None:
    path, cluster = db
    plot = tmp_path / "inc.png"
    code = main(
        ["forensics", "incident", "inc-0001", "--db", str(path), "--topology", str(cluster), "--plot", str(plot)]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    header = rows_of(out, "time (UTC)")[0]
    for column in ("leaf5-0:p00 L3 rx dBm", "node000/gpu5:p0 L0 tx dBm", "leaf5-0:p00 BER", "node000/gpu5 °C"):
        assert column in header
    rows = rows_of(out, "2025-11-29")
    rx = [float(r[header.index("leaf5-0:p00 L3 rx dBm")]) for r in rows]
    assert rx[0] > -2.0 and rx[-1] < -5.0  # the 4 dB drop, lane by lane, over time
    far = [float(r[header.index("node000/gpu5:p0 L3 rx dBm")]) for r in rows]
    assert max(far) - min(far) < 0.5  # one direction only: the other end receives as before
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    # without the topology the evidence still names the port that saw it
    assert main(["forensics", "incident", "inc-0001", "--db", str(path)]) == 0
    assert "ports leaf5-0:p00; GPUs -" in capsys.readouterr().out


def test_unknown_incident_is_one_line(db, capsys) -> None:
    assert main(["forensics", "incident", "inc-9999", "--db", str(db[0])]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "no incident 'inc-9999'" in err[0]


def test_link_history_and_top(db, capsys) -> None:
    path, cluster = db
    assert main(["forensics", "link", "L00005", "--db", str(path), "--topology", str(cluster), "--since", "10m"]) == 0
    assert "link L00005: node000/gpu5:p0 ↔ leaf5-0:p00" in capsys.readouterr().out
    assert main(["forensics", "top", "--by", "margin", "--db", str(path), "--since", "2m", "--limit", "3"]) == 0
    rows = rows_of(capsys.readouterr().out, ":p")
    assert rows[0][0] == "leaf5-0:p00" and len(rows) == 3
    assert main(["forensics", "top", "--by", "temperature", "--db", str(path)]) == 0
    temps = [float(r[1]) for r in rows_of(capsys.readouterr().out, "/gpu")]
    assert len(temps) == 10 and temps == sorted(temps, reverse=True)
    assert main(["forensics", "top", "--by", "corruption", "--db", str(path)]) == 0


def test_export_a_time_range_to_parquet(db, tmp_path, capsys) -> None:
    path, _ = db
    out = tmp_path / "parquet"
    start, end = T0 + 60, T0 + 120
    assert (
        main(["forensics", "export", "--db", str(path), "--out", str(out), "--from", str(start), "--to", str(end)]) == 0
    )
    listed = dict(line.split("\t") for line in capsys.readouterr().out.splitlines())
    con = duckdb.connect()
    span = con.execute(
        f"SELECT min(epoch(ts)), max(epoch(ts)), count(*) FROM read_parquet('{out}/optical.parquet')"
    ).fetchone()
    assert (
        start <= span[0]
        and span[1] <= end
        and listed[str(out / "optical.parquet")] == f"{span[2]} rows"
        and span[2] > 0
    )
    assert con.execute(f"SELECT count(*) FROM read_parquet('{out}/incidents.parquet')").fetchone()[0] == 1


@pytest.mark.timeout(120)
def test_forensics_reads_sealed_segments_while_a_writer_holds_the_file(db, tmp_path, capsys) -> None:
    """As while serve runs: another process holds the file for writing; forensics reads the sealed Parquet."""
    import shutil
    import subprocess
    import sys

    from fabricwatch.stream.segments import seal

    path = tmp_path / "live.duckdb"
    shutil.copy(db[0], path)
    con = duckdb.connect(str(path))
    seal(con, path, T0 + 240)  # what serve's sealing does every minute
    con.close()
    hold = f"import duckdb, time; c = duckdb.connect({str(path)!r}); print('held', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert main(["forensics", "incident", "inc-0001", "--db", str(path), "--topology", str(db[1])]) == 0
        out, err = capsys.readouterr()
        assert "showing sealed segments only" in err
        times = [r[0] for r in rows_of(out, "2025-11-29")]
        assert times and max(times) < "2025-11-29 07:10:40"  # nothing newer than the sealed cutoff (t+240)
    finally:
        holder.kill()
        holder.wait(10)

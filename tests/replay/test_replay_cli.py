"""``fabricwatch replay`` on damaged captures: one line per problem, exit 2, every good line used."""

from __future__ import annotations

import json

import duckdb

from fabricwatch.cli import main
from fabricwatch.collectors.sim import simulate_capture
from fabricwatch.faults import Fault, FaultPlan
from fabricwatch.topology import generate


def _capture(path):
    topo = generate(64, 8, 8)
    plan = FaultPlan(3, (Fault("link_down", topo.links[5].id, 20.0),))
    simulate_capture(topo, plan, 240.0, 5.0, path, progress=False)


def test_truncated_capture_still_gives_its_incidents(tmp_path, capsys):
    path = tmp_path / "c.jsonl.gz"
    _capture(path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * 0.8)])
    out = tmp_path / "incidents.json"
    code = main(["replay", str(path), "--quiet", "--incidents-out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and f"{path}:" in err and "truncated gzip" in err
    incidents = json.loads(out.read_text())
    assert [(i["cause"], i["location"]["id"]) for i in incidents] == [("link_down", "L00005")]


def test_malformed_lines_and_values_are_skipped_and_counted(tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    _capture(path)
    lines = path.read_text().splitlines(keepends=True)
    bad_value = json.loads(lines[10])
    bad_value["value"]["ts"] = "yesterday"
    lines[10] = json.dumps(bad_value) + "\n"  # a message that breaks the schema: a dead letter
    lines.insert(20, "{this is not json\n")  # a broken line: reported with its number
    path.write_text("".join(lines))
    db = tmp_path / "r.duckdb"
    code = main(["replay", str(path), "--quiet", "--db", str(db), "--incidents-out", str(tmp_path / "i.json")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"fabricwatch replay: {path}:21: malformed record") and err.count("\n") == 1
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*), any_value(code) FROM deadletters").fetchone() == (1, "structure")
    assert con.execute("SELECT count(DISTINCT ts) FROM port").fetchone()[0] == 49


def test_existing_db_is_not_overwritten(tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    _capture(path)
    db = tmp_path / "keep.duckdb"
    db.write_text("precious")
    assert main(["replay", str(path), "--db", str(db)]) == 2
    assert "exists" in capsys.readouterr().err and db.read_text() == "precious"

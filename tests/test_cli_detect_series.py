"""``fabricwatch detect-series`` and the NAB scorer in bench/nab.py."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from bench import nab
from fabricwatch.cli import main


def _write(path, rows, header="timestamp,value"):
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def _series(n=600):
    rng = np.random.default_rng(3)
    values = 20 + np.sin(np.arange(n) / 20) + rng.normal(0, 0.2, n)
    values[500] = 40
    return [f"2015-09-08 {i // 60 % 24:02d}:{i % 60:02d}:00,{v:.3f}" for i, v in enumerate(values)]


def _read(path):
    with path.open() as f:
        return list(csv.reader(f))


@pytest.mark.timeout(60)
def test_writes_a_score_per_row_in_unit_interval(tmp_path, capsys):
    src = _write(tmp_path / "in.csv", _series())
    out = tmp_path / "out.csv"
    assert main(["detect-series", str(src), "--out", str(out)]) == 0
    rows = _read(out)
    assert rows[0] == ["timestamp", "value", "anomaly_score"]
    assert len(rows) == 601
    assert rows[1][:2] == _series()[0].split(",")  # timestamp and value copied as written
    scores = np.array([float(r[2]) for r in rows[1:]])
    assert np.all((scores >= 0) & (scores <= 1))
    assert scores[500] == 1.0 and scores[:500].max() < 1.0


@pytest.mark.timeout(60)
def test_no_look_ahead_a_truncated_file_scores_as_the_prefix(tmp_path, capsys):
    rows = _series()
    full, part = tmp_path / "full.csv", tmp_path / "part.csv"
    main(["detect-series", str(_write(tmp_path / "a.csv", rows)), "--out", str(full)])
    main(["detect-series", str(_write(tmp_path / "b.csv", rows[:350])), "--out", str(part)])
    assert _read(part) == _read(full)[:351]


def test_epoch_timestamps_and_stdout(tmp_path, capsys):
    src = _write(tmp_path / "e.csv", ["1441712340,1", "1441712640.5,2", "", "1441712940,3"])
    assert main(["detect-series", str(src)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "timestamp,value,anomaly_score" and len(out) == 4 and out[3].startswith("1441712940,3,")


@pytest.mark.parametrize(
    ("rows", "header", "expected"),
    [
        # no header: the first data row is not 'timestamp,value'
        (["2015-09-08 00:00:00,1"], "2015-09-08 00:00:00,1", "x.csv:1: expected the header 'timestamp,value'"),
        # a value that is not a number, on the file's third line
        (["2015-09-08 00:00:00,1", "2015-09-08 00:05:00,abc"], None, "x.csv:3: value 'abc' is not a number"),
        (["2015-09-08 00:00:00,nan"], None, "x.csv:2: value 'nan' is not a finite number"),
        (["yesterday,1"], None, "x.csv:2: timestamp 'yesterday' is neither ISO 8601 nor epoch seconds"),
        (["2015-09-08 00:00:00"], None, "x.csv:2: expected two columns, timestamp and value"),
    ],
)
def test_bad_input_is_one_line_naming_file_and_line(tmp_path, capsys, rows, header, expected):
    src = _write(tmp_path / "x.csv", rows, header or "timestamp,value")
    out = tmp_path / "o.csv"
    assert main(["detect-series", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"fabricwatch detect-series: {expected}\n"
    if header:  # a bad header is found before the output is opened
        assert not out.exists()


def test_missing_file(tmp_path, capsys):
    assert main(["detect-series", str(tmp_path / "nope.csv")]) == 2
    assert "nope.csv: no such file" in capsys.readouterr().err


# --- the NAB scorer -------------------------------------------------------------------------------


def test_scaled_sigmoid_matches_the_published_points():
    assert nab.scaled_sigmoid(-1.0) == pytest.approx(0.98661, abs=1e-5)
    assert nab.scaled_sigmoid(-0.5) == pytest.approx(0.84828, abs=1e-5)
    assert nab.scaled_sigmoid(0.0) == 0.0
    assert nab.scaled_sigmoid(1.0) == pytest.approx(-0.98661, abs=1e-5)
    assert nab.scaled_sigmoid(3.0) == -1.0


def test_file_score_rules():
    n, window = 1000, [(500, 599)]  # probation: 150 rows
    perfect = np.zeros(n)
    perfect[500] = 1.0
    assert nab.score_file("f", perfect, window).at(np.array([1.0]))[0] == pytest.approx(1.0)
    nothing = nab.score_file("f", np.zeros(n), window)
    assert nothing.at(np.array([1.1]))[0] == -1.0
    late = np.zeros(n)
    late[550] = 1.0  # halfway into the window
    assert nab.score_file("f", late, window).at(np.array([1.0]))[0] == pytest.approx(0.84828 / 0.98661, abs=1e-4)
    early_fp = np.zeros(n)
    early_fp[[100, 300]] = 1.0  # one in probation (free), one before any window (full A_FP), window missed
    assert nab.score_file("f", early_fp, window).at(np.array([1.0]))[0] == pytest.approx(-1.0 - 0.11)
    just_after = np.zeros(n)
    just_after[600] = 1.0  # right after the window: a false positive that costs almost nothing
    assert -0.11 < nab.score_file("f", just_after, window).at(np.array([1.0]))[0] + 1.0 < 0


@pytest.mark.timeout(120)
def test_bench_normalises_perfect_to_100_and_null_to_0(tmp_path, capsys, monkeypatch):
    (tmp_path / "data" / "cat").mkdir(parents=True)
    (tmp_path / "labels").mkdir()
    rows = _series(1000)
    _write(tmp_path / "data" / "cat" / "a.csv", rows)
    start, end = rows[700].split(",")[0], rows[760].split(",")[0]
    labels = {"cat/a.csv": [[start + ".000000", end + ".000000"]], "cat/absent.csv": []}
    (tmp_path / "labels" / "combined_windows.json").write_text(json.dumps(labels))

    def perfect(values, config=None):
        scores = np.zeros(len(values))
        scores[700] = 1.0
        return scores

    monkeypatch.setattr(nab, "score_series", perfect)
    assert nab.main([str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["standard_score"] == pytest.approx(100.0) and result["missing"] == ["cat/absent.csv"]
    monkeypatch.setattr(nab, "score_series", lambda values, config=None: np.full(len(values), 0.5))
    nab.main([str(tmp_path), "--json"])
    assert json.loads(capsys.readouterr().out)["standard_score"] == pytest.approx(0.0)

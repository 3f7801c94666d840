"""The command line: every bad input is one line on stderr naming the place, exit status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from fabricwatch.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_topology_to_stdout_is_loadable_yaml(capsys):
    code, out, _ = run(capsys, "topology", "--gpus", "64", "--rails", "4")
    assert code == 0
    data = yaml.safe_load(out)
    assert len(data["links"]) == 128 and data["links"][0]["a"] == "node000/gpu0:p0"


def test_topology_out_and_check(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    assert run(capsys, "topology", "--gpus", "128", "--out", str(path))[0] == 0
    code, out, _ = run(capsys, "topology", "--check", str(path))
    assert code == 0 and "128 GPUs on 16 nodes" in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # argparse errors: one line, naming the argument
        (["topology", "--rails", "6"], "argument --rails: invalid choice"),
        (["topology", "--gpus", "ten"], "argument --gpus: invalid int value"),
        (["replay"], "the following arguments are required: capture"),
        (["nonsense"], "invalid choice: 'nonsense'"),
        (["demo", "--duration", "-5"], "must be a number > 0"),
    ],
)
def test_bad_arguments(capsys, argv, expected):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    _, err = capsys.readouterr()
    code = exit_.value.code
    assert code == 2
    assert expected in err
    assert len(err.strip().splitlines()) == 1


def test_bad_value_caught_after_parsing(capsys):
    code, _, err = run(capsys, "topology", "--gpus", "100")
    assert code == 2
    assert err.strip() == "fabricwatch topology: --gpus: must be a positive multiple of --gpus-per-node (8), not 100"


def test_broken_cluster_file(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\nnodes: [\n")
    code, _, err = run(capsys, "topology", "--check", str(path))
    assert code == 2
    assert err.startswith(f"fabricwatch topology: {path}:3: invalid YAML")
    assert "Traceback" not in err


def test_query_bad_sql_and_missing_file(tmp_path, capsys):
    code, _, err = run(capsys, "query", "--db", str(tmp_path / "none.duckdb"), "SELECT 1")
    assert code == 2 and "no such file" in err
    from fabricwatch.stream.store import Store

    with Store(tmp_path / "fw.duckdb"):
        pass
    code, _, err = run(capsys, "query", "--db", str(tmp_path / "fw.duckdb"), "SELEC nothing")
    assert code == 2 and err.startswith("fabricwatch query: sql: Parser Error")
    code, out, _ = run(
        capsys, "query", "--db", str(tmp_path / "fw.duckdb"), "--format", "csv", "SELECT count(*) AS n FROM gpu"
    )
    assert code == 0 and out.splitlines() == ["n", "0"]


def test_console_script_shows_no_traceback(tmp_path):
    bad = tmp_path / "capture.jsonl"
    bad.write_text('{"capture": "other"}\n')
    proc = subprocess.run([sys.executable, "-m", "fabricwatch", "replay", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"fabricwatch replay: {bad}:1: not a fabricwatch capture (header \"capture\" is 'other', want 'fabricwatch/v1')"
    )

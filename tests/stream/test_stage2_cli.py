"""``fabricwatch correlate`` arguments and ``serve``'s roles: settings built, bad input one line each."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.cli import main
from fabricwatch.cli.serve import load_config


def run(argv: list[str], capsys) -> tuple[int, list[str]]:
    code = main(argv)
    return code, capsys.readouterr().err.splitlines()


def test_correlate_help_names_its_arguments(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["correlate", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert all(a in out for a in ("--bootstrap", "--topology", "--db", "--instance", "--stall"))


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--stall", "0"], "fabricwatch correlate: --stall: must be a number of seconds > 0"),
        (["--partitions", "0"], "fabricwatch correlate: --partitions: must be at least 1"),
        (["--instance", "a b"], "fabricwatch correlate: --instance: 'a b': use letters, digits, - and _"),
    ],
)
def test_correlate_argument_errors_are_one_line(tmp_path, capsys, extra: list[str], expected: str) -> None:
    topo = tmp_path / "c.yaml"
    assert main(["topology", "--gpus", "64", "--out", str(topo)]) == 0
    capsys.readouterr()
    argv = ["correlate", "--bootstrap", "127.0.0.1:1", "--topology", str(topo), "--db", str(tmp_path / "s.duckdb")]
    code, lines = run([*argv, *extra], capsys)
    assert code == 2 and len(lines) == 1 and lines[0].startswith(expected), lines


def test_correlate_needs_its_topology(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["correlate", "--bootstrap", "h:1", "--db", str(tmp_path / "s.duckdb")])
    lines = capsys.readouterr().err.splitlines()
    assert exc.value.code == 2 and len(lines) == 1
    assert "the following arguments are required: --topology" in lines[0]


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "serve.yaml"
    path.write_text("bootstrap: h:9092\ndb: a.duckdb\n" + text)
    return path


def test_serve_roles(tmp_path) -> None:
    process = load_config(config(tmp_path, ""))
    assert process.process is not None and process.correlate is None
    both = load_config(config(tmp_path, "topology: c.yaml\nrole: both\ninstance: x\n"))
    assert both.process.db == tmp_path / "a.duckdb"
    assert (both.correlate.db, both.correlate.instance) == (tmp_path / "a.stage2.duckdb", "x")
    alone = load_config(config(tmp_path, "topology: c.yaml\nrole: correlate\nstage2_group: g2\nstall: 60\n"))
    assert alone.process is None and alone.correlate.db == tmp_path / "a.duckdb"
    assert (alone.correlate.group, alone.correlate.stall) == ("g2", 60.0)


def test_serve_role_problems_are_one_line_each(tmp_path, capsys) -> None:
    path = config(tmp_path, "role: stage2\nstall: 0\n")
    code, lines = run(["serve", "--config", str(path)], capsys)
    assert code == 2
    assert lines == [
        f"fabricwatch serve: {path}:3: role: must be one of process, correlate, both, not 'stage2'",
        f"fabricwatch serve: {path}:4: stall: must be a number > 0, not 0",
    ]
    path = config(tmp_path, "role: both\n")
    code, lines = run(["serve", "--config", str(path)], capsys)
    assert (code, lines) == (2, [f"fabricwatch serve: {path}:3: topology: required for role both"])


def test_the_live_stage_2_prunes_its_tracker(tmp_path, capsys) -> None:
    """``correlate`` and ``serve`` build stage 2 here: its state is saved every batch for months, so
    its tracker forgets incidents that can no longer change (demo and replay keep them all)."""
    from fabricwatch.cli.correlate import Service, Settings

    topo = tmp_path / "c.yaml"
    assert main(["topology", "--gpus", "64", "--out", str(topo)]) == 0
    service = Service(Settings(bootstrap="127.0.0.1:1", db=tmp_path / "s.duckdb", topology=topo))
    try:
        assert service.joiner.engine.tracker.prune
    finally:
        service.close()

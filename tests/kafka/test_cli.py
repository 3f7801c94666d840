"""``fabricwatch serve`` config validation and ``process`` argument errors: one line each, exit 2."""

from __future__ import annotations

import pytest

from fabricwatch.cli import main


def run(argv: list[str], capsys) -> tuple[int, list[str]]:
    code = main(argv)
    return code, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a misspelt key is an error, never silently ignored
        ("bootstrap: h:9092\ndb: a.duckdb\nbootstarp: x\n", ["{f}:3: bootstarp: unknown key (known: "]),
        # required keys
        ("group: g\n", ["{f}:1: bootstrap: missing (required)", "{f}:1: db: missing (required)"]),
        # types and ranges, every problem on its own line with its line number
        (
            "bootstrap: h:9092\ndb: a.duckdb\npartitions: 0\nreplication: two\nhttp:\n  port: 70000\n  lisen: x\n",
            [
                "{f}:3: partitions: must be an integer from 1 to 10000",
                "{f}:4: replication: must be an integer from 1 to 100",
                "{f}:6: http.port: must be an integer from 0 to 65535",
                "{f}:7: http.lisen: unknown key (known: listen, port)",
            ],
        ),
        ("bootstrap: h:9092\ndb: a.duckdb\nhttp: 9108\n", ["{f}:3: http: must be a mapping (listen: ..., port: ...)"]),
        ("- just\n- a list\n", ["{f}: must be a mapping of settings (bootstrap: ..., db: ...)"]),
        ("bootstrap: [unclosed\n", ["{f}:2: invalid YAML: "]),
    ],
)
def test_serve_config_problems_are_one_line_each(tmp_path, capsys, text: str, expected: list[str]) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(text)
    code, lines = run(["serve", "--config", str(config)], capsys)
    assert code == 2
    assert len(lines) == len(expected)
    for line, want in zip(lines, expected, strict=True):
        assert line.startswith("fabricwatch serve: " + want.format(f=config)), line


def test_serve_without_its_config_file(tmp_path, capsys) -> None:
    code, lines = run(["serve", "--config", str(tmp_path / "missing.yaml")], capsys)
    assert code == 2 and lines == [
        f"fabricwatch serve: {tmp_path / 'missing.yaml'}: cannot read: No such file or directory"
    ]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--max-records", "0"], "fabricwatch process: --max-records: must be at least 1"),
        (["--partitions", "0"], "fabricwatch process: --partitions: must be at least 1"),
    ],
)
def test_process_argument_errors(tmp_path, capsys, argv: list[str], expected: str) -> None:
    code, lines = run(["process", "--bootstrap", "127.0.0.1:9", "--db", str(tmp_path / "p.duckdb"), *argv], capsys)
    assert (code, lines) == (2, [expected])


def test_process_with_a_db_it_cannot_open(tmp_path, capsys) -> None:
    code, lines = run(["process", "--bootstrap", "127.0.0.1:9", "--db", str(tmp_path)], capsys)
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"fabricwatch process: {tmp_path}: cannot open the DuckDB file: ")

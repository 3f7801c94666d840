"""The stored incident library (replay/library): replayed, never re-simulated.

Each scenario's replay must give exactly its stored expected incidents (a detection change shows up
here as a diff, never as a physics change), and must pass its score: every fault found at its place
with its cause, and no other incident. Scenarios detection gets wrong today carry ``known_failure``
and are expected failures (strict: one that starts passing must lose its mark).
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from fabricwatch.app import library
from fabricwatch.cli import main

LIBRARY = Path(__file__).resolve().parents[2] / "replay" / "library"
SCENARIOS = library.scenarios(LIBRARY)
MAX_LIBRARY_BYTES = 30 * 1000 * 1000  # issue 8: the stored captures together stay under 30 MB


def test_library_is_small_and_every_scenario_has_its_capture_and_expected_incidents() -> None:
    assert sum(s.capture.stat().st_size for s in SCENARIOS) < MAX_LIBRARY_BYTES
    assert all(s.capture.exists() and s.expected.exists() for s in SCENARIOS)
    assert {p.name for p in LIBRARY.iterdir()} == {
        n for s in SCENARIOS for n in (s.path.name, s.capture.name, s.expected.name)
    }


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(
            s, id=s.name, marks=[pytest.mark.xfail(reason=s.known_failure, strict=True)] if s.known_failure else []
        )
        for s in SCENARIOS
    ],
)
def test_scenario_scores_and_matches_its_expected_incidents(scenario: library.Scenario) -> None:
    result = library.run_scenario(scenario)
    assert result.errors == []
    assert [i.to_dict() for i in result.incidents] == json.loads(scenario.expected.read_text())
    assert result.to_dict()["missed"] == [] and result.to_dict()["false_incidents"] == []
    assert result.passed


def _unfindable(tmp_path: Path) -> None:
    """``unfindable``: link-down-host's capture with a fault in its truth that was never injected (so
    it stays a miss whatever detection learns), marked as a known failure."""
    with gzip.open(LIBRARY / "link-down-host.jsonl.gz", "rt") as src:
        header, *rest = src.read().splitlines(keepends=True)
    head = json.loads(header)
    head["truth"] = [*head["truth"], {"cause": "gpu_xid", "gpu": "node000/gpu0", "start": 10.0, "xid": 79}]
    with gzip.open(tmp_path / "unfindable.jsonl.gz", "wt") as out:
        out.write(json.dumps(head) + "\n")
        out.writelines(rest)
    text = (LIBRARY / "link-down-host.yaml").read_text()
    (tmp_path / "unfindable.yaml").write_text(text + 'known_failure: "a fault in the truth that was never injected"\n')
    shutil.copy(LIBRARY / "link-down-host.expected.json", tmp_path / "unfindable.expected.json")


def test_score_library_prints_a_table_and_json(tmp_path, capsys) -> None:
    for suffix in (".yaml", ".jsonl.gz", ".expected.json"):
        shutil.copy(LIBRARY / f"link-down-host{suffix}", tmp_path)
    _unfindable(tmp_path)
    assert main(["score", "--library", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    by_name = {s["scenario"]: s for s in report["scenarios"]}
    assert by_name["link-down-host"]["passed"] and by_name["link-down-host"]["found"] == 1
    assert by_name["unfindable"]["missed"] == ["gpu_xid at gpu node000/gpu0"]
    assert by_name["unfindable"]["known_failure"]
    totals = report["totals"]
    assert (totals["scenarios"], totals["passed"], totals["faults"], totals["found"]) == (2, 1, 3, 2)
    assert totals["recall"] == pytest.approx(2 / 3) and totals["delay_s"]["link_down"]["n"] == 2

    assert main(["score", "--library", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1/2 scenarios pass" in out and "known failure" in out and "link-down-host" in out


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("description: x\ntopology: {gpus: 16}\nduration: 60\nfautls: []\n", ":4: fautls: unknown key"),
        ("description: x\ntopology: {gpus: 15}\nduration: 60\n", ":2: topology: "),
        ("description: x\ntopology: {gpus: 16, rails: 6}\nduration: 60\n", "topology.rails: must be"),
        ("description: x\ntopology: {gpus: 16}\nduration: -1\n", ":3: duration: must be"),
        ("topology: {gpus: 16}\nduration: 60\n", "description: missing"),
        (
            "description: x\ntopology: {gpus: 16}\nduration: 60\nfaults:\n  - {cause: link_down, link: L99999}\n",
            ":5: faults[0]",
        ),
    ],
)
def test_a_bad_scenario_is_one_clear_line_naming_the_file(tmp_path, capsys, text: str, said: str) -> None:
    (tmp_path / "bad.yaml").write_text(text)
    assert main(["score", "--library", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert said in err and "bad.yaml" in err


def test_score_needs_either_a_library_or_incidents_and_truth(tmp_path, capsys) -> None:
    assert main(["score"]) == 2
    assert "--library DIR" in capsys.readouterr().err
    assert main(["score", "x.json", "--library", str(tmp_path)]) == 2


def test_a_recorded_capture_joins_the_library_as_it_is(tmp_path, capsys) -> None:
    """A live recording, labelled, is a scenario of its own: scored from its header, never re-simulated."""
    shutil.copy(LIBRARY / "link-down-host.jsonl.gz", tmp_path / "inc-42.jsonl.gz")
    (tmp_path / "inc-42.yaml").write_text("description: a link went dark at 03:10 (INC-42)\nrecorded: true\n")
    data = (tmp_path / "inc-42.jsonl.gz").read_bytes()
    (scenario,) = library.scenarios(tmp_path)
    library.build(scenario)
    assert (tmp_path / "inc-42.jsonl.gz").read_bytes() == data
    assert json.loads((tmp_path / "inc-42.expected.json").read_text()) == json.loads(
        (LIBRARY / "link-down-host.expected.json").read_text()
    )
    assert library.run_scenario(scenario).passed
    (tmp_path / "inc-42.yaml").write_text("description: x\nrecorded: true\nfaults: []\n")
    assert main(["score", "--library", str(tmp_path)]) == 2
    assert "takes its topology and faults from its capture" in capsys.readouterr().err


def test_a_planned_maintenance_reaches_detection_as_its_change_ticket_only() -> None:
    """The maintenance scenario's window becomes a ticket in capture time; other pathologies do not."""
    by_name = {s.name: s for s in SCENARIOS}
    (ticket,) = library.change_tickets(by_name["maintenance"])
    assert (ticket.switch, ticket.start, ticket.end) == ("leaf3-0", 1764400100.0, 1764400160.0)
    assert library.change_tickets(by_name["spare-ports"]) == []

"""The realistic fleet mix: every pathology kind, valid telemetry, and opt-in only (``--realistic``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import fabricwatch.cli as cli
from fabricwatch import topology
from fabricwatch.errors import InputError, InputErrors
from fabricwatch.faults import load_plan
from fabricwatch.pathologies import KINDS
from fabricwatch.realistic import realistic
from fabricwatch.schema import from_dict, to_table
from tests.sim.helpers import standard


def test_the_mix_has_every_kind_and_is_deterministic_from_the_seed() -> None:
    topo = standard(128)
    mix = realistic(topo, 3)
    assert {p.kind for p in mix} == set(KINDS)
    assert realistic(topo, 3) == mix and realistic(topo, 4) != mix


def test_a_fault_file_can_ask_for_it(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text("seed: 3\npathologies: realistic\n")
    plan = load_plan(path, standard(64))
    assert plan.pathologies == tuple(realistic(standard(64), 3)) and plan.faults == ()


def run_simulate(tmp_path: Path, *extra: str) -> tuple[dict, list[dict]]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(topology.generate(64).to_yaml())
    faults = tmp_path / "faults.yaml"
    faults.write_text("seed: 2\nfaults:\n  - {cause: link_down, link: L00003, start: 30}\n")
    out = tmp_path / "c.jsonl.gz"
    argv = ["simulate", "--topology", str(cluster), "--faults", str(faults), "--duration", "120", "--out", str(out)]
    assert cli.main([*argv, "--quiet", *extra]) == 0
    with gzip.open(out, "rt") as f:
        header = json.loads(f.readline())
        records = [json.loads(line) for line in f]
    return header, records


def test_simulate_realistic_writes_a_messy_valid_capture_with_the_same_truth(tmp_path: Path) -> None:
    tidy_header, tidy = run_simulate(tmp_path, "--tidy")
    header, records = run_simulate(tmp_path, "--realistic")
    assert header["truth"] == tidy_header["truth"]
    assert len(records) < len(tidy)  # switches scraped every 30-60 s, lost scrapes, outages
    messages = [from_dict(r["value"]) for r in records]
    by_kind: dict[str, list] = {}
    for m in messages:
        by_kind.setdefault(m.kind, []).append(m)
    for kind, group in by_kind.items():
        assert to_table(kind, group).rejected == [], kind
    ports = [m for m in by_kind["port"] if m.source.startswith("node")]
    assert all(set(m.rows["pre_fec_ber"]) == {None} for m in ports)  # ethtool -S: no BER
    assert (
        {m.source for m in messages} - {n.name for n in standard(64).nodes} - {s.name for s in standard(64).switches}
    )  # a second collector reports a leaf under its own name


def test_a_fault_file_can_hold_the_realistic_mix_beside_its_own_pathologies(tmp_path) -> None:
    topo = topology.generate(16, rails=4)
    path = tmp_path / "faults.yaml"
    own = "  - {kind: clock_skew, source: node001, offset_s: 60, jitter_s: 0.5}\n"
    path.write_text("seed: 3\nfaults: []\npathologies:\n  - realistic\n" + own)
    kinds = [p.kind for p in load_plan(path, topo).pathologies]
    assert kinds[:-1] == [p.kind for p in realistic(topo, 3)] and kinds[-1] == "clock_skew"
    path.write_text("seed: 3\nfaults: []\npathologies:\n  - realistic\n" + own + "  - {kind: no_such_kind}\n")
    with pytest.raises((InputError, InputErrors)) as err:
        load_plan(path, topo)
    assert f"{path}:6" in str(err.value)  # the bad entry's own line, the mix beside it notwithstanding

"""``fabricwatch simulate`` and the live sim source."""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path

import pytest

import fabricwatch.cli as cli
from fabricwatch import schema, topology
from fabricwatch.cli.collect import build_source
from fabricwatch.collectors.base import source_class
from fabricwatch.errors import InputError
from fabricwatch.replay.capture import open_capture

FAULTS = """\
seed: 7
faults:
  - {cause: connector_contamination, link: L00017, direction: a_to_b, start: 10, ramp: 10, loss_db: 5.0}
  - {cause: gpu_xid, gpu: node003/gpu5, start: 15, xid: 48}
"""


@pytest.fixture
def fabricwatch(capsys):
    """Runs the CLI in-process; returns (status, stderr)."""

    def invoke(*argv: str) -> tuple[int, str]:
        try:
            status = cli.main(list(argv))
        except SystemExit as exc:  # argparse's own errors
            status = exc.code
        return status, capsys.readouterr().err

    return invoke


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(topology.generate(64).to_yaml())
    return path


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["run.jsonl", "run.jsonl.gz"])
def test_simulate_writes_a_readable_capture(fabricwatch, cluster, tmp_path, name) -> None:
    faults = write(tmp_path, "faults.yaml", FAULTS)
    out = tmp_path / name
    status, err = fabricwatch(
        "simulate", "--topology", str(cluster), "--faults", str(faults), "--duration", "30", "--interval", "5",
        "--out", str(out), "--quiet", "--tidy",  # the tidy world's grid: every scrape, counted below
    )  # fmt: skip
    assert status == 0, err
    assert f"wrote {out}" in err
    if name.endswith(".gz"):
        with gzip.open(out) as f:
            assert f.readline().startswith(b'{"capture"')
    capture = open_capture(out)
    topo = capture.topology
    assert topo.summary() == topology.load(cluster).summary()
    assert capture.truth == [
        {"cause": "connector_contamination", "link": "L00017", "start": 10.0, "ramp": 10.0, "direction": "a_to_b",
         "loss_db": 5.0},
        {"cause": "gpu_xid", "gpu": "node003/gpu5", "start": 15.0, "ramp": 0.0, "xid": 48},
    ]  # fmt: skip
    records = list(capture.records())
    assert capture.errors == []
    # Every scrape is written, as the parts a producer sends: one line per fault domain its rows touch.
    scrapes: dict[tuple[float, str, str], list] = {}
    for record in records:
        message = schema.from_dict(record.value)
        assert record.topic == schema.topic_of(message.kind) and record.ts == message.ts
        scrapes.setdefault((message.ts, message.kind, message.source), []).append((record.key, message))
    per_scrape = len(topo.nodes) * 3 + len(topo.switches) * 3  # gpu, port, optical per node; switch, port, optical
    assert len(scrapes) == 7 * per_scrape + len(topo.nodes) + len(topo.switches)  # t = 0..30, modules at t = 0
    for (_, kind, source), parts in scrapes.items():
        keys = [key for key, _ in parts]
        assert len(keys) == len(set(keys)), (kind, source)  # one part per domain
        for key, message in parts:
            if kind in ("gpu", "switch"):
                assert key == source
            else:
                assert {topo.fault_domain(p) for p in message.rows["port"]} == {key}
    node_ports = [f"node000/gpu{g}:p0" for g in range(8)]
    assert {r.key for r in records if r.value["kind"] == "port" and r.value["source"] == "node000"} == {
        topo.fault_domain(p) for p in node_ports
    }
    assert len({topo.fault_domain(p) for p in node_ports}) == 8  # 8 rails: the node's scrape is cut in 8


def test_seed_option_overrides_the_fault_files_seed(fabricwatch, cluster, tmp_path) -> None:
    faults = write(tmp_path, "faults.yaml", FAULTS)

    def body(*extra: str) -> list[str]:
        out = tmp_path / f"run{len(list(tmp_path.iterdir()))}.jsonl"
        args = ("simulate", "--topology", str(cluster), "--faults", str(faults), "--duration", "10", "--quiet")
        assert fabricwatch(*args, "--out", str(out), *extra)[0] == 0
        return out.read_text().splitlines()

    seven, seven_again, eight = body(), body("--seed", "7"), body("--seed", "8")
    assert seven == seven_again  # the file's seed is 7: same bytes
    assert seven[0] == eight[0] and seven[1:] != eight[1:]  # same header (truth), other noise


@pytest.mark.parametrize(
    ("faults", "expected"),
    [
        # broken YAML: file and line
        ("faults: [{cause: link_down, link: L00001\n", "faults.yaml:2: invalid YAML"),
        # a cause outside the vocabulary
        ("faults:\n  - {cause: cosmic_ray, link: L00001}\n", "faults.yaml:2: faults[0]: unknown cause 'cosmic_ray'"),
        # a target that is not in the topology
        ("faults:\n  - {cause: link_down, link: L99999}\n", "faults.yaml:2: faults[0]: unknown link 'L99999'"),
        # a time that is not a number of seconds
        ("faults:\n  - {cause: link_down, link: L00001, start: -3}\n", "start must be a number of seconds ≥ 0"),
        # an option value the physics cannot take
        ("faults:\n  - {cause: transceiver_fault, port: leaf0-0:p00, lane: 9}\n", "lane must be an integer 0..3"),
    ],
)
def test_bad_fault_files_give_one_line_and_status_2(fabricwatch, cluster, tmp_path, faults, expected) -> None:
    path = write(tmp_path, "faults.yaml", faults)
    out = tmp_path / "out.jsonl"
    status, err = fabricwatch(
        "simulate", "--topology", str(cluster), "--faults", str(path), "--duration", "10", "--out", str(out), "--quiet"
    )
    assert status == 2
    assert expected in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("fabricwatch simulate: ")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--duration", "0"], "argument --duration: '0' must be a number > 0"),  # nothing to simulate
        (["--duration", "10", "--interval", "abc"], "argument --interval: 'abc' is not a number"),
        (["--duration", "10", "--seed", "-1"], "argument --seed: '-1' must be ≥ 0"),
    ],
)
def test_bad_arguments_give_one_line_and_status_2(fabricwatch, cluster, tmp_path, argv, expected) -> None:
    status, err = fabricwatch("simulate", "--topology", str(cluster), "--out", str(tmp_path / "o.jsonl"), *argv)
    assert status == 2 and expected in err and len(err.strip().splitlines()) == 1


def test_missing_topology_file_is_one_line(fabricwatch, tmp_path) -> None:
    status, err = fabricwatch("simulate", "--topology", str(tmp_path / "nope.yaml"), "--duration", "5",
                              "--out", str(tmp_path / "o.jsonl"))  # fmt: skip
    assert status == 2 and "nope.yaml: cannot read" in err and len(err.strip().splitlines()) == 1


def test_sim_source_scrapes_at_the_callers_time(cluster, tmp_path) -> None:
    faults = write(tmp_path, "faults.yaml", FAULTS)
    cls = source_class("sim")
    parser = argparse.ArgumentParser()
    cls.add_arguments(parser)
    args = parser.parse_args(["--topology", str(cluster), "--faults", str(faults)])
    args.interval = 10.0
    source = build_source(cls, args)
    assert source.simulator.seed == 7 and source.simulator.interval == 10.0
    first = source.scrape(1800000000.0)
    second = source.scrape(1800000010.5)
    assert {m.ts for m in first} == {1800000000.0} and {m.ts for m in second} == {1800000010.5}
    assert {m.seq for m in second if m.kind == "gpu"} == {1}
    assert source.simulator.t == 10.0
    args.seed = 3
    assert build_source(cls, args).simulator.seed == 3
    source.close()


def test_sim_source_needs_a_topology() -> None:
    with pytest.raises(InputError) as err:
        build_source(source_class("sim"), argparse.Namespace(topology=None, faults=None, seed=None))
    assert err.value.place == "--topology"


def test_capture_lines_are_json_messages(fabricwatch, cluster, tmp_path) -> None:
    out = tmp_path / "healthy.jsonl"
    assert fabricwatch("simulate", "--topology", str(cluster), "--duration", "5", "--out", str(out), "--quiet")[0] == 0
    lines = out.read_text().splitlines()
    assert json.loads(lines[0])["truth"] == []
    assert all(json.loads(line)["value"]["schema"] == schema.SCHEMA for line in lines[1:])


def test_simulate_shapes_a_fleet_like_production_unless_told_tidy(fabricwatch, cluster, tmp_path) -> None:
    """The default fleet is the realistic mix (DESIGN §4b); ``--tidy`` is the unit tests' world."""
    faults = write(tmp_path, "faults.yaml", FAULTS)
    said = {}
    for world in ("", "--tidy"):
        args = ["--topology", str(cluster), "--faults", str(faults), "--duration", "10", "--quiet"]
        status, err = fabricwatch("simulate", *args, "--out", str(tmp_path / f"w{world}.jsonl"), *filter(None, [world]))
        assert status == 0, err
        said[world] = err
    assert re.search(r"\(2 faults, [1-9]\d* pathologies, seed", said[""]), said[""]
    assert "(2 faults, 0 pathologies, seed" in said["--tidy"], said["--tidy"]

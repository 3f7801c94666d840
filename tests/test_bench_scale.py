"""bench/scale.py's pure parts (no broker), so the benchmark cannot rot between runs."""

from __future__ import annotations

import math

import pytest

from bench import scale
from fabricwatch.errors import InputError
from fabricwatch.faults import Fault
from fabricwatch.topology import generate

T0 = 1_764_400_000.0


def test_faults_are_step_faults_on_distinct_nodes_and_leaves_spread_over_the_tick() -> None:
    topo = generate(4096, 8, 8)
    faults = scale.plan_faults(topo, 90)
    assert [f.cause for f in faults] == ["link_down", "gpu_xid"] * 3
    assert faults[0].start == scale.FIRST_FAULT_S and faults[-1].start == 90 - scale.OPEN_MARGIN_S
    assert len({f.start % 10 for f in faults}) >= 3  # several phases of the 10 s detection tick
    links = {lk.id: lk for lk in topo.links}
    nodes = [links[f.target].a.split("/")[0] if f.cause == "link_down" else f.target.split("/")[0] for f in faults]
    assert len(set(nodes)) == len(faults)
    leaves = [links[f.target].b.split(":")[0] for f in faults if f.cause == "link_down"]
    assert len(set(leaves)) == len(leaves)


def test_too_short_a_run_for_faults_is_an_input_error() -> None:
    with pytest.raises(InputError, match="--seconds"):
        scale.plan_faults(generate(128, 8, 8), 30)


def test_first_bad_scrape_and_entities() -> None:
    topo = generate(128, 8, 8)
    assert scale.first_bad_scrape(Fault("gpu_xid", "node001/gpu0", 12.0)) == 12
    assert scale.first_bad_scrape(Fault("gpu_xid", "node001/gpu0", 12.3)) == 13
    link = topo.links[5]
    assert scale.fault_entities(topo, Fault("link_down", link.id, 1.0)) == {link.id, link.a, link.b}
    assert scale.fault_entities(topo, Fault("gpu_xid", "node001/gpu0", 1.0)) == {"node001/gpu0"}


def test_percentile_interpolates_between_ranks() -> None:
    assert scale.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert scale.percentile([0.0, 10.0], 95) == pytest.approx(9.5)
    assert math.isnan(scale.percentile([], 50))


def test_latencies_from_send_and_arrival_times() -> None:
    topo = generate(128, 8, 8)
    link = topo.links[3]
    faults = [Fault("link_down", link.id, 12.0), Fault("gpu_xid", "node002/gpu1", 15.0), Fault("gpu_xid", "x/gpu0", 99)]
    sent_at = [1000.0 + k + 0.25 for k in range(60)]  # scrape k sent a quarter second into its second
    findings = [
        (1005.0, link.b, T0 + 0.0),  # an older tick's finding about the same port is not this fault's
        (1021.5, link.a, T0 + 20.0),
        (1022.0, "node002/gpu1", T0 + 20.0),
    ]
    incidents = [
        (1052.0, {"location": {"entity": "link", "id": link.id}, "detected_at": T0 + 51.0}),
        (1060.0, {"location": {"entity": "link", "id": link.id}, "detected_at": T0 + 51.0}),  # a later change
    ]
    got = scale.latencies(topo, faults, sent_at, findings, incidents, T0)
    assert got[0].finding_s == pytest.approx(1021.5 - 1012.25)
    assert got[0].incident_s == pytest.approx(1052.0 - 1012.25)
    assert got[0].pipeline_s == pytest.approx(1052.0 - 1051.25)
    assert got[1].finding_s == pytest.approx(1022.0 - 1015.25)
    assert got[1].incident_s is None and got[1].pipeline_s is None
    assert (got[2].finding_s, got[2].incident_s) == (None, None)  # its first bad scrape was never sent


def test_capacity_model_scales_the_measurement_to_100k_gpus() -> None:
    m = scale.Measured(
        records_per_sn_s=184.0,
        bytes_per_sn_s=1.8e6,
        broker_bytes_per_sn_s=0.5e6,
        rows_per_sn_s=21_528.0,
        gpus_per_core=10_240.0,
        stage2_pct_per_sn=0.1,
        duckdb_bytes_per_row=10.0,
        parquet_bytes_per_row=5.0,
    )
    model = dict(scale.capacity_model(m, gpus=102_400))
    assert model["supernodes (1024 GPUs) at 1 s"] == "100.0"
    assert model["broker in: records/s"] == "18,400"
    assert model["stage-1 processor cores (measured GPUs per core)"] == "10"
    assert model["partitions per telemetry topic (2 per processor, multiple of 12)"] == "24"
    assert model["stage 2: % of one core (linear in supernodes)"] == "10 %"
    assert model["sealed Parquet per day"] == f"{21_528 * 100 * 86_400 * 5 / 1e12:,.2f} TB"


def test_the_tables_render_from_run_results(tmp_path) -> None:
    import io

    from rich.console import Console

    faults = [Fault("gpu_xid", "node001/gpu0", 12.0), Fault("link_down", "L00001", 19.0)]
    latency = [scale.FaultLatency(faults[0], 8.0, 40.0, 3.0), scale.FaultLatency(faults[1], None, None, None)]
    run = scale.RunResult(2, [19.0, 16.0], 1.0, 4.0, 10.0, 0.0, 1472, 92.0, 0.1, 0, latency)
    run.duckdb_bytes, run.rows, run.parquet_bytes, run.sealed_rows, run.broker_bytes = 2350, 100, 1680, 100, 153_000_000
    runs = [run]
    load = scale.Load(tmp_path / "load.bin", 90, T0, 736.0, 7.3e6, 86_112.0)
    out = Console(file=io.StringIO(), width=200)
    scale.print_runs(out, runs, load)
    m = scale.measured(runs, load)
    assert m.gpus_per_core == pytest.approx(4096 / 0.35)
    assert (m.duckdb_bytes_per_row, m.parquet_bytes_per_row) == (23.5, 16.8)
    scale.print_targets(out, runs, m)
    text = out.file.getvalue()
    assert "1 missing" in text and "11,703" in text and "100,000 GPUs" in text


def test_stage1_bench_counts_every_stage_after_the_window_fills(capsys) -> None:
    from bench import stage1

    stage1.main(["--gpus", "64", "--seconds", "25", "--warm", "12", "--repeat", "1"])
    out = capsys.readouterr().out
    for label in ("decode", "source clocks", "validate", "DuckDB", "window cut", "detectors", "the rest"):
        assert f"  {label} " in out
    assert "GPUs per stage-1 core at 1 s:" in out and "of the 10,240 target" in out


def test_step_latency_scenario_has_one_step_fault_per_node_and_every_clock_off_the_grid(tmp_path) -> None:
    from bench import step_latency
    from fabricwatch.app import library

    spec = tmp_path / "steps.yaml"
    spec.write_text(step_latency.scenario_yaml(64, seed=3, duration=300.0))
    sc = library.load_scenario(spec)
    faults = sc.plan.faults
    assert len(faults) == 8 and {f.cause for f in faults} == {"link_down", "transceiver_fault"}
    assert len({f.target for f in faults}) == 8 and all(100.0 <= f.start <= 240.0 for f in faults)
    skews = [p for p in sc.plan.pathologies if p.kind == "clock_skew"]
    topo = generate(64, 8, 8)
    assert {p.options["source"] for p in skews} == {n.name for n in topo.nodes} | {s.name for s in topo.switches}
    assert len({round(p.options["offset_s"] % 5, 1) for p in skews}) > 4  # many phases of the 5 s scrape

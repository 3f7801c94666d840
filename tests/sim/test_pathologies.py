"""Pathologies (DESIGN §4b): each shows its documented signature, and nothing else changes.

As in test_signatures.py, each case runs a small supernode twice with the same seed, without and with
one pathology; the random streams do not depend on pathologies, so the difference is exactly what the
pathology did (collectors/sim/delivery.py and realism.py document each).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from fabricwatch.collectors.sim import simulate_capture
from fabricwatch.faults import Fault, FaultPlan
from fabricwatch.pathologies import Pathology, parse_pathologies
from fabricwatch.schema import LOSSLESS_PRIORITIES, Message, pause_columns, to_table, tx_pause_duration_column
from tests.sim.helpers import changes, healthy, run, series, standard

GPUS, STEPS, SEED, INTERVAL, T0 = 64, 48, 5, 5.0, 1764400000.0
COUNTERS = (
    "rx_bytes_total",
    "tx_bytes_total",
    "rx_packets_total",
    "tx_packets_total",
    "rx_crc_errors_total",
    "symbol_errors_total",
    "fec_corrected_total",
    "fec_uncorrectable_total",
    "link_down_total",
    "rx_pause_total",
    "tx_pause_total",
    "ecn_marked_total",
    "tx_drops_total",
    *(c for p in LOSSLESS_PRIORITIES for c in (*pause_columns(p), tx_pause_duration_column(p))),
)


def with_(*entries: dict, steps: int = STEPS) -> list[list[Message]]:
    topo = standard(GPUS)
    return run(topo, (), steps, SEED, pathologies=parse_pathologies(list(entries), topo, "test"))


def base() -> list[list[Message]]:
    return healthy(GPUS, STEPS, SEED)


def by_key(scrape: list[Message]) -> dict[tuple[str, str], Message]:
    return {(m.source, m.kind): m for m in scrape}


def only(found: dict, allowed: set[tuple[str, str]]) -> None:
    extra = {key: found[key] for key in found if key not in allowed}
    assert not extra, f"unexpected changes: {extra}"


# --- the collectors' side ------------------------------------------------------------------------------


def test_clock_skew_moves_only_that_sources_ts() -> None:
    h, p = base(), with_({"kind": "clock_skew", "source": "node001", "offset_s": 20, "jitter_s": 0.5})
    found = changes(h, p)
    assert set(found) <= {(k, "<seq>") for k in ("gpu", "port", "optical", "module")}
    assert set().union(*found.values()) == {"node001"}
    offsets = [
        pm.ts - hm.ts
        for hs, ps in zip(h, p, strict=True)
        for key, hm in by_key(hs).items()
        if key[0] == "node001"
        for pm in [by_key(ps)[key]]
    ]
    assert abs(np.mean(offsets) - 20.0) < 0.15 and 0.35 < np.std(offsets) < 0.65
    assert all(pm.seq == hm.seq for hs, ps in zip(h, p, strict=True) for hm, pm in zip(hs, ps, strict=True))


def test_missing_scrapes_drop_messages_and_leave_seq_gaps() -> None:
    h, p = base(), with_({"kind": "missing_scrapes", "fraction": 0.1, "source": "leaf*"})
    found = changes(h, p)
    assert set(found) <= {(k, "<message>") for k in ("switch", "port", "optical", "module")}
    assert all(s.startswith("leaf") for s in set().union(*found.values()))
    total = sum(1 for s in h for m in s if m.source.startswith("leaf"))
    kept = sum(1 for s in p for m in s if m.source.startswith("leaf"))
    assert 0.05 < 1 - kept / total < 0.16
    seqs = [m.seq for s in p for m in s if (m.source, m.kind) == ("leaf0-0", "port")]
    assert seqs == sorted(seqs) and len(seqs) < STEPS and seqs[-1] == STEPS - 1  # gaps, not renumbered


def test_late_scrapes_arrive_later_unchanged() -> None:
    h, p = base(), with_({"kind": "late_scrapes", "fraction": 0.1, "delay_s": 12, "source": "node*"})

    def flat(run: list[list[Message]]) -> list[tuple[int, Message]]:
        return [(k, m) for k, s in enumerate(run) for m in s]

    def ident(m: Message) -> tuple:
        return (m.kind, m.source, m.seq, m.ts)

    arrived = {ident(m): k for k, m in flat(p)}
    assert len(arrived) == len(flat(p))
    sent = {ident(m): (k, m) for k, m in flat(h)}
    late = {key for key, k in arrived.items() if k != sent[key][0]}
    assert all(arrived[key] == sent[key][0] + 3 for key in late)  # the first scrape ≥ 12 s later
    assert all(key[1].startswith("node") for key in late)
    within = [key for key in sent if key[1].startswith("node") and sent[key][0] < STEPS - 3]
    assert 0.05 < len(late) / len(within) < 0.16
    assert set(arrived) == {key for key in sent if key in late or sent[key][0] == arrived.get(key)} | (
        set(arrived) - set(sent)
    )
    lost = set(sent) - set(arrived)  # only those still held at the end of the run
    assert all(sent[key][0] >= STEPS - 3 for key in lost)
    for _, m in flat(p):
        assert m.rows == sent[ident(m)][1].rows


def test_collector_outage_silences_the_source_for_its_window() -> None:
    h, p = base(), with_({"kind": "collector_outage", "source": "leaf0-0", "start": 60, "duration": 50})
    assert set(changes(h, p)) <= {(k, "<message>") for k in ("switch", "port", "optical", "module")}
    times = sorted({m.ts - T0 for s in p for m in s if m.source == "leaf0-0" and m.kind == "port"})
    assert times == [t for t in np.arange(STEPS) * INTERVAL if not 60 <= t < 110]
    assert set().union(*changes(h, p).values()) == {"leaf0-0"}


def test_scrape_interval_gives_a_source_its_own_cadence() -> None:
    h, p = base(), with_({"kind": "scrape_interval", "source": "leaf*", "interval_s": 30})
    found = changes(h, p)
    assert set(found) <= {(k, c) for k in ("switch", "port", "optical") for c in ("<message>", "<seq>")}
    assert all(s.startswith("leaf") for s in set().union(*found.values()))
    sent = [(m.ts - T0, m.seq) for s in p for m in s if (m.source, m.kind) == ("leaf1-0", "port")]
    assert sent == [(t, t // 30) for t in range(0, STEPS * 5, 30)]
    # the values are those of the same scrape without the pathology
    hp = {m.ts: m.rows for s in h for m in s if (m.source, m.kind) == ("leaf1-0", "port")}
    assert all(m.rows == hp[m.ts] for s in p for m in s if (m.source, m.kind) == ("leaf1-0", "port"))


def test_counter_reset_restarts_counters_and_seq_of_that_source() -> None:
    h, p = base(), with_({"kind": "counter_reset", "source": "node002", "at": 90})
    found = changes(h, p)
    allowed = {("gpu", "<seq>"), ("port", "<seq>"), ("optical", "<seq>")}
    allowed |= {("gpu", c) for c in ("ecc_dbe_total", "pcie_replay_total")} | {("port", c) for c in COUNTERS}
    only(found, allowed)
    assert {str(e).split("/")[0] for ents in found.values() for e in ents} == {"node002"}
    k0 = int(90 / INTERVAL)
    port = "node002/gpu0:p0"
    for column in ("tx_bytes_total", "rx_bytes_total", "link_down_total"):
        before, after = series(h, "port", port, column), series(p, "port", port, column)
        assert after[:k0] == before[:k0]
        assert after[k0] == 0 and after[k0:] == [v - before[k0] for v in before[k0:]]
    assert series(p, "port", port, "tx_bytes_total")[-1] > 0
    seqs = [m.seq for s in p for m in s if (m.source, m.kind) == ("node002", "gpu")]
    assert seqs == [*range(k0), *range(STEPS - k0)]


@pytest.mark.parametrize(
    ("column", "bits", "mode"), [("link_down_total", 1, "saturate"), ("tx_bytes_total", 32, "wrap")]
)
def test_counter_saturation_sticks_or_wraps(column: str, bits: int, mode: str) -> None:
    h, p = base(), with_({"kind": "counter_saturation", "column": column, "bits": bits, "mode": mode})
    found = changes(h, p)
    assert set(found) == {("port", column)}
    top = 2**bits - 1
    for hs, ps in zip(h, p, strict=True):
        for key, hm in by_key(hs).items():
            if hm.kind != "port":
                continue
            want = [min(v, top) if mode == "saturate" else v % (top + 1) for v in hm.rows[column]]
            assert by_key(ps)[key].rows[column] == want
    assert any(v > top for s in h for m in s if m.kind == "port" for v in m.rows[column])  # it did bite


def test_profile_nulls_what_the_collector_cannot_read() -> None:
    h = base()
    p = with_({"kind": "profile", "telemetry": "port", "as": "ethtool"})
    found = changes(h, p)
    assert set(found) == {("port", c) for c in ("pre_fec_ber", "fec_uncorrectable_total", "queue_depth_bytes")}
    for s in p:
        for m in s:
            if m.kind == "port":
                assert m.rows["pre_fec_ber"] == [None] * len(m.rows["port"])


def test_profile_na_fraction_prints_n_a_for_some_cells() -> None:
    h = base()
    p = with_({"kind": "profile", "source": "leaf0-0", "as": "switchcli", "na_fraction": 0.05})
    found = changes(h, p)
    assert {k for k, _ in found} == {"optical", "module"}
    cells = nulls = 0
    for hs, ps in zip(h, p, strict=True):
        for key, pm in by_key(ps).items():
            hm = by_key(hs)[key]
            if key != ("leaf0-0", "optical"):
                continue
            for column, values in pm.rows.items():
                if column in ("port", "lane"):
                    assert values == hm.rows[column]
                    continue
                for v, w in zip(values, hm.rows[column], strict=True):
                    cells += 1
                    nulls += v is None
                    assert v is None or v == w
    assert 0.03 < nulls / cells < 0.07


def test_sysfs_profile_has_ib_counter_widths() -> None:
    h = base()
    p = with_({"kind": "profile", "source": "leaf*", "as": "sysfs"})
    found = changes(h, p)
    assert {c for _, c in found} <= {
        "pre_fec_ber",
        "fec_corrected_total",
        "fec_uncorrectable_total",
        "rx_crc_errors_total",
        "rx_pause_total",
        "tx_pause_total",
        "queue_depth_bytes",
        "symbol_errors_total",
        "link_down_total",
        "rx_bytes_total",
        "tx_bytes_total",
        *(c for p in LOSSLESS_PRIORITIES for c in (*pause_columns(p), tx_pause_duration_column(p))),  # none in sysfs
    }
    assert {k for k, _ in found} == {"port"} and all(str(e).startswith("leaf") for v in found.values() for e in v)
    for s in p:
        for m in s:
            if m.kind == "port" and m.source.startswith("leaf"):
                assert max(m.rows["link_down_total"]) <= 255 and max(m.rows["symbol_errors_total"]) <= 65535
                assert all(v % 4 == 0 for v in m.rows["tx_bytes_total"])
                assert set(m.rows["fec_corrected_total"]) == {None}


def test_duplicate_source_reports_the_same_ports_twice() -> None:
    h, p = base(), with_({"kind": "duplicate_source", "source": "leaf1-0", "as": "leaf1-0-gnmi"})
    found = changes(h, p)
    assert found == {(k, "<message>"): {"leaf1-0-gnmi"} for k in ("port", "optical", "module")}
    for s in p:
        got = by_key(s)
        for kind in ("port", "optical"):
            first, second = got[("leaf1-0", kind)], got[("leaf1-0-gnmi", kind)]
            assert second.rows == first.rows and second.ts == pytest.approx(first.ts + 0.7, abs=1e-6)


def test_spare_ports_add_unlit_rows_not_in_the_topology() -> None:
    topo = standard(GPUS)
    h, p = base(), with_({"kind": "spare_port", "switch": "leaf0-0", "count": 2})
    spares = {"leaf0-0:p72", "leaf0-0:p73"}
    assert max(int(x.rsplit(":p", 1)[1]) for x in topo.ports if x.startswith("leaf0-0:")) == 71
    assert not spares & set(topo.ports)
    for hs, ps in zip(h, p, strict=True):
        hk, pk = by_key(hs), by_key(ps)
        assert hk.keys() == pk.keys()
        for key, hm in hk.items():
            pm = pk[key]
            rows = dict(pm.rows)
            if key == ("leaf0-0", "port") or key == ("leaf0-0", "module"):
                assert rows["port"][-2:] == sorted(spares)
                rows = {c: v[:-2] for c, v in rows.items()}
            if key == ("leaf0-0", "optical"):
                extra = {c: v[-8:] for c, v in rows.items()}
                assert set(extra["port"]) == spares
                assert all(-34.2 < v < -30.2 for v in extra["rx_power_dbm"])
                assert all(0.0 < v < 2.0 for v in extra["tx_power_dbm"])
                rows = {c: v[:-8] for c, v in rows.items()}
            assert rows == hm.rows, key
    port = [m for s in p for m in s if (m.source, m.kind) == ("leaf0-0", "port")][-1]
    assert port.rows["state"][-2:] == [0, 0] and port.rows["speed_gbps"][-2:] == [None, None]
    assert to_table("port", [port]).rejected == []


# --- the plant's side ----------------------------------------------------------------------------------


def test_dom_offset_shifts_the_readings_of_one_module() -> None:
    port = "node000/gpu0:p0"
    spec = {"kind": "dom_offset", "port": port, "tx_db": 1.5, "rx_db": -0.7, "lane_spread_db": 0.5}
    h, p = base(), with_(spec)
    found = changes(h, p)
    assert set(found) == {("optical", "tx_power_dbm"), ("optical", "rx_power_dbm")}
    assert set().union(*found.values()) == {(port, lane) for lane in range(4)}
    for lane in range(4):
        dtx = np.subtract(
            series(p, "optical", (port, lane), "tx_power_dbm"), series(h, "optical", (port, lane), "tx_power_dbm")
        )
        drx = np.subtract(
            series(p, "optical", (port, lane), "rx_power_dbm"), series(h, "optical", (port, lane), "rx_power_dbm")
        )
        assert np.ptp(dtx) < 0.011 and 1.0 - 0.01 <= dtx[0] <= 2.0 + 0.01  # fixed per lane, within the spread
        assert np.ptp(drx) < 0.011 and -1.2 - 0.01 <= drx[0] <= -0.2 + 0.01


def test_mixed_modules_bring_a_second_vendors_levels_and_no_thresholds() -> None:
    spec = {"kind": "mixed_modules", "fraction": 0.5, "vendor": "ALBATROSS", "tx_offset_db": -1.0, "bias_ma": 8}
    h, p = base(), with_({**spec, "thresholds": False, "media": "400G-FR4"})
    found = changes(h, p)
    module = [m for m in p[0] if m.kind == "module"]
    mixed = {port for m in module for port, v in zip(m.rows["port"], m.rows["vendor"], strict=True) if v == "ALBATROSS"}
    switch_ports = {port for m in module for port in m.rows["port"] if not port.startswith("node")}
    assert mixed and mixed <= switch_ports and 0.3 < len(mixed) / len(switch_ports) < 0.7
    for m in module:
        for i, port in enumerate(m.rows["port"]):
            assert (m.rows["bias_high_alarm_ma"][i] is None) == (port in mixed)
    assert found[("module", "vendor")] == mixed == found[("module", "media")]
    assert {e[0] for e in found[("optical", "bias_ma")]} == mixed
    assert {e[0] for e in found[("optical", "tx_power_dbm")]} == mixed
    bias = [series(p, "optical", (port, 0), "bias_ma")[5] for port in sorted(mixed)]
    assert 5.0 < np.median(bias) < 11.0
    tx = np.subtract(
        [series(p, "optical", (x, 1), "tx_power_dbm")[5] for x in sorted(mixed)],
        [series(h, "optical", (x, 1), "tx_power_dbm")[5] for x in sorted(mixed)],
    )
    assert np.allclose(tx, -1.0, atol=0.15)
    topo = standard(GPUS)
    peers = {topo.port_peer[x] for x in mixed}
    for (kind, column), ents in found.items():
        ports = {e[0] if isinstance(e, tuple) else e for e in ents}
        if kind == "module":
            assert ports <= mixed
        elif column == "rx_power_dbm":
            assert ports <= peers
        else:
            assert ports <= mixed | peers, (kind, column)


def test_module_swap_is_a_new_module_a_retrain_and_new_levels() -> None:
    port, at = "leaf0-0:p00", 100.0
    topo = standard(GPUS)
    peer = topo.port_peer[port]
    h, p = base(), with_({"kind": "module_swap", "port": port, "at": at})
    found = changes(h, p)
    k = int(at / INTERVAL)
    sent = [m for s in p for m in s if (m.source, m.kind) == ("leaf0-0", "module")]
    assert [m.ts - T0 for m in sent] == [0.0, at, 300.0][: len(sent)] and sent[1].seq == 1
    before, after = (m.rows["part_number"][m.rows["port"].index(port)] for m in sent[:2])
    assert before != after
    assert series(p, "port", port, "link_down_total")[k] == series(h, "port", port, "link_down_total")[k] + 1
    assert series(p, "port", peer, "fec_corrected_total")[k] < series(h, "port", peer, "fec_corrected_total")[k]
    tx_h, tx_p = series(h, "optical", (port, 0), "tx_power_dbm"), series(p, "optical", (port, 0), "tx_power_dbm")
    assert tx_p[:k] == tx_h[:k] and abs(tx_p[-1] - tx_h[-1]) > 0.02
    for (kind, column), ents in found.items():
        if column == "<message>":
            assert kind == "module" and ents == {"leaf0-0"}
            continue
        assert {e[0] if isinstance(e, tuple) else e for e in ents} <= {port, peer}, (kind, column)


def test_load_step_idles_part_of_the_job_then_it_joins_again() -> None:
    nodes = ["node000", "node001"]
    h, p = base(), with_({"kind": "load_step", "stop": 60, "start": 150, "nodes": nodes})
    found = changes(h, p)
    gpus = {f"{n}/gpu{i}" for n in nodes for i in range(8)}
    assert {e for (kind, _), ents in found.items() if kind == "gpu" for e in ents} == gpus
    off = range(int(65 / INTERVAL), int(150 / INTERVAL))
    power = series(p, "gpu", "node000/gpu3", "power_w")
    assert all(v < 120 for v in (power[i] for i in off)) and power[-1] > 300
    assert all(series(p, "gpu", "node001/gpu0", "throttle_mask")[i] & 0x1 for i in off)
    assert all(series(p, "gpu", "node001/gpu0", "util_pct")[i] == 0 for i in off)
    tx = np.diff(series(p, "port", "node000/gpu3:p0", "tx_bytes_total"))
    assert max(tx[i - 1] for i in off[1:]) < 0.01 * 50e9 * INTERVAL < min(tx[-5:])
    for column in ("tx_bytes_total", "rx_bytes_total"):  # other nodes' host links carry the job as before
        assert not {e for e in found.get(("port", column), set()) if e.startswith("node") and e[:7] not in nodes}


def test_bursty_traffic_has_healthy_marks_bursts_and_brief_pauses() -> None:
    h, p = base(), with_({"kind": "bursty_traffic", "duty": 0.3})
    found = changes(h, p)
    paused = {"tx_pause_total", "rx_pause_total", "tx_pause_p3_total", "rx_pause_p3_total"}
    held = {"rx_pause_duration_p3_us_total", "tx_pause_duration_p3_us_total"}
    assert {c for _, c in found} <= {"queue_depth_bytes", "ecn_marked_total"} | held | paused
    assert {k for k, _ in found} == {"port"}
    for port in ("node001/gpu1:p0", "leaf0-0:p01"):  # brief pauses on RoCE's priority: held a tiny share of the time
        held = series(p, "port", port, "rx_pause_duration_p3_us_total")
        assert (held[-1] - held[0]) / ((STEPS - 1) * INTERVAL * 1e6) < 0.01
    queues = [v for s in p for m in s if m.kind == "port" for v in m.rows["queue_depth_bytes"]]
    assert max(queues) <= 600e3
    marks_h = sum(sum(m.rows["ecn_marked_total"]) for m in h[-1] if m.kind == "port")
    marks_p = sum(sum(m.rows["ecn_marked_total"]) for m in p[-1] if m.kind == "port")
    assert marks_p > marks_h
    pauses = np.subtract(
        series(p, "port", "node003/gpu2:p0", "tx_pause_total"), series(h, "port", "node003/gpu2:p0", "tx_pause_total")
    )
    assert 0 < pauses[-1] < 10 * STEPS * INTERVAL  # brief pauses, far from a storm's 24 000/s


def test_coolant_drift_warms_every_loop() -> None:
    h, p = base(), with_({"kind": "coolant_drift", "delta_c": 6, "period_s": 480})
    found = changes(h, p)
    assert {k for k, _ in found} <= {"gpu", "optical", "port"}
    assert {c for k, c in found if k == "gpu"} <= {"temp_c", "mem_temp_c", "power_w", "sm_clock_mhz", "throttle_mask"}
    assert {c for k, c in found if k == "optical"} <= {"module_temp_c", "bias_ma"}
    assert all(e.startswith("node") for (k, _), ents in found.items() if k == "port" for e in ents)
    gpus = standard(GPUS).gpus
    rise = [series(p, "gpu", g, "temp_c")[-1] - series(h, "gpu", g, "temp_c")[-1] for g in gpus]
    assert 4.0 < np.mean(rise) < 6.5 and min(rise) > 2.0  # sin²(π·235/480) ≈ 1 at the end


def test_maintenance_takes_a_leaf_down_and_it_comes_back_rebooted() -> None:
    topo = standard(GPUS)
    h, p = base(), with_({"kind": "maintenance", "switch": "leaf1-0", "start": 60, "duration": 60})
    found = changes(h, p)
    window = range(int(60 / INTERVAL), int(120 / INTERVAL))
    times = [m.ts - T0 for s in p for m in s if (m.source, m.kind) == ("leaf1-0", "switch")]
    assert times == [t for t in np.arange(STEPS) * INTERVAL if not 60 <= t < 120]
    host = next(x for x in topo.ports if topo.port_peer[x].startswith("leaf1-0:"))
    state = series(p, "port", host, "state")
    assert all(state[i] == 0 for i in window) and state[-1] == 1
    assert series(p, "port", host, "link_down_total")[-1] == series(h, "port", host, "link_down_total")[-1] + 1
    leaf_port = topo.port_peer[host]
    after = series(p, "port", leaf_port, "tx_bytes_total")
    assert after[12] == 0 and 0 < after[24] < 50e9 * 60  # counting from 0 after the reboot (at t = 120)
    seqs = [m.seq for s in p for m in s if (m.source, m.kind) == ("leaf1-0", "port")]
    assert seqs[:12] == list(range(12)) and seqs[12] == 0
    switch_links = {link for link in topo.links if "leaf1-0:" in link.a or "leaf1-0:" in link.b}
    ends = {x for link in switch_links for x in (link.a, link.b)}
    for (kind, column), ents in found.items():
        if column in ("<message>", "<seq>"):
            assert ents == {"leaf1-0"}
            continue
        assert {e[0] if isinstance(e, tuple) else e for e in ents} <= ends | {"leaf1-0"}, (kind, column)


# --- every pathology together ---------------------------------------------------------------------------


ALL = [
    {"kind": "clock_skew", "source": "node001", "offset_s": 20, "jitter_s": 0.5},
    {"kind": "missing_scrapes", "fraction": 0.02},
    {"kind": "late_scrapes", "fraction": 0.02, "delay_s": 7},
    {"kind": "collector_outage", "source": "leaf2-0", "start": 100, "duration": 60},
    {"kind": "scrape_interval", "source": "spine*", "interval_s": 30},
    {"kind": "counter_reset", "source": "node002", "at": 90},
    {"kind": "counter_saturation", "column": "link_down_total", "bits": 8},
    {"kind": "dom_offset", "port": "*", "spread_db": 1.0, "lane_spread_db": 0.4},
    {"kind": "mixed_modules", "fraction": 0.3, "bias_ma": 8, "thresholds": False},
    {"kind": "spare_port", "switch": "leaf0-0", "count": 2},
    {"kind": "duplicate_source", "source": "leaf1-0", "as": "leaf1-0-gnmi"},
    {"kind": "load_step", "stop": 60, "start": 150, "nodes": "node00[01]"},
    {"kind": "bursty_traffic", "duty": 0.3},
    {"kind": "coolant_drift", "delta_c": 3},
    {"kind": "module_swap", "port": "leaf0-0:p00", "at": 150},
    {"kind": "maintenance", "switch": "leaf3-0", "start": 60, "duration": 60},
    {"kind": "profile", "source": "leaf*", "as": "gnmi"},
    {"kind": "profile", "source": "node*", "telemetry": "gpu", "as": "dcgm"},
    {"kind": "burst_errors", "rate_per_hour": 30},
]


def test_every_pathology_together_is_valid_telemetry_and_deterministic() -> None:
    first, second = with_(*ALL), with_(*ALL)
    assert first == second
    by_kind: dict[str, list[Message]] = {}
    for s in first:
        for m in s:
            by_kind.setdefault(m.kind, []).append(m)
    for kind, messages in by_kind.items():
        assert to_table(kind, messages).rejected == [], kind
    assert {q["kind"] for q in ALL} == set(parse_kinds())


def parse_kinds() -> list[str]:
    from fabricwatch.pathologies import KINDS

    return list(KINDS)


def test_pathologies_never_enter_the_ground_truth(tmp_path: Path) -> None:
    topo = standard(GPUS)
    faults = (Fault("link_down", topo.links[3].id, 60.0),)
    pathologies = tuple(parse_pathologies(ALL, topo, "test"))
    out = tmp_path / "c.jsonl.gz"
    simulate_capture(topo, FaultPlan(SEED, faults, pathologies), 60.0, INTERVAL, out, progress=False)
    with gzip.open(out, "rt") as f:
        header = json.loads(f.readline())
    assert header["truth"] == [faults[0].to_dict()]
    assert isinstance(pathologies[0], Pathology)


def test_the_live_source_keeps_a_skewed_stamp_relative_to_its_clock() -> None:
    from fabricwatch.collectors.sim.simulator import Simulator
    from fabricwatch.collectors.sim.source import SimSource

    topo = standard(GPUS)
    skew = parse_pathologies([{"kind": "clock_skew", "source": "node001", "offset_s": 20}], topo, "test")
    source = SimSource(Simulator(topo, seed=SEED, pathologies=skew))
    messages = source.scrape(1800000000.0)
    assert {m.ts - 1800000000.0 for m in messages if m.source == "node001"} == {20.0}
    assert {m.ts for m in messages if m.source != "node001"} == {1800000000.0}

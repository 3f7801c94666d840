"""The columns real collectors give: BER from corrected bits, corruption below the 1 % rule, missing
columns read as unknown, counters that reset, wrap or stick, and two collectors on one port."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fabricwatch import topology
from fabricwatch.detectors.base import detector_class
from fabricwatch.detectors.correlate import Correlator
from fabricwatch.detectors.corruption import Corruption, poisson_tail
from fabricwatch.detectors.frames import Keyed
from fabricwatch.detectors.pre_fec_ber import FEC_LINE_FACTOR
from fabricwatch.records import Finding
from tests.detectors.synth import LINE_BPS, T0, Timeline

TOPO = topology.generate(128, rails=8, gpus_per_node=8)
FAB = TOPO.links[200]  # leaf4-0:p72 <-> spine00:p36
HOST = TOPO.port_link["node002/gpu1:p0"]
LINE_BITS = LINE_BPS * FEC_LINE_FACTOR  # 425 Gb/s through the FEC at 400 Gb/s


def frames_per_s(tl: Timeline, port: str) -> float:
    """The port's received frames a second in the timeline (rx_packets_total's own rate)."""
    f = tl.frames["port"]
    rows = f[f["port"] == port]
    return float(np.diff(rows["rx_packets_total"].to_numpy(dtype=float)).mean() / tl.step)


def run(name: str, edit, at: float = 180.0, detector=None) -> list[Finding]:
    """Detector ``name`` every 10 s over an edited healthy timeline; the last tick's findings."""
    tl = Timeline(TOPO, duration=at, seed=5)
    edit(tl)
    detector = detector or detector_class(name)()
    out: list[Finding] = []
    for t in tl.ticks(10.0, 60.0):
        out = detector.detect(tl.window(t))
    return out


def found(findings: list[Finding]) -> set[tuple[str, str]]:
    return {(f.symptom, f.id) for f in findings}


# --- 1. pre-FEC BER from corrected bits where the BER column is missing (ethtool -S) ---------------


def no_ber_column(tl: Timeline) -> None:
    tl.put("port", "pre_fec_ber", None)


@pytest.mark.parametrize(
    ("comment", "edit", "expected"),
    [
        ("no BER column, healthy corrected bits: quiet", no_ber_column, set()),
        (
            "no BER column, corrected bits at a BER of 1e-3: above the KP4 limit",
            lambda tl: (no_ber_column(tl), tl.count("port", "fec_corrected_total", 1e-3 * LINE_BITS, 100, port=FAB.b)),
            {("ber_above_limit", FAB.b)},
        ),
        (
            "no BER column and no speed: the BER is unknown, never judged",
            lambda tl: (
                no_ber_column(tl),
                tl.put("port", "speed_gbps", None),
                tl.count("port", "fec_corrected_total", 1e-3 * LINE_BITS, 100, port=FAB.b),
            ),
            set(),
        ),
        (
            "no BER column and no corrected bits: unknown, nothing said",
            lambda tl: (no_ber_column(tl), tl.put("port", "fec_corrected_total", None)),
            set(),
        ),
    ],
)
def test_ber_from_corrected_bits(comment: str, edit, expected: set) -> None:
    assert found(run("pre_fec_ber", edit)) == expected, comment


def test_derived_ber_says_where_it_came_from() -> None:
    out = run(
        "pre_fec_ber",
        lambda tl: (no_ber_column(tl), tl.count("port", "fec_corrected_total", 1e-3 * LINE_BITS, 100, port=FAB.b)),
    )
    (f,) = out
    assert f.evidence[0]["from"] == "fec_corrected_total"
    assert f.attrs["pre_fec_ber"] == pytest.approx(1e-3, rel=0.05)


# --- 2. corruption: CRC and symbol-error rates down to CorrOpt's 1e-8, with hysteresis ------------


def crc_at(rate: float, start: float = 60.0, end: float | None = None, port: str = FAB.b):
    """CRC errors at ``rate`` of the frames the port receives."""

    def edit(tl: Timeline) -> None:
        tl.count("port", "rx_crc_errors_total", rate * frames_per_s(tl, port), start, end, port=port)

    return edit


@pytest.mark.parametrize(
    ("comment", "edit", "expected"),
    [
        ("healthy: no CRC or symbol errors", lambda tl: None, set()),
        ("frame loss 1e-6: far under the 1 % rule, still corrupting", crc_at(1e-6), {("corruption", FAB.b)}),
        ("frame loss 1e-7: ten times CorrOpt's threshold", crc_at(1e-7), {("corruption", FAB.b)}),
        ("frame loss 1e-10: under the threshold", crc_at(1e-10), set()),
        (
            "one burst of 30 CRC errors within one scrape interval: an event, not a rate",
            lambda tl: tl.count("port", "rx_crc_errors_total", 10, 151, 154, port=FAB.b),
            set(),
        ),
        (
            "2,000 symbol errors an hour (NVSentinel: > 120/h is fatal)",
            lambda tl: tl.count("port", "symbol_errors_total", 2000 / 3600, 60, port=FAB.b),
            {("corruption", FAB.b)},
        ),
        (
            "symbol errors stuck at 65535 (16-bit IBTA counter): unknown, not a burst",
            lambda tl: tl.put("port", "symbol_errors_total", 65535, 120, port=FAB.b),
            set(),
        ),
        (
            "no CRC column: unknown, not quiet and not lossy",
            lambda tl: (crc_at(1e-6)(tl), tl.put("port", "rx_crc_errors_total", None, port=FAB.b)),
            set(),
        ),
    ],
)
def test_corruption_rows(comment: str, edit, expected: set) -> None:
    assert found(run("corruption", edit)) == expected, comment


def test_corruption_hysteresis_opens_above_and_clears_well_below() -> None:
    """Open at 1e-7; a later 3e-9 (between clear 1e-9 and open 1e-8) holds it; no errors clear it;
    the same 3e-9 on a port never opened says nothing."""
    tl = Timeline(TOPO, duration=400, seed=5)
    crc_at(1e-7, 60, 160)(tl)
    crc_at(3e-9, 160, 300)(tl)
    crc_at(3e-9, 60, 300, port=FAB.a)(tl)
    det = Corruption()
    seen: dict[float, set] = {}
    for t in tl.ticks(10.0, 60.0):
        seen[t] = found(det.detect(tl.window(t)))
    assert ("corruption", FAB.b) in seen[150.0]
    assert all(("corruption", FAB.b) in seen[t] for t in (230.0, 260.0, 290.0)), "held between clear and open"
    assert ("corruption", FAB.b) not in seen[400.0], "cleared once the errors stop"
    assert not any(("corruption", FAB.a) in s for s in seen.values()), "3e-9 never opens"


def test_corruption_state_round_trips() -> None:
    det = Corruption()
    det.open = {FAB.b}
    again = Corruption()
    again.restore(det.snapshot())
    assert again.open == {FAB.b}


def test_poisson_tail() -> None:
    assert poisson_tail(0, 3.0) == 1.0
    assert poisson_tail(1, 2.0) == pytest.approx(1 - np.exp(-2.0))
    assert poisson_tail(10**6, 1.0) == 0.0
    assert poisson_tail(3, 0.0) == 0.0


# --- 3. a missing column is unknown, never quiet nor a made-up number --------------------------------


def test_packet_loss_without_frame_counters_is_unknown_not_total_loss() -> None:
    def edit(tl: Timeline) -> None:
        tl.count("port", "rx_crc_errors_total", 100, 100, port=FAB.b)
        tl.put("port", "rx_packets_total", None)
        tl.put("port", "rx_bytes_total", None)

    assert run("packet_loss", edit) == []


# --- 4. counters that stick, wrap or reset read as unknown for the window ---------------------------


def keyed(rows: list[tuple[float, str, float | None]], column: str = "c") -> Keyed:
    """One port's samples (ts, source, value) as a Keyed group."""
    frame = pd.DataFrame(
        {"ts": [T0 + t for t, _, _ in rows], "source": [s for _, s, _ in rows], "port": "x:p0",
         column: [np.nan if v is None else v for _, _, v in rows]}
    )  # fmt: skip
    return Keyed(frame, ("port",))


@pytest.mark.parametrize(
    ("comment", "values", "expected"),
    [
        ("a rising counter", [100, 110, 125, 125], 25.0),
        ("a null sample is skipped, not zero", [100, None, 125, 130], 30.0),
        ("a drop (agent restart or wrap) makes the window unknown", [100, 110, 3, 9], None),
        ("a 32-bit wrap: unknown, not a burst of 4e9", [4_294_967_000, 200, 900, 1500], None),
        ("stuck at 255 (8-bit LinkDownedCounter): unknown, not quiet", [250, 255, 255, 255], None),
        ("stuck at 65535 (16-bit SymbolErrorCounter)", [65535, 65535, 65535], None),
        ("one sample: unknown", [100], None),
    ],
)
def test_counter_increase(comment: str, values: list, expected: float | None) -> None:
    inc = keyed([(5.0 * i, "a", v) for i, v in enumerate(values)]).increase("c")
    if expected is None:
        assert np.isnan(inc.total[0]), comment
    else:
        assert inc.total[0] == expected, comment


def test_saturated_link_downed_opens_no_flap() -> None:
    out = run("link_state", lambda tl: tl.put("port", "link_down_total", 255, 100, port=FAB.b))
    assert out == []


# --- 5. two collectors on one port are kept apart ----------------------------------------------------


def test_duplicate_source_counters_are_not_interleaved() -> None:
    """Two agents count the same port from their own bases, 0.7 s apart: one source's steps only."""
    rows = []
    for i in range(6):
        rows.append((5.0 * i, "node000", 1_000 + 10 * i))
        rows.append((5.0 * i + 0.7, "node000-cli", 50 + 10 * i))
    inc = keyed(rows).increase("c")
    assert inc.total[0] == 50.0 and inc.unknown[0] == 0


def test_duplicate_source_prefers_the_one_that_reports_the_column() -> None:
    rows = []
    for i in range(6):
        rows.append((5.0 * i, "a-first", None))
        rows.append((5.0 * i + 0.7, "b-second", 7 * i))
    assert keyed(rows).increase("c").total[0] == 35.0


def test_duplicate_source_with_a_restart_on_one_agent_gives_no_false_loss() -> None:
    """A second collector whose agent restarted reports the same port: no CRC 'burst', no loss."""

    def edit(tl: Timeline) -> None:
        f = tl.frames["port"]
        dup = f[f["port"] == FAB.b].copy()
        dup["source"] = "spine00-cli"
        dup["ts"] = dup["ts"] + 0.7
        for c in ("rx_crc_errors_total", "rx_packets_total", "rx_bytes_total"):
            dup[c] = dup[c] - dup[c].iloc[0] // 2
        tl.frames["port"] = pd.concat([f, dup]).sort_values("ts", kind="stable").reset_index(drop=True)

    assert run("packet_loss", edit) == []
    assert run("corruption", edit) == []


# --- the correlator: corruption without optical evidence is the transceiver's ----------------------


def finding(symptom: str, port: str, score: float = 1.0) -> Finding:
    attrs = {"lanes": [0, 1, 2, 3], "lanes_total": 4}
    return Finding("test", symptom, "port", port, 100.0, 130.0, "minor", ({"metric": symptom, "port": port},),
                   None, score, attrs)  # fmt: skip


@pytest.mark.parametrize(
    ("comment", "findings", "expected"),
    [
        (
            "corruption alone, light normal: the transceiver counting the errors",
            [finding("corruption", FAB.b)],
            {("transceiver_fault", "port", FAB.b)},
        ),
        (
            "corruption at both ends: one incident, at the worse end",
            [finding("corruption", FAB.a, 2.0), finding("corruption", FAB.b, 5.0)],
            {("transceiver_fault", "port", FAB.b)},
        ),
        (
            "corruption with the receive power down in that direction: the connector",
            [finding("corruption", HOST.b), finding("rx_power_drop", HOST.b)],
            {("connector_contamination", "link", HOST.id)},
        ),
        (
            "corruption with both directions' light down: the fibre",
            [finding("corruption", HOST.b), finding("rx_power_drop", HOST.a), finding("rx_power_drop", HOST.b)],
            {("fiber_damage", "link", HOST.id)},
        ),
    ],
)
def test_corruption_correlation(comment: str, findings: list[Finding], expected: set) -> None:
    got = Correlator(TOPO).correlate(findings)
    assert {(d.cause, d.entity, d.id) for d in got} == expected, comment
    assert sum(len(d.findings) for d in got) == len(findings), "every finding folded in once"


SMALL = topology.generate(16, rails=4, gpus_per_node=8)
SMALL_PORT = SMALL.links[3].b


def corruption_over(rate: float, duration: float = 900.0, restart_at: float | None = None) -> dict[float, bool]:
    """Per tick (s into the run): whether SMALL_PORT, losing ``rate`` of its frames from 60 s, is
    flagged; with ``restart_at``, the detector is snapshot and restored into a new one there."""
    tl = Timeline(SMALL, duration=duration, seed=3)
    crc_at(rate, 60.0, port=SMALL_PORT)(tl)
    det = Corruption()
    seen = {}
    for t in tl.ticks(10.0, 60.0):
        if restart_at is not None and t == restart_at:
            state = json.loads(json.dumps(det.snapshot()))
            det = Corruption()
            det.restore(state)
        seen[t] = ("corruption", SMALL_PORT) in found(det.detect(tl.window(t)))
    return seen


def test_a_rate_near_corropts_threshold_is_found_over_minutes_not_in_one_window() -> None:
    """2e-8 is 8 errors a minute on this port: no single window tells it from noise, the
    accumulated sums do within 15 minutes; 5e-9 (under the threshold) is never flagged."""
    near = corruption_over(2e-8)
    assert not near[120.0], "one or two windows are not enough evidence"
    assert near[900.0]
    assert not any(corruption_over(5e-9).values())


def test_accumulated_evidence_survives_a_restart() -> None:
    assert corruption_over(2e-8, restart_at=400.0) == corruption_over(2e-8)


def test_a_link_down_reported_by_two_sources_is_one_event_not_a_flap() -> None:
    """The port's leaf is read by a second collector 0.7 s behind the first (DESIGN §4b
    duplicate_source): one down, seen at two sample times (the state's fall by one, the counter's
    step by the other), is one link-down event."""

    def edit(tl: Timeline) -> None:
        tl.put("port", "state", 0, start=120, port=FAB.b)
        tl.count("port", "link_down_total", 1e-9, start=0, port=FAB.b)  # keeps the column integral
        f = tl.frames["port"]
        f.loc[(f["port"] == FAB.b).to_numpy() & (f["ts"] >= T0 + 120).to_numpy(), "link_down_total"] += 1
        dup = f[f["port"] == FAB.b].copy()
        dup["source"] = "spine00-cli"
        dup["ts"] = dup["ts"] + 0.7
        dup.loc[dup["ts"] < T0 + 120.7, "state"] = 1  # its reading just before the down is still up
        lost = (f["port"] == FAB.b).to_numpy() & (np.abs(f["ts"].to_numpy() - T0 - 100) < 2.5)
        f = f[~lost]  # the first collector lost a scrape: the second has more samples, so counts
        tl.frames["port"] = pd.concat([f, dup]).sort_values("ts", kind="stable").reset_index(drop=True)

    symptoms = {f.symptom for f in run("link_state", edit)}
    assert "link_down" in symptoms and "link_flap" not in symptoms

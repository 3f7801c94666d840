"""A small one-direction optical dip that comes with new CRC errors (issue 9, part 4): the connector or
fibre, not the transceiver. The dip is judged against the lane's own noise (optical_baseline)."""

from __future__ import annotations

import pytest

from fabricwatch import topology
from fabricwatch.detectors.correlate import Correlator
from fabricwatch.detectors.optical_baseline import OpticalBaseline
from fabricwatch.records import Finding
from tests.detectors.synth import Timeline

TOPO = topology.generate(128, rails=8, gpus_per_node=8)
HOST = TOPO.port_link["node002/gpu1:p0"]  # node002/gpu1:p0 <-> leaf1-0:p02
PORT = HOST.b


def optical_findings(edit) -> set[tuple[str, str]]:
    tl = Timeline(TOPO, duration=300.0, seed=5)
    edit(tl)
    det = OpticalBaseline()
    out: list[Finding] = []
    for t in tl.ticks(10.0, 60.0):
        out = det.detect(tl.window(t))
    return {(f.symptom, f.id) for f in out}


def quiet(tl: Timeline) -> None:
    """PORT's lanes read a steady -3 dBm (a DOM precise to ~0.01 dB against itself)."""
    tl.put("optical", "rx_power_dbm", -3.0, port=PORT)


@pytest.mark.parametrize(
    ("comment", "edit", "expected"),
    [
        ("a quiet lane that stays put: nothing", quiet, set()),
        (
            "a quiet lane 0.5 dB down: under the 1 dB change rule, 50 of its own noise floors: a dip",
            lambda tl: (quiet(tl), tl.shift("optical", "rx_power_dbm", -0.5, start=150, port=PORT)),
            {("rx_power_dip", PORT)},
        ),
        (
            "a quiet lane 3 dB down: a drop, not a dip",
            lambda tl: (quiet(tl), tl.shift("optical", "rx_power_dbm", -3.0, start=150, port=PORT)),
            {("rx_power_drop", PORT)},
        ),
        (
            "a lane with 0.1 dB of noise 0.5 dB down: within ten of its own noise, nothing",
            lambda tl: tl.shift("optical", "rx_power_dbm", -0.5, start=150, port=PORT),
            set(),
        ),
    ],
)
def test_a_dip_is_judged_against_the_lanes_own_noise(comment: str, edit, expected: set) -> None:
    assert optical_findings(edit) == expected, comment


def finding(symptom: str, port: str, severity: str = "minor") -> Finding:
    attrs = {"lanes": [0], "lanes_total": 4}
    return Finding("test", symptom, "port", port, 100.0, 130.0, severity, ({"metric": symptom, "port": port},),
                   None, 1.0, attrs)  # fmt: skip


@pytest.mark.parametrize(
    ("comment", "findings", "expected"),
    [
        (
            "corruption with a receive dip at the same port, the far transmitter steady: the connector",
            [finding("corruption", PORT), finding("rx_power_dip", PORT, "warning")],
            {("connector_contamination", "link", HOST.id)},
        ),
        (
            "corruption, no dip: the transceiver counting the errors",
            [finding("corruption", PORT)],
            {("transceiver_fault", "port", PORT)},
        ),
        (
            "corruption with the dip at the far end's transmitter too: not the path alone, as before",
            [
                finding("corruption", PORT),
                finding("rx_power_dip", PORT, "warning"),
                finding("tx_power_dip", HOST.a, "warning"),
            ],
            {("transceiver_fault", "port", PORT)},
        ),
        (
            "corruption with dips in both directions: not one direction, as before",
            [
                finding("corruption", PORT),
                finding("rx_power_dip", PORT, "warning"),
                finding("rx_power_dip", HOST.a, "warning"),
            ],
            {("transceiver_fault", "port", PORT)},
        ),
        (
            "corruption at one end, the dip at the other end's receiver: not the corrupting direction",
            [finding("corruption", PORT), finding("rx_power_dip", HOST.a, "warning")],
            {("transceiver_fault", "port", PORT)},
        ),
        ("a dip alone: a hint, never an incident", [finding("rx_power_dip", PORT, "warning")], set()),
    ],
)
def test_a_one_direction_dip_with_corruption_is_the_connector(comment: str, findings: list, expected: set) -> None:
    got = Correlator(TOPO).correlate(findings)
    assert {(d.cause, d.entity, d.id) for d in got} == expected, comment

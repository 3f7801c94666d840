"""The pathologies: list of a fault file (DESIGN §4b): every kind parses; bad entries name file:line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fabricwatch.errors import InputError
from fabricwatch.faults import load_plan
from fabricwatch.pathologies import KINDS
from tests.sim.helpers import standard

GOOD = """\
seed: 3
faults:
  - {cause: link_down, link: L00003, start: 60}
pathologies:
  - {kind: clock_skew, source: node001, offset_s: 20, jitter_s: 0.5}
  - {kind: missing_scrapes, fraction: 0.01}
  - {kind: late_scrapes, fraction: 0.01, delay_s: 12}
  - {kind: collector_outage, source: leaf0-0, start: 100, duration: 60}
  - {kind: scrape_interval, source: "leaf*", interval_s: 30}
  - {kind: counter_reset, source: node002, at: 90}
  - {kind: counter_saturation, column: link_down_total, bits: 8}
  - {kind: dom_offset, port: "node000/gpu0:p0", tx_db: 1.5, rx_db: -0.7, lane_spread_db: 0.5}
  - {kind: mixed_modules, fraction: 0.3, vendor: ALBATROSS, tx_offset_db: -0.8, bias_ma: 8, thresholds: false}
  - {kind: spare_port, switch: leaf0-0, count: 2}
  - {kind: duplicate_source, source: leaf1-0, as: leaf1-0-gnmi}
  - {kind: load_step, stop: 100, start: 200, nodes: [node000, node001]}
  - {kind: bursty_traffic, duty: 0.3}
  - {kind: coolant_drift, delta_c: 4}
  - {kind: module_swap, port: "leaf0-0:p00", at: 150}
  - {kind: maintenance, switch: leaf1-0, start: 300, duration: 120}
  - {kind: profile, telemetry: port, as: ethtool}
  - {kind: burst_errors, port: "leaf*", rate_per_hour: 2}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "faults.yaml"
    path.write_text(text)
    return path


def test_every_kind_parses_with_defaults_and_stays_out_of_the_truth(tmp_path: Path) -> None:
    plan = load_plan(write(tmp_path, GOOD), standard(64))
    assert [p.kind for p in plan.pathologies] == list(KINDS)
    assert plan.to_list() == [{"cause": "link_down", "link": "L00003", "start": 60.0, "ramp": 0.0}]
    skew = plan.pathologies[0]
    assert skew.options == {"source": "node001", "offset_s": 20.0, "jitter_s": 0.5}
    assert plan.pathologies[1]["source"] == "*"  # default: every source
    assert plan.pathologies[11]["nodes"] == ("node000", "node001")
    assert skew.place.endswith("faults.yaml:5")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{kind: clock_drift, source: node001}", "unknown kind 'clock_drift'"),
        ("{kind: clock_skew, source: node001, offset: 3}", "unknown option 'offset' for clock_skew"),
        ("{kind: clock_skew, offset_s: 3}", "clock_skew needs 'source'"),
        ("{kind: clock_skew, source: nodeX}", "source 'nodeX' matches no source"),
        ("{kind: missing_scrapes, fraction: 1.5}", "fraction must be in [0, 1]"),
        ("{kind: counter_saturation, column: temp_c, bits: 8}", "column must be one of"),
        ("{kind: dom_offset, port: 'node000/gpu0:p0', tx_db: 2.5, spread_db: 1}", "within the DOM"),
        ("{kind: profile, as: ethtool}", "profile needs 'source' or 'telemetry'"),
        ("{kind: profile, telemetry: port, as: snmp}", "as must be one of"),
        ("{kind: port, as: ethtool}", "write 'telemetry: port'"),
        ("{kind: load_step, stop: 100, start: 50}", "start (50) must come after stop (100)"),
        ("{kind: duplicate_source, source: leaf0-0, as: leaf1-0}", "already a source"),
        ("{kind: module_swap, port: 'leaf9-9:p00', at: 1}", "unknown port"),
        ("[kind, clock_skew]", "must be a mapping"),
    ],
)
def test_bad_entry_is_one_line_naming_file_and_line(tmp_path: Path, entry: str, message: str) -> None:
    path = write(tmp_path, f"seed: 1\npathologies:\n  - {{kind: bursty_traffic, duty: 0.5}}\n  - {entry}\n")
    with pytest.raises(InputError) as caught:
        load_plan(path, standard(64))
    text = str(caught.value)
    assert len(text.splitlines()) == 1, text
    assert message in text, text
    assert text.startswith(f"{path}:4: pathologies[1]:") or text.startswith(f"{path}: pathologies[1]:"), text


def test_faults_and_pathologies_errors_are_reported_together(tmp_path: Path) -> None:
    text = "faults:\n  - {cause: nope}\npathologies:\n  - {kind: nope}\n"
    with pytest.raises(InputError) as caught:
        load_plan(write(tmp_path, text), standard(64))
    lines = str(caught.value).splitlines()
    assert [line.split(": ", 1)[0].rsplit(":", 1)[1] for line in lines] == ["2", "4"]


def test_every_kind_and_option_of_the_contract_is_accepted() -> None:
    """DESIGN §4b's table (the contract) names kinds and options; every one of them must be known here."""
    design = Path(__file__).resolve().parents[1] / "golden" / "contracts" / "design-4b.md"
    section = design.read_text().split("## 4b.", 1)[1]
    rows = [line.split("|") for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) >= 16
    for row in rows:
        kind = row[1].strip().strip("`")
        assert kind in KINDS, kind
        for option in re.findall(r"`(\w+)`", row[2].split("(nvml")[0]):
            # "`source` or `kind`": a telemetry kind is selected with `telemetry` (`kind` names the pathology)
            assert option in KINDS[kind] or (option == "kind" and "telemetry" in KINDS[kind]), (kind, option)

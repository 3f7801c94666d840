"""Collector profiles claim no column their real parser leaves empty (checked on every golden case)."""

from __future__ import annotations

import json

import pytest

from fabricwatch.collectors.sim.profiles import PROFILES
from fabricwatch.pathologies import COLLECTORS
from fabricwatch.schema import KINDS
from tests.conftest import GOLDEN

PARSED = sorted(name for name in PROFILES if (GOLDEN / name).is_dir())


def filled(collector: str) -> dict[str, set[str]]:
    """kind → value columns some golden case of ``collector`` fills with a non-null value."""
    out: dict[str, set[str]] = {}
    for path in (GOLDEN / collector).glob("*/expected.jsonl"):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            m = json.loads(line)
            keys = {c.name for c in KINDS[m["kind"]].keys}
            out.setdefault(m["kind"], set()).update(
                c for c, v in m["rows"].items() if c not in keys and any(x is not None for x in v)
            )
    return out


def test_every_collector_of_the_vocabulary_has_a_profile() -> None:
    assert set(PROFILES) == set(COLLECTORS)
    assert {"dcgm", "ethtool", "gnmi", "nvidia-smi", "sysfs", "switchcli"} <= set(PARSED)


@pytest.mark.parametrize("collector", PARSED)
def test_profile_covers_what_the_parser_fills(collector: str) -> None:
    seen = filled(collector)
    assert seen, collector
    profile = PROFILES[collector]
    for kind, columns in seen.items():
        assert kind in profile, f"{collector} parses {kind} rows but its profile has none"
        assert columns <= profile[kind], f"{collector} {kind}: parser fills {columns - profile[kind]}"


@pytest.mark.parametrize(
    ("collector", "kind", "column"),
    [
        ("ethtool", "port", "pre_fec_ber"),  # ethtool -S: corrected bits, no BER
        ("ethtool", "port", "fec_uncorrectable_total"),
        ("gnmi", "port", "queue_depth_bytes"),  # OpenConfig has no queue depth nor ECN marks
        ("gnmi", "port", "ecn_marked_total"),
        ("sysfs", "port", "fec_corrected_total"),  # IB counters only
        ("sysfs", "port", "rx_pause_p3_total"),
        ("gnmi", "port", "rx_pause_duration_p3_us_total"),  # OpenConfig: the port's mac pause frames only
        ("gnmi", "port", "tx_pause_p4_total"),
        ("nvidia-smi", "gpu", "xid"),
    ],
)
def test_profile_leaves_out_what_the_collector_cannot_read(collector: str, kind: str, column: str) -> None:
    assert column not in PROFILES[collector][kind]
    assert column not in filled(collector).get(kind, set())


def test_ethtool_fills_pfc_per_lossless_priority() -> None:
    """mlx5 ``ethtool -S`` has rx/tx_prioP_pause and rx_prioP_pause_duration for each PFC-enabled priority."""
    seen = filled("ethtool")["port"]
    assert {"rx_pause_p3_total", "tx_pause_p3_total", "rx_pause_duration_p3_us_total"} <= seen
    assert {"rx_pause_p4_total", "tx_pause_p4_total", "rx_pause_duration_p4_us_total"} <= seen

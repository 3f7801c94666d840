"""Short error bursts (pathology burst_errors): uncorrectable codewords out of a clean BER, never a trend.

Same seed with and without the pathology: the difference is exactly the bursts (realism.py documents
them), and it lies in the receiving ports' error counters of the matched ports only.
"""

from __future__ import annotations

import math

from fabricwatch.pathologies import parse_pathologies
from fabricwatch.realistic import realistic
from tests.sim.helpers import changes, healthy, run, series, standard

GPUS, STEPS, SEED = 64, 48, 5
ERRORS = ("pre_fec_ber", "fec_corrected_total", "fec_uncorrectable_total", "symbol_errors_total", "rx_crc_errors_total")
FEC_LIMIT_BER = 2.4e-4  # RS(544,514) corrects up to about this pre-FEC BER (REALISM.md, Errors)


def with_bursts(**options) -> list:
    topo = standard(GPUS)
    entry = {"kind": "burst_errors", **options}
    return run(topo, (), STEPS, SEED, pathologies=parse_pathologies([entry], topo, "test"))


def test_bursts_fail_codewords_below_the_fec_limit_on_the_matched_ports_only() -> None:
    topo = standard(GPUS)
    h, b = healthy(GPUS, STEPS, SEED), with_bursts(port="leaf*", rate_per_hour=60, codewords=5)
    found = changes(h, b)
    assert {kind for kind, _ in found} == {"port"} and {c for _, c in found} <= set(ERRORS)
    hit = set().union(*found.values())
    assert hit and all(p.startswith("leaf") for p in hit)
    leaf_ports = [p for p in topo.ports if p.startswith("leaf")]
    failed = sum(
        series(b, "port", p, "fec_uncorrectable_total")[-1] - series(h, "port", p, "fec_uncorrectable_total")[-1]
        for p in leaf_ports
    )
    events = len(leaf_ports) * 60 / 3600 * 5.0 * (STEPS - 1)
    assert abs(failed - 5 * events) <= 6 * math.sqrt(5 * 5 * events)  # 5 codewords a burst on average
    for p in hit:
        assert max(series(b, "port", p, "pre_fec_ber")) < FEC_LIMIT_BER  # below the limit, yet uncorrectables


def test_the_realistic_mix_has_rare_bursts_on_every_port() -> None:
    mix = realistic(standard(GPUS), 3)
    (bursts,) = [p for p in mix if p.kind == "burst_errors"]
    assert bursts["port"] == "*" and 0 < bursts["rate_per_hour"] < 1
    assert mix[-1] is bursts  # appended last: the other entries keep their random streams

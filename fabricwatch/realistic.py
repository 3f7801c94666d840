"""The realistic fleet mix: every pathology of DESIGN §4b at a plausible rate: the default fleet of
``demo`` and ``simulate`` (``--tidy`` for none; unit tests build their own worlds).

Rates follow REALISM.md where it has a number and are otherwise a plausible guess, named here.
"""

from __future__ import annotations

import random
from typing import Any

from fabricwatch import yamlconf
from fabricwatch.pathologies import Pathology, parse_pathologies
from fabricwatch.topology import Topology

REALISTIC = "realistic"


def realistic(topology: Topology, seed: int, horizon: float = 3600.0) -> list[Pathology]:
    """A fleet as production has it: every pathology at a plausible rate over ``horizon`` seconds.

    Hosts scraped every 5 s by DCGM (a tenth by nvidia-smi) and ethtool, switches every 30 s (spines
    60 s) over gNMI; a few hosts with offset clocks, 0.5 % of scrapes lost and 1 % late, one switch and one host
    collector briefly down, two agents restarting, a sixteenth of the hosts with IBTA-width
    (8/16-bit) link-down and symbol counters; every module's DOM off by up to ±0.5 dB with lanes
    ±0.6 dB apart; a quarter of the pluggables a second vendor's (bias around 70 mA), a few reporting
    no thresholds; two spare ports on two leaves; one leaf reported twice; the last cooling loop idle
    for the first tenth then joining (where there is more than one: a fleet of one loop would have no
    job at all); bursty all-reduce; coolant drifting 3 °C over a day; one module
    swapped and one leaf drained for 5 minutes; short error bursts (a cable moved) on a port about
    every 5 hours. Deterministic from ``seed`` (a Python PRNG).
    """
    rng = random.Random(seed)
    nodes = [n.name for n in topology.nodes]
    leaves = [s.name for s in topology.switches if s.tier == "leaf"] or [s.name for s in topology.switches]
    spines = [s.name for s in topology.switches if s.tier == "spine"]
    switch_ports = [p for p in topology.ports if topology.port_device[p] in set(leaves) | set(spines)]
    h = horizon
    entries: list[dict[str, Any]] = []
    for node in rng.sample(nodes, max(1, len(nodes) // 10)):
        entries.append(
            {"kind": "clock_skew", "source": node, "offset_s": rng.uniform(-3, 3), "jitter_s": rng.uniform(0.05, 0.3)}
        )
    entries.append({"kind": "clock_skew", "source": rng.choice(nodes), "offset_s": 8.0, "jitter_s": 0.2})
    entries.append({"kind": "missing_scrapes", "fraction": 0.005})
    entries.append({"kind": "late_scrapes", "fraction": 0.01, "delay_s": 12.0})
    if leaves:
        entries.append({"kind": "scrape_interval", "source": "leaf*", "interval_s": 30})
    if spines:
        entries.append({"kind": "scrape_interval", "source": "spine*", "interval_s": 60})
    entries.append(
        {"kind": "collector_outage", "source": rng.choice(leaves), "start": 0.3 * h, "duration": min(90, 0.05 * h)}
    )
    entries.append(
        {"kind": "collector_outage", "source": rng.choice(nodes), "start": 0.55 * h, "duration": min(60, 0.05 * h)}
    )
    for node in rng.sample(nodes, min(2, len(nodes))):
        entries.append({"kind": "counter_reset", "source": node, "at": round(rng.uniform(0.2, 0.8) * h)})
    for node in rng.sample(nodes, max(1, len(nodes) // 16)):  # IB-style counters read through sysfs
        entries.append({"kind": "counter_saturation", "source": node, "column": "link_down_total", "bits": 8})
        entries.append({"kind": "counter_saturation", "source": node, "column": "symbol_errors_total", "bits": 16})
    entries.append({"kind": "dom_offset", "port": "*", "spread_db": 0.5, "lane_spread_db": 0.6})
    entries.append(
        {"kind": "mixed_modules", "fraction": 0.25, "vendor": "ALBATROSS", "tx_offset_db": -0.6, "bias_ma": 70}
    )
    entries.append({"kind": "mixed_modules", "fraction": 0.05, "vendor": "GENERIC", "thresholds": False})
    for leaf in rng.sample(leaves, min(2, len(leaves))):
        entries.append({"kind": "spare_port", "switch": leaf, "count": 2})
    dup = rng.choice(leaves)
    entries.append({"kind": "duplicate_source", "source": dup, "as": f"{dup}-cli"})
    if len(topology.cooling_loops) > 1:  # a loop joining the others' job: a lone loop would idle the fleet
        entries.append({"kind": "load_step", "stop": 0, "start": 0.1 * h, "cooling_loop": topology.cooling_loops[-1]})
    entries.append({"kind": "bursty_traffic", "duty": 0.4})
    entries.append({"kind": "coolant_drift", "delta_c": 3.0})
    if switch_ports:
        entries.append({"kind": "module_swap", "port": rng.choice(switch_ports), "at": round(0.45 * h)})
    entries.append(
        {"kind": "maintenance", "switch": rng.choice(leaves), "start": 0.7 * h, "duration": min(300, 0.1 * h)}
    )
    gpu_smi = rng.sample(nodes, max(1, len(nodes) // 10))
    for node in nodes:
        gpu = "nvidia-smi" if node in gpu_smi else "dcgm"
        entries.append({"kind": "profile", "source": node, "telemetry": "gpu", "as": gpu})
        entries.append({"kind": "profile", "source": node, "as": "ethtool"})
    entries += [{"kind": "profile", "source": s, "as": "gnmi"} for s in leaves + spines]
    entries.append({"kind": "profile", "source": rng.choice(leaves), "as": "switchcli", "na_fraction": 0.01})
    # last, so every entry above keeps its index (its random stream); 0.2 an hour per port is a guess
    entries.append({"kind": "burst_errors", "rate_per_hour": 0.2})
    return parse_pathologies(entries, topology, REALISTIC)


def pathologies_of(value: Any, topology: Topology, seed: int, place: str) -> list[Pathology]:
    """A ``pathologies:`` value as loaded: a list of DESIGN §4b entries; ``realistic`` (the mix above,
    over an hour, from ``seed``); or a list holding ``realistic`` beside entries of its own (the mix,
    then its own entries: a scenario's own pathology inside the fleet's). Errors name file and line."""
    if value == REALISTIC:
        return realistic(topology, seed)
    if isinstance(value, list) and REALISTIC in value:
        own = [e for e in value if e != REALISTIC]
        lines = {id(e): line for i, e in enumerate(value) if e != REALISTIC and (line := yamlconf.line_of(value, i))}
        return realistic(topology, seed) + parse_pathologies(own, topology, place, lines)
    return parse_pathologies(value, topology, place)

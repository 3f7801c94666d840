"""Parser speed: median time to parse each golden input, and a 128-port leaf switch over gNMI.

Run: ``.venv/bin/python bench/parsers.py``. Prints one line per case (median of N runs, ms) so a
change that makes a parser slow shows up; the collectors scrape every few seconds, so the budget is
far above these figures, and the 128-port leaf case says whether one collector can keep up with a
whole switch (DESIGN: a 1024-GPU supernode has 16 leaves of 128 ports).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabricwatch.collectors.base import SOURCES, source_class
from fabricwatch.collectors.gnmi import parse_json
from fabricwatch.collectors.portmap import PortMap
from fabricwatch.collectors.toolsource import Options

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden"
RUNS = 21


def median_ms(fn) -> float:
    times = []
    for _ in range(RUNS):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def options_from(cls: type, args: list[str]) -> Options:
    extra: dict = {}
    host = "node007"
    it = iter(args)
    for a in it:
        if a == "--host":
            host = next(it)
        elif a == "--iface":
            extra["iface"] = (next(it),)
        elif a == "--port-style":
            extra["port_style"] = next(it)
    return Options.from_config(cls.Config(host=host, **extra))


def leaf_notifications(ports: int = 128, lanes: int = 4) -> str:
    """One gNMI notification per port: 12 counters, oper-status, and 3 readings per optical lane."""
    out = []
    for p in range(1, ports + 1):
        updates = [
            {
                "path": {"elem": [{"name": "state"}, {"name": "counters"}, {"name": c}]},
                "val": {"uintVal": str(p * 1000)},
            }
            for c in ("in-octets", "out-octets", "in-pkts", "out-pkts", "in-fcs-errors", "out-discards")
        ]
        updates.append({"path": {"elem": [{"name": "state"}, {"name": "oper-status"}]}, "val": {"stringVal": "UP"}})
        out.append(
            {
                "update": {
                    "prefix": {
                        "elem": [{"name": "interfaces"}, {"name": "interface", "key": {"name": f"Ethernet{p}"}}]
                    },
                    "update": updates,
                }
            }
        )
        chans = []
        for lane in range(lanes):
            base = [
                {"name": "transceiver"},
                {"name": "physical-channels"},
                {"name": "channel", "key": {"index": str(lane)}},
                {"name": "state"},
            ]
            for leaf, v in (("output-power", 1.5), ("input-power", -2.0), ("laser-bias-current", 36.0)):
                chans.append({"path": {"elem": [*base, {"name": leaf}, {"name": "instant"}]}, "val": {"doubleVal": v}})
        out.append(
            {
                "update": {
                    "prefix": {
                        "elem": [{"name": "components"}, {"name": "component", "key": {"name": f"Ethernet{p}"}}]
                    },
                    "update": chans,
                }
            }
        )
    return json.dumps(out)


def main() -> None:
    print(f"{'case':58s} {'median ms':>10s}")
    for case_yaml in sorted(GOLDEN.glob("*/*/case.yaml")):
        case = case_yaml.parent
        if case.parent.name not in SOURCES:
            continue
        spec = yaml.safe_load(case_yaml.read_text()) or {}
        if spec.get("error"):
            continue
        entries = [p for p in case.iterdir() if p.name not in ("case.yaml", "expected.jsonl")]
        path = case / spec["input"] if "input" in spec else entries[0]
        cls = source_class(case.parent.name)
        opts = options_from(cls, spec.get("args", []))
        ms = median_ms(lambda cls=cls, path=path, opts=opts: cls.parse_saved(path, opts, 1764400000.0))
        print(f"{case.parent.name + '/' + case.name:58s} {ms:10.3f}")
    text = leaf_notifications()
    ms = median_ms(lambda: parse_json(text, "leaf0-0", "x", PortMap(), "generic", 1764400000.0, "bench"))
    print(f"{'gnmi/synthetic 128-port leaf (7 leaves/port, 4 lanes)':58s} {ms:10.3f}")
    print(f"16 leaves of a 1024-GPU supernode every 5 s: {16 * ms / 5000 * 100:.2f}% of one core")


if __name__ == "__main__":
    main()

"""The pathology vocabulary (DESIGN §4b): production's mess, as simulator input beside the faults.

A pathology is not a fault and never part of a capture's ground truth: it is how real telemetry looks
when nothing is broken (clock offsets, lost scrapes, counters that reset or stick, a fleet of mixed
modules and collectors). Detection must not mistake any of them for a fault. Each entry of a fault
file's ``pathologies:`` list is ``{kind: NAME, ...options}``; :data:`KINDS` lists every kind with its
options, which are required or have a default. The simulator documents what each does
(collectors/sim/delivery.py for what the collectors deliver, collectors/sim/realism.py for the plant).

Selectors: ``source`` and ``port`` take an exact name or a shell-style pattern (``leaf*``, ``node00?``)
that must match something in the topology; ``telemetry`` names a telemetry kind (``gpu``, ``port``,
...), because ``kind`` is the pathology's own name.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fabricwatch import yamlconf
from fabricwatch.errors import InputError, InputErrors
from fabricwatch.schema import LOSSLESS_PRIORITIES, pause_columns, tx_pause_duration_column
from fabricwatch.topology import Topology

TELEMETRY_KINDS = ("gpu", "optical", "port", "switch", "module")
COLLECTORS = ("nvml", "nvidia-smi", "dcgm", "ethtool", "sysfs", "gnmi", "switchcli", "ibtools", "full")
DOM_ACCURACY_DB = 3.0  # SFF-8472 internally calibrated tx/rx power accuracy (REALISM.md, Optics)
COUNTER_COLUMNS = (
    "ecc_dbe_total",
    "pcie_replay_total",
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

REQUIRED = object()  # an option without a default


class _Bad(ValueError):
    """An option value that does not fit; the message says what would."""


Check = Callable[[Any, Topology], Any]


def _number(low: float = -math.inf, high: float = math.inf, *, low_open: bool = False) -> Check:
    def check(value: Any, topology: Topology) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise _Bad(f"must be a number, not {value!r}")
        if value < low or value > high or (low_open and value == low):
            lo = "(" if low_open else "["
            raise _Bad(f"must be in {lo}{low:g}, {high:g}], not {value!r}")
        return float(value)

    return check


def _integer(low: int, high: int) -> Check:
    def check(value: Any, topology: Topology) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _Bad(f"must be an integer {low}..{high}, not {value!r}")
        return value

    return check


def _choice(*choices: str) -> Check:
    def check(value: Any, topology: Topology) -> str:
        if value not in choices:
            raise _Bad(f"must be one of {', '.join(choices)}, not {value!r}")
        return value

    return check


def _text(value: Any, topology: Topology) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Bad(f"must be a non-empty string, not {value!r}")
    return value


def _flag(value: Any, topology: Topology) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"must be true or false, not {value!r}")
    return value


def sources_of(topology: Topology) -> list[str]:
    """Every telemetry source of a topology: its nodes, then its switches."""
    return [n.name for n in topology.nodes] + [s.name for s in topology.switches]


def _source(value: Any, topology: Topology) -> str:
    _text(value, topology)
    if not fnmatch.filter(sources_of(topology), value):
        raise _Bad(f"{value!r} matches no source (node or switch) of topology {topology.name}")
    return value


def _port(value: Any, topology: Topology) -> str:
    _text(value, topology)
    if value not in topology.port_link and not fnmatch.filter(topology.ports, value):
        raise _Bad(f"{value!r} matches no port of topology {topology.name}")
    return value


def _one_port(value: Any, topology: Topology) -> str:
    if value not in topology.port_link:
        raise _Bad(f"unknown port {value!r} in topology {topology.name}")
    return value


def _switch(value: Any, topology: Topology) -> str:
    _text(value, topology)
    if not fnmatch.filter([s.name for s in topology.switches], value):
        raise _Bad(f"{value!r} matches no switch of topology {topology.name}")
    return value


def _one_switch(value: Any, topology: Topology) -> str:
    if value not in topology.switch_by_name:
        raise _Bad(f"unknown switch {value!r} in topology {topology.name}")
    return value


def _one_source(value: Any, topology: Topology) -> str:
    if value not in sources_of(topology):
        raise _Bad(f"unknown source {value!r} (a node or switch of topology {topology.name})")
    return value


def _new_source(value: Any, topology: Topology) -> str:
    _text(value, topology)
    if value in sources_of(topology):
        raise _Bad(f"{value!r} is already a source of topology {topology.name}")
    return value


def _nodes(value: Any, topology: Topology) -> tuple[str, ...]:
    names = [n.name for n in topology.nodes]
    patterns = [value] if isinstance(value, str) else value
    if not isinstance(patterns, list) or not patterns or not all(isinstance(v, str) for v in patterns):
        raise _Bad(f"must be a node name or pattern, or a list of them, not {value!r}")
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, pat) for pat in patterns)]
    missing = [pat for pat in patterns if not fnmatch.filter(names, pat)]
    if missing:
        raise _Bad(f"{missing[0]!r} matches no node of topology {topology.name}")
    return tuple(chosen)


def _loop(value: Any, topology: Topology) -> str:
    if value not in topology.cooling_loops:
        raise _Bad(f"unknown cooling_loop {value!r} in topology {topology.name}")
    return value


def _telemetry(value: Any, topology: Topology) -> str:
    return _choice(*TELEMETRY_KINDS)(value, topology)


def _optional(check: Check) -> Check:
    def inner(value: Any, topology: Topology) -> Any:
        return None if value is None else check(value, topology)

    return inner


_SECONDS = _number(0.0)
_POSITIVE_SECONDS = _number(0.0, low_open=True)
_FRACTION = _number(0.0, 1.0)

# kind -> option -> (check, default); REQUIRED marks an option without a default
KINDS: dict[str, dict[str, tuple[Check, Any]]] = {
    "clock_skew": {
        "source": (_source, REQUIRED),
        "offset_s": (_number(-3600, 3600), 0.0),
        "jitter_s": (_number(0, 600), 0.0),
    },
    "missing_scrapes": {"fraction": (_number(0.0, 1.0, low_open=False), REQUIRED), "source": (_source, "*")},
    "late_scrapes": {"fraction": (_FRACTION, REQUIRED), "delay_s": (_POSITIVE_SECONDS, 10.0), "source": (_source, "*")},
    "collector_outage": {
        "source": (_source, REQUIRED),
        "start": (_SECONDS, REQUIRED),
        "duration": (_POSITIVE_SECONDS, REQUIRED),
    },
    "scrape_interval": {
        "source": (_optional(_source), None),
        "telemetry": (_optional(_telemetry), None),
        "interval_s": (_POSITIVE_SECONDS, REQUIRED),
    },
    "counter_reset": {"source": (_source, REQUIRED), "at": (_SECONDS, REQUIRED)},
    "counter_saturation": {
        "column": (_choice(*COUNTER_COLUMNS), REQUIRED),
        "bits": (_integer(1, 63), REQUIRED),
        "source": (_source, "*"),
        "mode": (_choice("saturate", "wrap"), "saturate"),
    },
    "dom_offset": {
        "port": (_port, REQUIRED),
        "tx_db": (_number(-DOM_ACCURACY_DB, DOM_ACCURACY_DB), 0.0),
        "rx_db": (_number(-DOM_ACCURACY_DB, DOM_ACCURACY_DB), 0.0),
        "spread_db": (_number(0.0, DOM_ACCURACY_DB), 0.0),
        "lane_spread_db": (_number(0.0, 1.0), 0.0),
    },
    "mixed_modules": {
        "fraction": (_FRACTION, REQUIRED),
        "vendor": (_text, "ALBATROSS"),
        "tx_offset_db": (_number(-3.0, 3.0), 0.0),
        "bias_ma": (_optional(_number(1.0, 150.0)), None),
        "thresholds": (_flag, True),
        "where": (_choice("switch", "gpu", "all"), "switch"),
        "media": (_optional(_text), None),
    },
    "spare_port": {"switch": (_switch, REQUIRED), "count": (_integer(1, 256), 1)},
    "duplicate_source": {
        "source": (_one_source, REQUIRED),
        "as": (_new_source, REQUIRED),
        "lag_s": (_number(0, 60), 0.7),
    },
    "load_step": {
        "stop": (_SECONDS, REQUIRED),
        "start": (_optional(_SECONDS), None),
        "nodes": (_optional(_nodes), None),
        "cooling_loop": (_optional(_loop), None),
    },
    "bursty_traffic": {"duty": (_number(0.0, 1.0, low_open=True), REQUIRED)},
    "coolant_drift": {"delta_c": (_number(-15.0, 15.0), REQUIRED), "period_s": (_POSITIVE_SECONDS, 86400.0)},
    "module_swap": {"port": (_one_port, REQUIRED), "at": (_SECONDS, REQUIRED)},
    "maintenance": {
        "switch": (_one_switch, REQUIRED),
        "start": (_SECONDS, REQUIRED),
        "duration": (_POSITIVE_SECONDS, REQUIRED),
    },
    "profile": {
        "source": (_optional(_source), None),
        "telemetry": (_optional(_telemetry), None),
        "as": (_choice(*COLLECTORS), REQUIRED),
        "na_fraction": (_number(0.0, 0.5), 0.0),
    },
    # beyond §4b: short error bursts (a cable moved, a door closed on a bundle), healthy background
    "burst_errors": {
        "port": (_port, "*"),
        "rate_per_hour": (_number(0.0, 3600.0), 0.2),
        "codewords": (_number(1.0, 1e6), 5.0),
    },
}
_NEEDS_SELECTOR = ("scrape_interval", "profile")


@dataclass(frozen=True, slots=True)
class Pathology:
    """One validated entry: its kind and every option (defaults filled in); ``place`` is file:line."""

    kind: str
    options: dict[str, Any] = field(default_factory=dict)
    place: str = ""

    def __getitem__(self, name: str) -> Any:
        return self.options[name]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **{k: list(v) if isinstance(v, tuple) else v for k, v in self.options.items()}}


def _check(kind: str, entry: dict[Any, Any], topology: Topology) -> dict[str, Any]:
    """The entry's options with defaults, or _Bad naming the first problem."""
    spec = KINDS[kind]
    unknown = [k for k in entry if k != "kind" and k not in spec]
    if unknown:
        raise _Bad(f"unknown option {unknown[0]!r} for {kind} (options: {', '.join(spec)})")
    options: dict[str, Any] = {}
    for name, (check, default) in spec.items():
        if name not in entry:
            if default is REQUIRED:
                raise _Bad(f"{kind} needs '{name}'")
            options[name] = default
            continue
        try:
            options[name] = check(entry[name], topology)
        except _Bad as exc:
            raise _Bad(f"{name} {exc}") from None
    if kind in _NEEDS_SELECTOR and options["source"] is None and options["telemetry"] is None:
        raise _Bad(f"{kind} needs 'source' or 'telemetry' (a telemetry kind: {', '.join(TELEMETRY_KINDS)})")
    if kind == "dom_offset":
        for side in ("tx_db", "rx_db"):
            if abs(options[side]) + options["spread_db"] > DOM_ACCURACY_DB:
                raise _Bad(f"|{side}| + spread_db must stay within the DOM's ±{DOM_ACCURACY_DB:g} dB accuracy")
    if kind == "load_step" and options["start"] is not None and options["start"] <= options["stop"]:
        raise _Bad(f"start ({options['start']:g}) must come after stop ({options['stop']:g})")
    if kind == "load_step" and options["nodes"] is not None and options["cooling_loop"] is not None:
        raise _Bad("give nodes or cooling_loop, not both")
    return options


def parse_pathologies(
    entries: Any, topology: Topology, place: str, lines: dict[int, int] | None = None
) -> list[Pathology]:
    """Validate a ``pathologies:`` list against the vocabulary and the topology; errors name file:line.

    Lines come from the loader (fabricwatch.yamlconf); ``lines`` (``id(mapping)`` → line) is for callers
    that loaded the YAML themselves.
    """
    lines = lines or {}
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise InputError(place, "'pathologies' must be a list of {kind: NAME, ...options}")
    errors: list[InputError] = []
    out: list[Pathology] = []
    for i, entry in enumerate(entries):
        line = lines.get(id(entry)) or yamlconf.line_of(entries, i)
        loc = f"{place}:{line}" if line else place
        if not isinstance(entry, dict):
            errors.append(InputError(loc, f"pathologies[{i}]: must be a mapping {{kind: NAME, ...options}}"))
            continue
        kind = entry.get("kind")
        if kind in TELEMETRY_KINDS:
            message = (
                f"kind is the pathology's name, not a telemetry kind: write 'telemetry: {kind}' "
                f"(known kinds: {', '.join(KINDS)})"
            )
            errors.append(InputError(loc, f"pathologies[{i}]: {message}"))
            continue
        if not isinstance(kind, str) or kind not in KINDS:
            errors.append(InputError(loc, f"pathologies[{i}]: unknown kind {kind!r} (known: {', '.join(KINDS)})"))
            continue
        try:
            out.append(Pathology(kind, _check(kind, entry, topology), loc))
        except _Bad as exc:
            errors.append(InputError(loc, f"pathologies[{i}]: {exc}"))
    if errors:
        raise InputErrors(errors)
    return out

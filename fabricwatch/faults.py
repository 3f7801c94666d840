"""The fault vocabulary (DESIGN §4): causes, where each is located, and the fault-spec file.

A fault spec is the simulator's input and a capture's ground truth. Each fault names its target with
the key of the 'located at' column; ``start``, ``ramp`` and ``end`` are common; the options of each
cause are listed in :data:`CAUSES` with their defaults (the simulator documents their physics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec

from fabricwatch import yamlconf
from fabricwatch.errors import InputError, InputErrors
from fabricwatch.pathologies import Pathology
from fabricwatch.realistic import pathologies_of
from fabricwatch.topology import Topology

ENTITIES = ("link", "port", "gpu", "node", "switch", "rack", "cooling_loop")


@dataclass(frozen=True, slots=True)
class Cause:
    name: str
    incident_type: str
    located_at: str  # the target key: link, port, gpu, switch or cooling_loop
    runbook: str
    options: dict[str, Any] = field(default_factory=dict)


CAUSES: dict[str, Cause] = {
    c.name: c
    for c in (
        Cause(
            "connector_contamination",
            "link_degradation",
            "link",
            "clean-connector",
            # episodes/on_s/off_s: an intermittent connector (None = the loss stays)
            {"direction": "a_to_b", "loss_db": 4.0, "episodes": None, "on_s": 30.0, "off_s": 120.0},
        ),
        Cause("fiber_damage", "link_degradation", "link", "replace-fiber", {"loss_db": 8.0}),
        Cause(
            "laser_degradation",
            "link_degradation",
            "port",
            "replace-transceiver",
            {"drop_db": 5.0, "lane": None},
        ),
        Cause(
            "transceiver_fault",
            "link_degradation",
            "port",
            "replace-transceiver",
            # frame_loss: mode corrupt only (low-rate corruption, CorrOpt's ≥ 1e-8 frame loss)
            {"mode": "errors", "lane": 0, "ber": 1e-3, "frame_loss": 1e-6},
        ),
        Cause("link_flap", "link_down", "link", "reseat-transceiver", {"period": 30.0, "down_s": 3.0}),
        Cause("link_down", "link_down", "link", "check-link", {}),
        Cause(
            "switch_fault",
            "switch_fault",
            "switch",
            "drain-switch",
            {"mode": "errors", "ports_fraction": 0.6, "ber": 5e-4, "down_s": 90.0},  # down_s: mode reboot
        ),
        Cause("incast_hotspot", "congestion_hotspot", "port", "rebalance-traffic", {"load": 1.6, "phase": "all"}),
        Cause("pfc_storm", "pfc_storm", "port", "isolate-pfc-source", {"priority": 3, "paused": 1.0, "quanta": 65535}),
        Cause("cooling_failure", "thermal", "cooling_loop", "check-cooling-loop", {"delta_c": 18.0}),
        Cause("gpu_thermal", "thermal", "gpu", "throttle-gpu", {"delta_c": 22.0}),
        Cause("npo_thermal_coupling", "thermal", "gpu", "throttle-gpu", {"delta_c": 20.0, "coupling": 0.6}),
        Cause("gpu_xid", "gpu_fault", "gpu", "drain-gpu", {"xid": 79}),
    )
}

_OPTION_CHOICES = {
    ("connector_contamination", "direction"): ("a_to_b", "b_to_a"),
    ("transceiver_fault", "mode"): ("errors", "dead_lane", "corrupt"),
    ("switch_fault", "mode"): ("errors", "reboot"),
    ("incast_hotspot", "phase"): ("all", "allreduce"),
}


@dataclass(frozen=True, slots=True)
class Fault:
    cause: str
    target: str  # the id of the entity the cause is located at
    start: float = 0.0
    ramp: float = 0.0
    end: float | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> Cause:
        return CAUSES[self.cause]

    def option(self, name: str) -> Any:
        return self.options.get(name, self.spec.options[name])

    def severity_at(self, t: float) -> float:
        """How far the fault has developed at ``t`` seconds into the run: 0 before start, 1 at full."""
        if t < self.start or (self.end is not None and t >= self.end):
            return 0.0
        if self.ramp <= 0:
            return 1.0
        return min(1.0, (t - self.start) / self.ramp)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cause": self.cause, self.spec.located_at: self.target, "start": self.start}
        out["ramp"] = self.ramp
        if self.end is not None:
            out["end"] = self.end
        out.update(self.options)
        return out


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """A fault file: the seed, the faults (the ground truth) and the pathologies (never truth, DESIGN §4b)."""

    seed: int
    faults: tuple[Fault, ...]
    pathologies: tuple[Pathology, ...] = ()

    def to_list(self) -> list[dict[str, Any]]:
        return [f.to_dict() for f in self.faults]


def _target_exists(topology: Topology, key: str, target: str) -> bool:
    if key == "link":
        return target in topology.link_by_id
    if key == "port":
        return target in topology.port_link
    if key == "gpu":
        return target in topology.gpu_node
    if key == "switch":
        return target in topology.switch_by_name
    if key == "cooling_loop":
        return target in topology.cooling_loops
    return False


def parse_faults(entries: Any, topology: Topology, place: str, lines: dict[int, int] | None = None) -> list[Fault]:
    """Validate a list of fault mappings against the vocabulary and the topology."""
    lines = lines or {}
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise InputError(place, "'faults' must be a list")
    errors: list[InputError] = []
    faults: list[Fault] = []
    for i, entry in enumerate(entries):
        line = lines.get(id(entry)) or yamlconf.line_of(entries, i)
        loc = f"{place}:{line}" if line else place

        def bad(message: str, loc: str = loc, i: int = i) -> None:
            errors.append(InputError(loc, f"faults[{i}]: {message}"))

        if not isinstance(entry, dict):
            bad("must be a mapping")
            continue
        cause_name = entry.get("cause")
        cause = CAUSES.get(cause_name) if isinstance(cause_name, str) else None
        if cause is None:
            bad(f"unknown cause {cause_name!r} (known: {', '.join(CAUSES)})")
            continue
        key = cause.located_at
        target = entry.get(key)
        if target is None:
            others = [k for k in ("link", "port", "gpu", "switch", "cooling_loop") if k in entry]
            hint = f" (it has {others[0]}, but {cause.name} is located at a {key})" if others else ""
            bad(f"{cause.name} needs '{key}: <id>'{hint}")
            continue
        if not isinstance(target, str) or not _target_exists(topology, key, target):
            bad(f"unknown {key} {target!r} in topology {topology.name}")
            continue
        times: dict[str, float | None] = {}
        ok = True
        for name, default in (("start", 0.0), ("ramp", 0.0), ("end", None)):
            value = entry.get(name, default)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0
            ):
                bad(f"{name} must be a number of seconds ≥ 0, not {value!r}")
                ok = False
            times[name] = None if value is None else float(value)
        if ok and times["end"] is not None and times["end"] <= times["start"]:  # type: ignore[operator]
            bad(f"end ({times['end']:g}) must come after start ({times['start']:g})")
            ok = False
        options = {k: v for k, v in entry.items() if k not in ("cause", key, "start", "ramp", "end")}
        for name, value in options.items():
            if name not in cause.options:
                known = ", ".join(cause.options) or "none"
                bad(f"unknown option {name!r} for {cause.name} (options: {known})")
                ok = False
                continue
            choices = _OPTION_CHOICES.get((cause.name, name))
            default = cause.options[name]
            if choices and value not in choices:
                bad(f"{name} must be one of {', '.join(choices)}, not {value!r}")
                ok = False
            elif (
                not choices
                and isinstance(default, float)
                and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0)
            ):
                bad(f"{name} must be a number ≥ 0, not {value!r}")
                ok = False
        if ok:
            faults.append(Fault(cause.name, target, times["start"], times["ramp"], times["end"], options))  # type: ignore[arg-type]
    if errors:
        raise InputErrors(errors)
    return faults


class FaultFile(yamlconf.Config):
    """The fault-spec file's top level; a new section is a new field here."""

    seed: Annotated[int, msgspec.Meta(ge=0)] = 0
    faults: list[Any] | None = None  # each checked by parse_faults: its options depend on its cause
    pathologies: list[Any] | str | None = None  # DESIGN §4b, "realistic", or a list holding both (pathologies_of)


def load_plan(path: str | Path, topology: Topology) -> FaultPlan:
    """Load a fault-spec YAML (``seed``, ``faults``, ``pathologies``); every problem names the file and line."""
    place = str(path)
    data = yamlconf.load(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError(place, "a fault spec is a mapping with keys seed and faults")
    spec = yamlconf.convert(data, FaultFile, place)
    errors: list[InputError] = []
    parsed: dict[str, tuple] = {}

    def pathologies(value: Any, topology: Topology, place: str) -> list[Pathology]:
        return pathologies_of(value, topology, spec.seed, place)  # DESIGN §4b entries, the realistic mix, or both

    for key, parse in (("faults", parse_faults), ("pathologies", pathologies)):
        value = data.get(key)  # as loaded, with the line of each entry
        try:
            parsed[key] = tuple(parse(value, topology, place))
        except InputErrors as exc:
            errors.extend(exc.errors)
        except InputError as exc:
            errors.append(exc)
    if errors:
        raise InputErrors(errors)
    return FaultPlan(spec.seed, parsed["faults"], parsed["pathologies"])

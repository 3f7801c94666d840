"""The engine's own settings, and the base of every detector's own config (STYLE item 2).

Each detector carries its thresholds in its own frozen ``Config`` (in its module, each number saying
where it comes from); the engine keeps only what spans detectors: cadence, what "recent" means,
correlation and the incident tracker, and one section per detector to enable, disable or tune it::

    window_s: 60
    detectors:
      gpu_temp: {gpu_hot_c: 83}        # a field of GpuTemperature.Config
      pfc_storm: {enabled: false}      # every registered detector runs unless disabled
    maintenance:                       # change tickets: a switch outage inside one is never paged
      - {switch: leaf3-0, start: 1764400100, end: 1764400400}

Built from YAML with :func:`fabricwatch.yamlconf.convert`: an unknown detector, an unknown key or a
wrong type is one line naming the file, the line and the key path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

import msgspec

from fabricwatch.errors import InputError
from fabricwatch.yamlconf import Config, convert

Positive = Annotated[float, msgspec.Meta(gt=0)]
Count = Annotated[int, msgspec.Meta(ge=1)]
Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]

RECENT_S = 30.0  # gauges: median of the last 30 s; counters: increase over it
# A switch with more than this share of its links down at once, their far ends on ≥ 2 nodes or switches,
# is down itself. A strict majority: a leaf of a non-blocking leaf-spine fabric has as many uplinks as
# host ports, so every host behind it rebooting is exactly half, never more; a reboot or power loss
# takes every port, and the majority leaves room for ports already down or whose far ends report late.
# (Correlation's rule 4a, and link_state's judgement of whose link-down events an outage's are.)
SWITCH_DOWN_MIN_FRACTION = 0.5
# The far ends of one switch outage see it within their slowest scrape interval of each other
# (switches' gNMI every 30-60 s, REALISM.md): a link down for longer before the outage began is a fault
# of its own, never folded into the switch's.
SWITCH_DOWN_SPREAD_S = 60.0


class DetectorConfig(Config):
    """Base of a detector's ``Config``; ``enabled: false`` leaves the detector out of the engine."""

    enabled: bool = True

    @classmethod
    def for_key(cls, name: Any) -> type[DetectorConfig] | None:
        """The config type of the detector registered as ``name`` (None: no such detector)."""
        from fabricwatch.detectors.base import DETECTORS, detector_class

        return detector_class(name).Config if name in DETECTORS else None

    @classmethod
    def known_keys(cls) -> list[str]:
        from fabricwatch.detectors.base import DETECTORS

        return sorted(DETECTORS)


class MaintenanceWindow(Config):
    """A change ticket: ``switch`` taken down on purpose from ``start`` to ``end`` (epoch seconds)."""

    switch: str
    start: float
    end: float

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.end < self.start:
            raise ValueError(f"maintenance of {self.switch}: end ({self.end:g}) before start ({self.start:g})")

    def covers(self, switch: str, onset: float, slack_s: float) -> bool:
        """Whether an outage of ``switch`` beginning at ``onset`` is this planned one."""
        return switch == self.switch and self.start - slack_s <= onset <= self.end


class EngineConfig(Config):
    # --- cadence ---------------------------------------------------------------------------------
    window_s: Positive = 60.0  # history a tick looks at
    every_s: Positive = 10.0  # tick cadence in telemetry time
    # Halfway between two ticks, a step tick: only the detectors that read a state (a link down, light
    # lost, a dark lane, a critical XID; detectors/stage.py STEP_DETECTORS) over the same window, and
    # only step incidents opened from them. Issue 9's target is a step fault found within two scrape
    # intervals of its first bad sample (10 s at hosts' 5 s scrapes, REALISM.md) at p95: the wait
    # for a 10 s tick alone is up to 10 s, so the target needs a look every 5 s (bench/step_latency.py).
    step_tick: bool = True
    recent_s: Positive = RECENT_S  # gauges: median of the last recent_s; counters: increase over it
    # (stretched to 2.5 scrape intervals when the data is scraped more slowly, so a counter always has
    # two samples)

    # --- correlation -----------------------------------------------------------------------------
    # Errors with normal light on links of one switch, their far ends on ≥ 2 nodes or switches: the
    # switch is the root when they are ≥ switch_fault_min_fraction of its links (and ≥ min_links).
    # Two links at least: one link's errors are its own port's. A quarter of the links (the seed rule):
    # independent corrupting links are rare (CorrOpt, SIGCOMM'17: well under 1 % of links at a time),
    # so a quarter of one switch's links erring together is not chance at any switch size, from a
    # 4-port leaf (2 links) to a 128-port one (32 links); a share, not a count, so small switches count.
    switch_fault_min_links: Count = 2
    switch_fault_min_fraction: Fraction = 0.25
    switch_down_min_fraction: Fraction = SWITCH_DOWN_MIN_FRACTION  # a switch down: see the constant
    # Planned maintenance: the change tickets operators file (a switch, a window in epoch seconds). A
    # switch down whose outage begins inside one of its windows is planned: held, never paged. No
    # telemetry tells a planned reboot from an unplanned one (tests/sim: a reboot reads like a
    # maintenance window, only the truth differs); the ticket does.
    maintenance: list[MaintenanceWindow] = msgspec.field(default_factory=list)
    # how early an outage may seem to begin before its window: its far ends' clocks and scrapes (hosts
    # are scraped every few seconds, switches every 30-60 s, REALISM.md)
    maintenance_slack_s: Positive = 60.0
    switch_down_spread_s: Positive = SWITCH_DOWN_SPREAD_S  # one outage's far ends: see the constant
    loop_hot_min_gpus: Count = 4  # a loop with this many GPUs hot (gpu_temp) ...
    loop_hot_min_fraction: Fraction = 0.25  # ... being at least this share of its GPUs is a cooling failure

    # --- incident tracker ------------------------------------------------------------------------
    open_after_s: Positive = 30.0  # a diagnosis must hold this long (and every tick) before it pages
    resolve_after_s: Positive = 120.0  # and be gone this long before its incident resolves
    # a resolved incident whose diagnosis returns within this long is the same (intermittent) fault,
    # re-opened: issue 9 item 5's intermittent connector came back four times in twenty minutes
    recur_within_s: Positive = 1800.0
    max_evidence: Count = 8

    # --- detectors: name -> its Config (missing: its defaults) -----------------------------------
    detectors: dict[str, DetectorConfig] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.recent_s > self.window_s:
            raise ValueError(f"recent_s ({self.recent_s:g}) must not exceed window_s ({self.window_s:g})")

    def detector(self, name: str) -> DetectorConfig:
        """The config of detector ``name``: its section, else its defaults; checked against its type."""
        from fabricwatch.detectors.base import detector_class

        cls = detector_class(name)
        config = self.detectors.get(name)
        if config is None:
            return cls.Config()
        if not isinstance(config, cls.Config):
            raise InputError(f"detectors.{name}", f"expected a {cls.__name__}.Config, not {type(config).__name__}")
        return config

    def enabled(self) -> list[str]:
        """Names of the detectors to run, sorted; an unknown name in ``detectors`` is an InputError."""
        from fabricwatch.detectors.base import DETECTORS, detector_class

        for name in sorted(set(self.detectors) - set(DETECTORS)):
            detector_class(name)  # raises: unknown detector
        return [n for n in sorted(DETECTORS) if self.detector(n).enabled]

    @classmethod
    def only(cls, names: Iterable[str], **settings: Any) -> EngineConfig:
        """A config that runs just the detectors ``names`` (each with its defaults)."""
        from fabricwatch.detectors.base import DETECTORS, detector_class

        keep = set(names)
        for name in sorted(keep - set(DETECTORS)):
            detector_class(name)
        off = {n: detector_class(n).Config(enabled=False) for n in DETECTORS if n not in keep}
        return cls(detectors=off, **settings)

    @classmethod
    def from_dict(cls, data: Any, place: str = "engine config") -> EngineConfig:
        """Build from a mapping (a YAML section); unknown keys and wrong types are one clear error each."""
        return convert({} if data is None else data, cls, place)

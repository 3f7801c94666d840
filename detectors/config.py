"""The engine's own settings, and the base of every detector's own config (STYLE item 2).

Each detector carries its thresholds in its own frozen ``Config`` (in its module, each number saying
where it comes from); the engine keeps only what spans detectors: cadence, what "recent" means,
correlation and the incident tracker, and one section per detector to enable, disable or tune it::

    window_s: 60
    detectors:
      gpu_temp: {gpu_hot_c: 83}        # a field of GpuTemperature.Config
      pfc_storm: {enabled: false}      # every registered detector runs unless disabled

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


class EngineConfig(Config):
    # --- cadence ---------------------------------------------------------------------------------
    window_s: Positive = 60.0  # history a tick looks at
    every_s: Positive = 10.0  # tick cadence in telemetry time
    recent_s: Positive = RECENT_S  # gauges: median of the last recent_s; counters: increase over it
    # (stretched to 2.5 scrape intervals when the data is scraped more slowly, so a counter always has
    # two samples)

    # --- correlation -----------------------------------------------------------------------------
    switch_fault_min_links: Count = 4  # links with errors on one switch ...
    switch_fault_min_fraction: Fraction = 0.25  # ... being this share of its links: the switch is the root
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

"""The detector interface: a window of typed rows in, findings out. Pure: no I/O, no wall clock.

A detector is registered by name (its key in configuration). It sees a :class:`Window`, a few
seconds to minutes of every telemetry kind as pandas frames, and returns :class:`Finding` objects,
one per abnormal entity. Localisation and correlation (detectors/correlate.py) turn findings into
incidents; a detector only says what it saw, where, since when, and how sure it is of the cause.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd

from fabricwatch.errors import InputError
from fabricwatch.topology import Topology


@dataclass(frozen=True, slots=True)
class Window:
    """Telemetry between ``start`` and ``end`` (epoch seconds, inclusive).

    ``frames[kind]`` has the columns of DESIGN §3 for that kind plus ``ts`` (float seconds) and
    ``source``, sorted by ts; a kind with no rows is an empty frame with those columns.
    ``modules`` is the latest ``module`` row of every port ever seen (thresholds outlive windows).
    """

    start: float
    end: float
    frames: dict[str, pd.DataFrame]
    modules: pd.DataFrame
    topology: Topology

    def frame(self, kind: str) -> pd.DataFrame:
        return self.frames[kind]


@dataclass(frozen=True, slots=True)
class Finding:
    """One abnormal entity seen by one detector in one window."""

    detector: str
    symptom: str  # what is abnormal, e.g. rx_power_low, pre_fec_ber_high, gpu_hot, link_down
    entity: str  # link, port, gpu, node, switch, rack, cooling_loop
    id: str
    first_seen: float
    last_seen: float
    severity: str  # critical, major, minor, warning
    evidence: tuple[dict[str, Any], ...] = ()
    cause: str | None = None  # set when the detector alone can name the cause (DESIGN §4)
    score: float = 1.0  # higher = more abnormal; thresholds are applied before a finding is made
    attrs: dict[str, Any] = field(default_factory=dict)  # detector-specific facts for correlation


class Detector(ABC):
    name: ClassVar[str]

    @abstractmethod
    def detect(self, window: Window) -> list[Finding]: ...


# name -> "module:Class"
DETECTORS: dict[str, str] = {}


def detector_class(name: str) -> type[Detector]:
    target = DETECTORS.get(name)
    if target is None:
        raise InputError("detectors", f"unknown detector {name!r} (known: {', '.join(sorted(DETECTORS))})")
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)

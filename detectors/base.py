"""The detector interface: a window of typed rows in, findings out. Pure: no I/O, no wall clock.

A detector is registered by name (its key in configuration). It sees a :class:`Window`, a few
seconds to minutes of every telemetry kind as pandas frames, and returns :class:`Finding` objects,
one per abnormal entity. Localisation and correlation (detectors/correlate.py) turn findings into
incidents; a detector only says what it saw, where, since when, and how sure it is of the cause.

Each detector declares the symptoms it ``emits`` (tests/detectors/test_contract.py checks that every
one is consumed by a correlation rule, and that it emits nothing else) and carries its own frozen
``Config``: adding a detector is its module, its line in :data:`DETECTORS` and its tests.

A processor of a split deployment sees some fault domains, not the cluster (detectors/stage.py). A
detector whose judgement compares across the cluster therefore comes in two parts: in stage 1 it
emits a summary of what its window holds, and its :class:`Judge` (``Detector.judge``) merges every
processor's summaries of a tick in stage 2 and judges there, emitting findings for correlation.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from fabricwatch.detectors.config import RECENT_S, DetectorConfig
from fabricwatch.errors import InputError
from fabricwatch.records import Finding, Window


class Detector(ABC):
    """Built once with its own config; ``detect`` is called once per tick.

    ``recent_s`` is the engine's "now" (gauges: median over it; counters: increase over it), shared
    by every detector so that their findings describe the same moment.

    A detector that learns (baselines, event memories) keeps that state JSON-able behind
    :meth:`snapshot` and :meth:`restore`, so a restarted processor resumes where it stopped.
    """

    name: ClassVar[str]
    emits: ClassVar[frozenset[str]]  # every symptom its findings may carry
    Config: ClassVar[type[DetectorConfig]] = DetectorConfig
    judge: ClassVar[type[Judge] | None] = None  # its stage-2 part, when its judgement spans processors

    def __init__(self, config: DetectorConfig | None = None, *, recent_s: float = RECENT_S) -> None:
        config = config if config is not None else self.Config()
        if not isinstance(config, self.Config):
            raise TypeError(f"{self.name} takes a {type(self).__name__}.Config, not {type(config).__name__}")
        self.config = config
        self.recent_s = recent_s

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not getattr(cls, "__abstractmethods__", None) and not isinstance(cls.__dict__.get("emits"), frozenset):
            raise TypeError(f"detector {cls.__name__} must declare emits: ClassVar[frozenset[str]]")

    @abstractmethod
    def detect(self, window: Window) -> list[Finding]: ...

    def snapshot(self) -> dict[str, Any]:
        """JSON-able learnt state; a stateless detector has none."""
        return {}

    def restore(self, state: dict[str, Any]) -> None:  # noqa: B027 - stateless by default
        """Resume from the output of :meth:`snapshot`."""

    def forget(self, sources: Mapping[str, float]) -> None:  # noqa: B027 - keeps nothing per source by default
        """These sources' telemetry now goes to another processor (their partitions were revoked;
        each with the newest ts read of it here): what is kept of them is no longer this one's to judge."""


class Judge(ABC):
    """A detector's stage-2 part: the summaries it ``reads`` (its detector's, from every processor of one
    tick) in, findings it ``emits`` for correlation out. Built with its detector's config; what it learns
    is kept behind :meth:`snapshot` and :meth:`restore`, saved with stage 2's state."""

    name: ClassVar[str]  # its detector's name: the configuration key, and the detector its findings name
    reads: ClassVar[frozenset[str]]
    emits: ClassVar[frozenset[str]]

    def __init__(self, config: DetectorConfig) -> None:
        self.config = config

    @abstractmethod
    def judge(self, findings: list[Finding]) -> list[Finding]:
        """One tick's summaries, from every processor, in any order → findings."""

    def snapshot(self) -> dict[str, Any]:
        return {}

    def restore(self, state: dict[str, Any]) -> None:  # noqa: B027 - stateless by default
        """Resume from the output of :meth:`snapshot`."""


# name -> "module:Class"; a detector's module defines the class and nothing registers at import time.
DETECTORS: dict[str, str] = {
    "gpu_temp": "fabricwatch.detectors.gpu_temp:GpuTemperature",
    "gpu_peers": "fabricwatch.detectors.gpu_peers:GpuPeerThermal",
    "gpu_model": "fabricwatch.detectors.gpu_model:GpuThermalModel",
    "cooling_loop": "fabricwatch.detectors.cooling_loop:CoolingLoop",
    "gpu_xid": "fabricwatch.detectors.gpu_xid:GpuXid",
    "optical_thresholds": "fabricwatch.detectors.optical_thresholds:OpticalThresholds",
    "optical_baseline": "fabricwatch.detectors.optical_baseline:OpticalBaseline",
    "optical_trend": "fabricwatch.detectors.optical_trend:OpticalTrend",
    "pre_fec_ber": "fabricwatch.detectors.pre_fec_ber:PreFecBer",
    "fec_uncorrectable": "fabricwatch.detectors.fec_uncorrectable:FecUncorrectable",
    "packet_loss": "fabricwatch.detectors.packet_loss:PacketLoss",
    "corruption": "fabricwatch.detectors.corruption:Corruption",
    "link_state": "fabricwatch.detectors.link_state:LinkState",
    "congestion": "fabricwatch.detectors.congestion:Congestion",
    "pfc_storm": "fabricwatch.detectors.pfc_storm:PfcStorm",
    "port_peers": "fabricwatch.detectors.port_peers:PortPeers",
    "liveness": "fabricwatch.detectors.liveness:Liveness",
}


def detector_class(name: str) -> type[Detector]:
    target = DETECTORS.get(name)
    if target is None:
        raise InputError("detectors", f"unknown detector {name!r} (known: {', '.join(sorted(DETECTORS))})")
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)

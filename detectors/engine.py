"""The detection engine: one tick = detectors over a window → correlation → incident tracker.

The processor builds a :class:`~detectors.base.Window` every ``every_s`` seconds of telemetry time
covering the last ``window_s`` and calls :meth:`DetectionEngine.run` with its clock's ``now``
(virtual in replay). Nothing here reads a wall clock or does I/O, so the same sequence of windows
gives the same incidents, byte for byte, live, in replay and in tests.
"""

from __future__ import annotations

from typing import Any

from fabricwatch.detectors.base import Detector, detector_class
from fabricwatch.detectors.config import EngineConfig
from fabricwatch.detectors.correlate import Correlator, Diagnosis, finding_order
from fabricwatch.detectors.tracker import IncidentTracker
from fabricwatch.errors import InputError
from fabricwatch.incident import Incident
from fabricwatch.records import Finding, Window
from fabricwatch.topology import Topology

SNAPSHOT_VERSION = 1


class DetectionEngine:
    def __init__(self, topology: Topology, config: EngineConfig | None = None) -> None:
        self.config = config if config is not None else EngineConfig()
        self.topology = topology
        cfg = self.config
        self.detectors: list[Detector] = [
            detector_class(n)(cfg.detector(n), recent_s=cfg.recent_s) for n in cfg.enabled()
        ]
        self.correlator = Correlator(topology, self.config)
        self.tracker = IncidentTracker(self.config)
        self.findings: list[Finding] = []  # the last tick's findings (the processor stores them)
        self.diagnoses: list[Diagnosis] = []  # the last tick's diagnoses, for inspection
        self.errors: list[str] = []  # the last tick's detector failures, "name: error" (never fatal)
        self.unconsumed: dict[str, int] = {}  # the last tick's findings that no correlation rule reads

    @property
    def window_s(self) -> float:
        return self.config.window_s

    @property
    def every_s(self) -> float:
        return self.config.every_s

    def run(self, window: Window, now: float) -> list[Incident]:
        """One tick: detectors over the window → findings → localisation/correlation → incident
        tracker. Returns the incidents that changed in this tick (opened, updated, resolved).

        A detector that fails on a window is reported in :attr:`errors` and skipped for the tick;
        the others still run, so one bad corner of the data never stops detection.
        """
        findings: list[Finding] = []
        self.errors = []
        for detector in self.detectors:
            try:
                findings += detector.detect(window)
            except Exception as exc:  # a long-running service never dies on its data
                self.errors.append(f"{detector.name}: {type(exc).__name__}: {exc}")
        self.findings = sorted(findings, key=finding_order)
        self.diagnoses = self.correlator.correlate(self.findings)
        self.unconsumed = self.correlator.unconsumed
        return self.tracker.update(self.diagnoses, now)

    def incidents(self) -> list[Incident]:
        """Every root incident so far, in id order."""
        return self.tracker.roots()

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state: learnt baselines, event memories and the incident tracker."""
        return {
            "version": SNAPSHOT_VERSION,
            "detectors": {d.name: d.snapshot() for d in self.detectors},
            "tracker": self.tracker.snapshot(),
        }

    def restore(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("version") != SNAPSHOT_VERSION:
            raise InputError("engine snapshot", f"expected a version {SNAPSHOT_VERSION} engine snapshot")
        saved = state.get("detectors", {})
        for d in self.detectors:
            d.restore(saved.get(d.name, {}))
        self.tracker.restore(state.get("tracker", {}))

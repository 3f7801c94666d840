"""The detection engine: both stages in one process. One tick = detectors over a window (stage 1) →
judges over their detectors' samples → correlation → incident tracker (stage 2); detectors/stage.py
has the stages and where each cross-domain judgement runs when they are split over processes.

The processor builds a :class:`~detectors.base.Window` every ``every_s`` seconds of telemetry time
covering the last ``window_s`` and calls :meth:`DetectionEngine.run` with its clock's ``now``
(virtual in replay), and, halfway between two ticks, :meth:`DetectionEngine.run_step` over a window of
the step detectors' kinds. Nothing here reads a wall clock or does I/O, so the same sequence of windows
gives the same incidents, byte for byte, live, in replay and in tests. The demo and replay use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fabricwatch.detectors.config import EngineConfig
from fabricwatch.detectors.correlate import Correlator, Diagnosis
from fabricwatch.detectors.stage import SNAPSHOT_VERSION, Stage1, Stage2, check_version
from fabricwatch.detectors.tracker import IncidentTracker
from fabricwatch.incident import Incident
from fabricwatch.records import Finding, Window
from fabricwatch.topology import Topology

__all__ = ["SNAPSHOT_VERSION", "DetectionEngine"]


class DetectionEngine:
    def __init__(self, topology: Topology, config: EngineConfig | None = None) -> None:
        self.config = config if config is not None else EngineConfig()
        self.topology = topology
        self.stage1 = Stage1(topology, self.config)
        self.stage2 = Stage2(topology, self.config)

    @property
    def window_s(self) -> float:
        return self.config.window_s

    @property
    def every_s(self) -> float:
        return self.config.every_s

    @property
    def detectors(self) -> list[Any]:
        return self.stage1.detectors

    @property
    def correlator(self) -> Correlator:
        return self.stage2.correlator

    @property
    def tracker(self) -> IncidentTracker:
        return self.stage2.tracker

    @property
    def findings(self) -> list[Finding]:
        """The last tick's findings, samples judged (the processor stores them)."""
        return self.stage2.findings

    @property
    def transport(self) -> frozenset[str]:
        """None of its findings is a summary for another stage: samples are judged here (:attr:`findings`)."""
        return frozenset()

    @property
    def errors(self) -> list[str]:
        """The last tick's detector and judge failures, "name: error" (never fatal)."""
        return self.stage1.errors + self.stage2.errors

    @property
    def unconsumed(self) -> dict[str, int]:
        """The last tick's findings that no correlation rule reads, per symptom."""
        return self.stage2.unconsumed

    @property
    def diagnoses(self) -> list[Diagnosis]:
        """The last tick's diagnoses, for inspection."""
        return self.stage2.diagnoses

    def run(self, window: Window, now: float) -> list[Incident]:
        """One tick: detectors over the window → findings → localisation/correlation → incident
        tracker. Returns the incidents that changed in this tick (opened, updated, resolved).

        A detector that fails on a window is reported in :attr:`errors` and skipped for the tick;
        the others still run, so one bad corner of the data never stops detection.
        """
        return self.stage2.run(self.stage1.detect(window), now)

    @property
    def step_kinds(self) -> frozenset[str]:
        """The telemetry kinds a step tick reads (empty: ``step_tick`` off, the processor runs none)."""
        return self.stage1.step_kinds

    def run_step(self, window: Window, now: float) -> list[Incident]:
        """A step tick, halfway between two ticks: the step detectors over a window of
        :attr:`step_kinds` → step incidents opened now (detectors/stage.py, ``EngineConfig.step_tick``).
        Returns the incidents it changed; :attr:`findings` and :attr:`diagnoses` stay the last full tick's."""
        return self.stage2.run_step(self.stage1.detect_step(window), now)

    def forget(self, sources: Mapping[str, float]) -> None:
        """These sources' partitions went to another processor (Engine protocol)."""
        self.stage1.forget(sources)

    def incidents(self) -> list[Incident]:
        """Every root incident so far, in id order."""
        return self.stage2.incidents()

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state: learnt baselines, event memories, the judges' baselines and the tracker."""
        return {**self.stage1.snapshot(), "tracker": self.tracker.snapshot(), "judges": self.stage2.judges_snapshot()}

    def restore(self, state: dict[str, Any]) -> None:
        check_version(state)
        self.stage1.restore(state)
        self.tracker.restore(state.get("tracker", {}))
        # a state saved before cooling_loop's baselines moved to its judge kept them with the detector
        self.stage2.restore_judges(state.get("judges", state.get("detectors", {})))

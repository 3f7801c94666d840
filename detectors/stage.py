"""The two stages of detection: detectors over one processor's window (stage 1), and correlation with
the incident tracker over every processor's findings (stage 2).

Telemetry is keyed by fault domain (a GPU by its node, both ends of a link by their leaf), so a
processor of a consumer group sees whole domains but not the whole cluster. What needs more than a
domain is placed as follows (DESIGN §1, README "Two-stage detection"):

* Cooling loop. A loop's GPUs sit on several nodes, so on several partitions. Stage 1 emits per-GPU
  findings (``gpu_hot`` over the absolute limit; ``gpu_hotter_than_peers`` against the loop's GPUs it
  sees, at least its own node's); the loop-level judgement moves to stage 2, whose correlator (rule 1)
  counts hot GPUs per loop over every processor's findings. The ``cooling_loop`` detector compares each
  loop's level with the other loops', which needs every GPU of the cluster: it runs where one engine
  sees everything (demo, replay, a single processor running both stages) and is left out of a split
  stage 1 (:data:`CLUSTER_DETECTORS`), where it would judge each loop from part of its GPUs, once per
  processor. A split deployment therefore finds a cooling failure when its GPUs pass ``gpu_hot_c``,
  not yet when the loop is merely warmer than the others.
* Switch. Errors on a spine's links are found on the leaves' partitions; stage 2's correlator (rule 5)
  joins them into one switch_fault.
* PFC. A leaf's ports (host and fabric link ends) share the leaf's partition, so stage 1 judges their
  pauses whole; the upstream tracing that folds pausing ports into their root (rule 7) runs in stage 2.
  A spine's ports are spread over the leaves' partitions: whether a pausing spine port has a reason on
  another of its ports is judged from the ports of that partition only.
"""

from __future__ import annotations

from typing import Any

from fabricwatch.detectors.base import Detector, detector_class
from fabricwatch.detectors.config import EngineConfig
from fabricwatch.detectors.correlate import Correlator, Diagnosis, finding_order
from fabricwatch.detectors.liveness import silent_entities
from fabricwatch.detectors.tracker import IncidentTracker
from fabricwatch.errors import InputError
from fabricwatch.incident import Incident
from fabricwatch.records import Finding, Window
from fabricwatch.topology import Topology

SNAPSHOT_VERSION = 1
# Detectors that compare across the whole cluster: not run by a stage 1 that sees part of it.
CLUSTER_DETECTORS = frozenset({"cooling_loop"})


class Stage1:
    """Detectors over a window → findings. As a processor's engine (``split=True``) it opens no
    incidents: ``run`` returns none and the tick's findings are in :attr:`findings` for stage 2."""

    def __init__(self, topology: Topology, config: EngineConfig | None = None, *, split: bool = False) -> None:
        self.config = config if config is not None else EngineConfig()
        self.topology = topology
        cfg = self.config
        self.detectors: list[Detector] = [
            detector_class(n)(cfg.detector(n), recent_s=cfg.recent_s)
            for n in cfg.enabled()
            if not (split and n in CLUSTER_DETECTORS)
        ]
        self.findings: list[Finding] = []  # the last tick's findings (the processor stores and publishes them)
        self.errors: list[str] = []  # the last tick's detector failures, "name: error" (never fatal)
        self.unconsumed: dict[str, int] = {}  # correlation is stage 2's: it counts what no rule reads

    @property
    def window_s(self) -> float:
        return self.config.window_s

    @property
    def every_s(self) -> float:
        return self.config.every_s

    def detect(self, window: Window) -> list[Finding]:
        """Every detector over the window, findings in a stable order. A detector that fails is
        reported in :attr:`errors` and skipped for the tick; the others still run."""
        findings: list[Finding] = []
        self.errors = []
        for detector in self.detectors:
            try:
                findings += detector.detect(window)
            except Exception as exc:  # a long-running service never dies on its data
                self.errors.append(f"{detector.name}: {type(exc).__name__}: {exc}")
        self.findings = sorted(findings, key=finding_order)
        return self.findings

    def run(self, window: Window, now: float) -> list[Incident]:
        """The processor's Engine protocol: findings only; incidents are stage 2's."""
        self.detect(window)
        return []

    def snapshot(self) -> dict[str, Any]:
        return {"version": SNAPSHOT_VERSION, "detectors": {d.name: d.snapshot() for d in self.detectors}}

    def restore(self, state: dict[str, Any]) -> None:
        check_version(state)
        saved = state.get("detectors", {})
        for d in self.detectors:
            d.restore(saved.get(d.name, {}))


class Stage2:
    """Findings of one tick (from every processor) → diagnoses → incidents that changed.

    ``id_prefix`` names the incidents: ``inc-`` in one process (``inc-0001``), ``inc-<instance>-`` for a
    live stage 2, whose counter is saved with its state, so ids stay unique across its restarts and
    across instances. ``prune`` (live stage 2) keeps only incidents that can still change in memory
    and in the snapshot (detectors/tracker.py); in one process every incident is kept for :meth:`incidents`.
    """

    def __init__(
        self, topology: Topology, config: EngineConfig | None = None, *, id_prefix: str = "inc-", prune: bool = False
    ) -> None:
        self.config = config if config is not None else EngineConfig()
        self.topology = topology
        self.correlator = Correlator(topology, self.config)
        self.tracker = IncidentTracker(self.config, id_prefix=id_prefix, prune=prune)
        self.diagnoses: list[Diagnosis] = []  # the last tick's diagnoses, for inspection
        self.unconsumed: dict[str, int] = {}  # the last tick's findings no correlation rule reads, per symptom

    @property
    def every_s(self) -> float:
        return self.config.every_s

    def run(self, findings: list[Finding], now: float) -> list[Incident]:
        self.diagnoses = self.correlator.correlate(findings)
        self.unconsumed = self.correlator.unconsumed
        return self.tracker.update(self.diagnoses, now, silent_entities(findings))

    def incidents(self) -> list[Incident]:
        """Every root incident so far, in id order (with ``prune``, those that can still change)."""
        return self.tracker.roots()

    def snapshot(self) -> dict[str, Any]:
        return {"version": SNAPSHOT_VERSION, "tracker": self.tracker.snapshot()}

    def restore(self, state: dict[str, Any]) -> None:
        check_version(state)
        self.tracker.restore(state.get("tracker", {}))


def check_version(state: Any) -> None:
    if not isinstance(state, dict) or state.get("version") != SNAPSHOT_VERSION:
        raise InputError("engine snapshot", f"expected a version {SNAPSHOT_VERSION} engine snapshot")

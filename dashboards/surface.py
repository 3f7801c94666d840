"""The on-call surface of a running processor: after every detection tick, the window's health and
the incidents that changed go to /metrics (:class:`~fabricwatch.dashboards.exporter.OncallMetrics`)
and, when an Alertmanager is configured, to it.

:meth:`OncallSurface.wrap` puts itself around the detection engine, so the processor is unchanged and
summarising reuses the aggregates the detectors just cached on the same window. Alerts leave through
an outbox drained by a background thread (:meth:`start`): a slow or absent Alertmanager never holds up
detection. Replays and tests drain it in line with :meth:`flush`.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

from prometheus_client import CollectorRegistry

from fabricwatch.dashboards.alertmanager import AlertmanagerClient
from fabricwatch.dashboards.exporter import OncallMetrics
from fabricwatch.dashboards.health import summarise
from fabricwatch.incident import Incident
from fabricwatch.records import Finding, Window
from fabricwatch.topology import Topology

log = logging.getLogger("fabricwatch.oncall")


class OncallSurface:
    def __init__(
        self, topology: Topology, registry: CollectorRegistry, *, alerts: AlertmanagerClient | None = None
    ) -> None:
        self.metrics = OncallMetrics(topology, registry)
        self.alerts = alerts
        self._outbox: deque[Incident] = deque()
        self._lock = threading.Lock()  # one sender at a time: the thread, or flush() at the end

    def wrap(self, engine: Any) -> WatchedEngine:
        return WatchedEngine(engine, self)

    def observe(self, window: Window, changed: list[Incident]) -> None:
        """One tick's results: never raises into detection (a failure is logged, detection goes on)."""
        try:
            self.metrics.update_health(summarise(window))
        except Exception:
            log.exception("health summaries of the window ending %.0f failed; the previous ones stay", window.end)
        self.incidents(changed)

    def incidents(self, changed: list[Incident]) -> None:
        """Incidents that changed (from the engine in one process, or stage 2's): metrics, then alerts."""
        self.metrics.update_incidents(changed)
        if self.alerts is not None and changed:
            self._outbox.extend(changed)

    def flush(self) -> None:
        """Send what the outbox holds, then re-send what is due."""
        if self.alerts is None:
            return
        with self._lock:
            batch = []
            while self._outbox:
                batch.append(self._outbox.popleft())
            if batch:
                self.alerts.notify(batch)
            self.alerts.sync()

    def start(self, stop: threading.Event, every_s: float = 1.0) -> threading.Thread | None:
        """The sender thread: flushes every ``every_s`` until ``stop``, then once more."""
        if self.alerts is None:
            return None

        def loop() -> None:
            while not stop.wait(every_s):
                self.flush()
            self.flush()

        thread = threading.Thread(target=loop, name="fabricwatch-alerts", daemon=True)
        thread.start()
        return thread


class WatchedEngine:
    """A detection engine (the processor's Engine protocol) that reports each tick to the surface."""

    def __init__(self, engine: Any, surface: OncallSurface) -> None:
        self.engine = engine
        self.surface = surface

    @property
    def window_s(self) -> float:
        return self.engine.window_s

    @property
    def every_s(self) -> float:
        return self.engine.every_s

    @property
    def findings(self) -> list[Finding]:
        return self.engine.findings

    @property
    def errors(self) -> list[str]:
        return self.engine.errors

    def run(self, window: Window, now: float) -> list[Incident]:
        changed = self.engine.run(window, now)
        self.surface.observe(window, changed)
        return changed

    def run_step(self, window: Window, now: float) -> list[Incident]:
        """A step tick (EngineConfig.step_tick): its incidents alert as a tick's; its window holds only the
        step detectors' kinds, so the health summaries stay the last tick's."""
        changed = self.engine.run_step(window, now)
        self.surface.incidents(changed)
        return changed

    def snapshot(self) -> dict[str, Any]:
        return self.engine.snapshot()

    def restore(self, state: dict[str, Any]) -> None:
        self.engine.restore(state)

    def __getattr__(self, name: str) -> Any:  # the rest of the engine (incidents(), diagnoses, config)
        return getattr(self.engine, name)

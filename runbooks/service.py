"""Runbooks inside ``fabricwatch serve``: off unless its config says so, and in shadow mode unless
told otherwise. Config (a ``runbooks:`` section of serve's YAML; paths relative to that file)::

    runbooks:
      enabled: true
      mode: shadow            # shadow (default): plans recorded and compared with telemetry; execute
      actions: actions.yaml   # the actions config (backends, allowlist, guards); default: all dry-run
      dir: site-runbooks/     # the site's own runbooks beside the library
      approve: false          # execute mode: destructive steps approved without a person (think twice)

A worker thread takes each new firing incident from the processor and runs its runbook on a cursor
of its own on the processor's DuckDB file; decisions go to ``runbook_audit``, to /metrics and to the
``fabricwatch.actions`` topic. A runbook's waits never hold up the processing loop.
"""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from fabricwatch import yamlconf
from fabricwatch.incident import Incident

log = logging.getLogger(__name__)
QUEUE_MAX = 10_000


class RunbooksConfig(yamlconf.Config):
    """serve's ``runbooks:`` section."""

    enabled: bool = False
    mode: Literal["shadow", "execute"] = "shadow"
    actions: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    dir: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    approve: bool = False


class RunbookWorker:
    def __init__(self, service: Any, section: dict[str, Any], base: Path, publish: Any = None, bus: Any = None) -> None:
        """``publish``: where audit rows go beside DuckDB; ``bus``: its producer, closed on stop."""
        from fabricwatch.clock import WallClock
        from fabricwatch.runbooks import config as actions
        from fabricwatch.runbooks.audit import RunbookMetrics
        from fabricwatch.runbooks.executor import Executor
        from fabricwatch.runbooks.guards import Approvals
        from fabricwatch.runbooks.loader import load_library

        def rel(value: str) -> Path:
            p = Path(value)
            return p if p.is_absolute() else base / p

        cfg = actions.load(rel(section["actions"])) if section.get("actions") else actions.ActionsConfig()
        books = load_library(rel(section["dir"]) if section.get("dir") else None)
        self.mode = section.get("mode", "shadow")
        self.bus = bus
        self.queue: queue.Queue[Incident | None] = queue.Queue(QUEUE_MAX)
        self.seen: set[str] = set()
        self.con = service.store.con.cursor()  # a connection of its own, for this thread
        self.executor = Executor(
            service.processor.topology, books, self.con, cfg, clock=WallClock(), mode=self.mode,
            approvals=Approvals("serve" if section.get("approve") else None),
            metrics=RunbookMetrics(service.metrics.registry), publish=publish, say=lambda line: log.info(line),
        )  # fmt: skip
        previous = service.processor.on_incident

        def on_incident(incident: Incident) -> None:
            if previous is not None:
                previous(incident)
            self.submit(incident)

        service.processor.on_incident = on_incident
        self.thread = threading.Thread(target=self._run, name="fabricwatch-runbooks", daemon=True)
        self.thread.start()

    def submit(self, incident: Incident) -> None:
        if incident.status == "firing" and incident.id not in self.seen:
            self.seen.add(incident.id)
            try:
                self.queue.put_nowait(Incident.from_dict(incident.to_dict()))
            except queue.Full:
                log.error("runbook queue full: incident %s not handled", incident.id)

    def _run(self) -> None:
        while (incident := self.queue.get()) is not None:
            try:
                result = self.executor.run(incident)
                log.info("runbook for %s (%s): %s", incident.id, self.mode, result.outcome)
            except Exception:  # one incident's failure must not stop the others
                log.exception("runbook for incident %s failed", incident.id)

    def stop(self, timeout_s: float = 10.0) -> None:
        self.queue.put(None)
        self.thread.join(timeout_s)
        if self.bus is not None:
            self.bus.close()
        if self.thread.is_alive():
            log.error("the runbook worker did not stop within %.0f s (a runbook is waiting)", timeout_s)
            return
        self.con.close()


def actions_producer(bootstrap: str) -> tuple[Any, Any]:
    """(publish, bus) for the ``fabricwatch.actions`` topic, created if missing."""
    from fabricwatch.runbooks.audit import ACTIONS_TOPIC, kafka_publisher
    from fabricwatch.stream.kafka import KafkaBus

    bus = KafkaBus(bootstrap, client_id="fabricwatch-runbooks", topics=[ACTIONS_TOPIC])
    try:
        bus.ensure_topics()
    except Exception as exc:  # the broker may be away at start: the producer retries on its own
        log.warning("cannot create %s yet: %s", ACTIONS_TOPIC, exc)
    return kafka_publisher(bus), bus

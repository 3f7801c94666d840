"""Stage 1 → stage 2 on ``fabricwatch.findings``: a finding with its tick time, and a tick mark.

A finding record is the :class:`~fabricwatch.records.Finding` as JSON plus ``ts``, the telemetry time
of the stage-1 tick that found it (the end of its window: the same grid in every processor, whatever
its wall clock), keyed by the entity it is about. It round-trips: ``decode`` gives back an equal
finding (tuples come back as lists inside ``attrs``, which correlation only reads).

A stage-1 processor of a split deployment also names itself (``source``) in its findings, and after
each tick sends a tick mark (``{"mark": "tick", "ts": T, "source": P, "findings": N}``, keyed by ``P``):
processor ``P`` ran its tick ``T`` and published ``N`` findings for it. Findings are spread over
partitions, so stage 2 cannot rely on their order; with the marks it knows when it holds all of a
tick's findings (stream/stage2.py), and its clock moves on when every domain is healthy, so open
incidents still resolve. A processor that runs both stages sends neither.

A step tick (``EngineConfig.step_tick``: the step detectors alone, halfway between two ticks) is
published the same way with ``"step": true`` in its findings and its mark; stage 2 runs its own step
tick over them. Records without the field are a full tick's (as every record was before step ticks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from fabricwatch.records import Finding
from fabricwatch.schema import TOPIC_FINDINGS
from fabricwatch.stream.bus import Outgoing
from fabricwatch.topology import Topology

FINDING_FIELDS = ("detector", "symptom", "entity", "id", "first_seen", "last_seen", "severity", "cause", "score")
SEVERITIES = {"critical", "major", "minor", "warning"}


class FindingError(ValueError):
    """A record on the findings topic that is not a finding or a tick mark; the message says why."""


@dataclass(frozen=True, slots=True)
class TickMark:
    """Processor ``source`` has run its detection tick ``ts`` (telemetry time), with ``findings`` findings."""

    ts: float
    source: str
    findings: int
    step: bool = False  # a step tick's mark


@dataclass(frozen=True, slots=True)
class Found:
    """A finding read back: its tick, the processor that sent it (None: not a split stage 1), itself."""

    ts: float
    source: str | None
    finding: Finding
    step: bool = False  # found by a step tick


def _plain(value: Any) -> Any:
    """orjson's fallback: numpy scalars and arrays (detectors compute with numpy) as plain JSON."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")


def to_json(tick: float, finding: Finding) -> dict[str, Any]:
    return {
        "ts": tick,
        **{k: getattr(finding, k) for k in FINDING_FIELDS},
        "evidence": list(finding.evidence),
        "attrs": finding.attrs,
    }


def encode(tick: float, finding: Finding, source: str | None = None, step: bool = False) -> bytes:
    d = to_json(tick, finding)
    if source is not None:
        d["source"] = source
    if step:
        d["step"] = True
    return orjson.dumps(d, default=_plain, option=orjson.OPT_SORT_KEYS)


def finding_key(finding: Finding, topology: Topology | None) -> str:
    """The fault domain of what a finding is about (DESIGN §1: a link's or port's leaf, a GPU's node, a
    switch itself), so a finding travels in the partition of the telemetry it came from. A cooling loop,
    rack or collector spans domains: keyed by its own id. Without a topology: the entity's id."""
    if topology is None or finding.entity in ("cooling_loop", "rack", "collector"):
        return finding.id
    if finding.entity == "link":
        link = topology.link_by_id.get(finding.id)
        return topology.fault_domain(link.a) if link is not None else finding.id
    return topology.fault_domain(finding.id)


def finding_record(
    tick: float, finding: Finding, source: str | None = None, topology: Topology | None = None, step: bool = False
) -> Outgoing:
    """A finding for ``fabricwatch.findings``, keyed by its fault domain (:func:`finding_key`)."""
    return Outgoing(TOPIC_FINDINGS, finding_key(finding, topology), encode(tick, finding, source, step), tick)


def tick_record(tick: float, source: str, findings: int, step: bool = False) -> Outgoing:
    mark: dict[str, Any] = {"mark": "tick", "source": source, "ts": tick, "findings": findings}
    if step:
        mark["step"] = True
    return Outgoing(TOPIC_FINDINGS, source, orjson.dumps(mark, option=orjson.OPT_SORT_KEYS), tick)


def tick_records(
    found: list[tuple[float, Finding]],
    ticks: list[float],
    source: str,
    topology: Topology | None = None,
    step: bool = False,
) -> list[Outgoing]:
    """A stage-1 batch's output: its findings naming ``source``, then one mark per tick it ran (of its
    step ticks, with ``step``)."""
    out = [finding_record(t, f, source, topology, step) for t, f in found]
    counts: dict[float, int] = {}
    for t, _ in found:
        counts[t] = counts.get(t, 0) + 1
    return out + [tick_record(t, source, counts.get(t, 0), step) for t in ticks]


def from_json(d: Any) -> tuple[float, Finding]:
    """``(tick, finding)`` from :func:`to_json`'s dict; a FindingError names the first bad field."""
    if not isinstance(d, dict):
        raise FindingError("a finding must be a JSON object")
    for k in ("ts", "first_seen", "last_seen", "score"):
        if not isinstance(d.get(k), int | float) or isinstance(d.get(k), bool):
            raise FindingError(f"{k}: must be a number")
    for k in ("detector", "symptom", "entity", "id"):
        if not isinstance(d.get(k), str) or not d[k]:
            raise FindingError(f"{k}: must be a non-empty string")
    if d.get("severity") not in SEVERITIES:
        raise FindingError(f"severity: must be one of {', '.join(sorted(SEVERITIES))}")
    if d.get("cause") is not None and not isinstance(d["cause"], str):
        raise FindingError("cause: must be a string or null")
    evidence, attrs = d.get("evidence", []), d.get("attrs", {})
    if not isinstance(evidence, list) or not all(isinstance(e, dict) for e in evidence):
        raise FindingError("evidence: must be a list of objects")
    if not isinstance(attrs, dict):
        raise FindingError("attrs: must be an object")
    finding = Finding(
        detector=d["detector"],
        symptom=d["symptom"],
        entity=d["entity"],
        id=d["id"],
        first_seen=float(d["first_seen"]),
        last_seen=float(d["last_seen"]),
        severity=d["severity"],
        evidence=tuple(evidence),
        cause=d.get("cause"),
        score=float(d["score"]),
        attrs=attrs,
    )
    return float(d["ts"]), finding


def decode(value: bytes) -> Found | TickMark:
    """A record's value: a finding with its tick, or a tick mark; FindingError if it is neither."""
    try:
        d = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise FindingError(f"not JSON: {exc}") from None
    if isinstance(d, dict) and d.get("mark") == "tick":
        ts, source, n = d.get("ts"), d.get("source"), d.get("findings")
        if not isinstance(ts, int | float) or isinstance(ts, bool) or not isinstance(source, str):
            raise FindingError("tick mark: needs a number ts and a string source")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise FindingError("tick mark: findings must be a count ≥ 0")
        return TickMark(float(ts), source, n, _step(d))
    tick, finding = from_json(d)
    source = d.get("source")
    if source is not None and not isinstance(source, str):
        raise FindingError("source: must be a string")
    return Found(tick, source, finding, _step(d))


def _step(d: dict[str, Any]) -> bool:
    step = d.get("step", False)
    if not isinstance(step, bool):
        raise FindingError("step: must be true or false")
    return step

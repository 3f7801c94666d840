"""Scoring incidents against ground truth: was each injected fault found, at the right place, with
the right cause, and how fast; and which incidents match no fault (false alarms)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fabricwatch.faults import CAUSES
from fabricwatch.incident import Incident


@dataclass(frozen=True, slots=True)
class Match:
    fault: dict[str, Any]
    incident: Incident | None
    located: bool  # right entity and id
    cause_ok: bool
    latency_s: float | None  # detected_at - (run start + fault start)


@dataclass(frozen=True, slots=True)
class Score:
    matches: list[Match]
    false_alarms: list[Incident]

    @property
    def detected(self) -> int:
        return sum(1 for m in self.matches if m.located and m.cause_ok)

    @property
    def recall(self) -> float:
        return self.detected / len(self.matches) if self.matches else 1.0

    @property
    def precision(self) -> float:
        hits = sum(1 for m in self.matches if m.incident is not None)
        total = hits + len(self.false_alarms)
        return hits / total if total else 1.0


def fault_location(fault: dict[str, Any]) -> tuple[str, str]:
    key = CAUSES[fault["cause"]].located_at
    return key, str(fault[key])


def score(truth: list[dict[str, Any]], incidents: list[Incident], start_ts: float) -> Score:
    """Match each fault to the best incident at its location (same cause first, then any cause)."""
    used: set[str] = set()
    matches = []
    for fault in sorted(truth, key=lambda f: (f.get("start", 0.0), f["cause"])):
        entity, target = fault_location(fault)
        at_place = [i for i in incidents if (i.location["entity"], i.location["id"]) == (entity, target)]
        same_cause = [i for i in at_place if i.cause == fault["cause"] and i.id not in used]
        pick = (same_cause or [i for i in at_place if i.id not in used] or [None])[0]
        if pick is not None:
            used.add(pick.id)
        latency = None if pick is None else pick.detected_at - (start_ts + float(fault.get("start", 0.0)))
        matches.append(Match(fault, pick, pick is not None, pick is not None and pick.cause == fault["cause"], latency))
    # A silent collector is reported as its own incident (entity collector, DESIGN §5): about the
    # monitoring, not the fabric, so never a false fabric incident.
    false_alarms = [i for i in incidents if i.id not in used and i.location["entity"] != "collector"]
    return Score(matches, false_alarms)

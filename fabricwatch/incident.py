"""The incident record (DESIGN §5): what an on-call engineer receives, one per root cause."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("critical", "major", "minor", "warning")  # most severe first
# DESIGN §5: where an incident is located; faults (DESIGN §4) use all but collector (a silent source)
ENTITIES = ("link", "port", "gpu", "node", "switch", "rack", "cooling_loop", "collector")
STATUSES = ("firing", "resolved", "unknown")  # unknown: its evidence comes from a source that went silent
OPTIONAL = ("forecast", "source_offsets")  # DESIGN §5's optional fields: absent, not null, when unset


@dataclass(slots=True)
class Incident:
    id: str
    type: str
    cause: str
    location: dict[str, str]  # {"entity": "link", "id": "L00017"}
    severity: str
    first_seen: float
    detected_at: float
    resolved_at: float | None = None
    evidence: list[dict[str, Any]] = field(default_factory=list)
    symptoms: list[str] = field(default_factory=list)
    runbook: str | None = None
    status: str = "firing"
    # optional (DESIGN §5): a predicted crossing {"metric", "threshold", "eta_s"}, and the clock offsets
    # (source -> seconds its clock was ahead, taken out of its stamps) that shaped the evidence
    forecast: dict[str, Any] | None = None
    source_offsets: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of DESIGN §5, keys in the documented order; an optional field only when set."""
        out = asdict(self)
        for key in OPTIONAL:
            if out[key] is None:
                del out[key]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Incident:
        return cls(**{k: d[k] for k in cls.__slots__ if k in d})  # type: ignore[attr-defined]

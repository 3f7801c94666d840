"""The records every stage shares: a window of telemetry, a finding, a dead letter.

They live in the core so that collectors, the stream, detectors and replay import one definition
each and none of them imports another stage for its vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import pandas as pd

from fabricwatch.topology import Topology


@dataclass(frozen=True, slots=True)
class Window:
    """Telemetry between ``start`` and ``end`` (epoch seconds, inclusive).

    ``frames[kind]`` has the columns of DESIGN §3 for that kind plus ``ts`` (float seconds) and
    ``source``, sorted by ts; a kind with no rows is an empty frame with those columns.
    ``modules`` is the latest ``module`` row of every port ever seen (thresholds outlive windows).
    ``cache`` holds aggregates derived from the frames (detectors/frames.py), so that detectors of
    one tick share one pass over the rows; it never changes what the frames say.
    """

    start: float
    end: float
    frames: dict[str, pd.DataFrame]
    modules: pd.DataFrame
    topology: Topology
    cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    # the clock offsets taken out of each corrected source's stamps (stream/sources.py): what stage 1
    # notes on the findings those sources' rows made (an incident's ``source_offsets``, DESIGN §5)
    source_offsets: dict[str, float] = field(default_factory=dict)

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


class DeadLetter(msgspec.Struct, frozen=True):
    """A record that could not be used, kept whole with where it came from and why.

    The processor stores it (``deadletters`` table) and produces it to ``fabricwatch.deadletter``
    (fabricwatch.stream.deadletter wraps it in a schema-tagged envelope for the bus).
    """

    topic: str
    partition: int
    offset: int  # the original's own offset, not the next
    key: str | None
    value: bytes  # the original bytes, unchanged
    reason: str
    code: str  # one of fabricwatch.stream.metrics.DEADLETTER_CODES ("" when not known)
    ts: float

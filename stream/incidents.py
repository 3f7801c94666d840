"""Stage 2 → on-call on ``fabricwatch.incidents``: one record per incident change, keyed by its id.

The key is the incident's id, not its location: Kafka keeps order within a partition only, and an
incident's location can be refined while it is open (a port's finding joined by the far end's becomes
the link). Keyed by location, its opened and resolved records could land in different partitions and be
read out of order; keyed by id, every change of one incident stays in one partition, in order, and a
compacted topic keeps each incident's latest state. Ids are unique across stage-2 instances and
restarts (detectors/tracker.py), so no two incidents share a key.
"""

from __future__ import annotations

import orjson

from fabricwatch.incident import Incident
from fabricwatch.schema import TOPIC_INCIDENTS
from fabricwatch.stream.bus import Outgoing


def incident_record(incident: Incident) -> Outgoing:
    """A changed incident: the DESIGN §5 JSON, keyed by its id, stamped with its detection time."""
    value = orjson.dumps(incident.to_dict(), option=orjson.OPT_SORT_KEYS)
    return Outgoing(TOPIC_INCIDENTS, incident.id, value, incident.detected_at)

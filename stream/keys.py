"""Bus keys: which fault domain a telemetry message belongs to, so one partition sees a whole link.

DESIGN §1 keys telemetry by fault domain (``Topology.fault_domain``): both ends of a host link map
to the link's leaf switch, a GPU to its node, a switch to itself. One scrape does not always fall in
one domain: a node's optical, port and module scrape covers its GPU ports, and each GPU port hangs
off the leaf of its own rail, so an 8-rail node's scrape touches 8 leaves; a spine's scrape touches
every leaf. :func:`split_by_fault_domain` cuts such a message into one message per domain.

The parts keep the scrape's ``source``, ``ts`` and ``seq``: ``seq`` therefore repeats across the
parts of one scrape (a gap in ``seq`` still means a lost scrape; a repeat across partitions is a part,
not a duplicate). Rows keep their order within each part; parts come in order of first appearance.

:func:`keyed` is the one keying rule: collectors (collectors.runner.BusSink), the simulator's captures,
the demo and every producer of telemetry key through it, so demo, replay and live partition alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter

from fabricwatch import topology as topo
from fabricwatch.schema import KINDS, Message, encode, encode_batch, make, topic_of
from fabricwatch.stream.bus import Outgoing


def domain_of(topology: topo.Topology, entity: str) -> str:
    """The fault domain of a port or device; a port the topology lacks goes with its device."""
    if entity in topology.port_link:
        return topology.fault_domain(entity)
    split = topo.split_port(entity)
    if split is not None:
        return topology.fault_domain(split[0])
    return topology.fault_domain(entity)


def split_by_fault_domain(message: Message, topology: topo.Topology) -> list[tuple[str, Message]]:
    """``[(fault domain, message)]``: one part per domain its rows touch (the message itself if one).

    The key column is the kind's first key (``port`` or ``device``). A message without rows, or of a
    kind this version does not know, is keyed by its source and not cut.
    """
    spec = KINDS.get(message.kind)
    entities = message.rows.get(spec.keys[0].name) if spec else None
    if not entities:
        return [(message.source, message)]
    cache: dict[str, str] = {}
    domains = []
    for entity in entities:
        d = cache.get(entity) if isinstance(entity, str) else message.source
        if d is None:
            d = cache[entity] = domain_of(topology, entity)
        domains.append(d)
    first = domains[0]
    if all(d == first for d in domains):
        return [(first, message)]
    index: dict[str, list[int]] = {}
    for i, d in enumerate(domains):
        index.setdefault(d, []).append(i)
    parts = []
    for d, rows in index.items():
        if len(rows) == 1:
            cut = {name: [values[rows[0]]] for name, values in message.rows.items()}
        else:
            pick = itemgetter(*rows)
            cut = {name: list(pick(values)) for name, values in message.rows.items()}
        parts.append((d, make(message.kind, message.source, message.ts, message.seq, cut)))
    return parts


def keyed(message: Message, topology: topo.Topology | None) -> list[tuple[str, Message]]:
    """``[(bus key, message part)]``: by fault domain with a topology; without one (a collector not told
    the cluster's layout) by source, which is the fault domain of a node's GPUs and of a switch."""
    if topology is None:
        return [(message.source, message)]
    return split_by_fault_domain(message, topology)


def outgoing(message: Message, topology: topo.Topology | None) -> list[Outgoing]:
    """Bus records for one scrape: its kind's topic, one record per :func:`keyed` part."""
    topic = topic_of(message.kind)
    return [Outgoing(topic, key, encode(part), part.ts) for key, part in keyed(message, topology)]


def batch_records(parts: Iterable[tuple[str, Message]]) -> list[Outgoing]:
    """One bus record per (kind, key) for what a collector sends at once: a collector serving many
    sources pays Kafka's and the decoder's per-record cost once per key, not once per message."""
    groups: dict[tuple[str, str], list[Message]] = {}
    for key, part in parts:
        groups.setdefault((part.kind, key), []).append(part)
    return [
        Outgoing(topic_of(kind), key, encode_batch(group), max(m.ts for m in group))
        for (kind, key), group in groups.items()
    ]


def outgoing_batched(messages: Iterable[Message], topology: topo.Topology | None) -> list[Outgoing]:
    """:func:`outgoing` for many messages at once, batched per (kind, key)."""
    return batch_records(part for m in messages for part in keyed(m, topology))

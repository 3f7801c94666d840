"""What an incident's runbook acts on: placeholder values, the ports and GPUs its conditions read, the
devices its act steps take out of service, and their fault domain.

Everything is derived from the incident's location and the topology; the only telemetry read is the
GPU's current power limit, so a power cap can be computed from it and undone to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fabricwatch.incident import Incident
from fabricwatch.topology import Topology, split_gpu, split_port

# How interfaces are named on the devices; overridable in the actions config.
DEFAULT_INTERFACES = {"switch": "Ethernet{port_number}", "host": "rdma{gpu_index}"}


@dataclass(slots=True)
class Target:
    values: dict[str, object]
    ports: list[str] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)
    out: list[tuple[str, str]] = field(default_factory=list)  # (kind, id) taken out by the act steps
    links_out: list[str] = field(default_factory=list)  # fabric capacity those devices remove
    domain: str = ""


def domain_of(topology: Topology, kind: str, ident: str) -> str:
    """The fault domain a breaker and a rate limit count in: a link's leaf, a GPU's or node's rack,
    a leaf's rail, the spine layer."""
    if kind in ("link", "port"):
        link = topology.link_by_id.get(ident) or topology.port_link.get(ident)
        return topology.fault_domain(link.a) if link else ident
    if kind in ("gpu", "node"):
        node = topology.node_of(ident)
        return node.rack if node else ident
    if kind == "switch":
        sw = topology.switch_by_name.get(ident)
        if sw is None:
            return ident
        return f"rail{sw.rail}" if sw.tier == "leaf" and sw.rail is not None else sw.tier
    return ident


def resolve(
    incident: Incident,
    topology: Topology,
    takes_out: str,
    params: dict[str, object],
    power_limit: Callable[[str], float | None] = lambda gpu: None,
    interfaces: dict[str, str] | None = None,
) -> Target:
    names = {**DEFAULT_INTERFACES, **(interfaces or {})}
    entity, ident = incident.location.get("entity", ""), incident.location.get("id", "")
    v: dict[str, object] = {
        "incident_id": incident.id,
        "cause": incident.cause,
        "type": incident.type,
        "severity": incident.severity,
        "entity": entity,
        "target": ident,
        **params,
    }
    t = Target(v)
    link = None
    if entity == "link":
        link = topology.link_by_id.get(ident)
    elif entity == "port":
        link = topology.port_link.get(ident)
        v["port"] = ident
    if link is not None:
        v.update(link=link.id, port_a=link.a, port_b=link.b)
        t.ports = [link.a, link.b]
        ends = [link.a, link.b] if entity == "link" else [ident, topology.port_peer[ident]]
        for end in ends:
            device = topology.port_device[end]
            if device in topology.switch_by_name and "switch" not in v:
                number = split_port(end)[1]  # type: ignore[index]
                v.update(switch=device, switch_port=end, port_number=number)
                v["switch_interface"] = names["switch"].replace("{port_number}", str(number))
            elif split_gpu(device) and "gpu" not in v:
                v["gpu"] = device
        v.setdefault("port", v.get("switch_port", link.a))
    if entity == "gpu":
        v["gpu"] = ident
    if entity == "switch":
        v["switch"] = ident
        t.ports = topology.ports_of_device(ident)
    if entity == "cooling_loop":
        v["cooling_loop"] = ident
        t.gpus = topology.gpus_of_loop(ident) if ident in topology.cooling_loops else []
    if entity == "node":
        v["node"] = ident
    if entity == "collector":
        v["collector"] = ident
    gpu = v.get("gpu")
    if isinstance(gpu, str) and (g := split_gpu(gpu)):
        v.update(node=g[0], gpu_index=g[1])
        v["host_interface"] = names["host"].replace("{gpu_index}", str(g[1]))
        t.gpus = [gpu]
        limit = power_limit(gpu)
        if limit is not None:
            v["power_limit_w"] = round(limit)
            fraction = params.get("cap_fraction")
            if isinstance(fraction, int | float):
                v["power_cap_w"] = round(limit * fraction)
    node = topology.node_by_name.get(str(v.get("node", "")))
    if node is not None:
        v.update(rack=node.rack, cooling_loop=node.cooling_loop)
        if entity == "node":
            t.gpus = [g for g in topology.gpus if topology.gpu_node[g] == node.name]
    _taken_out(t, topology, takes_out, entity, ident, link)
    return t


def _taken_out(t: Target, topology: Topology, takes_out: str, entity: str, ident: str, link: object) -> None:
    v = t.values
    if takes_out in ("link", "port") and link is not None:
        t.out = [("link", link.id)]  # type: ignore[attr-defined]
        t.links_out = [link.id]  # type: ignore[attr-defined]
    elif takes_out == "gpu" and v.get("gpu"):
        t.out = [("gpu", str(v["gpu"]))]
    elif takes_out == "node" and v.get("node"):
        t.out = [("node", str(v["node"]))]
    elif takes_out == "switch" and v.get("switch"):
        t.out = [("switch", str(v["switch"]))]
        t.links_out = sorted({topology.port_link[p].id for p in topology.ports_of_device(str(v["switch"]))})
    if t.out:
        t.domain = domain_of(topology, *t.out[0])
    else:
        t.domain = domain_of(topology, entity, ident) if entity in ("link", "port", "gpu", "node", "switch") else ident

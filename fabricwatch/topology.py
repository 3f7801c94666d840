"""The supernode's shape (DESIGN §2): nodes, GPUs, switches, ports and the links between them.

A standard supernode is a rail-optimised, non-blocking leaf-spine fabric:

* every GPU has one near-package optical (NPO) port ``node000/gpu0:p0`` wired to a leaf of its rail;
* GPU ``g`` of a node is on rail ``g mod rails``. With 8 GPUs per node and 8 rails each GPU has a rail
  of its own. In 4-rail mode (or 16 GPUs per node on 8 rails) GPUs ``g`` and ``g + rails`` of a node
  share a rail: they plug into two different ports of that rail's leaf switches, so a rail's leaves
  carry twice as many GPUs and a rail has twice as many leaves; no two GPUs ever share one port;
* a leaf is a 128-port switch (51.2 Tb/s at 400G): ports p00-p63 face GPUs and, non-blocking, as many
  uplinks as used downlinks start at p64, spread round-robin over the spines;
* a spine is a 128-port switch; there are at least two, and as many as the uplinks need;
* 32 GPUs share a rack and two racks share a cooling loop (one coolant distribution unit).

At 1024 GPUs, 8 per node, 8 rails: 128 nodes, 16 leaves (2 per rail), 8 spines, 1024 host links and
1024 fabric links.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabricwatch import yamlconf
from fabricwatch.errors import InputError, InputErrors

LEAF_RADIX = 128
LEAF_DOWNLINKS = 64
SPINE_RADIX = 128
GPUS_PER_RACK = 32
RACKS_PER_COOLING_LOOP = 2
TIERS = ("leaf", "spine")
LINK_TIERS = ("host", "fabric")

_PORT_RE = re.compile(r"^(?P<device>[^:\s]+):p(?P<num>\d+)$")
_GPU_RE = re.compile(r"^(?P<node>[^/\s]+)/gpu(?P<index>\d+)$")


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    rack: str
    cooling_loop: str
    gpus: int


@dataclass(frozen=True, slots=True)
class Switch:
    name: str
    tier: str
    rail: int | None = None
    rack: str | None = None
    ports: int | None = None


@dataclass(frozen=True, slots=True)
class Link:
    id: str
    a: str
    b: str
    tier: str
    rail: int | None = None


def split_port(port: str) -> tuple[str, int] | None:
    """``'leaf0-0:p17'`` → ``('leaf0-0', 17)``; ``None`` when it is not a port id."""
    m = _PORT_RE.match(port)
    return (m["device"], int(m["num"])) if m else None


def split_gpu(device: str) -> tuple[str, int] | None:
    """``'node003/gpu5'`` → ``('node003', 5)``; ``None`` when it is not a GPU id."""
    m = _GPU_RE.match(device)
    return (m["node"], int(m["index"])) if m else None


class Topology:
    """A validated cluster with the look-ups detection and simulation need.

    Built only through :func:`generate`, :func:`load` or :meth:`from_dict`, which check it first;
    afterwards every port named by a link exists and is used once.
    """

    def __init__(self, name: str, nodes: list[Node], switches: list[Switch], links: list[Link]) -> None:
        self.name = name
        self.nodes = nodes
        self.switches = switches
        self.links = links
        self.node_by_name = {n.name: n for n in nodes}
        self.switch_by_name = {s.name: s for s in switches}
        self.link_by_id = {link.id: link for link in links}
        self.gpus = [f"{n.name}/gpu{i}" for n in nodes for i in range(n.gpus)]
        self.gpu_node = {g: g.split("/", 1)[0] for g in self.gpus}
        self.cooling_loops = sorted({n.cooling_loop for n in nodes})
        self.racks = sorted({n.rack for n in nodes} | {s.rack for s in switches if s.rack})
        # Every link end, in link order (a then b): the port universe of the fabric.
        self.ports: list[str] = []
        self.port_link: dict[str, Link] = {}
        self.port_peer: dict[str, str] = {}
        for link in links:
            for near, far in ((link.a, link.b), (link.b, link.a)):
                self.ports.append(near)
                self.port_link[near] = link
                self.port_peer[near] = far
        self.port_device = {p: p.rsplit(":p", 1)[0] for p in self.ports}

    # --- look-ups -------------------------------------------------------------------------------

    def node_of(self, device: str) -> Node | None:
        gpu = split_gpu(device)
        return self.node_by_name.get(gpu[0]) if gpu else self.node_by_name.get(device)

    def cooling_loop_of(self, gpu: str) -> str:
        return self.node_by_name[self.gpu_node[gpu]].cooling_loop

    def gpus_of_loop(self, loop: str) -> list[str]:
        return [g for g in self.gpus if self.cooling_loop_of(g) == loop]

    def ports_of_device(self, device: str) -> list[str]:
        return [p for p in self.ports if self.port_device[p] == device]

    def fault_domain(self, port_or_device: str) -> str:
        """The Kafka key of telemetry about a port or device (DESIGN §1).

        Both ends of a host link map to its leaf, so one partition sees the whole link; a fabric
        link maps to its leaf end; a GPU or node maps to its node; a switch to itself.
        """
        link = self.port_link.get(port_or_device)
        if link is not None:
            for end in (link.a, link.b):
                switch = self.switch_by_name.get(self.port_device[end])
                if switch is not None and switch.tier == "leaf":
                    return switch.name
            return self.port_device[link.a]
        if port_or_device in self.switch_by_name:
            return port_or_device
        gpu = split_gpu(port_or_device)
        if gpu:
            return gpu[0]
        host = port_or_device.split("/", 1)[0]  # another device of a node (node000/eth9): the node
        return host if host in self.node_by_name else port_or_device

    # --- (de)serialisation ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "nodes": [_compact(n) for n in self.nodes],
            "switches": [_compact(s) for s in self.switches],
            "links": [_compact(link) for link in self.links],
        }

    def to_yaml(self) -> str:
        """YAML in the layout of DESIGN §2: one flow mapping per entry, diff- and grep-friendly."""
        lines = [f"name: {_scalar(self.name)}"]
        for section in ("nodes", "switches", "links"):
            entries = self.to_dict()[section]
            lines.append(f"{section}:" + ("" if entries else " []"))
            lines.extend("  - {" + ", ".join(f"{k}: {_scalar(v)}" for k, v in entry.items()) + "}" for entry in entries)
        return "\n".join(lines) + "\n"

    @classmethod
    def from_dict(cls, data: Any, place: str = "topology") -> Topology:
        return _parse(data, place, lines={})

    def summary(self) -> str:
        leaves = sum(1 for s in self.switches if s.tier == "leaf")
        spines = sum(1 for s in self.switches if s.tier == "spine")
        host = sum(1 for link in self.links if link.tier == "host")
        return (
            f"{self.name}: {len(self.gpus)} GPUs on {len(self.nodes)} nodes, {leaves} leaves, {spines} spines, "
            f"{host} host links, {len(self.links) - host} fabric links, {len(self.cooling_loops)} cooling loops"
        )


def _compact(entry: Node | Switch | Link) -> dict[str, Any]:
    return {k: getattr(entry, k) for k in entry.__slots__ if getattr(entry, k) is not None}


def _scalar(value: Any) -> str:
    text = str(value)
    if isinstance(value, int) or re.fullmatch(r"[A-Za-z_][\w./-]*", text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- generation ---------------------------------------------------------------------------------


def generate(gpus: int, rails: int = 8, gpus_per_node: int = 8, name: str | None = None) -> Topology:
    """A standard supernode of ``gpus`` GPUs (see the module docstring for its shape)."""
    if rails not in (4, 8):
        raise InputError("--rails", f"must be 4 or 8, not {rails}")
    if gpus_per_node not in (8, 16):
        raise InputError("--gpus-per-node", f"must be 8 or 16, not {gpus_per_node}")
    if gpus <= 0 or gpus % gpus_per_node:
        raise InputError("--gpus", f"must be a positive multiple of --gpus-per-node ({gpus_per_node}), not {gpus}")
    n_nodes = gpus // gpus_per_node
    width = max(3, len(str(n_nodes - 1)))
    nodes_per_rack = max(1, GPUS_PER_RACK // gpus_per_node)
    n_racks = math.ceil(n_nodes / nodes_per_rack)
    rack_width = max(2, len(str(n_racks + rails + 41)))
    nodes = []
    for i in range(n_nodes):
        rack = i // nodes_per_rack
        nodes.append(
            Node(
                name=f"node{i:0{width}d}",
                rack=f"r{rack:0{rack_width}d}",
                cooling_loop=f"cl{rack // RACKS_PER_COOLING_LOOP:02d}",
                gpus=gpus_per_node,
            )
        )

    per_rail: list[list[str]] = [[] for _ in range(rails)]
    for node in nodes:
        for g in range(gpus_per_node):
            per_rail[g % rails].append(f"{node.name}/gpu{g}")
    net_rack = max(40, math.ceil((n_racks + 1) / 10) * 10)
    switches: list[Switch] = []
    host_of_gpu: dict[str, str] = {}
    uplinks: list[str] = []
    for rail, rail_gpus in enumerate(per_rail):
        n_leaves = math.ceil(len(rail_gpus) / LEAF_DOWNLINKS)
        for j in range(n_leaves):
            leaf = f"leaf{rail}-{j}"
            switches.append(
                Switch(leaf, "leaf", rail=rail, rack=f"r{net_rack + rail:0{rack_width}d}", ports=LEAF_RADIX)
            )
            attached = rail_gpus[j * LEAF_DOWNLINKS : (j + 1) * LEAF_DOWNLINKS]
            for k, gpu in enumerate(attached):
                host_of_gpu[gpu] = f"{leaf}:p{k:02d}"
            uplinks.extend(f"{leaf}:p{LEAF_DOWNLINKS + k:02d}" for k in range(len(attached)))
    n_spines = max(2, math.ceil(len(uplinks) / SPINE_RADIX))
    spine_names = [f"spine{s:02d}" for s in range(n_spines)]
    switches.extend(
        Switch(s, "spine", rack=f"r{net_rack + rails:0{rack_width}d}", ports=SPINE_RADIX) for s in spine_names
    )

    links: list[Link] = []
    lid_width = max(5, len(str(2 * gpus)))
    for gpu in (g for node in nodes for g in (f"{node.name}/gpu{i}" for i in range(node.gpus))):
        rail = int(gpu.rsplit("gpu", 1)[1]) % rails
        links.append(Link(f"L{len(links):0{lid_width}d}", f"{gpu}:p0", host_of_gpu[gpu], "host", rail=rail))
    # Uplinks leave each leaf in turn (leaf0-0:p64, leaf0-0:p65, ...), spines taken round-robin, so
    # every leaf reaches every spine and the spines' ports fill evenly.
    next_port = dict.fromkeys(spine_names, 0)
    leaf_uplinks: dict[str, int] = {}
    for up in uplinks:
        leaf = up.split(":", 1)[0]
        k = leaf_uplinks.get(leaf, 0)
        leaf_uplinks[leaf] = k + 1
        spine = spine_names[k % n_spines]
        links.append(Link(f"L{len(links):0{lid_width}d}", up, f"{spine}:p{next_port[spine]:02d}", "fabric"))
        next_port[spine] += 1
    return Topology(name or f"supernode-{gpus}g-{rails}r", nodes, switches, links)


# --- loading and validation ---------------------------------------------------------------------


def load_yaml(path: str | Path) -> tuple[Any, dict[int, int]]:
    """Parse a YAML file (fabricwatch.yamlconf); returns the data and a map ``id(mapping) → line``."""
    data = yamlconf.load(path)
    lines: dict[int, int] = {}
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if line := yamlconf.line_of(item):
                lines[id(item)] = line
            stack += list(item.values())
        elif isinstance(item, list):
            stack += item
    return data, lines


def load(path: str | Path) -> Topology:
    """Load and validate a cluster YAML; every problem is reported on a line of its own."""
    return _parse(yamlconf.load(path), str(path), lines={})


_FIELDS: dict[str, tuple[set[str], set[str]]] = {
    # section: (required keys, optional keys)
    "nodes": ({"name", "rack", "cooling_loop", "gpus"}, set()),
    "switches": ({"name", "tier"}, {"rail", "rack", "ports"}),
    "links": ({"id", "a", "b", "tier"}, {"rail"}),
}


def _parse(data: Any, place: str, lines: dict[int, int]) -> Topology:
    errors: list[InputError] = []

    def where(entry: Any, section: str, index: int) -> str:
        line = lines.get(id(entry)) or yamlconf.line_of(entry)
        label = entry.get("id") or entry.get("name") if isinstance(entry, dict) else None
        return f"{place}:{line}" if line else place, f"{section}[{index}]" + (f" ({label})" if label else "")

    def fail(entry: Any, section: str, index: int, message: str) -> None:
        loc, what = where(entry, section, index)
        errors.append(InputError(loc, f"{what}: {message}"))

    if not isinstance(data, dict):
        raise InputError(place, "a cluster file is a mapping with keys name, nodes, switches, links")
    unknown = set(data) - {"name", "nodes", "switches", "links"}
    if unknown:
        errors.append(InputError(place, f"unknown top-level key(s): {', '.join(sorted(map(str, unknown)))}"))
    sections: dict[str, list[dict[str, Any]]] = {}
    for section in ("nodes", "switches", "links"):
        entries = data.get(section)
        if not isinstance(entries, list):
            errors.append(InputError(place, f"'{section}' must be a list"))
            entries = []
        good = []
        required, optional = _FIELDS[section]
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                fail(entry, section, i, "must be a mapping")
                continue
            missing = required - set(entry)
            extra = set(entry) - required - optional
            if missing:
                fail(entry, section, i, f"missing {', '.join(sorted(missing))}")
            if extra:
                fail(entry, section, i, f"unknown key(s) {', '.join(sorted(map(str, extra)))}")
            if not missing and not extra:
                good.append((i, entry))
        sections[section] = good  # type: ignore[assignment]

    nodes: list[Node] = []
    switches: list[Switch] = []
    links: list[Link] = []
    devices: dict[str, str] = {}  # device name -> section it was defined in

    def text(entry: dict[str, Any], key: str, section: str, i: int) -> str | None:
        value = entry.get(key)
        if isinstance(value, str) and value and not any(c.isspace() for c in value):
            return value
        fail(entry, section, i, f"{key} must be a non-empty string without spaces, not {value!r}")
        return None

    def integer(entry: dict[str, Any], key: str, section: str, i: int, low: int) -> int | None:
        value = entry.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= low:
            return value
        fail(entry, section, i, f"{key} must be an integer ≥ {low}, not {value!r}")
        return None

    for i, e in sections["nodes"]:  # type: ignore[misc]
        name, rack, loop = (text(e, k, "nodes", i) for k in ("name", "rack", "cooling_loop"))
        gpus = integer(e, "gpus", "nodes", i, 1)
        if name and name in devices:
            fail(e, "nodes", i, f"duplicate name {name} (already a {devices[name]} entry)")
        elif None not in (name, rack, loop, gpus):
            devices[name] = "nodes"  # type: ignore[index]
            nodes.append(Node(name, rack, loop, gpus))  # type: ignore[arg-type]
    for i, e in sections["switches"]:  # type: ignore[misc]
        name = text(e, "name", "switches", i)
        tier = e.get("tier")
        ok = name is not None
        if tier not in TIERS:
            fail(e, "switches", i, f"tier must be one of {', '.join(TIERS)}, not {tier!r}")
            ok = False
        rail = integer(e, "rail", "switches", i, 0) if "rail" in e else None
        ports = integer(e, "ports", "switches", i, 1) if "ports" in e else None
        rack = text(e, "rack", "switches", i) if "rack" in e else None
        if ("rail" in e and rail is None) or ("ports" in e and ports is None) or ("rack" in e and rack is None):
            ok = False
        if name and name in devices:
            fail(e, "switches", i, f"duplicate name {name} (already a {devices[name]} entry)")
        elif ok:
            devices[name] = "switches"  # type: ignore[index]
            switches.append(Switch(name, tier, rail, rack, ports))  # type: ignore[arg-type]

    node_gpus = {n.name: n.gpus for n in nodes}
    switch_ports = {s.name: s.ports for s in switches}
    link_ids: set[str] = set()
    used: dict[str, str] = {}  # port -> link id using it

    def check_port(entry: dict[str, Any], i: int, end: str) -> str | None:
        port = entry.get(end)
        if not isinstance(port, str) or (parts := split_port(port)) is None:
            fail(entry, "links", i, f"{end}: {port!r} is not a port id (<device>:p<N>)")
            return None
        device, num = parts
        gpu = split_gpu(device)
        if gpu is not None:
            node, index = gpu
            if node not in node_gpus:
                fail(entry, "links", i, f"{end}: {port} is on unknown node {node} (link to nowhere)")
                return None
            if index >= node_gpus[node]:
                fail(entry, "links", i, f"{end}: unknown port {port}: {node} has {node_gpus[node]} GPUs")
                return None
        elif device in switch_ports:
            radix = switch_ports[device]
            if radix is not None and num >= radix:
                fail(entry, "links", i, f"{end}: unknown port {port}: {device} has {radix} ports (p0-p{radix - 1})")
                return None
        elif device in node_gpus:
            fail(entry, "links", i, f"{end}: {port} names a node; ports are on its GPUs ({device}/gpu0:p0)")
            return None
        else:
            fail(entry, "links", i, f"{end}: {port} is on unknown device {device} (link to nowhere)")
            return None
        return port

    for i, e in sections["links"]:  # type: ignore[misc]
        lid = text(e, "id", "links", i)
        tier = e.get("tier")
        ok = lid is not None
        if lid in link_ids:
            fail(e, "links", i, f"duplicate id {lid}")
            ok = False
        if tier not in LINK_TIERS:
            fail(e, "links", i, f"tier must be one of {', '.join(LINK_TIERS)}, not {tier!r}")
            ok = False
        rail = integer(e, "rail", "links", i, 0) if "rail" in e else None
        if "rail" in e and rail is None:
            ok = False
        a, b = check_port(e, i, "a"), check_port(e, i, "b")
        for port in (a, b):
            if port is not None and port in used:
                fail(e, "links", i, f"port {port} used twice (already by link {used[port]})")
                ok = False
        if a is not None and a == b:
            fail(e, "links", i, f"joins port {a} to itself")
            ok = False
        if ok and a and b:
            link_ids.add(lid)  # type: ignore[arg-type]
            used[a] = used[b] = lid  # type: ignore[assignment]
            links.append(Link(lid, a, b, tier, rail))  # type: ignore[arg-type]

    if errors:
        raise InputErrors(errors)
    name = data.get("name", "cluster")
    return Topology(str(name), nodes, switches, links)


def iter_gpu_ports(topology: Topology) -> Iterable[tuple[str, str]]:
    """(gpu, port) for every GPU port that a link uses."""
    for port in topology.ports:
        if split_gpu(topology.port_device[port]):
            yield topology.port_device[port], port

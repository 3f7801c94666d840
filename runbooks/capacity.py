"""The capacity constraint (after CorrOpt, SIGCOMM'17): never take a link out of service if a leaf
would keep less than a fraction of its uplinks, or a node's rail would lose its last path.

Computed on the topology and the links already down, so a link that is down already costs nothing
to shut, and a storm of incidents drains at most what the fabric can spare.
"""

from __future__ import annotations

from collections import defaultdict

from fabricwatch.topology import Topology


class Capacity:
    def __init__(self, topology: Topology, min_uplink_fraction: float) -> None:
        self.min_fraction = min_uplink_fraction
        self.groups: dict[str, set[str]] = defaultdict(set)  # "leaf X uplinks" / "node N rail R" → links
        self.of_link: dict[str, list[str]] = defaultdict(list)
        switches = topology.switch_by_name
        for link in topology.links:
            ends = [topology.port_device[link.a], topology.port_device[link.b]]
            if link.tier == "fabric":
                for dev in ends:
                    if dev in switches and switches[dev].tier == "leaf":
                        self._add(f"leaf {dev} uplinks", link.id)
            else:
                node = next((topology.node_of(d) for d in ends if topology.node_of(d)), None)
                if node is not None:
                    self._add(f"node {node.name} rail {link.rail}", link.id)

    def _add(self, group: str, link: str) -> None:
        self.groups[group].add(link)
        self.of_link[link].append(group)

    def check(self, down: set[str], remove: list[str], switches_out: set[str] = frozenset()) -> str | None:
        """Why removing ``remove`` (link ids) on top of ``down`` breaks the constraint, or None.

        A leaf in ``switches_out`` is leaving service whole: its own uplinks do not count against it
        (its nodes' rails do).
        """
        new = [link for link in remove if link not in down]
        after = down | set(new)
        skip = {f"leaf {s} uplinks" for s in switches_out}
        for group in sorted({g for link in new for g in self.of_link.get(link, ())} - skip):
            links = self.groups[group]
            up_before = len(links - down)
            up_after = len(links - after)
            if group.startswith("node "):
                if up_before > 0 and up_after == 0:
                    return f"{group} would lose its last path ({len(links)} link(s), {len(links & down)} already down)"
            elif up_after < self.min_fraction * len(links):
                return (
                    f"{group}: {up_after} of {len(links)} would stay up, below the floor of "
                    f"{self.min_fraction:.0%} ({len(links & down)} already down)"
                )
        return None

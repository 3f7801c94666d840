"""The simulated plant's layout: every entity of a topology as a position in a numpy array.

Built once per simulator. Arrays are ordered the way messages are cut, so a message is a slice:

* GPUs in topology order (node by node), so each node's GPUs are one slice of the ``gpu`` kind;
* ports grouped by the source that reports them: first the GPU-side ports node by node (GPU index,
  then port number), then the switch-side ports switch by switch (port number). Each source's ports
  are one slice of the ``port`` and ``module`` kinds;
* optical rows are port-major with :data:`LANES` lanes each, so a source's lanes are a slice too.

Works for any validated topology (DESIGN §2), not only generated ones: a port's device is a GPU or a
switch; links may join GPU-switch, switch-switch or GPU-GPU. Every port is modelled as one
400G-DR4 module (four 100G PAM4 lanes, IEEE 802.3bs clause 124).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabricwatch.topology import Topology, split_port

LANES = 4  # 400GBASE-DR4: four parallel single-mode lanes of 100 Gb/s (53.125 GBd PAM4)
TIER_RANK = {"leaf": 0, "spine": 1}


@dataclass(frozen=True, slots=True)
class Slice:
    """One message's rows: ``source`` reports rows ``start:stop`` of its kind's arrays."""

    source: str
    start: int
    stop: int


class Plant:
    """Index arrays of one topology (see the module docstring for the order)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        # --- GPUs and nodes -----------------------------------------------------------------
        self.gpus: list[str] = list(topology.gpus)
        self.G = len(self.gpus)
        self.gpu_index = gpu_index = {g: i for i, g in enumerate(self.gpus)}
        self.loops: list[str] = list(topology.cooling_loops)
        self.loop_index = loop_index = {c: i for i, c in enumerate(self.loops)}
        self.gpu_loop = np.array([loop_index[topology.cooling_loop_of(g)] for g in self.gpus], dtype=np.int64)
        self.gpu_slices: list[Slice] = []
        start = 0
        for node in topology.nodes:
            if node.gpus:
                self.gpu_slices.append(Slice(node.name, start, start + node.gpus))
            start += node.gpus
        # --- switches -------------------------------------------------------------------------
        self.switches: list[str] = [s.name for s in topology.switches]
        self.S = len(self.switches)
        self.switch_index = switch_index = {s: i for i, s in enumerate(self.switches)}
        self.switch_rank = np.array([TIER_RANK.get(s.tier, 0) for s in topology.switches], dtype=np.int64)
        self.switch_slices = [Slice(s, i, i + 1) for i, s in enumerate(self.switches)]

        # --- ports, grouped by reporting source -------------------------------------------------
        gpu_side: list[tuple[int, int, str]] = []
        switch_side: list[tuple[int, int, str]] = []
        for port in topology.ports:
            device = topology.port_device[port]
            num = split_port(port)[1]  # type: ignore[index]  # validated topology: always a port id
            if device in gpu_index:
                gpu_side.append((gpu_index[device], num, port))
            else:
                switch_side.append((switch_index[device], num, port))
        gpu_side.sort()
        switch_side.sort()
        self.ports: list[str] = [p for _, _, p in gpu_side] + [p for _, _, p in switch_side]
        self.P = len(self.ports)
        self.port_index = {p: i for i, p in enumerate(self.ports)}
        n_gpu_ports = len(gpu_side)
        self.port_gpu = np.full(self.P, -1, dtype=np.int64)
        self.port_gpu[:n_gpu_ports] = [g for g, _, _ in gpu_side]
        self.port_switch = np.full(self.P, -1, dtype=np.int64)
        self.port_switch[n_gpu_ports:] = [s for s, _, _ in switch_side]
        self.port_is_gpu = self.port_gpu >= 0

        # Each source's ports are contiguous by construction; cut them into slices.
        self.port_slices: list[Slice] = []
        for i in range(self.P):
            g, sw = self.port_gpu[i], self.port_switch[i]
            owner = topology.gpu_node[self.gpus[g]] if g >= 0 else self.switches[sw]
            if self.port_slices and self.port_slices[-1].source == owner:
                self.port_slices[-1] = Slice(owner, self.port_slices[-1].start, i + 1)
            else:
                self.port_slices.append(Slice(owner, i, i + 1))
        self.port_source = np.empty(self.P, dtype=np.int64)
        for k, sl in enumerate(self.port_slices):
            self.port_source[sl.start : sl.stop] = k

        # --- links --------------------------------------------------------------------------------
        self.links: list[str] = [link.id for link in topology.links]
        self.N = len(self.links)
        self.link_a = np.array([self.port_index[link.a] for link in topology.links], dtype=np.int64)
        self.link_b = np.array([self.port_index[link.b] for link in topology.links], dtype=np.int64)
        self.link_index = {lid: i for i, lid in enumerate(self.links)}
        self.port_link = np.empty(self.P, dtype=np.int64)
        self.port_link[self.link_a] = np.arange(self.N)
        self.port_link[self.link_b] = np.arange(self.N)
        self.port_peer = np.empty(self.P, dtype=np.int64)
        self.port_peer[self.link_a] = self.link_b
        self.port_peer[self.link_b] = self.link_a

        # Direction class of a switch port: 0 faces down (towards a GPU or a lower tier), 1 faces up.
        self.port_up = np.zeros(self.P, dtype=bool)
        for i in range(n_gpu_ports, self.P):
            peer = self.port_peer[i]
            if self.port_switch[peer] >= 0:
                self.port_up[i] = self.switch_rank[self.port_switch[peer]] >= self.switch_rank[self.port_switch[i]]

        # --- optical lane rows ------------------------------------------------------------------------
        self.L = self.P * LANES
        self.lane_port = np.repeat(np.arange(self.P), LANES)
        self.lane_of_row = np.tile(np.arange(LANES), self.P)
        # The lane row the light of row r comes from: the same lane of the peer port.
        self.row_peer = self.port_peer[self.lane_port] * LANES + self.lane_of_row

        # --- python lists for the key columns (sliced into messages) -------------------------------------
        self.gpu_list = self.gpus
        self.port_list = self.ports
        self.lane_port_list = [p for p in self.ports for _ in range(LANES)]
        self.lane_list = [lane for _ in range(self.P) for lane in range(LANES)]

    # --- look-ups used by fault injection ---------------------------------------------------------------

    def gpu_of(self, gpu: str) -> int:
        return self.gpu_index[gpu]

    def ports_of_switch(self, s: int) -> np.ndarray:
        return np.flatnonzero(self.port_switch == s)

    def rows_of_port(self, p: int) -> np.ndarray:
        return np.arange(p * LANES, (p + 1) * LANES)

    def feeders(self, p: int) -> np.ndarray:
        """Ingress ports of ``p``'s device whose traffic can queue behind egress port ``p``.

        On a switch these are the ports of the other direction class (a down-facing port is fed by
        the uplinks, an uplink by the down-facing ports), or the device's other ports when it has one
        class only (a spine). A GPU's NIC is fed by its GPU, not by the fabric: no feeders.
        """
        s = self.port_switch[p]
        if s < 0:
            return np.zeros(0, dtype=np.int64)
        own = self.ports_of_switch(s)
        other = own[self.port_up[own] != self.port_up[p]]
        if other.size:
            return other
        return own[own != p]

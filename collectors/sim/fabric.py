"""Traffic, queues, ECN marks and PFC pause frames of the RoCEv2 fabric.

Load. During the job's all-reduce phase (job.py) every host link carries 82-92 % of line rate in each
direction (NCCL ring/tree bus bandwidth on 400G RoCE NICs), and 0.4 % background otherwise. A leaf
sends off-leaf the share of its hosts' traffic bound for other leaves of the rail plus ~6 % cross-rail
traffic (PXN normally keeps traffic on its rail); that share is spread over the leaf's uplinks by ECMP
with a per-link hash imbalance (lognormal, σ ≈ 7 %), in both directions. Line rate is 400 Gb/s of
MAC data (50 GB/s); frames are RoCEv2 at 4096-byte MTU, ~4.1 kB on average with acks. Byte and frame
counters integrate rate × time exactly (fractions carried between scrapes) and count every received
frame, good or bad, like RMON etherStatsOctets/Pkts; a link's rx counters equal its far end's tx.

Queues. An egress queue at utilisation ρ holds on average ρ²/(2(1-ρ)) frames (M/D/1); a scrape sees an
exponential sample of it, with rare microbursts ×5-30 (capped at 600 kB). ECN marking follows the
DCQCN profile (Zhu et al., SIGCOMM 2015): marking probability rises linearly from Kmin = 150 kB to
Pmax = 20 % at Kmax = 1.5 MB. Healthy ports mark some tens of frames a minute in all-reduce bursts,
a few hot ECMP paths many more; GPU ports report the ECN-marked frames they receive (the
notification point's counter, like mlx5 ``np_ecn_marked_roce_packets``).

PFC (IEEE 802.1Qbb). A pause frame carries up to 65535 quanta of 512 bit times (84 µs at 400 Gb/s);
a port held in XOFF refreshes it about every 42 µs, so a continuously paused link sees ~24 000 pause
frames/s. When an egress port cannot drain (offered load above capacity, or its link partner pausing
it), the switch pauses the ingress ports feeding it (plant.Plant.feeders), which can in turn back up
the next switch upstream: pauses spread hop by hop. A pause frame sent by one end is received by the
other: rx_pause_total is the peer's tx_pause_total.
"""

from __future__ import annotations

import numpy as np

from fabricwatch.collectors.sim.plant import Plant

LINE_BYTES_PER_S = 400e9 / 8
BACKGROUND = 0.004
CROSS_RAIL_SHARE = 0.06
MEAN_FRAME_BYTES = 4100.0
KMIN = 150e3
KMAX = 1.5e6
PMAX = 0.2
QUEUE_CAP_BYTES = 3.0e6  # a congested port's dynamic share of a 51.2 Tb/s switch's shared buffer
PAUSE_FULL_PER_S = 2 * 400e9 / (65535 * 512)  # ≈ 23 840/s: a full pause lasts 83.9 µs at 400G, refreshed at half
MAX_TX_SHARE = 0.985  # line rate less preamble/IFG and pause overhead
MICROBURST_CAP_BYTES = 600e3  # microbursts stay below the ECN/PFC thresholds


class Traffic:
    """Static per-port load and congestion constants."""

    def __init__(self, plant: Plant, gen: np.random.Generator) -> None:
        P = plant.P
        self.plant = plant
        peer = plant.port_peer
        # comm-phase load of each port as a transmitter, in shares of line rate
        w = np.zeros(P)
        host_tx = plant.port_is_gpu
        w[host_tx] = gen.uniform(0.82, 0.92, int(host_tx.sum()))
        to_gpu = ~plant.port_is_gpu & plant.port_is_gpu[peer]
        w[to_gpu] = gen.uniform(0.82, 0.92, int(to_gpu.sum()))
        ecmp = np.exp(np.clip(gen.normal(0.0, 0.07, P), -0.2, 0.2))
        rail_of = {s.name: s.rail for s in plant.topology.switches}
        switch_hosts = np.bincount(plant.port_switch[to_gpu], minlength=plant.S)
        rail_hosts: dict[object, int] = {}
        for s, name in enumerate(plant.switches):
            rail_hosts[rail_of[name]] = rail_hosts.get(rail_of[name], 0) + int(switch_hosts[s])
        for s, name in enumerate(plant.switches):
            own = plant.ports_of_switch(s)
            up = own[plant.port_up[own]]
            if not up.size:
                continue
            hosts = int(switch_hosts[s])
            if hosts:
                same_rail = rail_hosts[rail_of[name]]
                off = CROSS_RAIL_SHARE + (1 - CROSS_RAIL_SHARE) * (1 - hosts / same_rail)
                down = own[~plant.port_up[own] & plant.port_is_gpu[peer[own]]]
                sent = w[peer[down]].sum() * off / up.size  # hosts → leaf → up
                recv = w[down].sum() * off / up.size  # up → leaf → hosts
                w[up] = np.minimum(sent * ecmp[up], 0.93)
                w[peer[up]] = np.maximum(w[peer[up]], np.minimum(recv * ecmp[peer[up]], 0.93))
        rest = (w == 0) & ~plant.port_is_gpu  # switch-switch links without hosts below them
        w[rest] = 0.03
        self.comm_load = w
        self.frame_bytes = MEAN_FRAME_BYTES * (1.0 + np.clip(gen.normal(0.0, 0.02, P), -0.05, 0.05))
        # healthy ECN marking probability per frame sent in comm phase; a few hot ECMP collisions
        self.ecn_rate = np.where(plant.port_is_gpu, 0.0, np.exp(gen.normal(np.log(3e-7), 1.0, P)))
        # healthy pause frames per second (rare; 5 % of ports see occasional bursts)
        burst = gen.random(P) < 0.05
        self.pause_rate = np.where(burst, gen.uniform(0.02, 0.2, P), gen.uniform(0.0, 0.004, P))
        self.queue_scale = np.where(plant.port_is_gpu, 0.5, 1.0)


def queue_mean_bytes(rho: np.ndarray, frame: np.ndarray) -> np.ndarray:
    r = np.clip(rho, 0.0, 0.97)
    return r * r / (2.0 * (1.0 - r)) * frame


def ecn_probability(queue: np.ndarray) -> np.ndarray:
    return np.where(queue < KMIN, 0.0, np.where(queue >= KMAX, PMAX, PMAX * (queue - KMIN) / (KMAX - KMIN)))


def incast_queue(offered: np.ndarray) -> np.ndarray:
    """Standing queue of an egress port offered more than its capacity (DCQCN keeps it bounded)."""
    over = np.clip((offered - 1.0) / 0.6, 0.0, 1.0)
    return np.where(offered > 1.0, KMIN + (QUEUE_CAP_BYTES - KMIN) * over, 0.0)


def pause_spread(plant: Plant, sources: dict[int, float], hops: int, decay: float) -> np.ndarray:
    """Pause frames/s sent by each port when ``sources`` (egress port → pause rate upstream of it) back up.

    Hop 1: the switch of each congested egress port pauses the feeders of that port at the given rate.
    Each paused feeder's link partner then cannot drain towards it and pauses its own feeders at
    ``decay`` times the rate, for ``hops`` hops in all. A port paused from several sides sends the
    largest rate.
    """
    rate = np.zeros(plant.P)
    frontier = dict(sources)
    for _ in range(hops):
        nxt: dict[int, float] = {}
        for egress, r in frontier.items():
            f = plant.feeders(egress)
            if not f.size:
                continue
            rate[f] = np.maximum(rate[f], r)
            for q in plant.port_peer[f].tolist():
                nxt[q] = max(nxt.get(q, 0.0), r * decay)
        frontier = nxt
    return rate

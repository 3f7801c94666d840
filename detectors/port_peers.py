"""A port congested against its peers at the same instant (DESIGN §4 incast_hotspot), not against a level.

Minder (NSDI'25) finds a faulty machine of a training job by comparing it with the job's other machines
at the same moment: they run the same code under the same load, so what the load does to one it does
to all, and only a fault makes one stand apart. Ports compare the same way. Peers are the ports of one
role (a leaf's host-facing egress, a GPU NIC, a leaf uplink, a spine port; a rail-optimised fabric
gives each rail's ports the same share of one job's collective) that carry a comparable load: the
lesser of their two directions' utilisations within a factor ``port_peer_load_ratio`` of each other,
so the idle ports of a partial load step are nobody's peers. The lesser direction, because a
collective is symmetric per link (a ring or tree all-reduce sends and receives the same bytes on
every NIC) while an incast inflates one direction only: the hotspot's egress runs at line rate, its
ingress at the job's share like its peers'. A port stands out on a congestion signal (median queue depth,
ECN-marked share, pause frames sent a second) when, against the median of its peers:

* the signal is at least its absolute floor (the level at which it means congestion at all) and
  exceeds the peers' median by at least that floor again, so a uniformly idle group, whose MAD is
  zero, cannot page on noise; and
* its modified z-score 0.6745·(x − median)/MAD is at least ``port_peer_z`` (Iglewicz & Hoaglin).

Emits, per port: ``congestion_vs_peers`` (warning) when the queue or ECN marks stand out,
``pausing_vs_peers`` when only the pauses it sends do (an ingress backing up: a symptom, folded like
``pause_upstream``), and ``congestion_shared`` when a signal is over its floor but so is the peers'
median and it is no outlier: a load step or a bursty phase raised the whole group, and correlation
holds no hotspot there (detectors/correlate.py rule 7). A signal that a port does not report (column
absent, or null) is unknown: the port is neither judged on it nor anyone's peer for it, never taken as
quiet; fewer than ``port_peer_min`` peers with a value: no judgement.

A port receiving pauses at the pausing rate is left out of the queue and ECN comparison, as judged and
as a peer: its queue is its link partner holding it (a PFC victim), not load it was offered.

Peers are the ports of that role this window holds: the whole cluster in one process; in a split
deployment whole leaves (DESIGN §1: both ends of a host link and a leaf's uplinks share its partition),
64 host ports each on the standard supernode, far above ``port_peer_min``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import Count, Positive
from fabricwatch.detectors.frames import carried, sig, ts_or
from fabricwatch.detectors.traffic import Traffic, TrafficConfig, traffic
from fabricwatch.records import Finding, Window

MAD_TO_Z = 0.6745  # modified z-score: 0.6745 = Φ⁻¹(0.75), so MAD/0.6745 estimates σ for normal data
ROLES = ("leaf_host", "nic", "leaf_uplink", "spine")


class PortPeerConfig(TrafficConfig):
    # Iglewicz & Hoaglin (1993, "How to Detect and Handle Outliers", ASQC): a modified z-score ≥ 3.5
    # is their recommended outlier label.
    port_peer_z: Positive = 3.5
    # As gpu_peers: with 4 peers, a second congested port among them moves neither the median nor the
    # MAD past the healthy peers' values (both have a 50 % breakdown point), so two hotspots at once
    # are both found.
    port_peer_min: Count = 4
    # Same load: a job's collective gives each of its rail ports the same share (NCCL rings and trees
    # over every rail), so the busy ports of one job are within tens of percent of each other, while a
    # port outside the job carries background only, orders of magnitude less: a factor of two keeps the
    # first together and the second apart at any job load (compared on the lesser direction, see above).
    port_peer_load_ratio: Positive = 2.0
    # Floors, below which a signal is not congestion at all. Queue: the top of the RoCE ECN Kmin range
    # at 400G (~100-400 kB, TrafficConfig's note): over it every such switch marks, so the switch itself
    # calls the queue congested whatever its Kmin, and a microburst sample does not. ECN share: congestion's own
    # 1 % (CongestionConfig.ecn_frac), so the two judgements mean the same by "marked". Pauses sent:
    # TrafficConfig.pause_rate_min, what every traffic detector counts as pausing.
    port_peer_queue_floor_bytes: Positive = 400e3
    port_peer_ecn_floor: Positive = 0.01


@dataclass(frozen=True, slots=True)
class Signal:
    metric: str  # the evidence's metric name
    values: np.ndarray  # per port, NaN = unknown
    floor: float
    judged: np.ndarray  # per port: may be judged on this signal, and be a peer for it


@dataclass(slots=True)
class Verdict:
    """One port's standing on one signal against its peers."""

    metric: str
    value: float
    peers: float  # the peers' median
    n: int  # peers with a value
    z: float  # modified z-score (inf: the peers do not spread at all)
    outlier: bool
    shared: bool  # over the floor, no outlier, and so are the peers


def role_of(window: Window, ports: list[str]) -> np.ndarray:
    """The role of each port ("" for a port the topology does not know); cached per window."""
    key = ("port_roles", tuple(ports[:1]), len(ports))
    hit = window.cache.get(key)
    if hit is not None:
        return hit
    last = carried(window).get("port_roles")  # the last tick's: the same ports, usually
    if last is not None and last[0] is window.topology and last[1] == ports:
        window.cache[key] = last[2]
        return last[2]
    topo = window.topology
    tiers = {s.name: s.tier for s in topo.switches}
    out = []
    for p in ports:
        link = topo.port_link.get(p)
        tier = tiers.get(topo.port_device.get(p, ""), "")
        if link is None:
            out.append("")
        elif link.tier == "host":
            out.append("leaf_host" if tier == "leaf" else "nic" if not tier else "")
        else:
            out.append("leaf_uplink" if tier == "leaf" else "spine" if tier == "spine" else "")
    hit = np.array(out, dtype=object)
    window.cache[key] = hit
    carried(window)["port_roles"] = (topo, ports, hit)
    return hit


def same_load(util: np.ndarray, i: int, ratio: float) -> np.ndarray:
    """The ports whose utilisations are within ``ratio`` of port ``i``'s (an unknown utilisation is
    comparable to any: the role alone decides). Row by row: only ports over a floor are judged."""
    hi, lo = np.maximum(util, util[i]), np.minimum(util, util[i])
    with np.errstate(invalid="ignore"):
        return (lo * ratio >= hi) | np.isnan(util) | np.isnan(util[i])


def judge(s: Signal, members: np.ndarray, load: np.ndarray, cfg: PortPeerConfig) -> dict[int, Verdict]:
    """The verdicts of one signal over one role's ports (``members``: their positions; ``load``: theirs):
    only ports over the floor are judged (the rest are quiet by the signal's own meaning), each
    against its peers."""
    v = s.values[members]
    known = np.isfinite(v) & s.judged[members]
    with np.errstate(invalid="ignore"):
        over = known & (v >= s.floor)
    out: dict[int, Verdict] = {}
    for i in np.flatnonzero(over):
        peers = known & same_load(load, i, cfg.port_peer_load_ratio)
        peers[i] = False
        if peers.sum() < cfg.port_peer_min:
            continue  # too few to compare: unknown, never quiet
        pv = v[peers]
        med = float(np.median(pv))
        mad = float(np.median(np.abs(pv - med)))
        excess = v[i] - med
        z = MAD_TO_Z * excess / mad if mad > 0 else (np.inf if excess > 0 else 0.0)
        outlier = bool(excess >= s.floor and z >= cfg.port_peer_z)
        out[int(members[i])] = Verdict(s.metric, float(v[i]), med, int(peers.sum()), float(z), outlier,
                                       shared=not outlier and med >= s.floor)  # fmt: skip
    return out


class PortPeers(Detector):
    name = "port_peers"
    emits = frozenset({"congestion_vs_peers", "pausing_vs_peers", "congestion_shared"})
    Config = PortPeerConfig
    config: PortPeerConfig

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        t = traffic(window, self.recent_s, cfg)
        if t.at.n < cfg.port_peer_min + 1:
            return []
        with np.errstate(invalid="ignore"):
            loaded = ~(t.rx_pause >= cfg.pause_rate_min)  # a PFC victim's queue is not its load
        everyone = np.ones(t.at.n, dtype=bool)
        roles = role_of(window, t.at.names)
        signals = (
            Signal("queue_depth_bytes", t.queue, cfg.port_peer_queue_floor_bytes, loaded),
            # a NIC counts the marked frames it receives (the notification point's counter, mlx5
            # np_ecn_marked_roce_packets): congestion on the way to it, not at its own egress
            Signal("ecn_marked_frac", t.ecn_frac, cfg.port_peer_ecn_floor, loaded & (roles != "nic")),
            Signal("tx_pause_per_s", t.tx_pause, cfg.pause_rate_min, everyone),
        )
        verdicts: dict[int, list[Verdict]] = {}
        for role in ROLES:
            members = np.flatnonzero(roles == role)
            if len(members) < cfg.port_peer_min + 1:
                continue
            load = np.fmin(t.tx_util, t.rx_util)[members]
            for s in signals:
                for pos, verdict in judge(s, members, load, cfg).items():
                    verdicts.setdefault(pos, []).append(verdict)
        last_ts = t.at.last_ts()
        out = []
        for pos in sorted(verdicts):
            out += self.findings(t.at.names[pos], str(roles[pos]), verdicts[pos], t, pos, float(last_ts[pos]))
        return out

    def findings(
        self, port: str, role: str, verdicts: list[Verdict], t: Traffic, pos: int, last: float
    ) -> list[Finding]:
        """A port's findings from its verdicts: the outliers if any, else whether it shares its peers' load."""
        outliers = [v for v in verdicts if v.outlier]
        congested = [v for v in outliers if v.metric != "tx_pause_per_s"]
        if congested:
            symptom, shown, severity = "congestion_vs_peers", outliers, "warning"
        elif outliers:
            symptom, shown, severity = "pausing_vs_peers", outliers, "warning"
        elif shared := [v for v in verdicts if v.shared and v.metric != "tx_pause_per_s"]:
            # pauses sent by a whole group are PFC spreading from a root, not load: not "shared"
            symptom, shown, severity = "congestion_shared", shared, "warning"
        else:
            return []
        first = t.first_busy[pos] if any(v.metric == "queue_depth_bytes" for v in shown) else np.nan
        if symptom == "pausing_vs_peers":
            first = t.first_pause[pos]
        evidence = tuple(
            {"metric": v.metric, "port": port, "value": sig(v.value, 3), "peers": sig(v.peers, 3), "n_peers": v.n}
            for v in shown
        )
        z = max(min(v.z, 1e6) for v in shown)
        return [
            Finding(
                detector=self.name,
                symptom=symptom,
                entity="port",
                id=port,
                first_seen=min(ts_or(first, last), last),
                last_seen=last,
                severity=severity,
                evidence=evidence,
                cause="incast_hotspot" if symptom == "congestion_vs_peers" else None,
                score=float(z),
                attrs={"role": role, "tx_util": sig(t.tx_util[pos], 3), "signals": [v.metric for v in shown]},
            )
        ]

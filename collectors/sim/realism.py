"""The plant's side of the pathologies (DESIGN §4b): healthy mess that lives in the physics.

What each kind does to the plant (the collectors' side is delivery.py):

dom_offset  ``port`` (name or pattern), ``tx_db``, ``rx_db``, ``spread_db``, ``lane_spread_db``. Each
    matched module's DOM reads tx and rx power off by the fixed offset plus its own draw in
    ±``spread_db``, and each lane by a further ±``lane_spread_db``: a calibration error of the reading
    within the ±3 dB that SFF-8472 allows. The light itself, and so BER and link state, is unchanged.
    A dark lane still reads -40 dBm (the register's floor).
mixed_modules  ``fraction``, ``vendor``, ``tx_offset_db``, ``bias_ma``, ``thresholds``, ``where``
    (switch | gpu | all), ``media`` (the module message's; default the first vendor's). That share of
    the modules (switch pluggables per port; NPO engines per node) are a second vendor's part: launch
    power set ``tx_offset_db`` from the first vendor's, laser bias around ``bias_ma`` (6 mA VCSEL-like
    to 90 mA), the part's tx thresholds moved with its power and bias thresholds with its bias, or no
    thresholds at all (``thresholds: false``: null).
module_swap  ``port``, ``at``. A new module of the other part of the same family: its own launch
    power (±0.4 dB per module, ±0.3 dB per lane) and bias, in spec. The link drops once and retrains
    (link_down_total +1, FEC/symbol counters from 0 at both ends) and the port's source re-sends its
    module message.
load_step  ``stop``, ``start`` (optional: never), ``nodes`` or ``cooling_loop`` (optional: all). The
    job stops on those GPUs: power falls to ~90 W idle, util to 0 with NVML's GpuIdle bit (0x1),
    temperatures relax towards the coolant, their host links carry background traffic only (both
    directions), and switch-to-switch links carry the job's share of the GPUs still running.
bursty_traffic  ``duty``. The all-reduce arrives in bursts filling ``duty`` of the comm phase at
    1/duty of the mean rate: at a scrape in the comm phase an egress queue is sampled at the burst's
    utilisation (capped at 0.95, microbursts at 600 kB, below any incast's standing queue), ECN marking
    rises by 1/duty² (at most ×100, healthy tens of marks a minute), and NICs send brief PFC pauses
    (5 × (1-duty) frames/s, far from a storm's 24 000/s).
coolant_drift  ``delta_c``, ``period_s`` (86 400). Every loop's coolant follows
    delta_c · sin²(π t / period_s): the facility water of a day.
burst_errors  ``port`` (name or pattern, all), ``rate_per_hour`` (0.2), ``codewords`` (5). Short error
    bursts on healthy links (a cable moved, a door closed on a bundle): each matched port's receiver
    sees bursts at random, ``rate_per_hour`` per port while its link is up. A burst lasts a few
    milliseconds: 1 + Poisson(codewords − 1) codewords fail (fec_uncorrectable_total, 17 symbol errors
    each, CRC errors ×1.16 by the traffic then, as any failed codeword), and about 12 corrected
    codewords of up to 15 symbols surround each failed one (fec_corrected_total, and that interval's
    pre_fec_ber by corrected/bits). Below the BER limit, so no trend: uncorrectables out of a clean
    BER (REALISM.md, Errors: "burst errors make some uncorrectables below it").
maintenance  ``switch``, ``start``, ``duration``. The plant side: every link of the switch is down for
    the window (its lasers off while it reboots: the far ends see loss of light) and retrains after.
    The switch's own source is silent for the window and its counters restart from 0 (delivery.py).

Every draw comes from the pathology's own stream (``pathology/<index>``), so a pathology never changes
the noise any other entity sees.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fabricwatch.collectors.sim import fabric, optics
from fabricwatch.collectors.sim.plant import LANES, Plant
from fabricwatch.collectors.sim.streams import Streams, poisson
from fabricwatch.faults import Fault
from fabricwatch.pathologies import Pathology
from fabricwatch.topology import Topology

if TYPE_CHECKING:
    from fabricwatch.collectors.sim.injection import Effects
    from fabricwatch.collectors.sim.simulator import Simulator

PHYSICS_KINDS = frozenset(
    {
        "dom_offset",
        "mixed_modules",
        "module_swap",
        "load_step",
        "bursty_traffic",
        "coolant_drift",
        "maintenance",
        "burst_errors",
    }
)
BURST_CORRECTED_CODEWORDS = 12  # corrected codewords around each failed one in a burst
BURST_CORRECTED_BITS = 12 * 15 * 10 // 2  # ... with up to 15 of their 10-bit symbols wrong (about half)
BURST_RHO_CAP = 0.95
BURST_ECN_MAX = 100.0
BURST_PAUSE_PER_S = 5.0


@dataclass(slots=True)
class JobLoad:
    """Share of the job each GPU and port carries: over the interval (mean) and at the scrape (now)."""

    gpu_mean: np.ndarray
    gpu_now: np.ndarray
    port_mean: np.ndarray
    port_now: np.ndarray


@dataclass(slots=True)
class _Swap:
    port: int
    at: float
    gen: np.random.Generator


def maintenance_faults(topology: Topology, pathologies: Sequence[Pathology]) -> list[Fault]:
    """The link_down faults a maintenance window puts on its switch's links (never ground truth)."""
    out = []
    for p in pathologies:
        if p.kind != "maintenance":
            continue
        end = p["start"] + p["duration"]
        for link in topology.links:
            if topology.port_device[link.a] == p["switch"] or topology.port_device[link.b] == p["switch"]:
                out.append(Fault("link_down", link.id, p["start"], 0.0, end))
    return out


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


class Realism:
    """The physics pathologies of one simulator, compiled against its plant once."""

    def __init__(self, plant: Plant, pathologies: Sequence[Pathology], streams: Streams) -> None:
        self.plant = p = plant
        self.items = [(i, q) for i, q in enumerate(pathologies) if q.kind in PHYSICS_KINDS]
        self.gens = {i: streams.static(f"pathology/{i}") for i, _ in self.items}
        self.dom_tx = np.zeros(p.L)
        self.dom_rx = np.zeros(p.L)
        self.has_dom = False
        self.steps: list[tuple[np.ndarray, float, float | None]] = []  # (gpu indices, stop, start)
        self.duty = 1.0
        self.drifts: list[tuple[float, float]] = []
        self.swaps: list[_Swap] = []
        self.error_bursts: list[tuple[int, np.ndarray, float]] = []  # (entry, rate per port per s, codewords)
        for i, q in self.items:
            gen = self.gens[i]
            if q.kind == "dom_offset":
                self._dom(q, gen)
            elif q.kind == "load_step":
                self.steps.append((self._gpus(q), q["stop"], q["start"]))
            elif q.kind == "bursty_traffic":
                self.duty = min(self.duty, q["duty"])
            elif q.kind == "coolant_drift":
                self.drifts.append((q["delta_c"], q["period_s"]))
            elif q.kind == "module_swap":
                self.swaps.append(_Swap(p.port_index[q["port"]], q["at"], gen))
            elif q.kind == "burst_errors":
                chosen = np.array([fnmatch.fnmatchcase(name, q["port"]) for name in p.port_list])
                self.error_bursts.append((i, chosen * q["rate_per_hour"] / 3600.0, q["codewords"]))
        # GPU whose job a port carries: its own, or the GPU at the far end; -1 for switch-switch ports
        self.port_job_gpu = np.where(
            p.port_is_gpu, p.port_gpu, np.where(p.port_is_gpu[p.port_peer], p.port_gpu[p.port_peer], -1)
        )

    def _dom(self, q: Pathology, gen: np.random.Generator) -> None:
        p = self.plant
        chosen = [i for i, name in enumerate(p.port_list) if fnmatch.fnmatchcase(name, q["port"])]
        n = len(chosen)
        module = gen.uniform(-1.0, 1.0, (2, n)) * q["spread_db"]
        lane = gen.uniform(-1.0, 1.0, (2, n, LANES)) * q["lane_spread_db"]
        rows = np.array([p.rows_of_port(i) for i in chosen], dtype=np.int64).reshape(n, LANES)
        self.dom_tx[rows] += q["tx_db"] + module[0][:, None] + lane[0]
        self.dom_rx[rows] += q["rx_db"] + module[1][:, None] + lane[1]
        self.has_dom = True

    def _gpus(self, q: Pathology) -> np.ndarray:
        p = self.plant
        topo = p.topology
        if q["nodes"] is not None:
            nodes = set(q["nodes"])
        elif q["cooling_loop"] is not None:
            nodes = {n.name for n in topo.nodes if n.cooling_loop == q["cooling_loop"]}
        else:
            return np.arange(p.G)
        return np.array([i for i, g in enumerate(p.gpus) if topo.gpu_node[g] in nodes], dtype=np.int64)

    # --- static plant -------------------------------------------------------------------------------

    def fit_modules(self, sim: Simulator) -> None:
        """Mixed fleets: re-fit the chosen modules as a second vendor's part (before the first scrape)."""
        p = self.plant
        for i, q in self.items:
            if q.kind != "mixed_modules":
                continue
            gen = self.gens[i]
            where = q["where"]
            pick = np.zeros(p.P, dtype=bool)
            if where in ("switch", "all"):
                pick |= ~p.port_is_gpu & (gen.random(p.P) < q["fraction"])
            if where in ("gpu", "all"):
                nodes = gen.random(len(p.topology.nodes)) < q["fraction"]
                node_of_gpu = np.repeat(np.arange(len(p.topology.nodes)), [n.gpus for n in p.topology.nodes])
                pick |= p.port_is_gpu & nodes[node_of_gpu[np.maximum(p.port_gpu, 0)]]
            variants: dict[int, int] = {}
            for port in np.flatnonzero(pick).tolist():
                base = int(sim.part_of_port[port])
                if base not in variants:
                    variants[base] = len(sim.parts)
                    sim.parts.append(_variant(sim.parts[base], q))
                new = variants[base]
                ratio = (sim.parts[new].bias_nominal_ma / sim.parts[base].bias_nominal_ma) if q["bias_ma"] else 1.0
                shift = sim.parts[new].tx_nominal_dbm - sim.parts[base].tx_nominal_dbm
                self._refit(sim, port, sim.tx_set_dbm[p.rows_of_port(port)] + shift, ratio)
                sim.part_of_port[port] = new

    @staticmethod
    def _refit(sim: Simulator, port: int, tx_set: np.ndarray, bias_ratio: float) -> None:
        """Give a port's lanes a new set point and a bias scaled by ``bias_ratio`` (APC keeps the power)."""
        rows = sim.plant.rows_of_port(port)
        lane_bias = sim.ith0[rows] + optics.dbm_to_mw(sim.tx_set_dbm[rows]) / sim.eta0[rows]
        sim.ith0[rows] *= bias_ratio
        sim.tx_set_dbm[rows] = tx_set
        sim.eta0[rows] = optics.dbm_to_mw(tx_set) / (lane_bias * bias_ratio - sim.ith0[rows])

    # --- one scrape ---------------------------------------------------------------------------------

    def before_step(self, sim: Simulator, eff: Effects, t_prev: float, t: float) -> None:
        """Module swaps due in (t_prev, t] and the coolant's drift at t."""
        for swap in self.swaps:
            if t_prev < swap.at <= t:
                self._swap(sim, swap)
                eff.replaced.append(swap.port)
        for delta, period in self.drifts:
            eff.coolant_delta += delta * math.sin(math.pi * t / period) ** 2

    def _swap(self, sim: Simulator, swap: _Swap) -> None:
        p, gen = self.plant, swap.gen
        base = int(sim.part_of_port[swap.port])
        family = optics.NPO_PARTS if sim.parts[base].npo else optics.PLUGGABLE_PARTS
        new = family[(family.index(base) + 1) % len(family)] if base in family else base
        part = sim.parts[new]
        tx = part.tx_nominal_dbm + gen.normal(0.0, 0.4) + np.clip(gen.normal(0.0, 0.3, LANES), -0.8, 0.8)
        rows = p.rows_of_port(swap.port)
        old_bias = sim.ith0[rows] + optics.dbm_to_mw(sim.tx_set_dbm[rows]) / sim.eta0[rows]  # at 50 °C
        ratio = part.bias_nominal_ma * float(np.clip(gen.normal(1.0, 0.06), 0.85, 1.15)) / float(old_bias.mean())
        self._refit(sim, swap.port, tx, ratio)
        sim.part_of_port[swap.port] = new
        sim.messages.set_part(swap.port, part)

    def job_load(self, t_prev: float, t: float, first: bool) -> JobLoad | None:
        """How much of the job each GPU and port carries, or None when every GPU runs all of it over the
        interval and at the scrape (the simulator's readings are then the same as with shares of 1)."""
        if not self.steps:
            return None
        p = self.plant
        mean = np.ones(p.G)
        now = np.ones(p.G)
        dt = t - t_prev
        stepped = False
        for gpus, stop, start in self.steps:
            end = math.inf if start is None else start
            off_now = stop <= t < end
            off_share = 1.0 * off_now if first else _overlap(t_prev, t, stop, end) / dt
            if not (off_now or off_share):
                continue
            stepped = True
            mean[gpus] *= 1.0 - off_share
            now[gpus] *= 0.0 if off_now else 1.0
        if not stepped:
            return None
        g = self.port_job_gpu
        port_mean = np.where(g >= 0, mean[np.maximum(g, 0)], mean.mean())
        port_now = np.where(g >= 0, now[np.maximum(g, 0)], now.mean())
        return JobLoad(mean, now, port_mean, port_now)

    def bursts(
        self, k: int, streams: Streams, comm_now: bool, rho_now: np.ndarray, queue_scale: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(queue sampled in a burst or NaN, ECN multiplier) at scrape ``k``, or None without bursts."""
        if self.duty >= 1.0:
            return None
        gen = streams.at(k, "pathology/bursts")
        u, e = gen.random((2, self.plant.P))
        rho = np.minimum(rho_now / self.duty, BURST_RHO_CAP)
        queue = np.minimum(
            fabric.queue_mean_bytes(rho, fabric.MEAN_FRAME_BYTES) * queue_scale * -np.log1p(-e),
            fabric.MICROBURST_CAP_BYTES,
        )
        burst = comm_now & (u < self.duty) & (rho_now > 0.2)
        return np.where(burst, queue, np.nan), np.full(self.plant.P, min(self.duty**-2, BURST_ECN_MAX))

    def bursts_of_errors(
        self, k: int, streams: Streams, dt: float, up_share: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(corrected bits, failed codewords) per port from error bursts over the interval."""
        p = self.plant
        corrected = np.zeros(p.P)
        failed = np.zeros(p.P, dtype=np.int64)
        for i, rate, codewords in self.error_bursts:
            gen = streams.at(k, f"pathology/{i}/bursts")
            events = poisson(rate * dt * up_share, gen)
            if not events.any():  # nothing else comes from this stream: its second draw would give zeros
                continue
            lost = events + poisson(events * (codewords - 1.0), gen)
            failed += lost
            corrected += lost * BURST_CORRECTED_BITS
        return corrected, failed

    def burst_pauses(self, k: int, streams: Streams, dt: float, comm_share: float, up_share: np.ndarray) -> np.ndarray:
        """Brief PFC pause frames NICs send in receive bursts over the interval (0 without bursts)."""
        p = self.plant
        if self.duty >= 1.0:
            return np.zeros(p.P, dtype=np.int64)
        gen = streams.at(k, "pathology/burst-pauses")
        rate = np.where(p.port_is_gpu, BURST_PAUSE_PER_S * (1.0 - self.duty) * comm_share, 0.0)
        return poisson(rate * dt * up_share, gen)


def _variant(part: optics.ModulePart, q: Pathology) -> optics.ModulePart:
    """A second vendor's version of ``part`` (see mixed_modules in the module docstring)."""
    shift = float(q["tx_offset_db"])
    bias = float(q["bias_ma"]) if q["bias_ma"] else part.bias_nominal_ma
    ratio = bias / part.bias_nominal_ma
    vendor = str(q["vendor"])
    fields: dict[str, object] = {
        "vendor": vendor,
        "part_number": f"{vendor[:3].upper()}-{part.part_number.split('-', 1)[-1]}",
        "tx_nominal_dbm": part.tx_nominal_dbm + shift,
        "bias_nominal_ma": bias,
        "media": q["media"] or part.media,
    }
    if q["thresholds"]:
        fields |= {
            "tx_power_low_alarm_dbm": part.tx_power_low_alarm_dbm + shift,
            "tx_power_low_warn_dbm": part.tx_power_low_warn_dbm + shift,
            "bias_high_alarm_ma": round(part.bias_high_alarm_ma * ratio, 1),
            "bias_high_warn_ma": round(part.bias_high_warn_ma * ratio, 1),
        }
    else:
        fields |= {name: None for name in optics.THRESHOLD_COLUMNS}
    return dataclasses.replace(part, **fields)  # type: ignore[arg-type]

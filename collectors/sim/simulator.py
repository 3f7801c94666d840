"""The simulator: one scrape of every source of a supernode per :meth:`Simulator.step`.

Each step advances the plant by one interval (t_prev, t] and reads it at t. The physics live in the
modules beside this one (job, thermal, optics, fabric, injection); this module holds the state that
carries between scrapes (counters, link states, temperatures) and cuts the readings into messages.

Counters only rise, with exactly these resets:

* fec_corrected_total, fec_uncorrectable_total and symbol_errors_total restart from 0 at both ends of
  a link whenever it retrains: after it was down at a scrape, after a flap between scrapes, and when a
  module is replaced (end of laser_degradation / transceiver_fault). These are PHY/FEC statistics
  that, as on many switch ASICs, count per link-up.
* nothing else ever resets: bytes, frames, CRC errors, link_down_total, pauses, ECN marks, drops
  (MAC/RMON counters) and the GPU's ecc_dbe_total / pcie_replay_total (lifetime counts).

Counters start from values a long-running plant would have (1-60 days of uptime). A link that is down
at a scrape reports state 0, speed_gbps and pre_fec_ber null (nothing to measure), queue 0; a GPU
that has fallen off the bus reports every value but its XID as null. Messages follow DESIGN §3 (see
``messages.py`` for sources and seq).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from fabricwatch.collectors.sim import fabric, optics
from fabricwatch.collectors.sim.delivery import Delivery
from fabricwatch.collectors.sim.injection import (
    ROCE_PRIORITY,
    Effects,
    Injector,
    flap_window,
    pause_sources,
    reboot_windows,
)
from fabricwatch.collectors.sim.job import TrainingJob
from fabricwatch.collectors.sim.messages import MessageBuilder
from fabricwatch.collectors.sim.plant import LANES, Plant
from fabricwatch.collectors.sim.realism import PHYSICS_KINDS, JobLoad, Realism, maintenance_faults
from fabricwatch.collectors.sim.streams import Streams, poisson, round_up_fraction
from fabricwatch.collectors.sim.thermal import GpuThermal
from fabricwatch.errors import InputError
from fabricwatch.faults import Fault
from fabricwatch.pathologies import Pathology
from fabricwatch.schema import LOSSLESS_PRIORITIES, Message
from fabricwatch.topology import Topology

DEFAULT_START_TS = 1764400000.0
DAY = 86400.0
CRC_FRAMES_PER_FAILED_CODEWORD = 1.16  # a 4.1 kB frame spans ~6.4 codewords; 1 in 6.4 straddles two frames
SWITCH_MODULE_SELF_C = 14.0
RX_JITTER_DB = 0.03
MICROBURST_CAP_BYTES = fabric.MICROBURST_CAP_BYTES
# Time one pause frame holds its receiver: XOFF is refreshed every half pause time (fabric.py), so a
# priority held throughout receives PAUSE_FULL_PER_S frames a second, each standing for 1/that.
PAUSE_US_PER_FRAME = 1e6 / fabric.PAUSE_FULL_PER_S
ROCE_ROW = LOSSLESS_PRIORITIES.index(ROCE_PRIORITY)  # the per-priority row healthy and congestion pauses go to


@dataclass(slots=True)
class _Light:
    tx_read: np.ndarray
    rx_read: np.ndarray
    bias: np.ndarray
    module_temp: np.ndarray
    voltage: np.ndarray
    port_ber: np.ndarray
    rx_min: np.ndarray


@dataclass(slots=True)
class _Flow:
    tx_bytes: np.ndarray
    tx_pkts: np.ndarray
    rho_now: np.ndarray  # egress utilisation at the scrape instant
    pause_rate: np.ndarray  # pause frames/s caused by faults
    blocked: dict[int, float]  # port -> share of its sending held by its partner's pauses
    u_queue: np.ndarray
    u_burst: np.ndarray
    burst: np.ndarray


class _Counter:
    """Integer counters fed with real-valued amounts; the fractions carry over, so the sums are exact."""

    def __init__(self, initial: np.ndarray) -> None:
        self.value = initial.astype(np.int64)
        self.rest = np.zeros(initial.shape)

    def add(self, amount: np.ndarray) -> np.ndarray:
        acc = self.rest + amount
        inc = np.floor(acc)
        self.rest = acc - inc
        inc = inc.astype(np.int64)
        self.value += inc
        return inc


def _lane_mean(lanes: np.ndarray) -> np.ndarray:
    """Each port's mean over its lanes: numpy's ``reshape(-1, LANES).mean(axis=1)``, the same sums in the
    same order (lane by lane, then divided), in whole-array operations: a reduction over so short an axis
    takes some ten times as long."""
    rows = lanes.reshape(-1, LANES)
    total = rows[:, 0] + rows[:, 1]
    for lane in range(2, LANES):
        total = total + rows[:, lane]
    return total / LANES


def _lane_min(lanes: np.ndarray) -> np.ndarray:
    """Each port's minimum over its lanes (as ``reshape(-1, LANES).min(axis=1)``, faster; see _lane_mean)."""
    rows = lanes.reshape(-1, LANES)
    low = np.minimum(rows[:, 0], rows[:, 1])
    for lane in range(2, LANES):
        low = np.minimum(low, rows[:, lane])
    return low


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a step runs, and the step's objects left out of its
    next young collection.

    A 1024-GPU step makes some 7,000 lists, dicts and messages (a quarter of a million references)
    that stay alive until it returns and form no cycles: the collections they would trigger on the
    way (one per 700 new objects, and full ones as they pile up) find nothing and traverse the whole
    heap. Paused, one young collection would still traverse them after the step (2-4 ms of a 20 ms
    step). Instead, after the step every tracked object joins the oldest generation untraversed
    (``gc.freeze`` then ``gc.unfreeze``: two list splices). The messages die by reference count
    when the caller drops them; whatever the caller made since its last collection moves up with
    them, so a reference cycle among it waits for the next full collection. Skipped when the
    caller has frozen objects itself (``gc.unfreeze`` would thaw them).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if not gc.get_freeze_count():
            gc.freeze()  # every generation into the permanent one (resets the young count) ...
            gc.unfreeze()  # ... and it into the oldest: nothing traversed
        gc.enable()


class Simulator:
    """A supernode under a training job, with faults; deterministic from ``seed``."""

    def __init__(
        self,
        topology: Topology,
        faults: Sequence[Fault] = (),
        *,
        seed: int = 0,
        interval: float = 5.0,
        start_ts: float = DEFAULT_START_TS,
        module_every: float = 300.0,
        pathologies: Sequence[Pathology] = (),
    ) -> None:
        for name, value in (("interval", interval), ("module_every", module_every)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value < math.inf):
                raise InputError(name, f"must be a number of seconds > 0, not {value!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise InputError("seed", f"must be an integer ≥ 0, not {seed!r}")
        self.topology = topology
        self.faults = tuple(faults)
        self.pathologies = tuple(pathologies)
        self.seed = seed
        self.interval = float(interval)
        self.start_ts = float(start_ts)
        self.module_every = float(module_every)
        self.t = 0.0
        self.ts = self.start_ts
        self._k = 0

        self.plant = p = Plant(topology)
        self.streams = st = Streams(seed)
        # a maintenance window takes its switch's links down like link_down faults, never ground truth
        self.injector = Injector(p, self.faults + tuple(maintenance_faults(topology, self.pathologies)), st)
        physics = any(q.kind in PHYSICS_KINDS for q in self.pathologies)
        self.realism = Realism(p, self.pathologies, st) if physics else None
        self.parts = list(optics.PARTS)
        self.job = TrainingJob(st.static("job"))
        self.thermal = GpuThermal(p.G, len(p.loops), p.gpu_loop, st.static("gpu"))
        self.traffic = fabric.Traffic(p, st.static("traffic"))
        self._init_optics(st.static("optics"))
        if self.realism is not None:
            self.realism.fit_modules(self)
        self._init_switches(st.static("switch"))
        self._init_counters(st.static("counters"))
        self.link_up = np.ones(p.N, dtype=bool)
        self.messages = MessageBuilder(p, self.part_of_port, self.parts)
        # a switch reboot (switch_fault, mode reboot) silences its source and restarts its counters as a
        # maintenance window does; appended last, so every pathology keeps its own random stream
        reboots = tuple(
            Pathology("maintenance", {"switch": sw, "start": a, "duration": b - a}, "switch_fault reboot")
            for sw, a, b in reboot_windows(self.faults)
        )
        collectors = self.pathologies + reboots
        self.delivery = Delivery(p, collectors, seed, self.interval) if collectors else None

    # --- static plant ----------------------------------------------------------------------------

    def _init_optics(self, gen: np.random.Generator) -> None:
        p = self.plant
        npo = np.array(optics.NPO_PARTS)
        plug = np.array(optics.PLUGGABLE_PARTS)
        # NPO parts are fitted per node (one engine type per tray), pluggables per port, 60/40 by vendor.
        node_pick = gen.choice(npo, size=len(p.topology.nodes), p=[0.6, 0.4])
        node_of_gpu = np.repeat(np.arange(len(p.topology.nodes)), [n.gpus for n in p.topology.nodes])
        part = gen.choice(plug, size=p.P, p=[0.6, 0.4])
        gpu_ports = p.port_is_gpu
        part[gpu_ports] = node_pick[node_of_gpu[p.port_gpu[gpu_ports]]]
        self.part_of_port = part
        nominal = np.array([self.parts[i].tx_nominal_dbm for i in part])
        bias_nom = np.array([self.parts[i].bias_nominal_ma for i in part])
        module_off = np.clip(gen.normal(0.0, 0.4, p.P), -1.0, 1.0)
        lane_off = np.clip(gen.normal(0.0, 0.3, p.L), -0.8, 0.8)
        self.tx_set_dbm = np.repeat(nominal + module_off, LANES) + lane_off
        self._tx_set_seen: np.ndarray | None = None  # the set points _tx_set_mw last converted
        self._tx_set_mw_cached = np.zeros(0)
        self.sensitivity_dbm = optics.SENSITIVITY_DBM + np.clip(gen.normal(0.0, 0.4, p.L), -1.0, 1.0)
        # BER floor per receiving lane: mostly 1e-9..1e-7, a tail of outliers towards 1e-6
        self.floor_log10 = np.clip(gen.normal(-8.0, 0.55, p.L), -9.3, -6.0)
        link_loss = gen.uniform(0.5, 2.3, p.N)
        self.loss_rx_db = np.clip(
            np.repeat(link_loss[p.port_link], LANES)
            + np.repeat(np.clip(gen.normal(0.0, 0.1, p.P), -0.25, 0.25), LANES)
            + np.clip(gen.normal(0.0, 0.12, p.L), -0.3, 0.3),
            0.3,
            2.9,
        )
        lane_bias = np.repeat(bias_nom, LANES) * (1.0 + np.clip(gen.normal(0.0, 0.06, p.L), -0.15, 0.15))
        self.ith0 = optics.ITH0_MA * (1.0 + np.clip(gen.normal(0.0, 0.1, p.L), -0.25, 0.25))
        self.eta0 = optics.dbm_to_mw(self.tx_set_dbm) / (lane_bias - self.ith0)
        self.voltage = 3.30 * (1.0 + np.clip(gen.normal(0.0, 0.006, p.P), -0.015, 0.015))
        self.module_offset_c = np.clip(gen.normal(0.0, 0.8, p.P), -2.0, 2.0)
        self.switch_port_heat = np.clip(gen.normal(0.0, 2.5, p.P), -6.0, 6.0)  # cage position in the airflow

    def _init_switches(self, gen: np.random.Generator) -> None:
        S = self.plant.S
        self.switch_ambient = gen.uniform(23.0, 28.0, S)
        self.switch_r = gen.uniform(0.065, 0.08, S)  # °C/W, ASIC to inlet air
        self.fan_base = gen.uniform(9000.0, 10500.0, S)
        self.asic_temp: np.ndarray | None = None

    def _init_counters(self, gen: np.random.Generator) -> None:
        p, tr = self.plant, self.traffic
        P = p.P
        uptime = gen.uniform(1.0, 60.0, P) * DAY
        mean_share = tr.comm_load * self.job.comm + fabric.BACKGROUND
        tx0 = uptime * mean_share * fabric.LINE_BYTES_PER_S
        rx0 = uptime * mean_share[p.port_peer] * fabric.LINE_BYTES_PER_S
        retrain_age = gen.uniform(0.1, 30.0, P) * DAY
        floor = np.power(10.0, self.floor_log10).reshape(P, LANES).mean(axis=1)
        self.tx_bytes = _Counter(np.floor(tx0))
        self.rx_bytes = np.floor(rx0).astype(np.int64)
        self.tx_pkts = _Counter(np.floor(tx0 / tr.frame_bytes))
        self.rx_pkts = np.floor(rx0 / tr.frame_bytes[p.port_peer]).astype(np.int64)
        self.fec_corrected = np.floor(retrain_age * optics.PORT_BITS_PER_S * floor).astype(np.int64)
        rare = gen.random((4, P))
        self.fec_uncorrectable = np.where(rare[0] < 0.05, gen.integers(1, 20, P), 0).astype(np.int64)
        self.symbol_errors = self.fec_uncorrectable * optics.SYMBOLS_PER_FAILED_CODEWORD
        self.crc = np.where(rare[1] < 0.08, gen.integers(1, 60, P), 0).astype(np.int64)
        self.link_down = gen.poisson(0.6, P).astype(np.int64)
        self.tx_pause = np.floor(uptime * tr.pause_rate).astype(np.int64)
        self.rx_pause = self.tx_pause[p.port_peer].copy()
        # per lossless priority (rows: LOSSLESS_PRIORITIES): a healthy plant's pauses are RoCE's
        self.tx_pause_prio = np.zeros((len(LOSSLESS_PRIORITIES), P), dtype=np.int64)
        self.tx_pause_prio[ROCE_ROW] = self.tx_pause
        self.rx_pause_prio = self.tx_pause_prio[:, p.port_peer].copy()
        self.rx_paused_us = _Counter(np.floor(self.rx_pause_prio * PAUSE_US_PER_FRAME))
        mean_pkts = uptime * tr.comm_load * self.job.comm * fabric.LINE_BYTES_PER_S / tr.frame_bytes
        self.ecn = np.floor(mean_pkts * tr.ecn_rate).astype(np.int64)
        gpu_facing = p.port_is_gpu
        self.ecn[gpu_facing] = self.ecn[p.port_peer[gpu_facing]]
        self.drops = np.where(rare[2] < 0.03, gen.integers(1, 200, P), 0).astype(np.int64)
        G = p.G
        self.pcie_rate = np.where(gen.random(G) < 0.03, gen.uniform(0.002, 0.02, G), 0.0)
        self.pcie_replay = np.where(gen.random(G) < 0.1, gen.integers(1, 40, G), 0).astype(np.int64)
        self.ecc_dbe = np.zeros(G, dtype=np.int64)

    # --- one scrape -----------------------------------------------------------------------------------

    def step(self) -> list[Message]:
        """Scrape every source at the next scrape time (first call: t=0) and return all messages."""
        with _collector_paused():
            return self._step(None)

    def _step(self, ts: float | None) -> list[Message]:
        k = self._k
        t = k * self.interval
        t_prev = t - self.interval
        dt = self.interval if k else 0.0  # the first scrape reads the plant as found: no increments
        self.t, self.ts = t, self.start_ts + t
        eff = self.injector.effects(t_prev, t)
        p, st = self.plant, self.streams
        load: JobLoad | None = None
        if self.realism is not None:
            self.realism.before_step(self, eff, t_prev, t)
            load = self.realism.job_load(t_prev, t, not k)

        comm_s = self.job.comm_seconds(t_prev, t) if k else 0.0
        comm_interval = comm_s / self.interval if k else self.job.comm
        gpu, module_temp_gpu = self.thermal.step(
            dt=self.interval,
            coolant=self.thermal.coolant(t) + eff.coolant_delta,
            comm_recent=self.job.comm_share_recent(t),
            comm_interval=comm_interval,
            r_mult=eff.r_mult,
            r_extra=eff.r_extra,
            npo_coupling=eff.npo_coupling,
            noise=st.at(k, "gpu"),
            busy=None if load is None else (load.gpu_now, load.gpu_mean),
        )
        self.ecc_dbe += eff.dbe_events
        self.pcie_replay += poisson(self.pcie_rate * dt, st.at(k, "pcie"))

        job_share = 1.0 if load is None else load.port_mean
        port_util = self.traffic.comm_load * comm_interval * job_share + fabric.BACKGROUND
        light = self._optics(k, eff, self._module_temps(module_temp_gpu, port_util))
        if self.realism is not None and self.realism.has_dom:  # calibration error of the reading only
            lit_tx, lit_rx = light.tx_read > optics.LOSS_OF_LIGHT_DBM, light.rx_read > optics.LOSS_OF_LIGHT_DBM
            light.tx_read = np.where(lit_tx, light.tx_read + self.realism.dom_tx, light.tx_read)
            light.rx_read = np.where(lit_rx, light.rx_read + self.realism.dom_rx, light.rx_read)
        up_share, up_now, reset, after_reset = self._links(eff, t_prev, t, dt, light.port_ber, light.rx_min)
        port_up_share, port_up_now = up_share[p.port_link], up_now[p.port_link]
        flow = self._traffic(k, eff, t, dt, comm_s, port_up_share, port_up_now, load)
        measured_ber = self._errors(k, dt, light.port_ber, port_up_share, reset, after_reset, flow.tx_bytes)
        if eff.frame_loss:
            self._corruption(k, eff.frame_loss, flow.tx_pkts, reset, after_reset)
        queue = self._congestion(k, eff, dt, flow, port_up_share, port_up_now)
        switch_temp, fan = self._switch_rows(port_util, dt, st.at(k, "switch"))

        readings = {
            "gpu": gpu,
            "offbus": eff.offbus,
            "xid": eff.xid,
            "ecc_dbe": self.ecc_dbe,
            "pcie_replay": self.pcie_replay,
            "tx_read": light.tx_read,
            "rx_read": light.rx_read,
            "bias": light.bias,
            "module_temp": light.module_temp,
            "voltage": light.voltage,
            "up_now": port_up_now,
            "measured_ber": measured_ber,
            "queue": queue,
            "switch_temp": switch_temp,
            "fan": fan,
        }
        send_modules = self._module_due(t_prev, t, k, eff)
        self._k += 1
        if self.delivery is None:
            return self.messages.build(self.ts if ts is None else ts, k, readings, self, send_modules)
        unwanted = self.delivery.unwanted(k, t_prev, t)  # dropped unread (off cadence, outage): not cut
        messages = self.messages.build(self.ts if ts is None else ts, k, readings, self, send_modules, unwanted)
        return self.delivery.apply(messages, k, t_prev, t)

    # --- pieces of a step ---------------------------------------------------------------------------------

    def _optics(self, k: int, eff: Effects, module_temp: np.ndarray) -> _Light:
        """Lane powers, bias and BER at the scrape (optics.py has the physics)."""
        p = self.plant
        gen = self.streams.at(k, "optics")
        z_tx, z_rx, z_bias, z_ber, z_jitter = gen.standard_normal((5, p.L))
        u_burst, burst_mult = gen.random((2, p.L))
        z_temp, z_volt = gen.standard_normal((2, p.P))
        tx_true = np.where(eff.tx_dead, optics.DARK_DBM, self.tx_set_dbm - eff.tx_drop_db)
        # received power wanders by a few hundredths of a dB (connector micro-movement, polarisation)
        rx_true = tx_true[p.row_peer] - self.loss_rx_db - eff.rx_extra_loss_db + RX_JITTER_DB * z_jitter
        lane_temp = np.repeat(module_temp, LANES)
        # APC holds the set point: an ageing laser (bias_mult) needs more current for it, a dead one none
        bias = optics.bias_ma(self._tx_set_mw(), lane_temp, self.ith0, self.eta0) * eff.bias_mult
        bias = np.where(eff.tx_dead, 0.0, np.maximum(bias + 0.08 * z_bias, 0.0))
        floor = np.power(10.0, self.floor_log10 + 0.065 * z_ber) * optics.thermal_floor_factor(lane_temp)
        floor = np.where(u_burst < 2e-4, floor * (2.0 + 6.0 * burst_mult), floor)  # brief healthy error bursts
        ber_lane = floor + optics.waterfall_ber(rx_true, self.sensitivity_dbm)
        for rows, target, s in eff.ber_faults:  # log-linear from the healthy BER to the fault's
            base = ber_lane[rows]
            ber_lane[rows] = np.maximum(base, np.exp(np.log(base) + s * (np.log(target) - np.log(base))))
        ber_lane = np.minimum(ber_lane, 0.5)
        return _Light(
            tx_read=np.where(eff.tx_dead, optics.LOSS_OF_LIGHT_DBM, optics.dom_reading_dbm(tx_true, 0.03 * z_tx)),
            rx_read=optics.dom_reading_dbm(rx_true, 0.05 * z_rx),
            bias=bias,
            module_temp=module_temp + 0.1 * z_temp,
            voltage=self.voltage + 0.002 * z_volt,
            port_ber=_lane_mean(ber_lane),  # the FEC sees the lanes interleaved
            rx_min=_lane_min(rx_true),
        )

    def _tx_set_mw(self) -> np.ndarray:
        """The lanes' set-point power in mW, worked out again only when a set point changed (a module refit)."""
        if self._tx_set_seen is None or not np.array_equal(self._tx_set_seen, self.tx_set_dbm):
            self._tx_set_seen = self.tx_set_dbm.copy()
            self._tx_set_mw_cached = optics.dbm_to_mw(self.tx_set_dbm)
        return self._tx_set_mw_cached

    def _traffic(
        self,
        k: int,
        eff: Effects,
        t: float,
        dt: float,
        comm_s: float,
        up_share: np.ndarray,
        up_now: np.ndarray,
        load: JobLoad | None = None,
    ) -> _Flow:
        """Bytes and frames sent per port over the interval, and the load each egress sees at t."""
        p, tr = self.plant, self.traffic
        gen = self.streams.at(k, "traffic")
        z_traffic = gen.standard_normal(p.P)
        u_queue, u_burst, burst = gen.random((3, p.P))
        if load is None:
            seconds = (tr.comm_load * comm_s + fabric.BACKGROUND * dt) * (1.0 + 0.01 * z_traffic)
            rho_now = tr.comm_load * float(self.job.comm_now(t)) + fabric.BACKGROUND
        else:  # a job on part of the GPUs (realism.load_step)
            seconds = (tr.comm_load * comm_s * load.port_mean + fabric.BACKGROUND * dt) * (1.0 + 0.01 * z_traffic)
            rho_now = tr.comm_load * float(self.job.comm_now(t)) * load.port_now + fabric.BACKGROUND
        comm_now = self.job.comm_now(t)
        for port, load in eff.incast.items():
            if port in eff.incast_allreduce:  # the many-to-one step of the collective only
                busy = min(load, fabric.MAX_TX_SHARE) * comm_s + fabric.BACKGROUND * (dt - comm_s)
                seconds[port] = max(seconds[port], busy)
                rho_now[port] = max(rho_now[port], load * float(comm_now))
                continue
            seconds[port] = max(seconds[port], min(load, fabric.MAX_TX_SHARE) * dt)
            rho_now[port] = max(rho_now[port], load)
        comm_share = comm_s / dt if dt else self.job.comm
        pause_rate, blocked = pause_sources(p, eff, comm_share) if (eff.incast or eff.storm) else (np.zeros(p.P), {})
        for port, s in blocked.items():  # a port paused by its partner cannot send
            seconds[port] *= 1.0 - s
            rho_now[port] *= 1.0 - s
        silent = np.zeros(p.P, dtype=bool)
        if eff.offbus.any():  # a GPU off the bus neither sends nor is sent to
            dead = np.flatnonzero(eff.offbus[np.maximum(p.port_gpu, 0)] & p.port_is_gpu)
            silent[dead] = True
            silent[p.port_peer[dead]] = True
        seconds = np.where(silent, 0.0, seconds) * up_share
        rho_now = np.where(silent | ~up_now, 0.0, rho_now)
        tx_bytes = self.tx_bytes.add(seconds * fabric.LINE_BYTES_PER_S)
        self.rx_bytes += tx_bytes[p.port_peer]
        tx_pkts = self.tx_pkts.add(tx_bytes / tr.frame_bytes)
        self.rx_pkts += tx_pkts[p.port_peer]
        return _Flow(tx_bytes, tx_pkts, rho_now, pause_rate, blocked, u_queue, u_burst, burst)

    def _errors(
        self,
        k: int,
        dt: float,
        port_ber: np.ndarray,
        up_share: np.ndarray,
        reset: np.ndarray,
        after_reset: np.ndarray,
        tx_bytes: np.ndarray,
    ) -> np.ndarray:
        """FEC, symbol and CRC counters over the interval; returns the pre-FEC BER each port reports."""
        p = self.plant
        gen = self.streams.at(k, "fec")
        # The BER a port reports is its corrected bits over the bits it received in the last interval
        # (at the first scrape: over one interval before it, which only the reading sees).
        bits = optics.PORT_BITS_PER_S * self.interval * (up_share if k else 1.0)
        corrected = poisson(port_ber * bits, gen)
        unc = poisson(optics.codeword_failure(port_ber) * optics.CODEWORDS_PER_S * dt * up_share, gen)
        if self.realism is not None and self.realism.error_bursts:  # realism.burst_errors
            burst_bits, burst_failed = self.realism.bursts_of_errors(k, self.streams, dt, up_share)
            corrected = corrected + burst_bits.astype(np.int64)
            unc = unc + burst_failed
        measured_ber = corrected / np.maximum(bits, 1.0)
        busy = np.minimum(tx_bytes[p.port_peer] / (fabric.LINE_BYTES_PER_S * max(dt, 1e-9)), 1.0)
        crc = round_up_fraction(unc * CRC_FRAMES_PER_FAILED_CODEWORD * busy, gen.random(p.P))
        if not k:
            corrected = np.zeros(p.P, dtype=np.int64)
        zero = reset[p.port_link]
        keep = after_reset[p.port_link]  # counts after a retrain within the interval
        self.fec_corrected = np.where(zero, 0, self.fec_corrected) + np.floor(corrected * keep).astype(np.int64)
        self.fec_uncorrectable = np.where(zero, 0, self.fec_uncorrectable) + np.floor(unc * keep).astype(np.int64)
        symbols = np.floor(unc * keep * optics.SYMBOLS_PER_FAILED_CODEWORD).astype(np.int64)
        self.symbol_errors = np.where(zero, 0, self.symbol_errors) + symbols
        self.crc += crc
        return measured_ber

    def _corruption(
        self, k: int, loss: dict[int, float], tx_pkts: np.ndarray, reset: np.ndarray, after_reset: np.ndarray
    ) -> None:
        """Low-rate corruption (transceiver_fault, mode corrupt): lost frames and the codewords that lost them."""
        p = self.plant
        gen = self.streams.at(k, "corruption")  # its own stream: the healthy noise stays as it was
        rate = np.zeros(p.P)
        for port, q in loss.items():
            rate[port] = min(q, 1.0)
        lost = poisson(rate * tx_pkts[p.port_peer], gen)  # frames received over the interval
        unc = round_up_fraction(lost / CRC_FRAMES_PER_FAILED_CODEWORD, gen.random(p.P))
        keep = after_reset[p.port_link]
        unc_kept = np.floor(unc * keep).astype(np.int64)
        self.crc += lost
        self.fec_uncorrectable += unc_kept
        self.symbol_errors += unc_kept * optics.SYMBOLS_PER_FAILED_CODEWORD

    def _congestion(
        self, k: int, eff: Effects, dt: float, flow: _Flow, up_share: np.ndarray, up_now: np.ndarray
    ) -> np.ndarray:
        """Queues at t, ECN marks and pause frames over the interval; returns the queue depths."""
        p, tr = self.plant, self.traffic
        gen = self.streams.at(k, "congestion")
        queue = fabric.queue_mean_bytes(flow.rho_now, tr.frame_bytes) * tr.queue_scale * -np.log1p(-flow.u_queue)
        # microbursts (many flows' packets meeting at once): short, bounded by the ECN/PFC thresholds
        burst = np.minimum(queue * (5.0 + 25.0 * flow.burst), MICROBURST_CAP_BYTES)
        queue = np.where(flow.u_burst < 0.002, burst, queue)
        ecn_p = tr.ecn_rate.copy()
        rz = self.realism
        bursts = (
            None if rz is None else rz.bursts(k, self.streams, self.job.comm_now(self.t), flow.rho_now, tr.queue_scale)
        )
        if bursts is not None:  # realism.bursty_traffic: all-reduce in bursts
            queue = np.where(np.isnan(bursts[0]), queue, np.maximum(queue, bursts[0]))
            ecn_p = ecn_p * bursts[1]
        for port, load in eff.incast.items():
            if load > 1.0 and up_now[port]:
                standing = fabric.incast_queue(np.array([load]))[0] * (0.9 + 0.2 * flow.u_queue[port])
                # marks fall on the frames sent while the queue stands (all-reduce: the comm phase's)
                ecn_p[port] = max(ecn_p[port], float(fabric.ecn_probability(np.array([standing]))[0]))
                if port not in eff.incast_allreduce or self.job.comm_now(self.t):
                    queue[port] = standing
        for port, s in flow.blocked.items():
            if up_now[port]:
                queue[port] = s * fabric.QUEUE_CAP_BYTES * (0.95 + 0.1 * flow.u_queue[port])
        queue = np.where(up_now, queue, 0.0)
        marks = poisson(flow.tx_pkts * ecn_p, gen)
        gpu_facing = p.port_is_gpu & ~p.port_is_gpu[p.port_peer]
        marks[gpu_facing] = marks[p.port_peer[gpu_facing]]  # a NIC counts the marked frames it receives
        marks[p.port_is_gpu & p.port_is_gpu[p.port_peer]] = 0
        self.ecn += marks
        tx_pause = poisson((tr.pause_rate + flow.pause_rate) * dt * up_share, gen)
        if bursts is not None and rz is not None:
            tx_pause += rz.burst_pauses(k, self.streams, dt, self.job.comm, up_share)
        self.tx_pause += tx_pause
        self.rx_pause += tx_pause[p.port_peer]
        self._pauses_by_priority(eff, dt, tx_pause, tr.pause_rate, flow.pause_rate, up_share)
        return queue

    def _pauses_by_priority(
        self, eff: Effects, dt: float, tx_pause: np.ndarray, healthy: np.ndarray, fault: np.ndarray, up: np.ndarray
    ) -> None:
        """The interval's pause frames by lossless priority, and the time each priority's receiver was held.

        Every frame is RoCE's (priority 3) but a storm's: at a storm source, the frames beyond its
        healthy share are the storm's priority (none of the per-priority rows when it is not lossless).
        A receiver is held PAUSE_US_PER_FRAME per frame, a storm's partner ``paused`` of the time."""
        p = self.plant
        frames = np.zeros_like(self.tx_pause_prio)
        frames[ROCE_ROW] = tx_pause
        held_us = np.zeros(frames.shape)  # each receiver's time held by the storms sent to it
        storms = np.zeros_like(frames)
        for port, paused in eff.storm.items():
            share = fault[port] / (healthy[port] + fault[port]) if fault[port] > 0 else 0.0
            storm = round(float(tx_pause[port]) * share)
            frames[ROCE_ROW, port] -= storm
            prio = eff.storm_priority.get(port, ROCE_PRIORITY)
            if prio in LOSSLESS_PRIORITIES:  # else the port totals only
                row = LOSSLESS_PRIORITIES.index(prio)
                storms[row, port] = storm
                held_us[row, p.port_peer[port]] = paused * dt * up[port] * 1e6
        held_us += frames[:, p.port_peer] * PAUSE_US_PER_FRAME
        frames += storms
        self.tx_pause_prio += frames
        self.rx_pause_prio += frames[:, p.port_peer]
        self.rx_paused_us.add(np.minimum(held_us, dt * up[p.port_peer] * 1e6))

    # --- pieces of a step ---------------------------------------------------------------------------------

    def _module_temps(self, module_temp_gpu: np.ndarray, port_util: np.ndarray) -> np.ndarray:
        """Module temperature per port: NPO engines follow their GPU; pluggables their switch's inlet air."""
        p = self.plant
        temp = np.empty(p.P)
        g = p.port_is_gpu
        temp[g] = module_temp_gpu[p.port_gpu[g]] + self.module_offset_c[g]
        s = ~g
        temp[s] = (
            self.switch_ambient[p.port_switch[s]]
            + SWITCH_MODULE_SELF_C
            + self.switch_port_heat[s]
            + 3.0 * port_util[s]  # the module's DSP works harder with traffic
        )
        return temp

    def _links(
        self, eff: Effects, t_prev: float, t: float, dt: float, port_ber: np.ndarray, rx_min: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Link states at t and over the interval.

        Returns (share of the interval each link was up, up at t, FEC counters reset, share of the
        interval's counts that fall after the reset).
        """
        p = self.plant
        a, b = p.link_a, p.link_b
        lost = (np.minimum(rx_min[a], rx_min[b]) < optics.LOS_ASSERT_DBM) | (
            np.maximum(port_ber[a], port_ber[b]) > optics.LINK_LOST_BER
        )
        restored = (np.minimum(rx_min[a], rx_min[b]) >= optics.LOS_DEASSERT_DBM) & (
            np.maximum(port_ber[a], port_ber[b]) < optics.LINK_RESTORE_BER
        )
        state = np.where(self.link_up, ~lost, restored)
        drops = (self.link_up & ~state).astype(np.int64)
        reset = ~self.link_up & state
        after = np.ones(p.N)
        up_share = state.astype(np.float64)
        up_now = state.copy()
        for flap in eff.flaps:
            n, down, down_now, last_up = flap_window(flap, t_prev, t)
            i = flap.link
            drops[i] += n
            if dt:
                up_share[i] = max(0.0, up_share[i] - down / dt)
            up_now[i] &= not down_now
            if last_up is not None and state[i]:
                reset[i] = True
                after[i] = min(1.0, (t - last_up) / dt) if dt else 1.0
        for port in eff.replaced:  # swapping a module takes a live link down and up once
            i = p.port_link[port]
            drops[i] += int(self.link_up[i] and state[i])
            reset[i] = True
        self.link_up = state
        self.link_down[a] += drops
        self.link_down[b] += drops
        return up_share, up_now, reset, after

    def _switch_rows(self, port_util: np.ndarray, dt: float, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """ASIC temperature (lag 60 s towards inlet + R·P, P = 300 W + 250 W × load) and slowest fan."""
        p = self.plant
        z = gen.standard_normal((2, p.S))
        sw = ~p.port_is_gpu
        load = np.bincount(p.port_switch[sw], weights=port_util[sw], minlength=p.S) / np.maximum(
            np.bincount(p.port_switch[sw], minlength=p.S), 1
        )
        target = self.switch_ambient + self.switch_r * (300.0 + 250.0 * load)
        if self.asic_temp is None:
            self.asic_temp = target
        else:
            self.asic_temp = self.asic_temp + (target - self.asic_temp) * (1.0 - math.exp(-dt / 60.0))
        temp = np.round(self.asic_temp + 0.2 * z[0], 1)
        fan = np.round(self.fan_base * (1.0 + 0.02 * (self.asic_temp - 50.0)) + 40.0 * z[1])
        return temp, fan

    def _module_due(self, t_prev: float, t: float, k: int, eff: Effects) -> set[int]:
        """Indices (into plant.port_slices) of sources whose module message goes out at this scrape."""
        p = self.plant
        if k == 0 or math.floor(t / self.module_every) > math.floor(t_prev / self.module_every):
            return set(range(len(p.port_slices)))
        return {int(p.port_source[port]) for port in eff.replaced}

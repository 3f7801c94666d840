"""Fault injection: each cause of DESIGN §4 as changes to the plant's physical inputs.

A fault changes inputs (a fibre's loss, a coolant's temperature, a lane's BER, a port's offered load),
never readings directly, so every reading still follows the physics of the other modules. Severity
``s`` is 0 before ``start``, rises linearly over ``ramp`` seconds to 1 and drops to 0 at ``end``
(fabricwatch.faults.Fault.severity_at); lagged quantities (temperatures) then relax back. Discrete
events (a flap, an XID, a module replacement) happen at their instants. Random choices of a fault
(which lanes are dirtier, which ports of a switch fail) come from a stream of the fault's own, so a
fault never changes the noise any other entity sees.

Signatures: what differs from the same run (same seed) without the fault; nothing else does. "Port
errors" below means pre_fec_ber, fec_corrected_total, fec_uncorrectable_total, symbol_errors_total
and rx_crc_errors_total; "link-down port columns" means, at both ends: state 0 and speed_gbps null
at scrapes while down, pre_fec_ber null, link_down_total +1 per drop, bytes/packets, FEC/symbol,
pause and ECN counters stop for the time down, queue_depth_bytes 0, and FEC/symbol counters restart
from 0 when the link retrains.

connector_contamination  link; ``direction`` a_to_b (dirt in the a→b fibres, seen at b) or b_to_a;
    ``loss_db`` (4). optical rx_power_dbm of the receiving port's 4 lanes falls by 0.6-1.0 × loss_db
    (the dirtiest lane by loss_db). The receiving port's errors follow the BER waterfall: visible once
    rx is within ~3 dB of the lane's sensitivity (about -9 dBm), uncorrectables and CRC errors once
    BER nears 2.4e-4. tx at both ends and the other direction are unchanged. (A loss that drops the
    link adds the link-down port columns.) An intermittent connector (``episodes`` N, ``on_s`` 30,
    ``off_s`` 120; a loose or dirty connector that moves): the loss is there for on_s, gone for off_s,
    N times from ``start`` (``ramp`` still grows the loss from ``start``); a scrape reads the state
    at its instant and counts the interval's errors at that state, so on_s and off_s are meant to be
    multiples of the scrape interval. Between episodes the readings and the counters' rises are the
    healthy run's (the totals keep what the episodes added).
fiber_damage  link; ``loss_db`` (8). As contamination but both directions, every lane 0.85-1.0 ×
    loss_db: rx_power_dbm down at both ends, errors per the waterfall at both ends.
laser_degradation  port (the transmitter); ``drop_db`` (5), ``lane`` (None = all). The port's
    tx_power_dbm falls by s × drop_db and its bias_ma rises up to +50 % (APC driving an ageing laser);
    the far end's rx_power_dbm falls with it, its errors per the waterfall. Meant to ramp over hours.
    At ``end`` the module is replaced: the port's source re-sends its module message (module seq +1),
    the link retrains (link_down_total +1 and FEC/symbol counters from 0 at both ends), powers return.
transceiver_fault  port; ``mode``:
    errors (``ber`` 1e-3): the module's receive DSP corrupts bits on all lanes (``lane`` is for
    dead_lane only; one bad lane at 1e-3 would stay within the FEC): the port's errors,
    pre_fec_ber rising log-linearly to ``ber``; uncorrectables, symbol and CRC errors once ``ber``
    passes ~3e-4 (thousands per second at 1e-3). Optical powers at both ends unchanged.
    dead_lane (``lane`` 0): that lane's laser dies: its tx_power_dbm reads -40 dBm and its bias_ma 0,
    the far end's rx_power_dbm on that lane -40 dBm; other lanes and the other direction normal. The
    far end loses lock: the link-down port columns. At ``end`` the module is replaced (as above).
    corrupt (``frame_loss`` 1e-6, for 1e-8 .. 1e-4; s × frame_loss over the ramp): low-rate
    corruption (CorrOpt, SIGCOMM'17: a link is corrupting at frame loss ≥ 1e-8). Short error bursts
    in the receive path defeat the FEC in single codewords while the mean BER stays at its floor:
    each received frame is lost with probability frame_loss, one uncorrectable codeword per
    1.16 CRC errors (a frame spans ~6.4 codewords) with its symbol errors. rx_crc_errors_total,
    fec_uncorrectable_total and symbol_errors_total of the port rise; its pre_fec_ber,
    fec_corrected_total, optics and link partner are unchanged. The loss rate does not follow
    utilisation but the count does (it is a share of the frames received).
link_flap  link; ``period`` (30 s), ``down_s`` (3 s). From ``start`` the link drops for down_s every
    period seconds, drops between scrapes included: the link-down port columns at both ends (state 0
    only where a scrape falls inside a drop). Optics unchanged. ``ramp`` does not apply.
link_down  link. Light stops both ways: rx_power_dbm of every lane at both ends falls over ``ramp`` to
    -40 dBm; the link-down port columns at both ends. At ``end`` light returns and the link retrains.
switch_fault  switch; ``ports_fraction`` (0.6), ``ber`` (5e-4). A fixed random ports_fraction of the
    switch's ports receive with BER ``ber`` × 0.7-1.4 (log-linear over the ramp): port errors on all
    of them at once (at the default, uncorrectables and CRC errors from ~1/min to ~100/s per port).
    Optics, link partners and the switch row unchanged.
    ``mode: reboot`` (``down_s`` 90; real reboots take 60-120 s): the switch restarts at ``start``:
    every link of the switch is down for down_s (its lasers off: the far ends read loss of light,
    -40 dBm, and the link-down port columns), then retrains. The switch's own source is silent for
    the window, and from the first scrape after it the switch's ``_total`` counters restart from 0
    and its seq from 0 (collectors/sim/delivery.py, as a ``maintenance`` window does; unlike it,
    this one is unplanned and is ground truth). ports_fraction and ber do not apply.
incast_hotspot  port (congested egress); ``load`` (1.6, offered × line rate, s × load over the ramp).
    The port: tx_bytes/packets at 98.5 % of line rate all the time, queue_depth_bytes standing at
    0.15-3 MB once offered > 1, ecn_marked_total rising with DCQCN's marking probability (up to 20 %
    of frames). Its link partner: rx_bytes/packets, and ecn_marked_total if it is a GPU (it counts
    marked frames received). Its switch pauses the port's feeders (Plant.feeders: a leaf's uplinks for
    a GPU-facing port) at 24 000 × (load-1)/load frames/s: tx_pause_total there, rx_pause_total on
    their partners. One hop only. ``phase: allreduce``: the incast is a collective's many-to-one
    step, so it lives in the job's all-reduce phases only (job.py): the offered load applies for the
    comm seconds of each interval (tx bytes at line rate then, the job's load otherwise), the queue and
    ECN marking at a scrape in the comm phase only, and pauses at the rate above × the comm share.
pfc_storm  port (the pause source). The port: tx_pause_total at s × 24 000/s; its rx_bytes/packets
    (and, for a GPU, ecn_marked_total) drop by s because its partner is held; its queue and tx are
    unchanged (nothing is queued behind the pauses). The partner: rx_pause_total, tx_bytes/packets
    and ecn_marked_total down by s, queue_depth_bytes full (s × 3 MB). Upstream: the partner's switch
    pauses the partner's feeders at half the rate (hop 1), the switches beyond pause the feeders of
    those ports at a quarter (hop 2): tx_pause_total on those ports, rx_pause_total on their partners.
    PFC per priority (IEEE 802.1Qbb): ``priority`` (3), ``paused`` (1.0), ``quanta`` (65535). The
    source holds one priority in XOFF for ``paused`` of the time; a refresh every half pause time
    sends PAUSE_FULL_PER_S × 65535/quanta × paused frames/s (short quanta: more frames for the same
    paused time). Priority 3 is the RoCE class that carries the job (the default: as above, with
    the partner held ``paused`` × s of the time). Another priority carries none of the job's
    traffic, so nothing queues behind its pauses and nothing backs up: the source's tx_pause_total
    and the partner's rx_pause_total only; bytes, queues and ECN unchanged. Per priority (the
    schema's lossless priorities 3 and 4; rx/tx_pause_total count every priority's frames): the
    storm's frames are the source's tx_pause_pP_total and the partner's rx_pause_pP_total, and the
    partner's rx_pause_duration_pP_us_total rises by ``paused`` × s of the time; a storm on a
    priority outside 3 and 4 shows in the port totals only. Every other pause (healthy, incast,
    the storm's upstream spread, bursty traffic) is on the RoCE priority 3 and holds the receiver
    1 / PAUSE_FULL_PER_S per frame (a priority held throughout receives PAUSE_FULL_PER_S a second).
cooling_failure  cooling_loop; ``delta_c`` (18). The loop's coolant warms by s × delta_c and the
    reduced flow raises cold-plate resistance by up to 35 %. Every GPU of the loop: temp_c and
    mem_temp_c rise; from 85 °C throttle_mask has SW_THERMAL 0x20 (and 0x8|0x40 at 89 °C) while
    power_w and sm_clock_mhz fall. Their NPO engines warm with the coolant: module_temp_c and bias_ma
    of the GPUs' ports rise, and above 60 °C module temperature their pre_fec_ber and
    fec_corrected_total (×10 per 12 °C).
gpu_thermal  gpu; ``delta_c`` (22). The GPU runs s × delta_c hotter than it would at the job's mean
    load (its die-to-cold-plate resistance rises): temp_c, mem_temp_c up; from 85 °C SW_THERMAL 0x20,
    power_w and sm_clock_mhz down. Its engines do not heat: once it throttles, the lower power lets
    their module_temp_c (and bias_ma) fall by up to ~2 °C. Nothing else.
npo_thermal_coupling  gpu; ``delta_c`` (20), ``coupling`` (0.6). The GPU runs hot as in gpu_thermal
    (same gpu columns), and its engines take ``coupling`` × s of the die's excess over their normal
    temperature: module_temp_c up ~20 °C, bias_ma up ~20 %, the port's pre_fec_ber and
    fec_corrected_total up (×10 per 12 °C above 60 °C). The link partners are unchanged.
gpu_xid  gpu; ``xid`` (79). While active the GPU row's xid is the code. 48 (double-bit ECC):
    ecc_dbe_total +1 at ``start``. 79 (fallen off the bus): every other value of the row is null, and
    the GPU's host links go idle: tx/rx bytes and packets of both ends stop rising, their queue is 0
    and ECN marks stop; optics and link state unchanged. Other codes: xid only. After ``end`` the
    xid returns to 0 and readings resume.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fabricwatch.collectors.sim import fabric
from fabricwatch.collectors.sim.plant import LANES, Plant
from fabricwatch.collectors.sim.streams import Streams
from fabricwatch.collectors.sim.thermal import JOB_MEAN_W
from fabricwatch.errors import InputError
from fabricwatch.faults import Fault

CUT_DB = 60.0  # enough extra loss to put any lit lane below the DOM floor
DEAD_DB = 60.0
LASER_BIAS_RISE = 0.5
SWITCH_BER_SPREAD = (0.7, 1.4)
ROCE_PRIORITY = 3  # the lossless class RoCEv2 runs on by convention (NVIDIA/Mellanox default, DSCP 26)
PRIORITIES = 8  # IEEE 802.1Qbb traffic classes


@dataclass(slots=True)
class Flap:
    link: int
    start: float
    end: float | None
    period: float
    down_s: float


@dataclass(slots=True)
class Effects:
    """The physical inputs changed by the faults at one scrape."""

    coolant_delta: np.ndarray  # °C per GPU
    r_mult: np.ndarray  # × cold-plate resistance per GPU
    r_extra: np.ndarray  # + °C/W per GPU (die side)
    npo_coupling: np.ndarray  # weight of die excess temperature in its engines'
    xid: np.ndarray  # active XID code per GPU (0 none)
    dbe_events: np.ndarray  # DBE increments per GPU in this interval
    offbus: np.ndarray  # bool per GPU
    tx_drop_db: np.ndarray  # per lane row, at the transmitter
    bias_mult: np.ndarray  # per lane row
    tx_dead: np.ndarray  # bool per lane row: the laser is dead (reads -40 dBm, bias 0)
    rx_extra_loss_db: np.ndarray  # per lane row, on the fibre arriving at that row
    ber_faults: list[tuple[np.ndarray, np.ndarray, float]] = field(default_factory=list)  # (rows, target, s)
    incast: dict[int, float] = field(default_factory=dict)  # egress port → offered load (× line rate)
    storm: dict[int, float] = field(default_factory=dict)  # source port → severity
    flaps: list[Flap] = field(default_factory=list)
    replaced: list[int] = field(default_factory=list)  # ports whose module is replaced in this interval
    frame_loss: dict[int, float] = field(default_factory=dict)  # receiving port → frame-loss probability
    incast_allreduce: set[int] = field(default_factory=set)  # incast ports whose load lives in comm phases
    storm_pause: dict[int, float] = field(default_factory=dict)  # source port → pause frames/s
    storm_other_class: set[int] = field(default_factory=set)  # storms on a priority the job does not use
    storm_priority: dict[int, int] = field(default_factory=dict)  # source port → its storm's PFC priority


@dataclass(slots=True)
class _Compiled:
    fault: Fault
    index: int
    gpus: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0))
    port: int = -1
    link: int = -1


def _bad(i: int, fault: Fault, message: str) -> InputError:
    return InputError(f"faults[{i}] ({fault.cause} {fault.target})", message)


def _number(i: int, fault: Fault, name: str, low: float, high: float, *, low_open: bool = False) -> float:
    value = fault.option(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad(i, fault, f"{name} must be a number, not {value!r}")
    if value < low or value > high or (low_open and value == low):
        raise _bad(i, fault, f"{name} must be in {'(' if low_open else '['}{low:g}, {high:g}], not {value!r}")
    return float(value)


def _lane(i: int, fault: Fault, allow_none: bool) -> int | None:
    lane = fault.option("lane")
    if lane is None and allow_none:
        return None
    if isinstance(lane, bool) or not isinstance(lane, int) or not 0 <= lane < LANES:
        raise _bad(i, fault, f"lane must be an integer 0..{LANES - 1}{' or null' if allow_none else ''}, not {lane!r}")
    return lane


class Injector:
    """Compiles a fault list against a plant once; :meth:`effects` evaluates it at a scrape."""

    def __init__(self, plant: Plant, faults: Sequence[Fault], streams: Streams) -> None:
        self.plant = plant
        self.items: list[_Compiled] = []
        for i, fault in enumerate(faults):
            self.items.append(self._compile(i, fault, streams.static(f"fault/{i}")))

    def _compile(self, i: int, f: Fault, gen: np.random.Generator) -> _Compiled:
        p = self.plant
        c = _Compiled(f, i)
        cause = f.cause
        if cause in ("connector_contamination", "fiber_damage", "link_flap", "link_down"):
            if f.target not in p.link_index:
                raise _bad(i, f, "unknown link")
            c.link = p.link_index[f.target]
            ends = [p.link_a[c.link], p.link_b[c.link]]
            if cause == "connector_contamination":
                receiver = ends[1] if f.option("direction") == "a_to_b" else ends[0]
                c.rows = p.rows_of_port(receiver)
                w = gen.uniform(0.6, 1.0, LANES)
                c.weights = w / w.max() * _number(i, f, "loss_db", 0.0, 80.0)
                episodes = f.option("episodes")
                if episodes is not None:
                    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
                        raise _bad(i, f, f"episodes must be an integer ≥ 1 or null, not {episodes!r}")
                    _number(i, f, "on_s", 0.0, 1e9, low_open=True)
                    _number(i, f, "off_s", 0.0, 1e9)
            elif cause == "fiber_damage":
                c.rows = np.concatenate([p.rows_of_port(e) for e in ends])
                w = gen.uniform(0.85, 1.0, 2 * LANES)
                c.weights = w / w.max() * _number(i, f, "loss_db", 0.0, 80.0)
            elif cause == "link_down":
                c.rows = np.concatenate([p.rows_of_port(e) for e in ends])
                c.weights = np.full(2 * LANES, CUT_DB)
            else:
                period = _number(i, f, "period", 0.0, 1e9, low_open=True)
                _number(i, f, "down_s", 0.0, period, low_open=True)
        elif cause in ("laser_degradation", "transceiver_fault", "incast_hotspot", "pfc_storm"):
            if f.target not in p.port_index:
                raise _bad(i, f, "unknown port")
            c.port = p.port_index[f.target]
            if cause == "laser_degradation":
                lane = _lane(i, f, allow_none=True)
                _number(i, f, "drop_db", 0.0, 60.0)
                c.rows = p.rows_of_port(c.port) if lane is None else p.rows_of_port(c.port)[[lane]]
            elif cause == "transceiver_fault":
                lane = _lane(i, f, allow_none=False)
                if f.option("mode") == "dead_lane":
                    c.rows = p.rows_of_port(c.port)[[lane]]
                elif f.option("mode") == "corrupt":
                    _number(i, f, "frame_loss", 0.0, 0.01, low_open=True)
                else:
                    c.rows = p.rows_of_port(c.port)
                    _number(i, f, "ber", 0.0, 0.5, low_open=True)
            elif cause == "incast_hotspot":
                _number(i, f, "load", 0.0, 100.0)
            else:
                priority = f.option("priority")
                if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority < PRIORITIES:
                    raise _bad(i, f, f"priority must be an integer 0..{PRIORITIES - 1}, not {priority!r}")
                _number(i, f, "paused", 0.0, 1.0, low_open=True)
                _number(i, f, "quanta", 1.0, 65535.0)
        elif cause == "switch_fault":
            if f.target not in p.switch_index:
                raise _bad(i, f, "unknown switch")
            ports = p.ports_of_switch(p.switch_index[f.target])
            if f.option("mode") == "reboot":  # every link of the switch: both ends' receivers go dark
                _number(i, f, "down_s", 0.0, 1e9, low_open=True)
                ends = np.unique(np.concatenate([ports, p.port_peer[ports]]))
                c.rows = np.concatenate([p.rows_of_port(int(e)) for e in ends])
                c.weights = np.full(c.rows.size, CUT_DB)
                return c
            frac = _number(i, f, "ports_fraction", 0.0, 1.0, low_open=True)
            _number(i, f, "ber", 0.0, 0.5, low_open=True)
            n = max(1, round(frac * ports.size)) if ports.size else 0
            chosen = np.sort(gen.permutation(ports)[:n])
            c.rows = (chosen[:, None] * LANES + np.arange(LANES)).ravel()
            c.weights = np.repeat(gen.uniform(*SWITCH_BER_SPREAD, chosen.size), LANES)
        elif cause == "cooling_failure":
            if f.target not in p.loop_index:
                raise _bad(i, f, "unknown cooling loop")
            _number(i, f, "delta_c", 0.0, 200.0)
            c.gpus = np.flatnonzero(p.gpu_loop == p.loop_index[f.target])
        elif cause in ("gpu_thermal", "npo_thermal_coupling", "gpu_xid"):
            if f.target not in p.gpu_index:
                raise _bad(i, f, "unknown gpu")
            c.gpus = np.array([p.gpu_of(f.target)])
            if cause == "gpu_xid":
                xid = f.option("xid")
                if isinstance(xid, bool) or not isinstance(xid, int) or not 0 < xid < 2**31:
                    raise _bad(i, f, f"xid must be a positive integer, not {xid!r}")
            else:
                _number(i, f, "delta_c", 0.0, 200.0)
                if cause == "npo_thermal_coupling":
                    _number(i, f, "coupling", 0.0, 1.0)
        else:  # pragma: no cover - the vocabulary is closed; a new cause must be added here
            raise _bad(i, f, "cause not simulated")
        return c

    def effects(self, t_prev: float, t: float) -> Effects:
        """The inputs changed by every fault at scrape time ``t`` (the interval is (t_prev, t])."""
        p = self.plant
        e = Effects(
            coolant_delta=np.zeros(p.G),
            r_mult=np.ones(p.G),
            r_extra=np.zeros(p.G),
            npo_coupling=np.zeros(p.G),
            xid=np.zeros(p.G, dtype=np.int64),
            dbe_events=np.zeros(p.G, dtype=np.int64),
            offbus=np.zeros(p.G, dtype=bool),
            tx_drop_db=np.zeros(p.L),
            bias_mult=np.ones(p.L),
            tx_dead=np.zeros(p.L, dtype=bool),
            rx_extra_loss_db=np.zeros(p.L),
        )
        for c in self.items:
            f = c.fault
            s = f.severity_at(t)
            cause = f.cause
            if cause == "link_flap":
                e.flaps.append(Flap(c.link, f.start, f.end, float(f.option("period")), float(f.option("down_s"))))
                continue
            if cause in ("laser_degradation", "transceiver_fault") and f.end is not None and t_prev < f.end <= t:
                e.replaced.append(c.port)
            if cause == "gpu_xid":
                active = f.start <= t and (f.end is None or t < f.end)
                if active:
                    e.xid[c.gpus] = int(f.option("xid"))
                    e.offbus[c.gpus] |= int(f.option("xid")) == 79
                if int(f.option("xid")) == 48 and t_prev < f.start <= t:
                    e.dbe_events[c.gpus] += 1
                continue
            if cause == "connector_contamination" and f.option("episodes") is not None:
                s *= _in_episode(f, t)
            elif cause == "switch_fault" and f.option("mode") == "reboot":
                down = f.start <= t < f.start + float(f.option("down_s")) and (f.end is None or t < f.end)
                s = float(down)
            if s <= 0.0:
                continue
            if cause == "switch_fault" and f.option("mode") == "reboot":
                e.rx_extra_loss_db[c.rows] += c.weights
            elif cause in ("connector_contamination", "fiber_damage", "link_down"):
                e.rx_extra_loss_db[c.rows] += s * c.weights
            elif cause == "laser_degradation":
                e.tx_drop_db[c.rows] += s * float(f.option("drop_db"))
                e.bias_mult[c.rows] *= 1.0 + LASER_BIAS_RISE * s
            elif cause == "transceiver_fault":
                if f.option("mode") == "dead_lane":
                    e.tx_drop_db[c.rows] += s * DEAD_DB
                    e.bias_mult[c.rows] *= 1.0 - s
                    e.tx_dead[c.rows] |= s >= 1.0
                elif f.option("mode") == "corrupt":
                    e.frame_loss[c.port] = e.frame_loss.get(c.port, 0.0) + s * float(f.option("frame_loss"))
                else:
                    e.ber_faults.append((c.rows, np.full(c.rows.size, float(f.option("ber"))), s))
            elif cause == "switch_fault":
                e.ber_faults.append((c.rows, float(f.option("ber")) * c.weights, s))
            elif cause == "incast_hotspot":
                e.incast[c.port] = max(e.incast.get(c.port, 0.0), s * float(f.option("load")))
                if f.option("phase") == "allreduce":
                    e.incast_allreduce.add(c.port)
            elif cause == "pfc_storm":
                paused = s * float(f.option("paused"))
                if paused >= e.storm.get(c.port, 0.0):  # two storms on one port: the stronger one's priority
                    e.storm_priority[c.port] = int(f.option("priority"))
                e.storm[c.port] = max(e.storm.get(c.port, 0.0), paused)
                rate = paused * fabric.PAUSE_FULL_PER_S * 65535.0 / float(f.option("quanta"))
                e.storm_pause[c.port] = max(e.storm_pause.get(c.port, 0.0), rate)
                if int(f.option("priority")) != ROCE_PRIORITY:
                    e.storm_other_class.add(c.port)
            elif cause == "cooling_failure":
                e.coolant_delta[c.gpus] += s * float(f.option("delta_c"))
                e.r_mult[c.gpus] *= 1.0 + 0.35 * s
            elif cause in ("gpu_thermal", "npo_thermal_coupling"):
                e.r_extra[c.gpus] += s * float(f.option("delta_c")) / JOB_MEAN_W
                if cause == "npo_thermal_coupling":
                    e.npo_coupling[c.gpus] = np.maximum(e.npo_coupling[c.gpus], s * float(f.option("coupling")))
        return e


def _in_episode(f: Fault, t: float) -> float:
    """1.0 while an intermittent connector's loss is there at ``t`` (episode k: start + k·(on+off) .. + on)."""
    on, off = float(f.option("on_s")), float(f.option("off_s"))
    k = math.floor((t - f.start) / (on + off))
    return float(0 <= k < int(f.option("episodes")) and t - f.start - k * (on + off) < on)


def reboot_windows(faults: Sequence[Fault]) -> list[tuple[str, float, float]]:
    """(switch, start, end) of every switch reboot: its source is silent then and restarts its counters."""
    out = []
    for f in faults:
        if f.cause == "switch_fault" and f.option("mode") == "reboot":
            end = f.start + float(f.option("down_s"))
            out.append((f.target, f.start, end if f.end is None else min(end, f.end)))
    return out


def flap_window(flap: Flap, t_prev: float, t: float) -> tuple[int, float, bool, float | None]:
    """A flapping link in (t_prev, t]: (drops that began, seconds down, down at t, time of last retrain)."""
    drops, down, last_up = 0, 0.0, None
    if t < flap.start:
        return 0, 0.0, False, None
    k0 = max(0, math.floor((t_prev - flap.start - flap.down_s) / flap.period))
    k = k0
    down_now = False
    while True:
        w0 = flap.start + k * flap.period
        if w0 > t or (flap.end is not None and w0 >= flap.end):
            break
        w1 = w0 + flap.down_s
        if t_prev < w0 <= t:
            drops += 1
        overlap = min(w1, t) - max(w0, t_prev)
        if overlap > 0:
            down += overlap
        if w0 <= t < w1:
            down_now = True
        if t_prev < w1 <= t:
            last_up = w1
        k += 1
    return drops, down, down_now, last_up


def pause_sources(plant: Plant, effects: Effects, comm_share: float = 1.0) -> tuple[np.ndarray, dict[int, float]]:
    """Pause frames/s each port sends because of incasts and storms, and storm partners' drain loss.

    ``comm_share``: the share of the interval in the job's all-reduce phase (for ``phase: allreduce``).
    """
    rate = np.zeros(plant.P)
    blocked: dict[int, float] = {}
    for port, load in effects.incast.items():
        if load > 1.0:
            r = fabric.PAUSE_FULL_PER_S * (load - 1.0) / load
            if port in effects.incast_allreduce:
                r *= comm_share
            rate = np.maximum(rate, fabric.pause_spread(plant, {port: r}, hops=1, decay=0.5))
    for port, s in effects.storm.items():
        rate[port] = max(rate[port], effects.storm_pause.get(port, s * fabric.PAUSE_FULL_PER_S))
        if port in effects.storm_other_class:  # nothing of the job queues behind these pauses
            continue
        partner = int(plant.port_peer[port])
        blocked[partner] = max(blocked.get(partner, 0.0), s)
        spread = fabric.pause_spread(plant, {partner: 0.5 * s * fabric.PAUSE_FULL_PER_S}, hops=2, decay=0.5)
        rate = np.maximum(rate, spread)
    return rate, blocked

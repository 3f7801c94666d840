"""PFC pause storms (DESIGN §4 pfc_storm), with the SONiC PFC watchdog's meaning, per priority where
the source has it, traced to their origin.

SONiC's PFC watchdog calls a lossless queue *storming* when it is paused, has packets queued and
transmits none over its detection time (REALISM.md; NVIDIA's platforms: PFC blocks the queue for more
than 99 % of the interval). The storming queue is on the port that *receives* the pauses; the storm's
source is the port at the other end of its link, the one sending them. Over the latest scrape
interval of the receiving port (the shortest detection time the data allows), per port:

**Per priority**, where the source counts the time each lossless priority was held by received pauses
(``rx_pause_duration_pP_us_total``: mlx5 ``rx_prioP_pause_duration``, SAI
``SAI_PORT_STAT_PFC_P_RX_PAUSE_DURATION_US``): priority P is storming when it was held ≥
``paused_frac_min`` of the interval, so it could send during at most 1 - ``paused_frac_min`` of it
(none transmitted). This is the watchdog's own reading on platforms that count pause time: SONiC's
Mellanox detection script (sonic-swss orchagent/pfc_detect_mellanox.lua) calls a queue storming when
its pause duration over a poll exceeds 0.8 of the poll and it sent no packets, whether or not it holds
any (``occupancy_bytes == 0`` is one of its two branches; sonic-mgmt docs/pfcwd/PFCWD_MMU_Change.md:
"even when the queue is empty" a queue paused past the detection time is a storm). We cannot see a
priority's own sent packets, so we ask for the stricter 99 % held rather than 80 % held and nothing
sent; the queue depth, where the source has it, is evidence and not a condition. The finding names the priority.

**On the port** (today's judgement), where the source does not count every lossless priority's
pause time (our gNMI parser maps the port's MAC pause frames only, sysfs has none):

* paused: it receives ≥ ``pause_rate_min`` pause frames a second;
* queued: its ``queue_depth_bytes`` is above zero;
* transmits none, so blocked nearly all the time: with packets queued it sent ≤ 1 - ``paused_frac_min``
  of its line rate (a queue that has packets and sends 1 % of what the line carries is held 99 % of
  the time). The blocked time is read from what the queue sent, not from the pause count: how long a
  pause frame holds the link depends on the quanta the sender put in it (IEEE 802.1Qbb: up to 65535
  quanta of 512 bit times), which the counters do not say.

The port judgement covers the 1 % left over for control traffic and lossy classes still flowing
while the lossless one is held (a RoCE training fabric carries its load on the lossless class). A
storm on a lossless priority that carries none of the job (priority 4 under SONiC's default) leaves
the port's traffic flowing, so only the per-priority reading sees it. Where every lossless priority's
pause time is known, it decides; where one is unknown, the port judgement still applies. A column
that the source does not fill (no queue depth over OpenConfig gNMI, no pause counters over sysfs)
makes the queue's state unknown, and an unknown queue is never a storm: absent per-priority columns
are never read as quiet priorities.

**At the sender**, where its NIC counts the time its pauses held the partner on each lossless
priority (``tx_pause_duration_pP_us_total``: mlx5 ``tx_prioP_pause_duration``): the same held time
as the receiver's, read at the other end of the link. A priority it held ≥ ``paused_frac_min`` of its
latest interval is a storming queue at its partner, even where the partner (a switch over OpenConfig
gNMI) reports neither per-priority pause time nor queue depth.

Either way a held share is read within the port's own stamp scatter (:func:`last_share`): a host's
scrapes stamped a few tenths of a second off their period move the measured interval by several per
cent, while the time counter counts exactly, so a storm read interval by interval would flicker
around the 99 % line.

A port that sends ≥ ``pause_rate_min`` pause frames a second is pausing. It is the origin of a storm
(``pfc_storm_source``) when the queue it pauses is storming and its own device has no reason to pause
(no other port holding a queue of ``queue_high_bytes`` or being paused itself): pauses spread
upstream hop by hop, and a port pausing because its device is held is a step on the way, not the
origin. Every other pausing port is ``pause_upstream``; correlation folds them into the nearest storm
or congestion behind them.

Restoration, as the watchdog's: a storm found stays a storm until it stops (SONiC restores a queue
only once it has received no pause for its restoration time), here until the source no longer pauses
at ``pause_rate_min`` or its device gets another reason to. A held share read at 98.6 % one interval
(a host's stamps scatter more than their recent spread says) is the same storm, not an upstream step
that correlation would fold into whatever root is nearest.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import Fraction
from fabricwatch.detectors.frames import Keyed, peer_positions, sig, ts_or
from fabricwatch.detectors.traffic import TrafficConfig, by_device, traffic
from fabricwatch.records import Finding, Window
from fabricwatch.schema import LOSSLESS_PRIORITIES, pause_columns, tx_pause_duration_column

US_PER_S = 1e6  # the pause-duration counters count microseconds (mlx5 counters.rst; SAI ``_US``)
# A held share is read up to two standard deviations of the entity's own stamp scatter above its
# count (last_share): a one-sided 97.7 % allowance for where the interval really began and ended.
JITTER_K = 2.0


class PfcStormConfig(TrafficConfig):
    # NVIDIA's platforms call it a storm when PFC blocks the queue more than 99 % of the interval:
    # a priority held that share of it by its pause time, or on the port a queue with packets that
    # sends ≤ 1 % of its line rate
    paused_frac_min: Fraction = 0.99


def last_rate(at: Keyed, column: str) -> tuple[np.ndarray, np.ndarray]:
    """Per entity: the counter's rate over its latest scrape interval, and that interval's end ts
    (NaN where the entity has fewer than two samples)."""
    st = at.steps(column)
    rate, when = np.full(at.n, np.nan), np.full(at.n, np.nan)
    if len(st.codes):
        codes, pick = _latest(st.codes)
        with np.errstate(divide="ignore", invalid="ignore"):
            rate[codes] = np.where(st.dt[pick] > 0, st.step[pick] / st.dt[pick], np.nan)
        when[codes] = st.ts[pick]
    return rate, when


def _latest(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The entities that have steps, and the position of each one's latest step."""
    rev = np.arange(len(codes))[::-1]
    entities, first = np.unique(codes[rev], return_index=True)
    return entities, rev[first]


def last_share(at: Keyed, column: str) -> np.ndarray:
    """Per entity: the step of a time counter (µs) over its latest scrape interval as a share of that
    interval, read within its stamps' own jitter (NaN where unknown).

    A stamp's jitter moves the measured interval, not the time the counter counted: a host stamped
    0.2 s off its 5-s period reads a priority held all the time as held 96 % one interval and 104 %
    the next. So the interval is counted in whole periods of the entity's cadence (its first to last
    stamp here over the periods between, each interval rounded to whole periods of the median of its
    last three intervals, which one lost scrape cannot set: it makes one interval two periods), and
    the share is raised by ``JITTER_K`` standard deviations of the entity's own intervals about
    those periods (capped at 1 by the caller): what it may have been held, given how its stamps
    scatter. A steady collector (no scatter) reads exactly what its counter says."""
    st = at.steps(column)
    share = np.full(at.n, np.nan)
    if not len(st.codes):
        return share
    codes, pick = _latest(st.codes)
    recent_dts = np.full((3, len(codes)), np.nan)
    for back in range(3):
        j = np.maximum(pick - back, 0)
        recent_dts[back] = np.where((pick - back >= 0) & (st.codes[j] == codes), st.dt[j], np.nan)
    slot = np.searchsorted(codes, st.codes)  # each step's entity, by position in ``codes``
    rough = np.nanmedian(recent_dts, axis=0)[slot]  # the latest interval is always there: never all NaN
    with np.errstate(divide="ignore", invalid="ignore"):
        periods = np.maximum(1.0, np.round(st.dt / rough))
        counted = np.bincount(slot, weights=periods, minlength=len(codes))
        start = (st.ts - st.dt)[np.searchsorted(st.codes, codes)]  # each entity's first step's start
        period = (st.ts[pick] - start) / counted
        scatter = np.bincount(slot, weights=(st.dt - periods * period[slot]) ** 2, minlength=len(codes))
        sd = np.sqrt(scatter / counted)
        interval = periods[pick] * period
        read = st.step[pick] / US_PER_S + JITTER_K * sd
        share[codes] = np.where(period > 0, read / interval, np.nan)
    return share


class PfcStorm(Detector):
    name = "pfc_storm"
    emits = frozenset({"pfc_storm_source", "pause_upstream"})
    Config = PfcStormConfig
    config: PfcStormConfig

    def __init__(self, config: PfcStormConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.sources: set[str] = set()  # ports found storming and still pausing: not yet restored

    def snapshot(self) -> dict[str, Any]:
        return {"sources": sorted(self.sources)}

    def restore(self, state: dict[str, Any]) -> None:
        self.sources = set(state.get("sources", ()))

    def storming(self, window: Window, at: Keyed) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per port (``at``'s order): whether its egress queue is storming by the watchdog's meaning
        over its latest interval (False where unknown), the share of that interval it was held (NaN
        where unknown), and the lossless priority held (-1: judged on the port)."""
        port_storming, port_held = self.port_storming(at)
        held = np.full((len(LOSSLESS_PRIORITIES), at.n), np.nan)
        for row, priority in enumerate(LOSSLESS_PRIORITIES):
            # capped: a period's worth of pause time can still read a hair over it
            held[row] = np.minimum(last_share(at, pause_columns(priority)[2]), 1.0)
        known = ~np.isnan(held)
        with np.errstate(invalid="ignore"):
            on_priority = (held >= self.config.paused_frac_min).any(axis=0)  # NaN compares False
        worst = np.argmax(np.where(known, held, -1.0), axis=0)
        worst_held = held[worst, np.arange(at.n)]
        # an unknown lossless priority is never a quiet one: the port reading still applies there
        storming = on_priority | (port_storming & ~known.all(axis=0))
        priority = np.where(on_priority, np.asarray(LOSSLESS_PRIORITIES)[worst], -1)
        return storming, np.where(on_priority, worst_held, port_held), priority

    def holding(self, at: Keyed) -> tuple[np.ndarray, np.ndarray]:
        """Per port, from its own per-priority sent-pause time over its latest interval: the share of
        it the worst lossless priority held its partner (NaN where unknown), and that priority."""
        held = np.full((len(LOSSLESS_PRIORITIES), at.n), np.nan)
        for row, priority in enumerate(LOSSLESS_PRIORITIES):
            held[row] = np.minimum(last_share(at, tx_pause_duration_column(priority)), 1.0)  # as in storming()
        worst = np.argmax(np.where(np.isnan(held), -1.0, held), axis=0)
        return held[worst, np.arange(at.n)], np.asarray(LOSSLESS_PRIORITIES)[worst]

    def port_storming(self, at: Keyed) -> tuple[np.ndarray, np.ndarray]:
        """Per port, the watchdog's meaning read from port counters: paused, queued and sending
        ≤ 1 - ``paused_frac_min`` of its line rate (False where unknown), and the share held."""
        cfg = self.config
        speed_bps = at.last("speed_gbps") * 1e9
        rx_pause, _ = last_rate(at, "rx_pause_total")
        tx_bytes, _ = last_rate(at, "tx_bytes_total")
        queue = at.last("queue_depth_bytes")
        with np.errstate(divide="ignore", invalid="ignore"):
            sent = np.minimum(tx_bytes * 8 / speed_bps, 1.0)  # share of the line rate it transmitted
            blocking = (rx_pause >= cfg.pause_rate_min) & (queue > 0)
            held = np.where(blocking, 1.0 - sent, 0.0)
            held[np.isnan(rx_pause) | np.isnan(queue) | np.isnan(sent)] = np.nan
            storming = held >= cfg.paused_frac_min
        return storming, held  # NaN compares False: an unknown queue is never a storm

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        t = traffic(window, self.recent_s, cfg)
        if not t.at.n:
            return []
        with np.errstate(invalid="ignore"):
            pausing = t.tx_pause >= cfg.pause_rate_min
            if not pausing.any():
                self.sources.clear()  # every storm stopped
                return []
            storming, paused, priority = self.storming(window, t.at)
            partner = peer_positions(window, t.at)
            held = np.where(partner >= 0, storming[np.maximum(partner, 0)], False)
            sent_held, sent_priority = self.holding(t.at)
            holds = ~held & (sent_held >= cfg.paused_frac_min)  # read at the sender (docstring); NaN: False
            held |= holds
            reason = (t.queue >= cfg.queue_high_bytes) | (t.rx_pause >= cfg.pause_rate_min)
            devices = t.device_of(window)
            reasons = by_device(reason, devices).reindex(devices).to_numpy()
            explained = (reasons - reason.astype(np.int64)) > 0  # another port of the device has a reason
            names = np.asarray(t.at.names, dtype=object)
            was = np.isin(names, sorted(self.sources)) if self.sources else np.zeros(t.at.n, dtype=bool)
            source = pausing & (held | was) & ~explained  # restored only once its pauses stop (docstring)
        self.sources = (self.sources - set(names[~pausing])) | set(names[source])
        last_ts = t.at.last_ts()
        out = []
        for i in np.flatnonzero(pausing):
            port = t.at.names[i]
            evidence = [
                {
                    "metric": "tx_pause_per_s",
                    "port": port,
                    "value": sig(t.tx_pause[i], 3),
                    "threshold": cfg.pause_rate_min,
                },
                {"metric": "rx_util", "port": port, "value": sig(t.rx_util[i], 3)},
            ]
            held_priority = None
            if source[i] and holds[i]:  # the held time read at this port, the sender
                held_priority = int(sent_priority[i])
                evidence.append({"metric": "paused_frac", "port": window.topology.port_peer.get(port, port),
                                 "priority": held_priority, "value": sig(sent_held[i], 3),
                                 "threshold": cfg.paused_frac_min, "read_at": port})  # fmt: skip
            elif source[i]:  # the watchdog's reading of the queue it holds
                j = int(partner[i])
                entry: dict[str, object] = {"metric": "paused_frac", "port": t.at.names[j]}
                if priority[j] >= 0:  # read from that priority's pause time
                    held_priority = int(priority[j])
                    entry["priority"] = held_priority
                entry |= {"value": sig(paused[j], 3), "threshold": cfg.paused_frac_min}
                evidence.append(entry)
                evidence.append({"metric": "queue_depth_bytes", "port": t.at.names[j], "value": sig(t.queue[j])})
            else:
                evidence.append({"metric": "queue_depth_bytes", "port": port, "value": sig(t.queue[i])})
            out.append(
                Finding(
                    detector=self.name,
                    symptom="pfc_storm_source" if source[i] else "pause_upstream",
                    entity="port",
                    id=port,
                    first_seen=ts_or(t.first_pause[i], last_ts[i]),
                    last_seen=float(last_ts[i]),
                    severity="major" if source[i] else "warning",
                    evidence=tuple(evidence),
                    cause="pfc_storm" if source[i] else None,
                    score=float(t.tx_pause[i] / cfg.pause_rate_min),
                    attrs={"device": str(devices[i]), "partner_storming": bool(held[i]), "priority": held_priority},
                )
            )
        return out

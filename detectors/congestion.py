"""A congested egress port (DESIGN §4 incast_hotspot): more offered than the line can carry.

The port sends at ≥ ``line_rate_frac`` of its line rate and still builds a queue: ≥ ``ecn_frac`` of
its frames ECN-marked (the switch's own marking threshold says "congested") or a median queue of
``queue_high_bytes``. Pause frames it sends upstream are evidence; the upstream ports that pause in
turn are symptoms, folded into this port by correlation.

Where the source gives neither the queue depth nor ECN marks (OpenConfig gNMI, collectors/sim/
profiles.py), the queue is witnessed by the pauses its device sends: a lossless switch sends PFC pause
frames only when an ingress buffer passes its XOFF threshold (IEEE 802.1Qbb), which traffic held
behind a full egress queue causes. A port at ``line_rate_frac`` whose own queue and marks are unknown
is congested while another port of its device sends ≥ ``pause_rate_min`` pauses a second. Where the
queue or the marks are known, they decide, as above.

Judged twice: over ``recent_s`` as a whole, and burst by burst, where the data allows: each scrape
interval of the recent span on its own (its own rate, its ECN share, the queue sampled at its end).
An incast confined to the all-reduce phases fills the line only while they last; its 30-s average
can sit well under line rate while every interval that holds a phase is at line rate with a standing
queue. ``burst_min_intervals`` such intervals in the recent span make the port congested: one could
be a glitch of one sample. With slow scrapes the intervals are long and the burst view is the
average view.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import Count
from fabricwatch.detectors.frames import Keyed, sig, ts_or
from fabricwatch.detectors.traffic import TrafficConfig, by_device, traffic
from fabricwatch.records import Finding, Window


class CongestionConfig(TrafficConfig):
    line_rate_frac: float = 0.9  # egress at ≥ 90 % of line rate
    ecn_frac: float = 0.01  # ≥ 1 % of frames ECN-marked
    burst_min_intervals: Count = 2  # scrape intervals congested on their own: two, so one glitch is not a burst


def _at_steps(at: Keyed, column: str, codes: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """The step of counter ``column`` ending at each (entity code, ts), NaN where it has none."""
    st = at.steps(column)
    if not len(st.codes) or not len(codes):
        return np.full(len(codes), np.nan)
    steps = pd.Series(st.step, index=pd.MultiIndex.from_arrays([st.codes, st.ts]))
    steps = steps[~steps.index.duplicated()]
    return steps.reindex(pd.MultiIndex.from_arrays([codes, ts])).to_numpy(dtype=np.float64, na_value=np.nan)


def congested_bursts(at: Keyed, config: CongestionConfig) -> tuple[np.ndarray, np.ndarray]:
    """Per port: the number of scrape intervals in ``at`` congested on their own (at line rate with
    the ECN share or the queue sampled at its end over the marks), and the end ts of the first one."""
    count, first = np.zeros(at.n, dtype=np.int64), np.full(at.n, np.nan)
    st = at.steps("tx_bytes_total")
    if not len(st.codes):
        return count, first
    speed_bps = at.last("speed_gbps")[st.codes] * 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        full = st.step * 8 / st.dt / speed_bps >= config.line_rate_frac
    if not full.any():
        return count, first
    codes, ts, sent = st.codes[full], st.ts[full], st.step[full]
    queue = pd.Series(at.values("queue_depth_bytes"), index=pd.MultiIndex.from_arrays([at.codes, at.ts]))
    queue = queue[~queue.index.duplicated()]
    q = queue.reindex(pd.MultiIndex.from_arrays([codes, ts])).to_numpy(dtype=np.float64, na_value=np.nan)
    frames = _at_steps(at, "tx_packets_total", codes, ts) if at.has("tx_packets_total") else sent / config.mtu_bytes
    with np.errstate(divide="ignore", invalid="ignore"):
        marked = _at_steps(at, "ecn_marked_total", codes, ts) / frames
        busy = (marked >= config.ecn_frac) | (q >= config.queue_high_bytes)
    count = np.bincount(codes[busy], minlength=at.n)
    order = np.argsort(ts[busy], kind="stable")
    uniq, pos = np.unique(codes[busy][order], return_index=True)
    first[uniq] = ts[busy][order][pos]
    return count, first


class Congestion(Detector):
    name = "congestion"
    emits = frozenset({"congestion"})
    Config = CongestionConfig
    config: CongestionConfig

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        t = traffic(window, self.recent_s, cfg)
        if not t.at.n:
            return []
        with np.errstate(invalid="ignore"):
            busy = (t.tx_util >= cfg.line_rate_frac) & (
                (t.ecn_frac >= cfg.ecn_frac) | (t.queue >= cfg.queue_high_bytes)
            )
            # queue and marks unknown: the device's pauses upstream witness the queue (docstring)
            # (marks read at the far end are evidence of a queue, their absence none: traffic._far_marks)
            blind = np.isnan(t.queue) & (np.isnan(t.ecn_frac) | t.ecn_far) & (t.tx_util >= cfg.line_rate_frac)
        others = np.zeros(t.at.n, dtype=np.int64)  # per port: the other ports of its device pausing
        if blind.any():
            devices = t.device_of(window)
            with np.errstate(invalid="ignore"):
                pausing = t.tx_pause >= cfg.pause_rate_min
            others = by_device(pausing, devices).reindex(devices).to_numpy() - pausing.astype(np.int64)
            blind &= others > 0
        bursts, first_burst = congested_bursts(t.at, cfg)
        busy |= blind | (bursts >= cfg.burst_min_intervals)
        last_ts = t.at.last_ts()
        out = []
        for i in np.flatnonzero(busy):
            port = t.at.names[i]
            evidence = [
                {
                    "metric": "queue_depth_bytes",
                    "port": port,
                    "value": sig(t.queue[i]),
                    "threshold": cfg.queue_high_bytes,
                },
                {"metric": "ecn_marked_frac", "port": port, "value": sig(t.ecn_frac[i], 3), "threshold": cfg.ecn_frac},
                {"metric": "tx_util", "port": port, "value": sig(t.tx_util[i], 3), "threshold": cfg.line_rate_frac},
            ]
            if blind[i]:
                evidence.append({"metric": "device_ports_pausing", "port": port, "value": int(others[i]),
                                 "note": "queue and marks unknown: witnessed by its device's pauses"})  # fmt: skip
            if bursts[i]:
                evidence.append({"metric": "congested_intervals", "port": port, "value": int(bursts[i])})
            if np.isfinite(t.tx_pause[i]) and t.tx_pause[i] > 0:
                evidence.append({"metric": "tx_pause_per_s", "port": port, "value": sig(t.tx_pause[i], 3)})
            out.append(
                Finding(
                    detector=self.name,
                    symptom="congestion",
                    entity="port",
                    id=port,
                    first_seen=ts_or(np.fmin(t.first_busy[i], first_burst[i]), last_ts[i]),
                    last_seen=float(last_ts[i]),
                    severity="major",
                    evidence=tuple(evidence),
                    cause="incast_hotspot",
                    score=float(
                        np.nan_to_num(t.queue[i]) / cfg.queue_high_bytes + np.nan_to_num(t.ecn_frac[i]) / cfg.ecn_frac
                    ),
                    attrs={"tx_util": sig(t.tx_util[i], 3), "congested_intervals": int(bursts[i])},
                )
            )
        return out

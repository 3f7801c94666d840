"""A congested egress port (DESIGN §4 incast_hotspot): more offered than the line can carry.

The port sends at ≥ ``line_rate_frac`` of its line rate and still builds a queue: ≥ ``ecn_frac`` of
its frames ECN-marked (the switch's own marking threshold says "congested") or a median queue of
``queue_high_bytes``. Pause frames it sends upstream are evidence; the upstream ports that pause in
turn are symptoms, folded into this port by correlation.
"""

from __future__ import annotations

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.frames import sig, ts_or
from fabricwatch.detectors.traffic import TrafficConfig, traffic
from fabricwatch.records import Finding, Window


class CongestionConfig(TrafficConfig):
    line_rate_frac: float = 0.9  # egress at ≥ 90 % of line rate
    ecn_frac: float = 0.01  # ≥ 1 % of frames ECN-marked


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
        last_ts = t.at.last_ts()
        out = []
        for i in np.flatnonzero(busy):
            port = str(t.at.index[i])
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
            if np.isfinite(t.tx_pause[i]) and t.tx_pause[i] > 0:
                evidence.append({"metric": "tx_pause_per_s", "port": port, "value": sig(t.tx_pause[i], 3)})
            out.append(
                Finding(
                    detector=self.name,
                    symptom="congestion",
                    entity="port",
                    id=port,
                    first_seen=ts_or(t.first_busy[i], last_ts[i]),
                    last_seen=float(last_ts[i]),
                    severity="major",
                    evidence=tuple(evidence),
                    cause="incast_hotspot",
                    score=float(
                        np.nan_to_num(t.queue[i]) / cfg.queue_high_bytes + np.nan_to_num(t.ecn_frac[i]) / cfg.ecn_frac
                    ),
                    attrs={"tx_util": sig(t.tx_util[i], 3)},
                )
            )
        return out

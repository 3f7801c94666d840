"""PFC pause storms (DESIGN §4 pfc_storm): a port that pauses its neighbour with nothing behind it.

A port "pauses" when it sends ≥ ``pause_rate_min`` pause frames a second. Pausing is legitimate when
its device has a reason: another of its ports holds a queue of ``queue_high_bytes`` or is itself being
paused (congestion, or a storm, spreading upstream hop by hop). A pausing port whose device has no such
reason, whose own queue is empty (≤ ``storm_max_queue_bytes``) and that receives little traffic
(≤ ``storm_max_util_frac`` of line rate) is the source of a storm. The others that pause are
``pause_upstream`` symptoms; correlation folds them into the storm or the congestion behind them.
"""

from __future__ import annotations

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.frames import sig, ts_or
from fabricwatch.detectors.traffic import TrafficConfig, by_device, traffic
from fabricwatch.records import Finding, Window


class PfcStormConfig(TrafficConfig):
    storm_max_util_frac: float = 0.2  # a storm source carries little traffic ...
    storm_max_queue_bytes: int = 64 << 10  # ... and has nothing queued behind its pauses


class PfcStorm(Detector):
    name = "pfc_storm"
    emits = frozenset({"pfc_storm_source", "pause_upstream"})
    Config = PfcStormConfig
    config: PfcStormConfig

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        t = traffic(window, self.recent_s, cfg)
        if not t.at.n:
            return []
        with np.errstate(invalid="ignore"):
            pausing = t.tx_pause >= cfg.pause_rate_min
            if not pausing.any():
                return []
            reason = (t.queue >= cfg.queue_high_bytes) | (t.rx_pause >= cfg.pause_rate_min)
            devices = t.device_of(window)
            reasons = by_device(reason, devices).reindex(devices).to_numpy()
            explained = (reasons - reason.astype(np.int64)) > 0  # another port of the device has a reason
            quiet = ~(t.rx_util > cfg.storm_max_util_frac) & ~(t.queue > cfg.storm_max_queue_bytes)
            source = pausing & ~explained & quiet
        last_ts = t.at.last_ts()
        out = []
        for i in np.flatnonzero(pausing):
            port = str(t.at.index[i])
            evidence = (
                {
                    "metric": "tx_pause_per_s",
                    "port": port,
                    "value": sig(t.tx_pause[i], 3),
                    "threshold": cfg.pause_rate_min,
                },
                {"metric": "rx_util", "port": port, "value": sig(t.rx_util[i], 3)},
                {"metric": "queue_depth_bytes", "port": port, "value": sig(t.queue[i])},
            )
            out.append(
                Finding(
                    detector=self.name,
                    symptom="pfc_storm_source" if source[i] else "pause_upstream",
                    entity="port",
                    id=port,
                    first_seen=ts_or(t.first_pause[i], last_ts[i]),
                    last_seen=float(last_ts[i]),
                    severity="major" if source[i] else "warning",
                    evidence=evidence,
                    cause="pfc_storm" if source[i] else None,
                    score=float(t.tx_pause[i] / cfg.pause_rate_min),
                    attrs={"device": str(devices[i])},
                )
            )
        return out

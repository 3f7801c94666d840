"""Uncorrectable FEC codewords: frames the FEC could not save (every one is a lost frame).

A healthy link's post-FEC error floor is ~1e-15, so any uncorrectable codeword within ``recent_s``
counts (``fec_uncorrectable_min``); the tracker's debounce keeps a single stray one from paging.
Counter resets (module reset, link down) are handled: a lower value means a restart from 0.
"""

from __future__ import annotations

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.frames import recent, sig, ts_or
from fabricwatch.records import Finding, Window


class FecUncorrectableConfig(DetectorConfig):
    fec_uncorrectable_min: int = 1  # uncorrectable codewords in recent_s; healthy post-FEC BER ~1e-15


class FecUncorrectable(Detector):
    name = "fec_uncorrectable"
    emits = frozenset({"fec_uncorrectable"})
    Config = FecUncorrectableConfig
    config: FecUncorrectableConfig

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        now = recent(window, "port", self.recent_s)
        if not now.n:
            return []
        inc = now.increase("fec_uncorrectable_total")
        flagged = np.flatnonzero(np.nan_to_num(inc.total) >= cfg.fec_uncorrectable_min)
        rate = inc.rate()
        last_ts = now.last_ts()
        out = []
        for i in flagged:
            port = str(now.index[i])
            out.append(
                Finding(
                    detector=self.name,
                    symptom="fec_uncorrectable",
                    entity="port",
                    id=port,
                    first_seen=ts_or(inc.first_up[i], last_ts[i]),
                    last_seen=float(last_ts[i]),
                    severity="major",
                    evidence=(
                        {
                            "metric": "fec_uncorrectable_total",
                            "port": port,
                            "value": sig(inc.total[i]),
                            "per_s": sig(rate[i], 3),
                            "over_s": sig(inc.span[i], 3),
                        },
                    ),
                    score=float(inc.total[i]),
                    attrs={"increase": sig(inc.total[i]), "resets": int(inc.resets[i])},
                )
            )
        return out

"""Uncorrectable FEC codewords: frames the FEC could not save (every one is a lost frame).

A healthy link's post-FEC error floor is ~1e-15, so uncorrectable codewords within ``recent_s`` are
a finding (``fec_uncorrectable_min``) once they recur: a burst (a cable moved, a door shut on a
bundle: REALISM.md, "burst errors make some uncorrectables") fails codewords within one scrape
interval and is then clean, while a corrupting receiver fails some in most intervals. So the
codewords must have failed in ``persist_intervals`` intervals of the window and in at least
``persist_share`` of its intervals since the first one. Slower, steadier corruption is the corruption detector's (rates
accumulated over an hour against CorrOpt's 1e-8). A counter that fell, wrapped or stuck is unknown.

Each finding says whether the port's pre-FEC BER is known (``ber_known``: its BER column, or the
corrected bits where a collector has no BER column, as pre_fec_ber reads it): failed codewords with a
known BER that pre_fec_ber finds normal are error bursts, not a failing receiver (REALISM.md: the
uncorrectables of a receiver come as its BER nears the FEC limit), which correlation's rule 6 then
leaves alone; with the BER unknown they stay a link problem (a missing column is never quiet).
"""

from __future__ import annotations

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.frames import keyed, recent, sig, ts_or
from fabricwatch.detectors.pre_fec_ber import corrected_ber
from fabricwatch.records import Finding, Window


class FecUncorrectableConfig(DetectorConfig):
    fec_uncorrectable_min: int = 1  # uncorrectable codewords in recent_s; healthy post-FEC BER ~1e-15
    # A burst is one event: its codewords fail within one scrape interval. Two intervals is the least
    # that can show recurrence; half of the intervals since the first is the midpoint between errors
    # that come back in every interval (a receiver past its FEC limit fails codewords continuously:
    # REALISM.md, the uncorrectable cliff) and isolated events, which recur in almost none. Not fitted
    # to any capture: any burst rate well under one per scrape interval falls far below a half.
    persist_intervals: int = 2
    persist_share: float = 0.5


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
        # recurrence over the whole window (it holds ≥ 2 intervals whatever the cadence; same entities)
        whole = keyed(window, "port")
        st = whole.steps("fec_uncorrectable_total")
        rose = st.step > 0
        failed_in = np.bincount(st.codes[rose], minlength=now.n)  # intervals with a failed codeword
        first = whole.increase("fec_uncorrectable_total").first_up
        with np.errstate(invalid="ignore"):
            since_first = np.bincount(st.codes[st.ts >= first[st.codes]], minlength=now.n)
        recurring = (failed_in >= cfg.persist_intervals) & (failed_in >= cfg.persist_share * since_first)
        flagged = np.flatnonzero((np.nan_to_num(inc.total) >= cfg.fec_uncorrectable_min) & recurring)
        rate = inc.rate()
        last_ts = now.last_ts()
        ber = now.median("pre_fec_ber") if flagged.size else np.empty(0)
        if flagged.size and np.any(now.has("fec_corrected_total")):
            ber = np.where(np.isnan(ber), corrected_ber(now), ber)
        out = []
        for i in flagged:
            port = now.names[i]
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
                    attrs={
                        "increase": sig(inc.total[i]),
                        "resets": int(inc.resets[i]),
                        "intervals": f"{int(failed_in[i])}/{int(since_first[i])}",
                        "ber_known": bool(np.isfinite(ber[i])),
                    },
                )
            )
        return out

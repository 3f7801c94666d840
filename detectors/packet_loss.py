"""Frames lost on a link (the seeds' rule: loss ≥ 1 % → reroute).

Lost frames are the larger of the CRC errors and the uncorrectable codewords counted in ``recent_s``
(each uncorrectable codeword corrupts a frame that then fails its CRC, so adding them would count
twice); the frames received come from ``rx_packets_total`` when the source has it, otherwise from
``rx_bytes_total`` / the RoCEv2 MTU (4096 bytes). The ratio needs ``loss_min_frames`` lost frames:
two CRC errors on an idle link are not 1 % of anything. A port whose frame count is unknown (no
frame or byte counter, or one that reset, wrapped or stuck in the window) gets no ratio: unknown,
never 100 %. The immediate action is to reroute traffic
around the link (``attrs['runbook']``); the incident's runbook follows the cause found.
"""

from __future__ import annotations

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.frames import recent, sig, ts_or
from fabricwatch.records import Finding, Window


class PacketLossConfig(DetectorConfig):
    loss_ratio: float = 0.01  # the seeds' rule: ≥ 1 % of frames lost on a link
    loss_min_frames: int = 10  # a ratio over fewer lost frames is noise
    mtu_bytes: int = 4096  # RoCEv2 MTU, to count frames from bytes when frame counters are absent


class PacketLoss(Detector):
    name = "packet_loss"
    emits = frozenset({"packet_loss"})
    Config = PacketLossConfig
    config: PacketLossConfig

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        now = recent(window, "port", self.recent_s)
        if not now.n:
            return []
        crc = now.increase("rx_crc_errors_total")
        unc = now.increase("fec_uncorrectable_total")
        lost = np.fmax(crc.total, unc.total)
        first_up = np.fmin(crc.first_up, unc.first_up)
        if now.has("rx_packets_total"):
            frames = now.increase("rx_packets_total").total
        else:
            frames = now.increase("rx_bytes_total").total / cfg.mtu_bytes
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = lost / (frames + lost)
            flagged = np.flatnonzero((lost >= cfg.loss_min_frames) & (ratio >= cfg.loss_ratio))
        last_ts = now.last_ts()
        out = []
        for i in flagged:
            port = now.names[i]
            out.append(
                Finding(
                    detector=self.name,
                    symptom="packet_loss",
                    entity="port",
                    id=port,
                    first_seen=ts_or(first_up[i], last_ts[i]),
                    last_seen=float(last_ts[i]),
                    severity="major",
                    evidence=(
                        {"metric": "loss_ratio", "port": port, "value": sig(ratio[i], 3), "threshold": cfg.loss_ratio},
                    ),
                    score=float(ratio[i] / cfg.loss_ratio),
                    attrs={"runbook": "reroute", "lost_frames": sig(lost[i]), "loss_ratio": sig(ratio[i], 3)},
                )
            )
        return out

"""XID errors and double-bit ECC: the GPU itself reports that it is broken (DESIGN §4 gpu_xid).

``xid`` is the last XID the driver logged (0 = none), so a GPU keeps its finding until it is reset;
a rising ``ecc_dbe_total`` is the same fault (XID 48) seen through the ECC counter.
"""

from __future__ import annotations

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.frames import keyed, recent, sig, ts_or
from fabricwatch.records import Finding, Window


class GpuXidConfig(DetectorConfig):
    # XIDs that mean broken hardware (NVIDIA XID catalogue): 48 DBE, 63/64 row remap, 74 NVLink,
    # 79 fallen off the bus, 92 high SBE rate, 94/95 contained/uncontained ECC, 119/120 GSP.
    xid_critical: tuple[int, ...] = (48, 64, 74, 79, 92, 95, 119, 120)
    xid_ignore: tuple[int, ...] = ()  # e.g. (13, 31, 43) where application faults must not page


class GpuXid(Detector):
    name = "gpu_xid"
    emits = frozenset({"gpu_xid"})
    Config = GpuXidConfig
    config: GpuXidConfig

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        now = recent(window, "gpu", self.recent_s)
        if not now.n:
            return []
        xid = now.last("xid")
        dbe = now.increase("ecc_dbe_total")
        ignore = set(cfg.xid_ignore)
        has_xid = np.isfinite(xid) & (xid > 0) & ~np.isin(np.nan_to_num(xid), list(ignore) or [-1])
        has_dbe = np.nan_to_num(dbe.total) > 0
        flagged = np.flatnonzero(has_xid | has_dbe)
        if not len(flagged):
            return []
        full = keyed(window, "gpu")
        fx = full.values("xid")
        first = full.first_ts_where(np.isfinite(fx) & (fx > 0))
        last_ts = now.last_ts()
        out = []
        for i in flagged:
            gpu = now.names[i]
            code = int(xid[i]) if has_xid[i] else 48
            evidence = []
            if has_xid[i]:
                evidence.append({"metric": "xid", "gpu": gpu, "value": code})
            if has_dbe[i]:
                evidence.append({"metric": "ecc_dbe_total", "gpu": gpu, "value": sig(dbe.total[i]), "increase": True})
            seen = first[i] if has_xid[i] else dbe.first_up[i]
            out.append(
                Finding(
                    detector=self.name,
                    symptom="gpu_xid",
                    entity="gpu",
                    id=gpu,
                    first_seen=ts_or(seen, last_ts[i]),
                    last_seen=float(last_ts[i]),
                    severity="critical" if code in cfg.xid_critical or has_dbe[i] else "major",
                    evidence=tuple(evidence),
                    cause="gpu_xid",
                    attrs={"xid": code},
                )
            )
        return out

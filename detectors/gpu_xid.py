"""XID errors and double-bit ECC: the GPU itself reports that it is broken (DESIGN §4 gpu_xid).

``xid`` is the last XID the driver logged (0 = none), so a GPU keeps its finding until it is reset;
a rising ``ecc_dbe_total`` is the same fault (XID 48) seen through the ECC counter.

A GPU that has fallen off the bus (XID 79) answers nothing: NVML returns NVML_ERROR_GPU_IS_LOST for
every query, so its collector keeps the row with every reading null (collectors/nvml.py), and a
collector that sees no XID events (nvidia-smi's query, DESIGN §4b profiles) reports no XID at all.
Such a GPU is the same fault: its latest row has every reading null while the same collector, in the
same recent rows, read another GPU (so the collector itself can read those columns). One such row is
enough: the driver marks a lost GPU lost until it is reset, and a row of independent nulls (a
collector's N/A cells) is as likely as each cell's N/A rate to the power of the readings' count.
"""

from __future__ import annotations

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.frames import Keyed, keyed, recent, sig, ts_or
from fabricwatch.records import Finding, Window

# What a GPU reads (DESIGN §3 gpu): all null in one row is a GPU that answered nothing
READINGS = ("util_pct", "mem_util_pct", "temp_c", "mem_temp_c", "power_w", "power_limit_w", "sm_clock_mhz")
LOST_XID = 79  # fallen off the bus (NVIDIA XID catalogue): what NVML_ERROR_GPU_IS_LOST looks like


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
        full = keyed(window, "gpu")
        lost, lost_since = _lost(now, full)
        lost &= ~has_xid & ~has_dbe  # a collector that reports the XID names it already
        flagged = np.flatnonzero(has_xid | has_dbe | lost)
        if not len(flagged):
            return []
        fx = full.values("xid")
        first = full.first_ts_where(np.isfinite(fx) & (fx > 0))
        last_ts = now.last_ts()
        out = []
        for i in flagged:
            gpu = now.names[i]
            code = int(xid[i]) if has_xid[i] else LOST_XID if lost[i] else 48
            evidence = []
            if lost[i]:
                evidence.append({"metric": "readings", "gpu": gpu, "value": None,
                                 "note": "every reading null while its collector reads its other GPUs: "
                                         "lost (NVML_ERROR_GPU_IS_LOST)"})  # fmt: skip
            if has_xid[i]:
                evidence.append({"metric": "xid", "gpu": gpu, "value": code})
            if has_dbe[i]:
                evidence.append({"metric": "ecc_dbe_total", "gpu": gpu, "value": sig(dbe.total[i]), "increase": True})
            seen = first[i] if has_xid[i] else lost_since[i] if lost[i] else dbe.first_up[i]
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
                    attrs={"xid": code, "lost": True} if lost[i] else {"xid": code},
                )
            )
        return out


def _lost(now: Keyed, full: Keyed) -> tuple[np.ndarray, np.ndarray]:
    """Per GPU: its latest recent row reads nothing while its collector read another GPU in the recent
    rows (module docstring), and since when its rows have read nothing (NaN where not lost)."""
    columns = [c for c in READINGS if c in now.frame.columns]
    if not columns:
        return np.zeros(now.n, dtype=bool), np.full(now.n, np.nan)
    blank = np.logical_and.reduce([np.isnan(now.values(c)) for c in columns])
    src = now.sources()
    reading = np.isin(src, np.unique(src[~blank]))  # rows of collectors that read some GPU here
    lost = now.last_ts_where(blank & reading) == now.last_ts()  # NaN (never blank) compares False
    if not lost.any():
        return lost, np.full(now.n, np.nan)
    whole = np.logical_and.reduce([np.isnan(full.values(c)) for c in columns])
    good = np.nan_to_num(full.last_ts_where(~whole), nan=-np.inf)  # the run of blank rows starts after it
    return lost, np.where(lost, full.first_ts_where(whole & (full.ts > full.per_row(good))), np.nan)

"""Optical levels against the module's own alarm and warning thresholds, per lane (DESIGN §3 module).

Every module reports its thresholds (``module`` kind); a port whose module never did is judged by the
defaults of its media type (``media_defaults``), else by the 400GBASE-DR4 defaults of the config.
Levels are lane medians of the lit readings over ``recent_s``. A lane whose latest reading is below
``loss_of_light_dbm`` is dark: that is loss of light, not a low reading. The link budget is checked
too, against the other end: tx(far end, same lane) − rx(here) above ``link_loss_max_db`` (and
``link_loss_margin_db`` above the fleet's median loss, since DOM calibration differs between vendors)
means the path between them may eat the light. Absolute readings carry each DOM's ±3 dB calibration
error (SFF-8472), so a warning or the path loss is evidence beside a change or an alarm, never an
incident alone (detectors/correlate.py NOT_ALONE).

A dark receive lane whose port has come back up is no loss of light: a link is up only with light on
every lane (IEEE 802.3 PCS lock; the simulator takes it down the same way), so when the port's state
read down during the dark spell and reads up after the lane's last dark reading, that reading is the
stale one of an outage that has ended (a leaf rebooted, and the spine, whose optics are read less often
than its port states, last read its uplinks dark while the leaf was away; REALISM.md). The next reading
of the lane says whether the light is back. A dark lane on a port that never read down is still
reported (its state column may lag or lie: the lane is the evidence).
"""

from __future__ import annotations

import msgspec
import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.frames import (
    Keyed,
    first_crossing,
    keyed,
    lane_findings,
    module_thresholds,
    peer_positions,
    recent,
)
from fabricwatch.records import Finding, Window

MEDIA_DEFAULTS: dict[str, dict[str, float]] = {
    # 400GBASE-FR4 (IEEE 802.3cu cl. 151): launch ≥ -3.2 dBm a lane, receive ≥ -7.2 dBm
    "400G-FR4": {"tx_power_low_warn_dbm": -3.2, "tx_power_low_alarm_dbm": -6.2,
                 "rx_power_low_warn_dbm": -7.2, "rx_power_low_alarm_dbm": -10.2},
    # 400GBASE-SR8 (IEEE 802.3cm cl. 138): launch ≥ -6.5 dBm a lane, receive ≥ -8.4 dBm
    "400G-SR8": {"tx_power_low_warn_dbm": -6.5, "tx_power_low_alarm_dbm": -9.5,
                 "rx_power_low_warn_dbm": -8.4, "rx_power_low_alarm_dbm": -11.4},
}  # fmt: skip


class OpticalThresholdsConfig(DetectorConfig):
    # Defaults for a module that never reported its thresholds: 400GBASE-DR4. IEEE 802.3bs cl. 124:
    # launch power -2.9..+4.0 dBm a lane, receive ≥ -5.9 dBm average; vendors put the low alarm ~3 dB
    # under the warning.
    dr4_rx_low_warn_dbm: float = -5.9
    dr4_rx_low_alarm_dbm: float = -8.9
    dr4_tx_low_warn_dbm: float = -2.9
    dr4_tx_low_alarm_dbm: float = -5.9
    dr4_temp_high_warn_c: float = 70.0  # QSFP-DD case temperature limit
    dr4_temp_high_alarm_c: float = 75.0
    # Other media's defaults by module column (the module kind's ``media``), from their IEEE clauses'
    # per-lane minimum average launch and receive powers as warnings, alarms 3 dB under as above.
    media_defaults: dict[str, dict[str, float]] = msgspec.field(default_factory=lambda: dict(MEDIA_DEFAULTS))
    loss_of_light_dbm: float = -30.0  # below this a lane receives (or sends) nothing (dark reads ~-40 dBm)
    link_loss_max_db: float = 5.0  # tx(far) - rx(near) above this: out of any DR4 budget (3 dB + margin) ...
    link_loss_margin_db: float = 3.0  # ... and this much above the fleet's median loss (DOM calibration differs)


class OpticalThresholds(Detector):
    name = "optical_thresholds"
    emits = frozenset({
        "loss_of_light", "rx_power_low_alarm", "rx_power_low_warn",
        "tx_dark", "tx_power_low_alarm", "tx_power_low_warn",
        "bias_high_alarm", "bias_high_warn", "module_temp_high_alarm", "module_temp_high_warn",
        "path_loss_high",
    })  # fmt: skip
    Config = OpticalThresholdsConfig
    config: OpticalThresholdsConfig

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        now = recent(window, "optical", self.recent_s)
        if not now.n:
            return []
        full = keyed(window, "optical")
        th = module_thresholds(window, now.index, cfg)
        # Dark is a state, like a link's: the latest reading says whether the lane is dark now (as
        # link_state reads the latest state), and a dark reading is no level, so the levels judged
        # against the thresholds are medians of the lit readings only. A median over dark and lit
        # readings alike would hold a lane dark for half the window after its light came back.
        dark = np.full(now.n, cfg.loss_of_light_dbm)
        rx_last, tx_last = now.last("rx_power_dbm"), now.last("tx_power_dbm")
        with np.errstate(invalid="ignore"):
            rx = now.median_where("rx_power_dbm", now.values("rx_power_dbm") > cfg.loss_of_light_dbm)
            tx = now.median_where("tx_power_dbm", now.values("tx_power_dbm") > cfg.loss_of_light_dbm)
        bias, temp = now.median("bias_ma"), now.median("module_temp_c")
        out: list[Finding] = []
        rxa, rxw = th["rx_power_low_alarm_dbm"], th["rx_power_low_warn_dbm"]
        txa, txw = th["tx_power_low_alarm_dbm"], th["tx_power_low_warn_dbm"]
        ba, bw = th["bias_high_alarm_ma"], th["bias_high_warn_ma"]
        ta, tw = th["temp_high_alarm_c"], th["temp_high_warn_c"]
        with np.errstate(invalid="ignore"):
            dark_rx, dark_tx = rx_last <= dark, tx_last <= dark
            dark_rx &= ~_back_up(window, full, now, dark_rx, dark)
            rx_alarm, tx_alarm, rx_warn, tx_warn = rx < rxa, tx < txa, rx < rxw, tx < txw
            bias_alarm, temp_alarm, bias_warn, temp_warn = bias >= ba, temp >= ta, bias >= bw, temp >= tw
            peer = peer_positions(window, now)
            tx_far = np.where(peer >= 0, tx[np.maximum(peer, 0)], np.nan)
            loss = tx_far - rx
            lit = ~dark_rx & ~(tx_far <= dark) & np.isfinite(loss)
            fleet = float(np.median(loss[lit])) if lit.any() else np.nan
            budget = (
                max(cfg.link_loss_max_db, fleet + cfg.link_loss_margin_db)
                if np.isfinite(fleet)
                else cfg.link_loss_max_db
            )
            lossy = lit & (loss >= budget)
        rules = (
            # symptom, severity, metric, value, mask, level, below
            ("loss_of_light", "critical", "rx_power_dbm", rx_last, dark_rx, dark + 1e-9, True),
            ("rx_power_low_alarm", "major", "rx_power_dbm", rx, ~dark_rx & rx_alarm, rxa, True),
            ("rx_power_low_warn", "minor", "rx_power_dbm", rx, ~rx_alarm & rx_warn, rxw, True),
            ("tx_dark", "critical", "tx_power_dbm", tx_last, dark_tx, dark + 1e-9, True),
            ("tx_power_low_alarm", "major", "tx_power_dbm", tx, ~dark_tx & tx_alarm, txa, True),
            ("tx_power_low_warn", "minor", "tx_power_dbm", tx, ~tx_alarm & tx_warn, txw, True),
            ("bias_high_alarm", "major", "bias_ma", bias, bias_alarm, ba, False),
            ("bias_high_warn", "minor", "bias_ma", bias, ~bias_alarm & bias_warn, bw, False),
            ("module_temp_high_alarm", "major", "module_temp_c", temp, temp_alarm, ta, False),
            ("module_temp_high_warn", "minor", "module_temp_c", temp, ~temp_alarm & temp_warn, tw, False),
        )  # fmt: skip
        for symptom, severity, metric, value, mask, level, below in rules:
            if mask.any():
                out += self._lanes(full, now, symptom, severity, metric, value, mask, level, below)
        if lossy.any():
            # first seen: when rx first fell further than the budget below the far end's current tx
            first = first_crossing(full, "rx_power_dbm", tx_far - budget + 1e-9, below=True)
            out += lane_findings(
                self.name, "path_loss_high", "minor", now, lossy, "link_loss_db", loss, first,
                worst="max", reference=("threshold", np.full(now.n, budget)),
            )  # fmt: skip
        return out

    def _lanes(
        self,
        full: Keyed,
        now: Keyed,
        symptom: str,
        severity: str,
        metric: str,
        value: np.ndarray,
        mask: np.ndarray,
        level: np.ndarray,
        below: bool,
    ) -> list[Finding]:
        first = first_crossing(full, metric, level, below)
        worst = "min" if below else "max"
        return lane_findings(
            self.name, symptom, severity, now, mask, metric, value, first, worst=worst, reference=("threshold", level)
        )


def _back_up(window: Window, full: Keyed, now: Keyed, dark_rx: np.ndarray, dark: np.ndarray) -> np.ndarray:
    """Dark lanes whose port read down during their dark spell and up since their last dark reading
    (module docstring): the outage that darkened them is over."""
    back = np.zeros(now.n, dtype=bool)
    candidates = np.flatnonzero(dark_rx)
    ports = keyed(window, "port")
    if not len(candidates) or not ports.n or not ports.has("state"):
        return back
    where = ports.index.get_indexer(now.index.get_level_values(0)[candidates])
    onset = first_crossing(full, "rx_power_dbm", dark + 1e-9, below=True)
    last_dark = now.last_ts()
    state = ports.values("state")
    for i, p in zip(candidates, where, strict=True):
        if p < 0:
            continue
        rows = ports.span(int(p))
        ts, up = ports.ts[rows], state[rows]
        known = ~np.isnan(up)
        ts, up = ts[known], up[known]
        if not len(ts) or up[-1] != 1 or not ts[-1] > last_dark[i]:
            continue
        back[i] = bool(np.any((up == 0) & (ts >= onset[i]) & (ts <= last_dark[i])))
    return back

"""Optical physics of a 400G-DR4 link: powers, laser bias, bit errors and what the FEC makes of them.

Numbers and where they come from:

* 400GBASE-DR4 (IEEE 802.3bs, clause 124): four lanes of 53.125 GBd PAM4 = 106.25 Gb/s each, 425 Gb/s
  on the wire for 400 Gb/s of MAC data after RS(544,514) FEC and 256b/257b transcoding. Per lane:
  average launch power -2.9..+4.0 dBm, average receive power down to -5.9 dBm, receiver damage
  at +5 dBm, channel insertion loss up to 3 dB (500 m). Module datasheets (e.g. Edgecore ET7502-DR4)
  repeat these and give LOS assert/de-assert at -15/-10 dBm.
* Loss of light reads about -40 dBm: SFF-8636 / CMIS report optical power in units of 0.1 µW, so an
  unlit receiver reads the smallest step, 0.1 µW = -40 dBm.
* RS(544,514) "KP4" FEC (802.3 clause 119): 10-bit symbols, corrects t = 15 symbol errors per 5440-bit
  codeword; a link is specified at a pre-FEC BER of 2.4e-4, the FEC limit quoted by every 400G
  datasheet. Uncorrectable codewords follow from the binomial tail P(> 15 of 544 symbols in error),
  which is negligible (< 1e-12 per codeword) at 2.4e-4 and rises steeply above it.
* Waterfall: a thermal-noise-limited PAM4 receiver has Q proportional to received optical power (linear
  units) and BER ≈ 3/4 · erfc(Q/√2) (Gray-coded PAM4, errors to adjacent levels). Each lane has a
  sensitivity, the received power at which the waterfall reaches 2.4e-4; real DR4 receivers beat the
  worst-case spec (-4.4 dBm OMA, stressed -1.9 dBm) by several dB, so ``SENSITIVITY_DBM`` is -9 dBm.
  This gives ~1.5 decades of BER per dB near the threshold, as measured 100G-PAM4 curves show. On top
  is a per-lane floor (TDECQ, jitter, reflections) of 1e-9..1e-6, the healthy range seen on deployed
  400G links.
* Laser bias under automatic power control: I = I_th(T) + P/η(T), with threshold current
  I_th = I_th0·exp((T-50 °C)/T0), T0 = 60 K, and slope efficiency falling 0.4 %/K (typical DFB/EML
  characteristics). Hotter modules draw more bias for the same power.
* Temperature raises a module's BER floor (laser bandwidth, driver linearity and TIA noise degrade):
  ×10 per 12 °C above 60 °C, below the 70-75 °C warning thresholds of the parts below.

``PARTS`` are the modules the plant uses: near-package optical engines on the GPUs and OSFP/QSFP112
pluggables in the switches. Vendor names are fictional; thresholds are typical of 400G-DR4 datasheets
and DOM tables (e.g. the threshold tables in ../shared/data/switch-cli), differing by vendor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MEDIA = "400G-DR4"
LANE_GBPS = 106.25  # line rate per lane (53.125 GBd PAM4)
PORT_BITS_PER_S = 4 * LANE_GBPS * 1e9  # 425 Gb/s through the FEC
CODEWORD_BITS = 5440  # RS(544,514) with 10-bit symbols
CODEWORD_SYMBOLS = 544
FEC_T = 15  # correctable symbols per codeword
FEC_LIMIT_BER = 2.4e-4
CODEWORDS_PER_S = PORT_BITS_PER_S / CODEWORD_BITS
SYMBOLS_PER_FAILED_CODEWORD = 17  # > t errors: at least 16, plus the expected excess near the limit

LOSS_OF_LIGHT_DBM = -40.0  # 0.1 µW, the DOM's smallest reading
DARK_DBM = -60.0  # power of an unlit path before the DOM floor
LOS_ASSERT_DBM = -15.0
LOS_DEASSERT_DBM = -10.0
LINK_LOST_BER = 1e-2  # PCS loses alignment lock; the link drops
LINK_RESTORE_BER = 1e-3

SENSITIVITY_DBM = -9.0
THERMAL_KNEE_C = 60.0
THERMAL_DECADE_C = 12.0
T0_K = 60.0
SLOPE_TEMPCO = 0.004  # per K
ITH0_MA = 10.0


def _q_at_limit() -> float:
    lo, hi = 0.0, 20.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if 0.75 * math.erfc(mid / math.sqrt(2)) > FEC_LIMIT_BER:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


Q_AT_SENSITIVITY = _q_at_limit()  # ≈ 3.6
_Q_NEGLIGIBLE = 9.0  # BER < 1e-19 beyond: nothing a counter could see
_X_NEGLIGIBLE = math.log10(_Q_NEGLIGIBLE / Q_AT_SENSITIVITY) + 1e-6  # (rx - sensitivity)/10 dB above it: q is too


@dataclass(frozen=True, slots=True)
class ModulePart:
    vendor: str
    part_number: str
    npo: bool  # near-package engine on a GPU (True) or switch pluggable
    tx_nominal_dbm: float
    bias_nominal_ma: float
    rx_power_low_alarm_dbm: float | None  # None: the module reports no thresholds
    rx_power_low_warn_dbm: float | None
    rx_power_high_alarm_dbm: float | None
    tx_power_low_alarm_dbm: float | None
    tx_power_low_warn_dbm: float | None
    bias_high_alarm_ma: float | None
    bias_high_warn_ma: float | None
    temp_high_alarm_c: float | None
    temp_high_warn_c: float | None
    media: str = MEDIA
    lanes: int = 4


PARTS: tuple[ModulePart, ...] = (
    ModulePart("NORDLICHT", "NL-NPO4DR4-A2", True, 1.0, 42.0, -8.9, -5.9, 5.0, -6.9, -2.9, 68.0, 62.0, 75.0, 70.0),
    ModulePart("NORDLICHT", "NL-NPO4DR4-B1", True, 0.8, 40.0, -9.4, -6.4, 5.0, -6.4, -3.4, 66.0, 60.0, 78.0, 72.0),
    ModulePart("KESTREL", "KS-OSFP-4DR4", False, 1.2, 45.0, -9.4, -6.4, 5.5, -6.4, -3.4, 72.0, 66.0, 80.0, 75.0),
    ModulePart("TANAGER", "TG-Q112-DR4-C", False, 0.9, 38.0, -8.4, -5.9, 4.5, -6.9, -2.9, 60.0, 55.0, 75.0, 70.0),
)
NPO_PARTS = tuple(i for i, p in enumerate(PARTS) if p.npo)
PLUGGABLE_PARTS = tuple(i for i, p in enumerate(PARTS) if not p.npo)
THRESHOLD_COLUMNS = (
    "rx_power_low_alarm_dbm",
    "rx_power_low_warn_dbm",
    "rx_power_high_alarm_dbm",
    "tx_power_low_alarm_dbm",
    "tx_power_low_warn_dbm",
    "bias_high_alarm_ma",
    "bias_high_warn_ma",
    "temp_high_alarm_c",
    "temp_high_warn_c",
)


def dbm_to_mw(dbm: np.ndarray) -> np.ndarray:
    return np.power(10.0, dbm / 10.0)


def dom_reading_dbm(true_dbm: np.ndarray, noise_db: np.ndarray) -> np.ndarray:
    """What a DOM reports: the true power plus reading noise, floored at the 0.1 µW step (-40 dBm)."""
    lit = true_dbm > LOSS_OF_LIGHT_DBM
    return np.where(lit, np.maximum(true_dbm + noise_db, LOSS_OF_LIGHT_DBM), LOSS_OF_LIGHT_DBM)


def waterfall_ber(rx_dbm: np.ndarray, sensitivity_dbm: np.ndarray) -> np.ndarray:
    """Receiver BER from received power (see module docstring); 0 where it is far below any floor.

    A healthy plant has every lane far above its sensitivity: then the exponent alone says so (with a
    margin a thousand times any rounding of the power) and the powers are not worked out.
    """
    x = (rx_dbm - sensitivity_dbm) / 10.0
    if not (x < _X_NEGLIGIBLE).any():  # every q above _Q_NEGLIGIBLE: all 0, as below
        return np.zeros(x.shape)
    q = Q_AT_SENSITIVITY * np.power(10.0, x)
    out = np.zeros(q.shape)
    near = np.flatnonzero(q < _Q_NEGLIGIBLE)
    if near.size:
        out[near] = [0.75 * math.erfc(x / math.sqrt(2.0)) for x in q[near].tolist()]
    return out


def thermal_floor_factor(module_temp_c: np.ndarray) -> np.ndarray:
    """10^((T - knee)/decade) above the knee, 1 below it (most modules: the power is taken where it is not 1)."""
    x = np.maximum(module_temp_c - THERMAL_KNEE_C, 0.0) / THERMAL_DECADE_C
    out = np.ones(x.shape)
    hot = np.flatnonzero(x > 0.0)
    if hot.size:
        out[hot] = np.power(10.0, x[hot])
    return out


def bias_ma(tx_mw: np.ndarray, module_temp_c: np.ndarray, ith0_ma: np.ndarray, eta0: np.ndarray) -> np.ndarray:
    """Bias current that holds ``tx_mw`` at ``module_temp_c`` under automatic power control."""
    dt = module_temp_c - 50.0
    ith = ith0_ma * np.exp(dt / T0_K)
    eta = eta0 * np.maximum(1.0 - SLOPE_TEMPCO * dt, 0.2)
    return ith + tx_mw / eta


_LOG_C16 = math.lgamma(CODEWORD_SYMBOLS + 1) - math.lgamma(FEC_T + 2) - math.lgamma(CODEWORD_SYMBOLS - FEC_T)


def codeword_failure(ber: np.ndarray) -> np.ndarray:
    """P(an RS(544,514) codeword has more than 15 symbol errors) at pre-FEC bit error ratio ``ber``.

    Bit errors are taken as independent, so a 10-bit symbol is wrong with p = 1-(1-ber)^10 and the
    count of wrong symbols is Binomial(544, p). Below BER 1e-5 the tail is < 1e-30: returned as 0.
    """
    ber = np.asarray(ber, dtype=np.float64)
    out = np.zeros(ber.shape)
    idx = np.flatnonzero(ber > 1e-5)
    if not idx.size:
        return out
    p = -np.expm1(10.0 * np.log1p(-np.minimum(ber[idx], 0.5)))
    sure = p > 0.2  # mean of > 100 symbol errors per codeword: every codeword fails
    tail = np.ones(idx.size)
    calc = ~sure
    if calc.any():
        pc = p[calc]
        k0 = FEC_T + 1
        term = np.exp(_LOG_C16 + k0 * np.log(pc) + (CODEWORD_SYMBOLS - k0) * np.log1p(-pc))
        total = term.copy()
        ratio = pc / (1.0 - pc)
        for k in range(k0, CODEWORD_SYMBOLS):
            term = term * (CODEWORD_SYMBOLS - k) / (k + 1) * ratio
            total += term
            if k > 60 and (term < 1e-18 * total).all():
                break
        tail[calc] = np.minimum(total, 1.0)
    out[idx] = tail
    return out

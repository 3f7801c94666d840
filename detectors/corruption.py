"""Corrupting links: frames lost to bit errors far below the seeds' 1 % reroute rule.

CorrOpt (SIGCOMM'17, 350k links) calls a link corrupting at a frame-loss rate ≥ 1e-8: CRC errors over
the frames received. NVIDIA's NIC health monitor (NVSentinel) treats more than 120 symbol errors an
hour as fatal (the IBTA 1e-12 BER budget). Either opens a ``corruption`` finding.

A minute of a busy 400G port is ~4e8 frames: 4 errors expected at 1e-8, too few to tell from noise.
So each port's errors, frames and symbol-error time are accumulated tick by tick (each counter step
once), decaying with ``horizon_s`` (an hour, the span of NVSentinel's rule), and the open test runs
on those sums; the clear test runs on the window, so a repaired link clears within a window.

Four guards keep stray errors from paging: the count must be improbable at the open rate
(a Poisson tail below ``alpha``, so two CRC errors on an idle port are not a rate), the errors must
come in ≥ ``min_error_steps`` scrape intervals (one burst is an event, e.g. a retrain), a counter
that reset, wrapped or stuck in the window is unknown (frames.Keyed.steps): no finding either way,
and clumped errors are counted as events, not errors.

Events, not errors (ITU-T G.826): both rules are rates of sparse, independent errors (CorrOpt's
random corruption; the IBTA BER budget behind NVSentinel's count). Short error bursts (a cable moved
during rack work: REALISM.md, "burst errors make some uncorrectables") put many errors in one
interval and none in the next ones; 20 bursts an hour of 5 failed codewords is 1,700 symbol errors an
hour, a count far past 120 from a handful of events. So a counter's errors are judged only once
``judge_intervals`` intervals have passed since its first error (G.826 declares a change of state
only after ten consecutive seconds agree), and over those intervals they must not be clumped: if C
independent errors (``symbol_errors_total`` in failed codewords, ≥ ``symbols_per_failed_codeword``
each) fell at random in the N intervals since the first, the chance that they all fit in only the E
intervals that saw errors is at most C(N, E)·(E/N)^C (the occupancy bound); below ``alpha`` the errors
are clumped, and, as G.826 counts an errored second once however many errors it holds, each errored
interval counts as one error in the open test. A steadily corrupting link (errors in about as many
intervals as it has errors, or in every interval) is never clumped, so its test is the count's; the
wait puts a strong fault's corruption finding ten intervals after its first error, by when its BER
and failed codewords (detectors/pre_fec_ber.py, fec_uncorrectable.py) have paged. The sums decay over
the hour like the counts, so the bound is read on recency-weighted intervals (the recent weigh most).

Hysteresis: a port opens when its accumulated rates are significantly above the open rates (and its
window rate is still at least the clear rate), and stays flagged until its window rates fall a decade
below them (``clear_*``), so a link hovering at the threshold does not flap; clearing empties its
sums. A port whose rates are unknown this window keeps its state and gets no finding. Corruption
does not follow utilisation (CorrOpt), which is why the rate is per frame received, not per second.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.frames import Increase, Keyed, keyed, same_keys, sig, ts_or
from fabricwatch.records import Finding, Window

HOUR_S = 3600.0
# per-port sums; *_intervals: known intervals since the counter's first error (the spread's N)
ACC = ("crc", "frames", "symbols", "span_s", "error_steps", "symbol_steps", "crc_intervals", "symbol_intervals",
       "until")  # fmt: skip
OLD_ACC = 7  # a snapshot from before the *_intervals columns: they restore as 0 (judged once seen again)


SYMBOLS = "symbol_errors_or_failed_codewords"  # the symbol count judged (:func:`symbol_counts`)


def symbol_counts(at: Keyed, per_codeword: float) -> np.ndarray:
    """Per entity, whether its symbol errors are read from failed codewords: a port whose source has
    no symbol-error counter (OpenConfig gNMI has FEC uncorrectable blocks, not symbol errors) is
    counted as ``per_codeword`` symbols per failed codeword, the least a failed KP4 codeword holds, so
    its count is a lower bound and never invents a rate. Registers the column :data:`SYMBOLS`."""
    sym, failed = at.values("symbol_errors_total"), at.values("fec_uncorrectable_total")
    has_sym = np.bincount(at.codes[~np.isnan(sym)], minlength=at.n) > 0
    derived = ~has_sym & (np.bincount(at.codes[~np.isnan(failed)], minlength=at.n) > 0)
    at.derive(SYMBOLS, np.where(derived[at.codes], failed * per_codeword, sym))
    return derived


class CorruptionConfig(DetectorConfig):
    open_loss_rate: float = 1e-8  # CorrOpt (SIGCOMM'17): corrupting at a frame-loss rate ≥ 1e-8
    clear_loss_rate: float = 1e-9  # hysteresis: an open link clears a decade below the open rate
    open_symbol_per_h: float = 120.0  # NVIDIA NVSentinel: > 120 symbol errors an hour is fatal (IBTA 1e-12)
    clear_symbol_per_h: float = 12.0  # hysteresis: a decade below the open rate
    alpha: float = 1e-3  # Poisson tail at the open rate: a port exactly at it opens in 1 window of 1,000
    min_error_steps: int = 2  # errors in ≥ 2 scrape intervals: a single burst is an event, not a rate
    horizon_s: float = 3600.0  # sums decay over an hour: the span of NVSentinel's 120 errors/hour rule
    mtu_bytes: int = 4096  # RoCEv2 MTU, to count frames from bytes when frame counters are absent
    # ITU-T G.826 Annex A: unavailable time starts (and ends) only after ten consecutive seconds agree;
    # the same ten, in scrape intervals, before a counter's errors are judged as sparse or clumped
    judge_intervals: int = 10
    # RS(544,514) "KP4" FEC corrects up to 15 symbols (IEEE 802.3 cl. 91/134): a failed codeword holds
    # ≥ 16 symbol errors, so symbols / 16 is at most the failed codewords when their spread is judged
    # (were the symbol errors single and independent, fewer units only weakens the clumping test)
    symbols_per_failed_codeword: int = 16


def _rises_so_far(codes: np.ndarray, rose: np.ndarray) -> np.ndarray:
    """Per step (grouped by entity, in time order), how many of its entity's steps up to and
    including it rose."""
    total = np.cumsum(rose)
    starts = np.r_[0, np.flatnonzero(codes[1:] != codes[:-1]) + 1]
    before = np.r_[0, total][starts]  # rises before each group's first step
    return total - np.repeat(before, np.diff(np.r_[starts, len(codes)]))


def poisson_tail(k: float, mu: float) -> float:
    """P(X ≥ k) for X ~ Poisson(mu): how likely ``k`` or more errors are at the expected ``mu``."""
    if k <= 0:
        return 1.0
    if mu <= 0:
        return 0.0
    if k > mu + 12.0 * math.sqrt(mu) + 30.0:  # far in the tail: below 1e-20
        return 0.0
    log_mu = math.log(mu)
    below = sum(math.exp(-mu + i * log_mu - math.lgamma(i + 1)) for i in range(int(k)))
    return max(0.0, 1.0 - below)


class Corruption(Detector):
    name = "corruption"
    emits = frozenset({"corruption"})
    Config = CorruptionConfig
    config: CorruptionConfig

    def __init__(self, config: CorruptionConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.open: set[str] = set()  # ports flagged and not yet below the clear rates
        self.ports = pd.Index([], dtype=object)  # the ports of ``acc``'s rows
        self.acc = np.zeros((0, len(ACC)))  # per port: the decayed sums of ACC; until = last step used
        self.last_end: float | None = None
        self._rows: tuple[pd.Index, np.ndarray] | None = None  # the last ports looked up, their rows in acc

    def _frames(self, at: Keyed) -> np.ndarray:
        if at.has("rx_packets_total"):
            return at.increase("rx_packets_total").total
        return at.increase("rx_bytes_total").total / self.config.mtu_bytes

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        at = keyed(window, "port")
        if not at.n:
            return []
        from_codewords = symbol_counts(at, cfg.symbols_per_failed_codeword)
        crc, sym = at.increase("rx_crc_errors_total"), at.increase(SYMBOLS)
        frames = self._frames(at)
        with np.errstate(invalid="ignore", divide="ignore"):
            loss = np.where(frames > 0, crc.total / frames, np.nan)
            per_h = np.where(sym.span > 0, sym.total / sym.span * HOUR_S, np.nan)
        acc = self._accumulate(at, window.end)
        crc_n, frames_n, sym_n, span_n, crc_steps, sym_steps, crc_int, sym_int = (acc[:, k] for k in range(8))
        crc_events = self._events(crc_n, crc_steps, crc_int, 1.0)
        sym_events = self._events(sym_n, sym_steps, sym_int, float(cfg.symbols_per_failed_codeword))
        opens = self._opens(crc_events, frames_n * cfg.open_loss_rate, crc_steps) | self._opens(
            sym_events, span_n * cfg.open_symbol_per_h / HOUR_S, sym_steps
        )
        with np.errstate(invalid="ignore"):
            above_clear = (loss >= cfg.clear_loss_rate) | (per_h >= cfg.clear_symbol_per_h)
        known = np.isfinite(loss) | np.isfinite(per_h)
        ports = np.asarray(at.index, dtype=object)
        was_open = np.isin(ports, sorted(self.open)) if self.open else np.zeros(at.n, dtype=bool)
        flagged = known & above_clear & (opens | was_open)
        cleared = known & ~flagged & was_open
        if cleared.any():  # the evidence that opened it is spent
            rows = self.ports.get_indexer(pd.Index(ports[cleared], dtype=object))
            self.acc[rows, : len(ACC) - 1] = 0.0
        # unknown ports keep their state; known ones are open exactly when flagged
        self.open = (self.open - {str(p) for p in ports[known]}) | {str(p) for p in ports[flagged]}
        last_ts = at.last_ts()
        return [
            self._finding(str(ports[i]), i, crc, sym, loss, per_h, frames, last_ts[i], bool(from_codewords[i]))
            for i in np.flatnonzero(flagged)
        ]

    def _accumulate(self, at: Keyed, end: float) -> np.ndarray:
        """Add each port's counter steps not yet counted (ts after its ``until``) to its decayed sums;
        a step that is unknown (reset, wrap, stuck) adds nothing for that counter pair this tick.
        Returns the sums (ACC order) for ``at``'s ports."""
        index = pd.Index(np.asarray(at.index, dtype=object), dtype=object)
        if self._rows is not None and same_keys(self._rows[0], index):  # the last tick's ports: rows known
            rows = self._rows[1]
        else:
            new = index.difference(self.ports)
            if len(new):
                self.ports = self.ports.append(new)
                fresh = np.zeros((len(new), len(ACC)))
                fresh[:, -1] = -np.inf
                self.acc = np.vstack([self.acc, fresh])
            rows = self.ports.get_indexer(index)
            self._rows = (index, rows)
        if self.last_end is not None and end > self.last_end:
            self.acc[:, :-1] *= math.exp(-(end - self.last_end) / self.config.horizon_s)
        self.last_end = end if self.last_end is None else max(self.last_end, end)
        until = self.acc[rows, -1]
        seen_before = {"crc": self.acc[rows, 0] > 0, "symbols": self.acc[rows, 2] > 0}  # an error already
        frames_col = "rx_packets_total" if at.has("rx_packets_total") else "rx_bytes_total"
        per_frame = 1.0 if frames_col == "rx_packets_total" else 1.0 / self.config.mtu_bytes
        sums = {}
        for name, column in (
            ("crc", "rx_crc_errors_total"),
            ("frames", frames_col),
            ("symbols", SYMBOLS),
        ):
            st = at.steps(column)
            fresh = st.ts > until[st.codes]
            sums[name] = np.bincount(st.codes[fresh], weights=np.nan_to_num(st.step[fresh]), minlength=at.n)
            sums[name + "_bad"] = np.bincount(st.codes[fresh & st.unknown], minlength=at.n) > 0
            sums[name + "_has"] = np.bincount(st.codes[fresh & ~st.unknown], minlength=at.n) > 0
            sums[name + "_ups"] = np.bincount(st.codes[fresh & (st.step > 0)], minlength=at.n)
            sums[name + "_dt"] = np.bincount(st.codes[fresh & ~st.unknown], weights=st.dt[fresh & ~st.unknown],
                                             minlength=at.n)  # fmt: skip
            if name in seen_before:  # known intervals from the counter's first error on (this one's included)
                since = seen_before[name][st.codes] | (_rises_so_far(st.codes, fresh & (st.step > 0)) > 0)
                sums[name + "_since"] = np.bincount(st.codes[fresh & ~st.unknown & since], minlength=at.n)
        loss_ok = sums["crc_has"] & sums["frames_has"] & ~sums["crc_bad"] & ~sums["frames_bad"]
        sym_ok = sums["symbols_has"] & ~sums["symbols_bad"]
        add = np.zeros((at.n, len(ACC) - 1))
        add[loss_ok, 0] = sums["crc"][loss_ok]
        add[loss_ok, 1] = sums["frames"][loss_ok] * per_frame
        add[sym_ok, 2] = sums["symbols"][sym_ok]
        add[sym_ok, 3] = sums["symbols_dt"][sym_ok]
        add[loss_ok, 4] = sums["crc_ups"][loss_ok]
        add[sym_ok, 5] = sums["symbols_ups"][sym_ok]
        add[loss_ok, 6] = sums["crc_since"][loss_ok]
        add[sym_ok, 7] = sums["symbols_since"][sym_ok]
        self.acc[rows, :-1] += add
        last = at.last_ts()
        self.acc[rows, -1] = np.where(np.isfinite(last), np.fmax(until, last), until)
        return self.acc[rows]

    def _events(self, count: np.ndarray, errored: np.ndarray, intervals: np.ndarray, unit: float) -> np.ndarray:
        """Per entity, the count the open test judges: the errors, or one per errored interval where
        they are clumped (``count``/``unit`` errors in ``errored`` of the ``intervals`` since the first,
        the occupancy bound below ``alpha``); NaN (no test) before ``judge_intervals`` intervals."""
        cfg = self.config
        units = count / unit
        out = np.where(intervals >= cfg.judge_intervals, count, np.nan)
        maybe = np.flatnonzero((intervals >= cfg.judge_intervals) & (errored > 0) & (units > errored))
        for i in maybe:
            n, e, c = float(intervals[i]), min(float(errored[i]), float(intervals[i])), float(units[i])
            log_bound = math.lgamma(n + 1) - math.lgamma(e + 1) - math.lgamma(n - e + 1) + c * math.log(e / n)
            if log_bound <= math.log(cfg.alpha):
                out[i] = errored[i]
        return out

    def _opens(self, count: np.ndarray, expected: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Per entity: the count is a rate above the open level, not noise (errors in several
        intervals, and improbable at the open level)."""
        with np.errstate(invalid="ignore"):  # a NaN count (not judged yet) never opens
            maybe = (steps >= self.config.min_error_steps) & (expected > 0) & (count > expected)
        out = np.zeros(len(count), dtype=bool)
        for i in np.flatnonzero(maybe):
            out[i] = poisson_tail(float(count[i]), float(expected[i])) <= self.config.alpha
        return out

    def _finding(self, port: str, i: int, crc: Increase, sym: Increase, loss: np.ndarray, per_h: np.ndarray,
                 frames: np.ndarray, last_ts: float, from_codewords: bool) -> Finding:  # fmt: skip
        cfg = self.config
        evidence: list[dict[str, Any]] = []
        if np.isfinite(loss[i]):
            evidence.append({"metric": "frame_loss_rate", "port": port, "value": sig(loss[i], 3),
                             "threshold": cfg.open_loss_rate, "crc_errors": sig(crc.total[i]),
                             "frames": sig(frames[i], 3)})  # fmt: skip
        if np.isfinite(per_h[i]):
            evidence.append({"metric": "symbol_errors_per_h", "port": port, "value": sig(per_h[i], 3),
                             "threshold": cfg.open_symbol_per_h,
                             **({"counted_from": "failed codewords"} if from_codewords else {})})  # fmt: skip
        ratio = max(np.nan_to_num(loss[i]) / cfg.open_loss_rate, np.nan_to_num(per_h[i]) / cfg.open_symbol_per_h)
        return Finding(
            detector=self.name,
            symptom="corruption",
            entity="port",
            id=port,
            first_seen=ts_or(np.fmin(crc.first_up[i], sym.first_up[i]), last_ts),
            last_seen=float(last_ts),
            severity="minor",
            evidence=tuple(evidence),
            score=float(ratio),
            attrs={"frame_loss_rate": sig(loss[i], 3), "symbol_errors_per_h": sig(per_h[i], 3)},
        )

    def snapshot(self) -> dict[str, Any]:
        acc = np.where(np.isfinite(self.acc), self.acc, -1e300)  # JSON has no -inf ("until" of a new port)
        return {
            "open": sorted(self.open),
            "ports": [str(p) for p in self.ports],
            "acc": acc.tolist(),
            "last_end": self.last_end,
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.open = set(state.get("open", ()))
        self.ports = pd.Index(list(state.get("ports", ())), dtype=object)
        acc = np.asarray(state.get("acc", ()), dtype=np.float64)
        acc = acc.reshape(len(self.ports), acc.size // len(self.ports) if len(self.ports) else len(ACC))
        if acc.shape[1] == OLD_ACC:
            acc = np.insert(acc, [OLD_ACC - 1, OLD_ACC - 1], 0.0, axis=1)
        self.acc = np.where(acc <= -1e300, -np.inf, acc)
        self.last_end = state.get("last_end")
        self._rows = None

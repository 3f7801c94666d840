"""A univariate streaming anomaly detector: one value in, a score in [0, 1] out, never a look ahead.

For a single metric seen one sample at a time (a benchmark series, a counter rate, a DOM reading), where
no peers and no labels exist. The score of sample *i* depends only on samples ``0..i``: every state
update happens after the score is computed from the past, so a prefix of a series scores exactly as the
same rows do inside the whole series (tests/detectors/test_series.py checks it by truncation).

Three parts, each from the streaming-anomaly literature, none fitted to one data set:

* two raw "surprise" scores, each a p-value-like number that is uniform on [0, 1] on ordinary data:
  a windowed Gaussian tail probability of the value against its trailing window, and a k-nearest-
  neighbour conformal score of the recent shape (the last ``embed`` values) against the shapes seen
  before (KNN-CAD, Burnaev and Ishimtsev 2016);
* the anomaly likelihood of Ahmad et al. (Neurocomputing 2017, the post-processing of Numenta's HTM
  detector): the short-term mean of the raw score against the long-term distribution of raw scores,
  as a Gaussian tail probability, reported on a log scale so that 1 - 1e-10 maps to 1.0; a run of
  "red" likelihoods keeps only its first at full strength (NuPIC's likelihood filter);
* a spatial check as in NAB's HTM detector: after the warm-up (``learning`` samples), a value beyond
  the range seen so far by more than 5 % of that range scores 1.0 at once.

Cost: O(reference_size * embed) numpy work per sample (about 30 µs); state is a few fixed ring buffers.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import msgspec
import numpy as np

from fabricwatch.yamlconf import Config

Count = Annotated[int, msgspec.Meta(ge=1)]
Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]


class SeriesConfig(Config):
    """Every number is a literature default or a choice made before measuring (BENCHMARKS.md, NAB)."""

    # Trailing window of the Gaussian tail score, in samples. Chosen a priori (about a day of 5-minute
    # samples, the cadence of most public benchmark series), not tuned.
    gauss_window: Count = 288
    # Length of the shape compared by the KNN conformal score, and the neighbours averaged: KNN-CAD's
    # (Burnaev and Ishimtsev 2016) small-embedding regime; chosen a priori, not tuned.
    embed: Count = 8
    neighbours: Count = 5
    # Shapes the current one is compared with, and past nonconformity values that calibrate it (the
    # conformal p-value's resolution is 1 / calibration).
    reference_size: Count = 600
    calibration: Count = 300
    # Weight of the KNN score in the raw score (the rest is the Gaussian tail): an even mix chosen a
    # priori. On the 10 NAB files measured (BENCHMARKS.md) neither part wins on every category; kept at
    # 0.5 until a full-NAB run says otherwise.
    knn_weight: Fraction = 0.5
    # Anomaly likelihood (Ahmad et al. 2017, NuPIC anomaly_likelihood.py defaults): a 10-sample
    # short-term mean against the raw scores' long-term distribution (8640 samples, 30 days at 5 min),
    # learned after 288 raw scores; mean and variance floors 0.03 and 0.0003 as in NuPIC.
    short_window: Count = 10
    long_window: Count = 8640
    learning: Count = 288
    mean_floor: float = 0.03
    variance_floor: float = 0.0003
    # NuPIC's filter: a likelihood at or above 1 - 1e-5 ("red") right after another red one is capped at
    # 1 - 1e-3 ("yellow"), so one event is one detection, not a run of them.
    red: Fraction = 1 - 1e-5
    yellow: Fraction = 1 - 1e-3
    # NAB's HTM detector (numenta_detector.py, spatialTolerance): a new extreme 5 % beyond the range.
    spatial_tolerance: float = 0.05


def _tail(z: float) -> float:
    """Upper tail of the standard normal, Q(z)."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def log_likelihood(likelihood: float) -> float:
    """Ahmad et al.'s log scale: 0.5 → 0.03, 1 - 1e-5 → 0.5, 1 - 1e-10 → 1.0 (clipped to [0, 1])."""
    value = math.log(1.0000000001 - likelihood) / math.log(1.0 - 0.9999999999)
    return min(1.0, max(0.0, value))


class _Ring:
    """A fixed-size float ring buffer; ``view()`` returns the filled part (order not kept)."""

    def __init__(self, size: int) -> None:
        self.data = np.zeros(size)
        self.size = size
        self.count = 0

    def push(self, value: float) -> None:
        self.data[self.count % self.size] = value
        self.count += 1

    def view(self) -> np.ndarray:
        return self.data[: min(self.count, self.size)]

    def snapshot(self) -> dict[str, Any]:
        return {"data": self.data.tolist(), "count": self.count}

    def restore(self, state: dict[str, Any]) -> None:
        self.data = np.array(state["data"], dtype=float)
        self.count = int(state["count"])


_RINGS = ("recent", "alphas", "raw", "short")


class SeriesDetector:
    """Score one value at a time: ``update(value) -> score``. Deterministic; no wall clock."""

    def __init__(self, config: SeriesConfig | None = None) -> None:
        self.config = c = config if config is not None else SeriesConfig()
        self.n = 0
        self.lo = math.inf
        self.hi = -math.inf
        self.recent = _Ring(c.gauss_window)
        self.history = np.zeros(c.embed + c.reference_size + c.embed)  # raw values, newest last
        self.alphas = _Ring(c.calibration)
        self.raw = _Ring(c.long_window)
        self.raw_sum = 0.0
        self.raw_sq = 0.0
        self.short = _Ring(c.short_window)
        self.prev_red = False

    def update(self, value: float) -> float:
        """The score of ``value`` given every earlier value; then learn from it."""
        c = self.config
        span = self.hi - self.lo if self.n else 0.0
        spatial = False
        if self.n >= c.learning:  # warm-up: the first samples set the range; a constant that changes counts
            margin = c.spatial_tolerance * span
            spatial = value > self.hi + margin or value < self.lo - margin
        w = c.knn_weight
        raw = (1.0 - w) * self._gauss(value, span) + (w * self._knn(value, span) if w > 0 else 0.0)
        score = self._likelihood(raw)
        self._learn(value)
        return 1.0 if spatial else score

    def _gauss(self, value: float, span: float) -> float:
        window = self.recent.view()
        if window.size < 2:
            return 0.5
        # Floor: 0.1 % of the range seen so far (and a tiny absolute one), so that a flat window does not
        # turn the next rounding-size step into an infinite z; chosen a priori.
        std = max(float(window.std()), 1e-3 * span, 1e-12)
        z = abs(value - float(window.mean())) / std
        return 1.0 - 2.0 * _tail(z)

    def _knn(self, value: float, span: float) -> float:
        c = self.config
        size = self.history.size
        filled = min(self.n, size)
        # The current shape (the last embed-1 values and this one) and the past shapes that do not
        # overlap it, all scaled by the range seen so far.
        past = self.history[size - filled : size - c.embed + 1] / span if span > 0 else self.history[:0]
        if past.size - c.embed + 1 < c.neighbours:
            return 0.5
        seq = np.append(self.history[size - c.embed + 1 :], value) / span
        shapes = np.lib.stride_tricks.sliding_window_view(past, c.embed)
        dist = np.sqrt(((shapes - seq) ** 2).sum(axis=1))
        alpha = float(np.partition(dist, c.neighbours - 1)[: c.neighbours].mean())
        calib = self.alphas.view()
        score = float((calib < alpha).mean()) if calib.size else 0.5
        self.alphas.push(alpha)
        return score

    def _likelihood(self, raw: float) -> float:
        c = self.config
        self.short.push(raw)
        if self.raw.count >= c.long_window:
            old = self.raw.data[self.raw.count % c.long_window]
            self.raw_sum -= old
            self.raw_sq -= old * old
        self.raw.push(raw)
        self.raw_sum += raw
        self.raw_sq += raw * raw
        if self.raw.count % c.long_window == 0:  # re-add from the buffer: no rounding drift on long streams
            self.raw_sum = float(self.raw.data.sum())
            self.raw_sq = float((self.raw.data**2).sum())
        count = min(self.raw.count, c.long_window)
        if count < c.learning:
            return 0.0
        mean = self.raw_sum / count
        var = max(self.raw_sq / count - mean * mean, c.variance_floor)
        mean = max(mean, c.mean_floor)
        short_mean = float(self.short.view().mean())
        likelihood = 1.0 - _tail((short_mean - mean) / math.sqrt(var))
        red = likelihood >= c.red
        if red and self.prev_red:
            likelihood = c.yellow
        self.prev_red = red
        return log_likelihood(likelihood)

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state, so that a restarted process resumes the same scores (STYLE item 5)."""
        return {
            "config": self.config.to_dict(),
            "n": self.n,
            "lo": self.lo if self.n else None,
            "hi": self.hi if self.n else None,
            "history": self.history.tolist(),
            "raw_sum": self.raw_sum,
            "raw_sq": self.raw_sq,
            "prev_red": self.prev_red,
            **{name: getattr(self, name).snapshot() for name in _RINGS},
        }

    @classmethod
    def restore(cls, state: dict[str, Any]) -> SeriesDetector:
        """The detector a :meth:`snapshot` was taken of, ready for the next value."""
        detector = cls(msgspec.convert(state["config"], SeriesConfig))
        detector.n = int(state["n"])
        detector.lo = math.inf if state["lo"] is None else float(state["lo"])
        detector.hi = -math.inf if state["hi"] is None else float(state["hi"])
        detector.history = np.array(state["history"], dtype=float)
        detector.raw_sum = float(state["raw_sum"])
        detector.raw_sq = float(state["raw_sq"])
        detector.prev_red = bool(state["prev_red"])
        for name in _RINGS:
            getattr(detector, name).restore(state[name])
        return detector

    def _learn(self, value: float) -> None:
        self.n += 1
        self.lo = min(self.lo, value)
        self.hi = max(self.hi, value)
        self.recent.push(value)
        self.history[:-1] = self.history[1:]
        self.history[-1] = value


def score_series(values: list[float] | np.ndarray, config: SeriesConfig | None = None) -> np.ndarray:
    """Scores of a whole series, row by row (the same numbers a stream of it would get)."""
    detector = SeriesDetector(config)
    return np.array([detector.update(float(v)) for v in values])

"""Per-entity learnt levels ("what is normal for this lane"), vectorised and JSON-able.

The first ``warmup`` observations are averaged (each is already a median over ``recent_s``, so noise
and single outliers are gone); after that a level follows slow drift through an exponential average
with time constant ``tau_s``, but only with observations within its gate. A fault therefore never
teaches the baseline that it is normal, and a laser fading over hours still stands out against
where it started. Several metrics of the same entities share one key index (one hash look-up a
tick for all of them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.frames import same_keys


class BaselineConfig(DetectorConfig):
    """What every learning detector shares: how long it warms up and how fast it follows drift."""

    baseline_warmup_ticks: int = 3  # ticks averaged before a baseline is trusted
    baseline_tau_s: float = 86_400.0  # then it follows slow drift with this time constant (a day) ...


@dataclass(frozen=True, slots=True)
class Gate:
    width: float  # how far from the level an observation may be and still be learnt
    relative: bool = False  # width as a fraction of the level instead of in its units


class Baselines:
    """Levels of named metrics keyed by entity: a pandas Index of names (a GPU, a port) or a
    MultiIndex (port, lane), exactly as :class:`detectors.frames.Keyed` indexes them."""

    def __init__(self, gates: dict[str, Gate], warmup: int, tau_s: float) -> None:
        self.gates = dict(gates)
        self.warmup = max(1, int(warmup))
        self.tau_s = float(tau_s)
        self._keys = pd.Index([], dtype=object)
        self._value = {m: np.zeros(0) for m in gates}
        self._n = {m: np.zeros(0, dtype=np.int64) for m in gates}
        self._t = {m: np.zeros(0) for m in gates}
        self._cache: tuple[pd.Index, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self._keys)

    def _positions(self, keys: pd.Index) -> np.ndarray:
        """Each key's row here (-1: none). A tick's keys are a new Index of (nearly always) the same
        entities as the last tick's: comparing them is a fraction of a hash look-up (16,384 lanes)."""
        if self._cache is not None and (self._cache[0] is keys or same_keys(self._cache[0], keys)):
            self._cache = (keys, self._cache[1])
            return self._cache[1]
        pos = self._keys.get_indexer(keys)
        self._cache = (keys, pos)
        return pos

    def lookup(self, keys: pd.Index) -> dict[str, np.ndarray]:
        """The trusted level of each key per metric (NaN while still warming up or never seen)."""
        pos = self._positions(keys)
        have = pos >= 0
        p = pos[have]
        out = {}
        for m in self.gates:
            level = np.full(len(keys), np.nan)
            level[have] = np.where(self._n[m][p] >= self.warmup, self._value[m][p], np.nan)
            out[m] = level
        return out

    def update(
        self, keys: pd.Index, values: dict[str, np.ndarray], now: float, learn: np.ndarray | None = None
    ) -> None:
        """Learn one tick's observations; a key with ``learn`` False or a NaN value is skipped."""
        pos = self._positions(keys).copy()
        new = pos < 0
        if new.any():
            start, added = len(self._keys), int(new.sum())
            self._keys = keys[new] if len(self._keys) == 0 else self._keys.append(keys[new])
            for m in self.gates:
                self._value[m] = np.concatenate([self._value[m], np.zeros(added)])
                self._n[m] = np.concatenate([self._n[m], np.zeros(added, dtype=np.int64)])
                self._t[m] = np.concatenate([self._t[m], np.full(added, np.nan)])
            pos[new] = np.arange(start, start + added)
            self._cache = None
        for m, gate in self.gates.items():
            x = np.asarray(values[m], dtype=np.float64)
            ok = np.isfinite(x) if learn is None else np.isfinite(x) & np.asarray(learn, dtype=bool)
            if not ok.any():
                continue
            p, x = pos[ok], x[ok]
            v0, n0, t0 = self._value[m][p], self._n[m][p], self._t[m][p]
            warming = n0 < self.warmup
            mean = (v0 * n0 + x) / (n0 + 1)
            limit = gate.width * np.abs(v0) if gate.relative else gate.width
            near = ~warming & (np.abs(x - v0) <= limit)
            dt = np.where(np.isfinite(t0), np.maximum(now - t0, 0.0), 0.0)
            drift = v0 + np.minimum(1.0, dt / self.tau_s) * (x - v0)
            learnt = warming | near
            self._value[m][p] = np.where(warming, mean, np.where(near, drift, v0))
            self._n[m][p] = n0 + learnt
            self._t[m][p] = np.where(learnt, now, t0)

    def forget(self, entities: set[str]) -> None:
        """Start these entities' levels afresh (all metrics): a replaced module, a load step. For a
        (port, lane) index, ``entities`` names ports and every lane of them is forgotten."""
        if not len(self._keys) or not entities:
            return
        names = self._keys.get_level_values(0) if isinstance(self._keys, pd.MultiIndex) else self._keys
        hit = np.asarray(pd.Index(names, dtype=object).isin(list(entities)), dtype=bool)
        for m in self.gates:
            self._n[m][hit] = 0
            self._value[m][hit] = 0.0
            self._t[m][hit] = np.nan

    def snapshot(self) -> dict[str, Any]:
        order = self._keys.argsort() if len(self._keys) else np.zeros(0, dtype=np.int64)
        return {
            "keys": [list(k) if isinstance(k, tuple) else k for k in _plain(self._keys[order])],
            **{
                m: {
                    "value": [float(v) for v in self._value[m][order]],
                    "n": [int(v) for v in self._n[m][order]],
                    "t": [float(v) if np.isfinite(v) else None for v in self._t[m][order]],
                }
                for m in sorted(self.gates)
            },
        }

    def restore(self, state: dict[str, Any]) -> None:
        keys = list(state.get("keys", []))
        if keys and isinstance(keys[0], list):
            self._keys = pd.MultiIndex.from_tuples([tuple(k) for k in keys])
        else:
            self._keys = pd.Index(keys, dtype=object)
        for m in self.gates:
            saved = state.get(m, {})
            self._value[m] = np.asarray(saved.get("value", [0.0] * len(keys)), dtype=np.float64)
            self._n[m] = np.asarray(saved.get("n", [0] * len(keys)), dtype=np.int64)
            self._t[m] = np.asarray(
                [np.nan if v is None else v for v in saved.get("t", [None] * len(keys))], dtype=np.float64
            )
        self._cache = None


def _plain(index: pd.Index) -> list:
    """Keys as JSON-able Python values (numpy integers of a lane level become int)."""
    return [tuple(v.item() if hasattr(v, "item") else v for v in k) if isinstance(k, tuple) else k for k in index]

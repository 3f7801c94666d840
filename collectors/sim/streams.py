"""Random streams that make the simulator deterministic and its fault runs exactly comparable.

Every random number comes from a stream named by (seed, step, name): a fresh PCG64 generator seeded
through ``SeedSequence``. Each subsystem draws arrays whose shapes depend on the topology only, never
on faults or on the values being drawn for, so

* the same seed gives the same numbers, hence the same bytes, on every run and machine;
* a run with faults draws exactly the noise of the same run without them. The difference between the
  two runs is then the fault's signature and nothing else, which is what the physics tests check.

Poisson counts are drawn by inversion from a uniform (small means) or a normal (large means) that are
always drawn, one of each per element, so an element's count depends on its own mean only.
"""

from __future__ import annotations

import zlib

import numpy as np

_SMALL = 30.0  # below this mean, invert the Poisson CDF exactly; above, the normal approximation is < 1 % off


def _name_key(name: str) -> int:
    return zlib.crc32(name.encode())


class Streams:
    """Named random streams for one seed."""

    def __init__(self, seed: int) -> None:
        if seed < 0:
            raise ValueError("seed must be ≥ 0")
        self.seed = seed

    def static(self, name: str) -> np.random.Generator:
        """A stream for per-device constants (spread between devices): one per name, step-free."""
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, 0, _name_key(name)])))

    def at(self, step: int, name: str) -> np.random.Generator:
        """The stream of ``name`` at scrape ``step``."""
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, 1, step, _name_key(name)])))


def poisson(lam: np.ndarray, gen: np.random.Generator) -> np.ndarray:
    """Poisson counts with means ``lam`` (int64), drawing exactly two numbers per element whatever ``lam``."""
    lam = np.asarray(lam, dtype=np.float64)
    u = gen.random(lam.shape)
    z = gen.standard_normal(lam.shape)
    out = np.zeros(lam.shape, dtype=np.int64)
    big = lam >= _SMALL
    if big.any():
        lb = lam[big]
        out[big] = np.maximum(0, np.floor(lb + np.sqrt(lb) * z[big] + 0.5)).astype(np.int64)
    small = (lam > 0) & ~big
    if small.any():
        out[small] = _invert_small(lam[small], u[small])
    return out


_TAIL = 24  # fewer elements than this left: their last terms are summed one by one in Python
_MAX_COUNT = 200  # the inversion stops here (far beyond any mean below _SMALL)


def _invert_small(lam: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inversion of the CDF, summed term by term: the count is how many of the partial sums
    cdf_0 .. cdf_199 lie below ``u`` (they only rise, so they are the ones before the first above it).

    Every element gets the same float operations in the same order as a loop over it alone, so its
    count depends on its own mean and uniform only. The sums run in place over the elements still
    short of ``u``, which are gathered again only once half of them are done; the last few elements
    finish in plain Python.
    """
    k = np.zeros(lam.shape, dtype=np.int64)
    p = np.exp(-lam)
    at = np.flatnonzero(u > p)  # the elements whose count is at least 1
    lam, u, p = lam[at], u[at], p[at]
    cdf = p.copy()
    count = np.ones(at.size, dtype=np.int64)  # partial sums below u so far (of at's elements)
    more = np.ones(at.size, dtype=bool)
    live = at.size
    j = 0
    while live >= _TAIL and j < _MAX_COUNT - 1:
        j += 1
        np.multiply(p, lam, out=p)
        np.divide(p, j, out=p)  # p * lam / j
        np.add(cdf, p, out=cdf)
        np.greater(u, cdf, out=more)
        count += more
        live = int(np.count_nonzero(more))
        if live <= at.size // 2:  # gather the elements still counting
            k[at] = count
            at, lam, u, p, cdf, count = at[more], lam[more], u[more], p[more], cdf[more], count[more]
            more = np.ones(at.size, dtype=bool)
    if live < at.size:
        k[at] = count
        at, lam, u, p, cdf = at[more], lam[more], u[more], p[more], cdf[more]
    for i, lam_i, u_i, p_i, cdf_i in zip(at.tolist(), lam.tolist(), u.tolist(), p.tolist(), cdf.tolist(), strict=True):
        n = j
        while n < _MAX_COUNT - 1:
            n += 1
            p_i = p_i * lam_i / n
            cdf_i = cdf_i + p_i
            if not u_i > cdf_i:
                break
        else:
            n += 1  # every partial sum below u: the cap
        k[i] = n
    return k


def round_up_fraction(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Stochastic rounding of non-negative ``x`` with the given uniforms: E[result] = x."""
    base = np.floor(x)
    return (base + (u < (x - base))).astype(np.int64)

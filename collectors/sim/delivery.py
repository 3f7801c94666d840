"""The collectors' side of the pathologies (DESIGN §4b): what reaches the bus from a healthy plant.

A layer over each scrape's messages, applied in this order (the plant side is realism.py):

spare_port  ``switch`` (name or pattern), ``count``. The switch's port, optical and module messages
    gain ``count`` ports past its last one (``leaf0-0:p66``): a module in a cage with no fibre, not
    in the topology. Optics read a normal tx and bias, rx -34..-30 dBm (REALISM.md: a Cisco spare
    reads -30.45 and -33.97 dBm, low alarms raised); the port is down (state 0, speed and BER null),
    its counters 0.
duplicate_source  ``source``, ``as``, ``lag_s`` (0.7). A second collector reports the source's port,
    optical and module rows under the name ``as``, ``lag_s`` later, before anything below happens to
    the first (its own agent, its own counters).
counter_reset  ``source``, ``at``. The agent restarts at the first scrape at or after ``at``: from
    there its ``_total`` counters count from 0 (each value less its value at the restart; a counter
    the hardware itself reset in between counts from its own 0) and every kind's ``seq`` restarts.
counter_saturation  ``column``, ``bits``, ``source`` (all), ``mode`` (saturate | wrap). The column
    sticks at 2^bits − 1 (IBTA counters) or wraps modulo 2^bits (32-bit MIB counters).
profile  ``source`` and/or ``telemetry``, ``as``, ``na_fraction`` (0). The kinds that collector
    reports keep only its columns (profiles.py); the rest are null. Several profiles on one source add
    up (two collectors). ``na_fraction`` of the remaining value cells read ``N/A`` (null), as a
    switch CLI prints for a lane or a whole port (REALISM.md).
scrape_interval  ``source`` and/or ``telemetry``, ``interval_s``. The source is scraped on its own
    cadence: a message goes out at the first scrape at or after each multiple of ``interval_s``, with
    ``seq`` counting those (module messages keep their own schedule).
missing_scrapes  ``fraction``, ``source`` (all). That share of messages is lost, at random: a gap in
    ``seq``.
late_scrapes  ``fraction``, ``delay_s`` (10), ``source`` (all). That share of messages arrives
    ``delay_s`` late: it keeps its ``ts`` and ``seq`` and is delivered with the first scrape at or after
    ts + delay_s, after messages stamped later (out of order on the bus).
collector_outage  ``source``, ``start``, ``duration``. Nothing from the source in [start, start +
    duration); also the window of a ``maintenance`` (its switch reboots).
clock_skew  ``source``, ``offset_s``, ``jitter_s``. The source's ``ts`` is off by offset + jitter × a
    standard normal draw per message (a late or early stamp); offsets of several entries add.

Random choices are a hash of (seed, scrape, entry, source, kind): deterministic, and independent of
every other pathology and of the physics.
"""

from __future__ import annotations

import fnmatch
import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from fabricwatch.collectors.sim.plant import LANES, Plant
from fabricwatch.collectors.sim.profiles import PORT_ALL, PROFILES, SATURATES, STEPS
from fabricwatch.errors import InputError
from fabricwatch.pathologies import Pathology
from fabricwatch.schema import KINDS, Message, make
from fabricwatch.topology import split_port

PORT_KINDS = ("port", "optical", "module")
# the kinds that act on a (source, kind) (Delivery._route), and the characters that make a source a pattern
_ROUTED = frozenset(
    {
        "duplicate_source",
        "counter_reset",
        "maintenance",
        "counter_saturation",
        "profile",
        "scrape_interval",
        "missing_scrapes",
        "late_scrapes",
        "collector_outage",
        "clock_skew",
    }
)
_WILD = re.compile(r"[*?\[]")
# every column a kind's messages can have (the simulator's port messages add the packet counters)
_COLUMNS = {name: {c.name for c in spec.columns} | {c.name for c in spec.keys} for name, spec in KINDS.items()}
_COLUMNS["port"] |= PORT_ALL
_NORMAL = NormalDist()
_SPARE_RX = (-34.0, -30.4)


def _uniform(*parts: object) -> float:
    """A deterministic uniform in (0, 1) from its arguments."""
    return _hashed("/".join(map(str, parts)).encode())


def _hashed(key: bytes) -> float:
    """:func:`_uniform` of arguments already joined with ``/`` and encoded (the hot path's form)."""
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return (int.from_bytes(digest, "little") + 0.5) / 2.0**64


def _tag(*parts: object) -> bytes:
    """The end of a :func:`_uniform` key that follows (seed, scrape): ``_hashed(b"seed/k" + tag)``."""
    return "".join(f"/{p}" for p in parts).encode()


@dataclass(slots=True)
class _Route:
    """Everything the pathologies do to one (source, kind), resolved once.

    Random draws are kept as their key's tag (:func:`_tag`): an entry's index, then what it draws for.
    ``keep`` holds the kind's key columns besides the profiles' columns.
    """

    spares: list[str] = field(default_factory=list)
    duplicate: tuple[str, float] | None = None
    resets: list[float] = field(default_factory=list)
    saturate: list[tuple[str, int, str]] = field(default_factory=list)
    keep: set[str] | None = None
    keeps_all: bool = False  # ``keep`` holds every column the kind has: it nulls nothing
    columns: tuple[str, ...] = ()  # the columns of the last message kept, and those ``keep`` nulls in it
    nulls: list[str] = field(default_factory=list)
    na: list[tuple[bytes, float]] = field(default_factory=list)
    steps: list[tuple[str, int]] = field(default_factory=list)
    cadence: float | None = None
    missing: list[tuple[bytes, float]] = field(default_factory=list)
    outages: list[tuple[float, float]] = field(default_factory=list)
    late: list[tuple[bytes, float, float]] = field(default_factory=list)
    skews: list[tuple[bytes, float, float]] = field(default_factory=list)
    before: bool = False  # spares, a duplicate or restarts: work before the drops (set by Delivery._route)
    after: bool = False  # saturation, steps, nulls, N/A or skew: work on a message kept

    @property
    def idle(self) -> bool:
        """True when nothing happens to this (source, kind): its messages pass untouched."""
        return not (
            self.spares
            or self.duplicate
            or self.resets
            or self.saturate
            or self.keep is not None
            or self.na
            or self.steps
            or self.cadence
            or self.missing
            or self.outages
            or self.late
            or self.skews
        )


_IDLE = _Route()


@dataclass(slots=True)
class _Restart:
    """A restarted agent's view of one (source, kind): when, the seq it restarted at, counter baselines."""

    at: float  # the counter_reset's ``at``
    t: float  # simulated time of the first scrape after it
    seq0: int
    base: dict[str, list[int | None]]
    last: dict[str, list[int | None]]


def _matches(pattern: str | None, name: str) -> bool:
    return pattern is None or fnmatch.fnmatchcase(name, pattern)


class Delivery:
    """The collector pathologies of one simulator; :meth:`apply` turns a scrape's messages into what arrives."""

    def __init__(self, plant: Plant, pathologies: Sequence[Pathology], seed: int, interval: float) -> None:
        self.plant = plant
        self.items = list(enumerate(pathologies))
        self.seed = seed
        self.interval = interval
        for _, q in self.items:
            if q.kind == "scrape_interval" and q["interval_s"] < interval - 1e-9:
                message = f"interval_s {q['interval_s']:g} is shorter than the simulator's {interval:g} s scrape"
                raise InputError(q.place or "scrape_interval", message)
        self.routes: dict[tuple[str, str], _Route] = {}
        self.restarts: dict[tuple[str, str], _Restart] = {}
        self.held: list[tuple[float, Message]] = []  # late messages and the simulated time they arrive
        self.droppable: list[tuple[str, str, _Route]] = []  # (source, kind)s that unwanted() may leave uncut
        self.spare_ports = self._spare_ports()
        self.spare_lanes: dict[tuple[str, int], tuple[float, float, float]] = {}  # _spare_lane's, by (port, lane)
        # the entries _route reads, by the source they name: a name, or a pattern (or none: every source)
        self.by_name: dict[str, list[tuple[int, Pathology]]] = {}
        self.by_pattern: list[tuple[int, Pathology]] = []
        for i, q in self.items:
            if q.kind in _ROUTED:
                name = q["switch"] if q.kind == "maintenance" else q["source"]
                if q.kind in ("maintenance", "duplicate_source") or (name is not None and not _WILD.search(name)):
                    self.by_name.setdefault(name, []).append((i, q))
                else:
                    self.by_pattern.append((i, q))

    # --- resolving the pathologies of one (source, kind) -----------------------------------------------

    def _spare_ports(self) -> dict[str, list[str]]:
        topo = self.plant.topology
        out: dict[str, list[str]] = {}
        for _, q in self.items:
            if q.kind != "spare_port":
                continue
            for sw in fnmatch.filter([s.name for s in topo.switches], q["switch"]):
                numbers = [split_port(p)[1] for p in topo.ports if topo.port_device[p] == sw]
                taken = out.setdefault(sw, [])
                first = max(numbers, default=-1) + 1 + len(taken)
                taken.extend(f"{sw}:p{n:02d}" for n in range(first, first + q["count"]))
        return out

    def _route(self, source: str, kind: str) -> _Route:
        r = _Route()
        if kind in PORT_KINDS:
            r.spares = self.spare_ports.get(source, [])
        named = self.by_name.get(source, [])
        for i, q in sorted(named + self.by_pattern, key=lambda e: e[0]) if self.by_pattern else named:
            k, o = q.kind, q.options
            if k == "duplicate_source" and kind in PORT_KINDS and o["source"] == source:
                r.duplicate = (o["as"], o["lag_s"])
            elif k == "counter_reset" and _matches(o["source"], source):
                r.resets.append(o["at"])
            elif k == "maintenance" and o["switch"] == source:
                r.resets.append(o["start"] + o["duration"])
                r.outages.append((o["start"], o["start"] + o["duration"]))
            elif k == "counter_saturation" and _matches(o["source"], source):
                r.saturate.append((o["column"], o["bits"], o["mode"]))
            elif k == "profile" and _matches(o["source"], source) and o["telemetry"] in (None, kind):
                columns = PROFILES[o["as"]].get(kind)
                if columns is not None:
                    r.keep = set(columns) | (r.keep or set())
                    r.saturate.extend((c, b, "saturate") for c, b in SATURATES.get(o["as"], ()))
                    r.steps.extend(STEPS.get(o["as"], ()))
                    if o["na_fraction"]:
                        r.na.append((_tag(i, "na", source, kind), o["na_fraction"]))
            elif k == "scrape_interval" and kind != "module":
                if _matches(o["source"], source) and o["telemetry"] in (None, kind):
                    r.cadence = max(r.cadence or 0.0, o["interval_s"])
            elif k == "missing_scrapes" and _matches(o["source"], source):
                r.missing.append((_tag(i, source, kind), o["fraction"]))
            elif k == "late_scrapes" and _matches(o["source"], source):
                r.late.append((_tag(i, "late", source, kind), o["fraction"], o["delay_s"]))
            elif k == "collector_outage" and _matches(o["source"], source):
                r.outages.append((o["start"], o["start"] + o["duration"]))
            elif k == "clock_skew" and _matches(o["source"], source):
                r.skews.append((_tag(i, source, kind), o["offset_s"], o["jitter_s"]))
        r.resets.sort()
        if r.keep is not None:
            r.keep |= {c.name for c in KINDS[kind].keys}
            r.keeps_all = r.keep >= _COLUMNS[kind]
        r.before = bool(r.spares or r.duplicate or r.resets)
        r.after = bool(r.saturate or r.steps or (r.keep is not None and not r.keeps_all) or r.na or r.skews)
        return r

    # --- one scrape ------------------------------------------------------------------------------------

    def unwanted(self, k: int, t_prev: float, t: float) -> dict[str, set[str]]:
        """Kind → the sources whose message of scrape ``k`` :meth:`apply` would drop unread.

        Those are off their cadence or in an outage, with no duplicate or restarted agent that reads
        them first: the simulator need not cut them, and what arrives is the same. Only (source, kind)s
        already seen count (every one is seen at the first scrape).
        """
        out: dict[str, set[str]] = {}
        for source, kind, route in self.droppable:
            c = route.cadence
            if (c is not None and k and math.floor(t / c + 1e-9) == math.floor(t_prev / c + 1e-9)) or any(
                a <= t < b for a, b in route.outages
            ):
                out.setdefault(kind, set()).add(source)
        return out

    def apply(self, messages: list[Message], k: int, t_prev: float, t: float) -> list[Message]:
        """The messages of scrape ``k`` (simulated time t) as the collectors deliver them."""
        out: list[Message] = []
        if self.held:
            out = [m for due, m in self.held if due <= t + 1e-9]
            self.held = [(due, m) for due, m in self.held if due > t + 1e-9]
        scrape = f"{self.seed}/{k}".encode()  # how every key hashed for this scrape starts (_tag)
        # _hashed(scrape + tag) for every tag: the scrape's part hashed once, each draw continues a copy
        copy, from_bytes = hashlib.blake2b(scrape, digest_size=8).copy, int.from_bytes
        routes, deliver = self.routes, out.append
        for m in messages:
            key = (m.source, m.kind)
            route = routes.get(key)
            if route is None:
                route = self._route(m.source, m.kind)
                routes[key] = route if not route.idle else _IDLE
                if (route.cadence or route.outages) and route.duplicate is None and not route.resets:
                    self.droppable.append((m.source, m.kind, route))
            if route is _IDLE:
                deliver(m)
                continue
            if route.before:
                if route.spares:
                    self._add_spares(m, route.spares, k)
                if route.duplicate is not None:
                    name, lag = route.duplicate
                    deliver(make(m.kind, name, m.ts + lag, m.seq, {c: list(v) for c, v in m.rows.items()}))
                if route.resets:
                    self._restart(m, route.resets, t)
            # the drops first: what follows only changes the message (same result, no work on a dropped one)
            c = route.cadence
            if c is not None:
                if k and math.floor(t / c + 1e-9) == math.floor(t_prev / c + 1e-9):
                    continue
                restart = self.restarts.get(key)
                m.seq = math.floor(t / c + 1e-9) - (math.floor(restart.t / c + 1e-9) if restart else 0)
            lost = False
            for tag, f in route.missing:
                h = copy()
                h.update(tag)
                if (from_bytes(h.digest(), "little") + 0.5) / 2.0**64 < f:
                    lost = True  # _hashed, written out: two draws per message on the hot path
                    break
            if lost or (route.outages and any(a <= t < b for a, b in route.outages)):
                continue
            if route.after:
                self._shape(m, route, scrape)
            delay = 0.0
            for tag, f, d in route.late:
                h = copy()
                h.update(tag)
                if (from_bytes(h.digest(), "little") + 0.5) / 2.0**64 < f:
                    delay = max(delay, d)
            if delay:
                self.held.append((t + delay, m))
                continue
            deliver(m)
        return out

    def _shape(self, m: Message, route: _Route, scrape: bytes) -> None:
        """What the route does to a message it delivers: saturation, steps, nulls, N/A cells, clock skew."""
        for column, bits, mode in route.saturate:
            values = m.rows.get(column)
            if isinstance(values, list):
                top = 2**bits - 1
                m.rows[column] = [
                    v if v is None else (min(v, top) if mode == "saturate" else v % (top + 1)) for v in values
                ]
        for column, step in route.steps:
            values = m.rows.get(column)
            if isinstance(values, list):
                m.rows[column] = [v if v is None else v - v % step for v in values]
        if route.keep is not None and not route.keeps_all:
            rows = m.rows
            names = tuple(rows)
            if names != route.columns:  # the columns to null, worked out once per set of columns
                route.columns, route.nulls = names, [c for c in names if c not in route.keep]
            n = len(rows[names[0]]) if names else 0
            for column in route.nulls:
                rows[column] = [None] * n
        for tag, fraction in route.na:
            self._not_available(m, _hashed(scrape + tag), fraction)
        for tag, offset, jitter in route.skews:
            z = _NORMAL.inv_cdf(_hashed(scrape + tag)) if jitter else 0.0
            m.ts = m.ts + offset + jitter * z

    def _restart(self, m: Message, resets: list[float], t: float) -> None:
        """Counters and seq of a restarted agent (see counter_reset in the module docstring)."""
        due = [at for at in resets if at <= t + 1e-9]
        if not due:
            return
        key = (m.source, m.kind)
        counters = [c for c, v in m.rows.items() if c.endswith("_total") and isinstance(v, list)]
        restart = self.restarts.get(key)
        if restart is None or restart.at != due[-1]:  # the first scrape since this restart
            raw = {c: list(m.rows[c]) for c in counters}  # type: ignore[arg-type]
            restart = self.restarts[key] = _Restart(due[-1], t, m.seq, raw, {c: list(v) for c, v in raw.items()})
        for c in counters:
            raw = m.rows[c]
            base, last = restart.base.get(c), restart.last.get(c)
            if not isinstance(raw, list) or base is None or last is None or len(base) != len(raw):
                continue
            for j, v in enumerate(raw):
                if v is not None and last[j] is not None and v < last[j]:
                    base[j] = 0  # the hardware reset it too: it counts from its own 0
            restart.last[c] = list(raw)
            m.rows[c] = [v if v is None or b is None else v - b for v, b in zip(raw, base, strict=True)]
        m.seq = m.seq - restart.seq0

    def _not_available(self, m: Message, u: float, fraction: float) -> None:
        """``fraction`` of the message's value cells become null (a collector printing N/A); ``u`` seeds which."""
        keys = {c.name for c in KINDS[m.kind].keys}
        columns = [c for c in m.rows if c not in keys]
        n = len(next(iter(m.rows.values()), []))
        seed = int(u * 2**63)
        hit = np.random.default_rng(seed).random((len(columns), n)) < fraction
        for j, c in enumerate(columns):
            if hit[j].any():
                values = list(m.rows[c])  # type: ignore[arg-type]
                for r in np.flatnonzero(hit[j]).tolist():
                    values[r] = None
                m.rows[c] = values

    def _spare_lane(self, port: str, lane: int) -> tuple[float, float, float]:
        """A spare lane's tx power, rx power and bias before its reading noise (fixed: worked out once)."""
        got = self.spare_lanes.get((port, lane))
        if got is None:
            u = [_uniform(self.seed, "spare", port, lane, j) for j in range(3)]
            got = (0.2 + 1.6 * u[0], _SPARE_RX[0] + (_SPARE_RX[1] - _SPARE_RX[0]) * u[1], 36.0 + 10.0 * u[2])
            self.spare_lanes[(port, lane)] = got
        return got

    def _add_spares(self, m: Message, spares: list[str], k: int) -> None:
        """Rows of modules in cages with no fibre (see spare_port in the module docstring)."""
        rows = m.rows
        n = len(spares)
        if m.kind == "port":
            for column in list(rows):
                value: Any = 0 if column.endswith("_total") or column in ("state", "queue_depth_bytes") else None
                rows[column] = list(rows[column]) + [value] * n  # type: ignore[operator]
            rows["port"][-n:] = spares  # type: ignore[index]
        elif m.kind == "optical":
            temps = [v for v in rows.get("module_temp_c", []) if v is not None]  # type: ignore[union-attr]
            ambient = (sum(temps) / len(temps) if temps else 40.0) - 3.0  # no traffic through the DSP
            add: dict[str, list[Any]] = {name: [] for name in rows}
            for port in spares:
                for lane in range(LANES):
                    tx, rx, bias = self._spare_lane(port, lane)
                    z = _NORMAL.inv_cdf(_uniform(self.seed, k, "spare", port, lane))
                    values = {
                        "port": port,
                        "lane": lane,
                        "tx_power_dbm": round(tx + 0.03 * z, 2),
                        "rx_power_dbm": round(rx + 0.05 * z, 2),
                        "bias_ma": round(bias + 0.08 * z, 3),
                        "module_temp_c": round(ambient, 2),
                        "voltage_v": 3.3,
                    }
                    for name in add:
                        add[name].append(values.get(name))
            for name, extra in add.items():
                rows[name] = list(rows[name]) + extra  # type: ignore[operator]
        elif m.kind == "module":
            for name in list(rows):
                first = rows[name][0] if len(rows[name]) else None  # type: ignore[arg-type]
                rows[name] = list(rows[name]) + [first] * n  # type: ignore[operator]
            rows["port"][-n:] = spares  # type: ignore[index]

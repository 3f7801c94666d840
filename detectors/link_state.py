"""Links that are down, or that keep going down and up (DESIGN §4 link_down, link_flap), and ports that
report but are not in the topology.

Down: the port's latest state is 0; its ``first_seen`` is the first down sample of the current down
spell, remembered across windows (snapshot/restore), so a link down for longer than a window still
says since when, and correlation can tell how long a switch has been off. Flapping: at least
``flap_min_events`` link-down events within ``flap_memory_s``. An event is a rise of
``link_down_total`` or a 1→0 step of ``state`` between two samples (the larger of the two for the same
sample, so one event is not counted twice); a flap that goes down and up between two scrapes shows
only in the counter. Windows overlap, so events are kept by their sample ts in a memory that outlives
the window (snapshot/restore), which also lets flaps slower than one window add up.

Switch outages: for each switch with two links or more down, a ``switch_links_down`` finding says how
many of its links were read since the outage began (either end reported after it) and how many of
those are down. Correlation judges "most of a switch's links down" over the links read since then,
not over all of them: a rebooting switch reports nothing itself, and a far end scraped less often than
the outage lasts (a spine's gNMI every 60 s, REALISM.md) cannot have seen it yet; such a link's state is
unknown, neither down nor up. Both ends of a leaf's links are keyed by that leaf, so one processor sees
all of them; a spine's links are spread over the leaves' partitions, and stage 2 adds the counts of the
processors that see one of its links down. The link-down events of an outage that wide (more than
``switch_wide_fraction`` of the known links, on two far fault domains or more) are the switch's: they
make no link a flapping one (a module swapped minutes before a leaf's maintenance is no flap).

Not in the topology: a port that reports but is no link end of the topology file is an inventory
finding (``port_not_in_topology``, severity warning), never a link_down or a link_flap: most often a
spare port (a module in a cage with no fibre reads state 0 and rx about -30 to -34 dBm with its low
alarms raised, REALISM.md), else a cable the topology file does not know yet. Correlation folds every
finding about such a port into nothing (it has no link to locate a fault on).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import (
    RECENT_S,
    SWITCH_DOWN_MIN_FRACTION,
    SWITCH_DOWN_SPREAD_S,
    DetectorConfig,
    Fraction,
    Positive,
)
from fabricwatch.detectors.frames import Keyed, keyed, recent, sig, ts_or
from fabricwatch.records import Finding, Window


class LinkStateConfig(DetectorConfig):
    flap_min_events: int = 2  # link-down events within flap_memory_s that make a flap
    flap_memory_s: Positive = 300.0  # five minutes: a link that fails twice in that time is flapping
    # how long a port's down spell is remembered without a sample saying so (a silent source): a day,
    # so a long outage keeps its start; memory only (one float per down port)
    down_memory_s: Positive = 86400.0
    # An outage with more than this share of its switch's known links down is the switch's (correlation's
    # rule 4a): the link-down events it caused make no link a flapping one.
    switch_wide_fraction: Fraction = SWITCH_DOWN_MIN_FRACTION
    outage_spread_s: Positive = SWITCH_DOWN_SPREAD_S  # one outage's far ends see it within this of each other


class LinkState(Detector):
    name = "link_state"
    emits = frozenset({"link_down", "link_flap", "port_not_in_topology", "switch_links_down"})
    Config = LinkStateConfig
    config: LinkStateConfig

    def __init__(self, config: LinkStateConfig | None = None, *, recent_s: float = RECENT_S) -> None:
        super().__init__(config, recent_s=recent_s)
        # port -> {sample ts: [down events at that sample, seconds since the sample before]}
        self.events: dict[str, dict[float, list[float]]] = {}
        self.down_since: dict[str, float] = {}  # port -> ts of the first down sample of its current spell
        # switch -> its current outage: [onset, links down, links read, far domains] at its widest tick
        self.outages: dict[str, list[float]] = {}
        # switch -> [onset, last seen] of its recent outages wide enough to be the switch's
        self.wide: dict[str, list[list[float]]] = {}

    def _remember(self, window: Window) -> None:
        full = keyed(window, "port")
        if not full.n:
            return
        found: dict[tuple[int, float], list[float]] = {}  # (port code, sample ts) -> [events, dt]
        st = full.steps("link_down_total")
        up = st.step > 0
        for c, t, k, dt in zip(st.codes[up], st.ts[up], st.step[up], st.dt[up], strict=True):
            found[(int(c), float(t))] = [int(k), float(dt)]
        state = full.values("state")
        ok = ~np.isnan(state)
        c, t, s = full.codes[ok], full.ts[ok], state[ok]
        fell = (c[1:] == c[:-1]) & (s[:-1] >= 1) & (s[1:] == 0)
        for code, when, dt in zip(c[1:][fell], t[1:][fell], np.diff(t)[fell], strict=True):
            key = (int(code), float(when))
            found[key] = [max(found.get(key, [0])[0], 1), float(dt)]
        for (code, when), (count, dt) in found.items():
            mem = self.events.setdefault(full.names[code], {})
            # the same down seen between other samples (a second source of the port, DESIGN §4b
            # duplicate_source, or the other source's samples on another tick) is the same event
            same = next((t for t, (_, d) in mem.items() if t - d < when and when - dt < t), when)
            mem[same] = [max(mem.get(same, [0])[0], count), mem.get(same, [0, dt])[1]]
        horizon = window.end - self.config.flap_memory_s
        self.wide = {sw: kept for sw, spans in self.wide.items() if (kept := [x for x in spans if x[1] >= horizon])}
        for port in list(self.events):
            kept = {t: k for t, k in self.events[port].items() if t >= horizon}
            if kept:
                self.events[port] = kept
            else:
                del self.events[port]

    def _down_spells(self, window: Window, first_down: np.ndarray, state: np.ndarray, ports: list[str]) -> None:
        """Remember when each port's current down spell began; forget ports seen up again."""
        with np.errstate(invalid="ignore"):
            down, up = (state == 0) & np.isfinite(first_down), state >= 1
        for i in np.flatnonzero(down):
            self.down_since[ports[i]] = min(self.down_since.get(ports[i], np.inf), float(first_down[i]))
        if self.down_since and up.any():
            back = set(np.asarray(ports, dtype=object)[up])
            self.down_since = {p: t for p, t in self.down_since.items() if p not in back}
        horizon = window.start - self.config.down_memory_s
        self.down_since = {p: t for p, t in self.down_since.items() if t >= horizon}

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        self._remember(window)
        now = recent(window, "port", self.recent_s)
        known = window.topology.port_link
        out: list[Finding] = []
        down: list[Finding] = []
        if now.n:
            state = now.last("state")
            full = keyed(window, "port")
            s = full.values("state")
            last_up = full.last_ts_where(s >= 1)
            row_up = full.per_row(np.nan_to_num(last_up, nan=-np.inf))
            first_down = full.first_ts_where((s == 0) & (full.ts > row_up))
            last_ts = now.last_ts()
            names = now.names
            self._down_spells(window, first_down, state, names)
            for i in [i for i, port in enumerate(names) if port not in known]:
                if np.isfinite(last_ts[i]):
                    out.append(self._not_in_topology(names[i], state[i], now.first_ts()[i], last_ts[i]))
            for i in np.flatnonzero(state == 0):
                port = names[i]
                if port not in known:
                    continue
                since = self.down_since.get(port, ts_or(first_down[i], last_ts[i]))
                down.append(
                    Finding(
                        detector=self.name,
                        symptom="link_down",
                        entity="port",
                        id=port,
                        first_seen=min(since, ts_or(first_down[i], last_ts[i])),
                        last_seen=float(last_ts[i]),
                        severity="critical",
                        evidence=({"metric": "state", "port": port, "value": 0},),
                        attrs={"events": int(sum(k for k, _ in self.events.get(port, {}).values()))},
                    )
                )
            out += down + self._switch_outages(window, down, full)
        for port in sorted(self.events):
            if port not in known:
                continue
            mem = self._own_events(port, window)
            count = int(sum(mem.values()))
            if count < cfg.flap_min_events:
                continue
            out.append(
                Finding(
                    detector=self.name,
                    symptom="link_flap",
                    entity="port",
                    id=port,
                    first_seen=min(mem),
                    last_seen=max(mem),
                    severity="major",
                    evidence=(
                        {"metric": "link_down_events", "port": port, "value": count, "over_s": sig(cfg.flap_memory_s)},
                    ),
                    score=float(count),
                    attrs={"events": count},
                )
            )
        return out

    def _own_events(self, port: str, window: Window) -> dict[float, float]:
        """The port's remembered link-down events, less those its switch's outage caused: an event
        whose down happened (between its sample and the one before) within a wide outage of a switch
        at either end of the link."""
        topology = window.topology
        link = topology.port_link[port]
        spans = [x for end in (link.a, link.b) for x in self.wide.get(topology.port_device[end], ())]
        return {t: k for t, (k, dt) in self.events[port].items() if not any(t >= a and t - dt <= b for a, b in spans)}

    def _switch_outages(self, window: Window, down: list[Finding], full: Keyed) -> list[Finding]:
        """Per switch with two links or more down (correlation needs their far ends on two fault
        domains): how many of its links were read since the outage began (the first start of its links'
        down spells within ``outage_spread_s`` of their median), how many of those are down, on how
        many far fault domains; the widest tick of the outage is kept until its last link is up, so the
        stragglers of a switch coming back (hosts not yet scraped) stay its own."""
        topology = window.topology
        starts: dict[str, list[float]] = {}  # switch -> the start of each of its down links' spells
        links_down: dict[str, set[str]] = {}
        for f in down:
            link = topology.port_link[f.id]
            for end in (link.a, link.b):
                device = topology.port_device[end]
                if device in topology.switch_by_name and link.id not in links_down.get(device, ()):
                    starts.setdefault(device, []).append(f.first_seen)
                    links_down.setdefault(device, set()).add(link.id)
        # the outage began when the first of the links that went down with most of them did: a link
        # down for longer than the spread before is a fault of its own
        spread = self.config.outage_spread_s
        onset = {sw: min(x for x in t if x >= np.median(t) - spread) for sw, t in starts.items()}
        self.outages = {sw: o for sw, o in self.outages.items() if sw in onset}
        # two links or more down (or an outage still ending): correlation needs two far fault domains
        switches = [sw for sw in sorted(onset) if len(links_down[sw]) >= 2 or sw in self.outages]
        last = dict(zip(full.names, full.last_ts(), strict=True)) if switches else {}
        out = []
        for switch in switches:
            ids = links_down[switch]
            links = [topology.port_link[p] for p in topology.ports_of_device(switch) if p in topology.port_link]
            since = onset[switch]
            seen = [max(last.get(link.a, -np.inf), last.get(link.b, -np.inf)) for link in links]
            read = max(sum(1 for t in seen if t >= since), len(ids))
            far = {
                topology.gpu_node.get(d, d)
                for link in links
                if link.id in ids
                for d in (topology.port_device[link.a], topology.port_device[link.b])
                if d != switch
            }
            widest = self.outages.get(switch)
            if widest is None or len(ids) / read > widest[1] / widest[2]:
                widest = [since, len(ids), read, len(far)]
            self.outages[switch] = widest
            since, n_down, n_read, n_far = widest
            if n_down / n_read > self.config.switch_wide_fraction and n_far >= 2:
                spans = self.wide.setdefault(switch, [])
                if spans and spans[-1][0] == since:
                    spans[-1][1] = window.end
                else:
                    spans.append([since, window.end])
            out.append(
                Finding(
                    detector=self.name,
                    symptom="switch_links_down",
                    entity="switch",
                    id=switch,
                    first_seen=since,
                    last_seen=window.end,
                    severity="warning",
                    evidence=({"metric": "links_down", "switch": switch, "value": int(n_down), "read": int(n_read)},),
                    score=n_down / n_read,
                    attrs={"down": int(n_down), "read": int(n_read), "domains": int(n_far), "down_now": len(ids)},
                )
            )
        return out

    def _not_in_topology(self, port: str, state: float, first: float, last: float) -> Finding:
        """An inventory finding: the port reports, the topology has no link on it."""
        value = None if not np.isfinite(state) else int(state)
        return Finding(
            detector=self.name,
            symptom="port_not_in_topology",
            entity="port",
            id=port,
            first_seen=ts_or(first, last),
            last_seen=float(last),
            severity="warning",
            evidence=({"metric": "state", "port": port, "value": value},),
            attrs={"state": value, "spare": value == 0},
        )

    def snapshot(self) -> dict[str, Any]:
        return {
            "events": {p: sorted([t, *e] for t, e in self.events[p].items()) for p in sorted(self.events)},
            "down_since": dict(sorted(self.down_since.items())),
            "outages": dict(sorted(self.outages.items())),
            "wide": dict(sorted(self.wide.items())),
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.events = {  # [t, events] from a snapshot before dt was kept: the down was at its sample
            p: {float(t): [int(k), float(dt[0]) if dt else 0.0] for t, k, *dt in pairs}
            for p, pairs in state.get("events", {}).items()
        }
        self.wide = {str(sw): [[float(a), float(b)] for a, b in spans] for sw, spans in state.get("wide", {}).items()}
        self.down_since = {str(p): float(t) for p, t in state.get("down_since", {}).items()}
        self.outages = {str(s): [float(x) for x in o] for s, o in state.get("outages", {}).items()}

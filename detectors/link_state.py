"""Links that are down, or that keep going down and up (DESIGN §4 link_down, link_flap).

Down: the port's latest state is 0. Flapping: at least ``flap_min_events`` link-down events within
``flap_memory_s``. An event is a rise of ``link_down_total`` or a 1→0 step of ``state`` between two
samples (the larger of the two for the same sample, so one event is not counted twice); a flap that
goes down and up between two scrapes shows only in the counter. Windows overlap, so events are kept by
their sample ts in a memory that outlives the window (snapshot/restore), which also lets flaps slower
than one window add up.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import RECENT_S, DetectorConfig, Positive
from fabricwatch.detectors.frames import keyed, recent, sig, ts_or
from fabricwatch.records import Finding, Window


class LinkStateConfig(DetectorConfig):
    flap_min_events: int = 2  # link-down events within flap_memory_s that make a flap
    flap_memory_s: Positive = 300.0  # five minutes: a link that fails twice in that time is flapping


class LinkState(Detector):
    name = "link_state"
    emits = frozenset({"link_down", "link_flap"})
    Config = LinkStateConfig
    config: LinkStateConfig

    def __init__(self, config: LinkStateConfig | None = None, *, recent_s: float = RECENT_S) -> None:
        super().__init__(config, recent_s=recent_s)
        self.events: dict[str, dict[float, int]] = {}  # port -> {sample ts: down events at that sample}

    def _remember(self, window: Window) -> None:
        full = keyed(window, "port")
        if not full.n:
            return
        found: dict[tuple[int, float], int] = {}
        st = full.steps("link_down_total")
        up = st.step > 0
        for c, t, k in zip(st.codes[up], st.ts[up], st.step[up], strict=True):
            found[(int(c), float(t))] = int(k)
        state = full.values("state")
        ok = ~np.isnan(state)
        c, t, s = full.codes[ok], full.ts[ok], state[ok]
        fell = (c[1:] == c[:-1]) & (s[:-1] >= 1) & (s[1:] == 0)
        for code, when in zip(c[1:][fell], t[1:][fell], strict=True):
            key = (int(code), float(when))
            found[key] = max(found.get(key, 0), 1)
        for (code, when), count in found.items():
            port = str(full.index[code])
            mem = self.events.setdefault(port, {})
            mem[when] = max(mem.get(when, 0), count)
        horizon = window.end - self.config.flap_memory_s
        for port in list(self.events):
            kept = {t: k for t, k in self.events[port].items() if t >= horizon}
            if kept:
                self.events[port] = kept
            else:
                del self.events[port]

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        self._remember(window)
        now = recent(window, "port", self.recent_s)
        out: list[Finding] = []
        if now.n:
            state = now.last("state")
            full = keyed(window, "port")
            s = full.values("state")
            last_up = full.last_ts_where(s >= 1)
            row_up = full.per_row(np.nan_to_num(last_up, nan=-np.inf))
            first_down = full.first_ts_where((s == 0) & (full.ts > row_up))
            last_ts = now.last_ts()
            for i in np.flatnonzero(state == 0):
                port = str(now.index[i])
                out.append(
                    Finding(
                        detector=self.name,
                        symptom="link_down",
                        entity="port",
                        id=port,
                        first_seen=ts_or(first_down[i], last_ts[i]),
                        last_seen=float(last_ts[i]),
                        severity="critical",
                        evidence=({"metric": "state", "port": port, "value": 0},),
                        attrs={"events": sum(self.events.get(port, {}).values())},
                    )
                )
        for port in sorted(self.events):
            mem = self.events[port]
            count = sum(mem.values())
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

    def snapshot(self) -> dict[str, Any]:
        return {"events": {p: sorted([t, k] for t, k in self.events[p].items()) for p in sorted(self.events)}}

    def restore(self, state: dict[str, Any]) -> None:
        self.events = {p: {float(t): int(k) for t, k in pairs} for p, pairs in state.get("events", {}).items()}

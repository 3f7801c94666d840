"""Liveness: lost scrapes and silent sources are findings of their own (DESIGN §3 ``seq``, §5 ``collector``).

Telemetry that stops is not telemetry that is healthy. Per source (a collector: a host's agent, a
switch's gNMI or CLI poller), over the window and what this detector remembers of earlier ones:

* ``seq_gap`` (warning): ``seq`` rises by one per message of a source and kind; a rise of more than
  one within the window is that many lost scrapes. A reset (``seq`` falling: the agent restarted) is
  not a gap.
* ``collector_silent``: nothing from the source for ``silent_intervals`` of its own scrape intervals
  (its cadence is measured, so a switch polled every 60 s is not silent after 15 s). The finding
  lists the entities (GPUs, devices, ports) the source reported, so the incident tracker can mark
  incidents resting on that evidence ``unknown`` instead of resolving them. From
  ``incident_after_s`` of silence on, the finding asks for an incident of its own (entity
  ``collector``, separate from the fabric: correlation rule ``collector``).

Silence is measured in telemetry time, the tick's ``window.end`` against the source's newest row,
both after the processor took each source's clock offset out (stream/sources.py), so a fast or slow
clock is not silence. Pure over windows; the memory (last row, cadence, entities per source) is JSON
state that survives a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import msgspec
import numpy as np
import pandas as pd

from fabricwatch.detectors.base import Detector
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.correlate import Diagnosis
from fabricwatch.detectors.frames import factorized
from fabricwatch.records import Finding, Window

SYMPTOMS = frozenset({"collector_silent", "seq_gap"})
COLLECTOR_CAUSE = "collector_silent"  # the incident's type and cause (runbooks/library/collector-silent.yaml)
COLLECTOR_RUNBOOK = "collector-silent"

# kind -> the column naming the entity a row is about
ENTITY_COLUMN = {"gpu": "device", "switch": "device", "port": "port", "optical": "port"}
NO_CADENCE_KINDS = frozenset({"module"})  # sent at start, on change and every few minutes (DESIGN §3)
ENTITY_REFRESH_TICKS = 30  # what a source reports changes rarely: re-read every 30 ticks, and when new


class LivenessConfig(DetectorConfig):
    # A source is silent after missing this many of its own scrapes in a row: one lost scrape is
    # common (REALISM.md, Collectors: late and missing scrapes), three in a row is not a late one.
    silent_intervals: Annotated[float, msgspec.Meta(gt=1)] = 3.0
    # Silent this long is an incident of its own: "a collector silent for a minute or more is an
    # incident with entity collector" (issue 9, item 2; DESIGN §5).
    incident_after_s: Annotated[float, msgspec.Meta(gt=0)] = 60.0


class Liveness(Detector):
    name = "liveness"
    emits = frozenset({"collector_silent", "seq_gap"})
    Config = LivenessConfig
    config: LivenessConfig

    def __init__(self, config: DetectorConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        # source -> {"last": newest ts, "interval": cadence (s) or None, "entities": sorted ids}
        self.sources: dict[str, dict[str, Any]] = {}
        # source -> its newest ts when another processor took it over: its older rows still in the
        # window are not a source to watch here; a newer row (handed back) is
        self.handed_off: dict[str, float] = {}
        self._ticks = 0

    def detect(self, window: Window) -> list[Finding]:
        cfg = self.config
        now = window.end
        out: list[Finding] = []
        self._ticks += 1
        refresh = self._ticks % ENTITY_REFRESH_TICKS == 1
        # a hand-off older than the window: none of the source's rows read here is left in it, so any
        # row of it from now on is new (handed back); the entry goes, and the map stays bounded
        self.handed_off = {s: t for s, t in self.handed_off.items() if t >= window.start}
        seen: dict[str, dict[str, Any]] = {}
        for kind, frame in sorted(window.frames.items()):
            if frame.empty or "source" not in frame:
                continue
            stats_by_source = _per_source(frame, factorized(window, kind, "source"), kind not in NO_CADENCE_KINDS)
            for source, stats in stats_by_source.items():
                s = seen.setdefault(source, {"last": -np.inf, "intervals": [], "entities": set(), "gaps": []})
                s["last"] = max(s["last"], stats["last"])
                if stats.get("interval") is not None:
                    s["intervals"].append(stats["interval"])
                if stats.get("lost"):
                    s["gaps"].append((kind, stats["lost"]))
            column = ENTITY_COLUMN.get(kind)
            if column in frame:
                fresh = [x for x in stats_by_source if refresh or x not in self.sources]
                if fresh:
                    part = frame.loc[frame["source"].isin(fresh), ["source", column]].dropna().drop_duplicates()
                    for source, entity in zip(part["source"].astype(str), part[column].astype(str), strict=True):
                        seen[source]["entities"].add(entity)
        for source, s in sorted(seen.items()):
            if source in self.handed_off:
                if s["last"] <= self.handed_off[source]:
                    continue
                del self.handed_off[source]
            known = self.sources.setdefault(source, {"last": s["last"], "interval": None, "entities": []})
            known["last"] = max(known["last"], s["last"])
            if s["intervals"]:
                known["interval"] = min(s["intervals"])  # the source's fastest kind
            if s["entities"]:
                known["entities"] = sorted(set(known["entities"]) | s["entities"])
            for kind, lost in s["gaps"]:
                out.append(
                    Finding(
                        detector=self.name,
                        symptom="seq_gap",
                        entity="collector",
                        id=source,
                        first_seen=window.start,
                        last_seen=known["last"],
                        severity="warning",
                        evidence=({"metric": "seq_gap", "source": source, "kind": kind, "lost": lost},),
                        attrs={"kind": kind, "lost": lost},
                    )
                )
        for source, known in sorted(self.sources.items()):
            interval = known["interval"]
            if interval is None:
                continue  # one message so far: its cadence, so its silence, is not known yet
            silent_s = now - known["last"]
            if silent_s < cfg.silent_intervals * interval:
                continue
            incident = silent_s >= max(cfg.incident_after_s, cfg.silent_intervals * interval)
            out.append(
                Finding(
                    detector=self.name,
                    symptom="collector_silent",
                    entity="collector",
                    id=source,
                    first_seen=known["last"] + interval,  # the first scrape that did not come
                    last_seen=now,
                    severity="major" if incident else "warning",
                    evidence=(
                        {
                            "metric": "silent_s",
                            "source": source,
                            "value": round(silent_s, 1),
                            "last_ts": known["last"],
                            "interval_s": round(interval, 3),
                        },
                    ),
                    attrs={"incident": incident, "entities": list(known["entities"]), "silent_s": silent_s},
                )
            )
        return out

    def forget(self, sources: Mapping[str, float]) -> None:
        """A source whose partitions moved to another processor is that one's to watch: silent here
        is not silent (a rebalance of a split deployment). Its rows up to the newest read here are
        left alone; a newer one means it was handed back."""
        for source, newest in sources.items():
            known = self.sources.pop(source, None)
            last = max(newest, known["last"] if known is not None else -np.inf)
            self.handed_off[source] = max(last, self.handed_off.get(source, -np.inf))

    def snapshot(self) -> dict[str, Any]:
        return {
            "sources": {k: dict(v) for k, v in sorted(self.sources.items())},
            "handed_off": dict(sorted(self.handed_off.items())),
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.sources = {str(k): dict(v) for k, v in state.get("sources", {}).items()}
        self.handed_off = {str(k): float(v) for k, v in state.get("handed_off", {}).items()}


def _per_source(
    frame: pd.DataFrame, sources: tuple[np.ndarray, np.ndarray], cadence: bool
) -> dict[str, dict[str, Any]]:
    """Per source of one kind's frame (sorted by ts; ``sources``: its source column factorised):
    newest ts, median gap between distinct ts, lost messages (rises of seq by more than one, in ts
    order). Vectorised: one pass per kind per tick."""
    codes, uniques = sources
    ts = frame["ts"].to_numpy(dtype=float)
    seqs = frame["seq"].to_numpy(dtype=float) if "seq" in frame else None
    if len(codes) > 1:
        # one row per run of equal source, ts and seq: a message's rows come together (a port's
        # four lanes, a switch's ports), and the rest of a run says nothing more about its source
        change = (codes[1:] != codes[:-1]) | (ts[1:] != ts[:-1])
        if seqs is not None:
            change |= seqs[1:] != seqs[:-1]
        heads = np.flatnonzero(np.r_[True, change])
        codes, ts = codes.take(heads), ts.take(heads)
        seqs = seqs.take(heads) if seqs is not None else None
    names = uniques.tolist()
    n = len(names)
    if n == 0 or not len(codes):
        return {}
    # by source, the frame's ts order kept within a source: a stable sort of 16-bit codes (a radix
    # sort, several times faster than a merge sort of 64-bit ones); -1 (a null) first, as before
    order = np.argsort((codes + 1).astype(np.uint16) if n < 1 << 16 else codes, kind="stable")
    c, t = codes[order], ts[order]
    ends = np.flatnonzero(np.r_[c[1:] != c[:-1], True])  # each source's last row: its newest ts
    out = {names[c[i]]: {"last": float(t[i])} for i in ends}
    if not cadence:
        return out
    distinct = np.ones(len(t), dtype=bool)
    distinct[1:] = (c[1:] != c[:-1]) | (t[1:] != t[:-1])
    c, t = c[distinct], t[distinct]
    same = c[1:] == c[:-1]
    for i, gap in _medians(c[1:][same], np.diff(t)[same]):
        out[names[i]]["interval"] = gap
    if seqs is not None:
        seq = seqs[order]
        cs = codes[order]
        step = np.diff(seq)
        ok = (cs[1:] == cs[:-1]) & np.isfinite(step) & (step > 1)
        lost = np.bincount(cs[1:][ok], weights=step[ok] - 1, minlength=n)
        for i in np.flatnonzero(lost):
            out[names[i]]["lost"] = int(lost[i])
    return out


def _medians(codes: np.ndarray, values: np.ndarray) -> list[tuple[int, float]]:
    """Each code's median of ``values`` (NaN skipped; NaN for a code with none), as pandas' groupby
    median gives it, by one sort of (code, value) pairs and the middle of each code's run."""
    codes = codes + 1  # factorize's -1 (a null) is a group too, as in a groupby on the codes
    present = np.unique(codes)
    ok = ~np.isnan(values)
    c, v = codes[ok], values[ok]
    v = np.append(v[np.lexsort((v, c))], np.nan)  # the NaN keeps an empty last run's index in range
    counts = np.bincount(c, minlength=int(present[-1]) + 1 if len(present) else 0)
    starts = np.cumsum(counts) - counts
    k, s = counts[present], starts[present]
    lo, hi = s + np.maximum((k - 1) // 2, 0), s + np.maximum(k // 2, 0)
    med = np.where(k > 0, (v[lo] + v[hi]) / 2, np.nan)
    return list(zip((present - 1).tolist(), med.tolist(), strict=True))


def _lost(rows: pd.DataFrame) -> int:
    """Messages lost within these rows of one source and kind: rises of ``seq`` by more than one."""
    if "seq" not in rows:
        return 0
    seq = rows["seq"].dropna().to_numpy(dtype=np.int64)  # in ts order: the window is sorted by ts
    if len(seq) < 2:
        return 0
    step = np.diff(seq)
    step = step[step != 0]  # rows of one message share its seq
    return int(np.sum(step[step > 1] - 1))  # a fall is a restarted agent, not a loss


# --- correlation rule "collector" (detectors/correlate.py calls it) ----------------------------------


class CollectorDiagnosis(Diagnosis):
    """A silent collector: its own incident (entity ``collector``), never a fabric one."""

    @property
    def type(self) -> str:
        return COLLECTOR_CAUSE

    @property
    def runbook(self) -> str:
        return COLLECTOR_RUNBOOK


def collector_diagnoses(pool: Any) -> list[Diagnosis]:
    """A source silent for ``incident_after_s`` → one collector incident, its lost-scrape findings
    folded in. Shorter silences and gaps alone are findings only: claimed here, no incident."""
    found = pool.free(entity="collector", symptoms=set(SYMPTOMS))
    out: list[Diagnosis] = []
    for f in found:
        if f.symptom == "collector_silent" and f.attrs.get("incident"):
            gaps = [g for g in found if g.symptom == "seq_gap" and g.id == f.id]
            roots, symptoms = pool.take([f]), pool.take(gaps)
            out.append(CollectorDiagnosis(COLLECTOR_CAUSE, "collector", f.id, f"collector:{f.id}", roots, symptoms))
    pool.take(found)
    return out


def silent_entities(findings: list[Finding]) -> dict[str, str]:
    """Entity id → the silent source that reported it, from a tick's ``collector_silent`` findings."""
    out: dict[str, str] = {}
    for f in findings:
        if f.symptom == "collector_silent":
            for entity in f.attrs.get("entities", ()):
                out.setdefault(str(entity), f.id)
    return out

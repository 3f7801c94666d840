"""Diagnoses over time → incidents: Alertmanager's life cycle, made topology-aware (STYLE item 6).

* Key: an incident is keyed by canonical content only, ``<type>|<anchor>`` (anchor: the link for
  every link or port cause, else the GPU, loop, switch or port), so the id survives refinement:
  contamination becoming fibre damage, or a laser found at one end, stays the same incident. A link's
  two types (link_down, link_degradation) share one key, ``link|<anchor>``: a link that reads down at
  once and shows its dark lane a few scrapes later is one incident, whose cause is refined. A second
  fault on a link, in the direction its first leaves alone, hangs on ``<link>><port>`` (correlate.py,
  rule 6), its own incident.
* Debounce: a diagnosis must be present on every tick for ``open_after_s`` before it opens (noise
  pages nobody), unless it rests on a step: a link whose state reads down, light lost (about
  -40 dBm), a dark lane, a collector silent for a minute. Those are not noisy judgements but
  readings of a state, so they open on the tick that first sees them (issue 9: step faults within two
  scrape intervals of the first bad sample). ``detected_at`` is the ``now`` of the tick that opens it,
  ``first_seen`` the earliest evidence. Between two ticks a step tick (:meth:`IncidentTracker.update_step`)
  opens the step incidents the step detectors already show, so a step waits 5 s for a look, not 10.
  A refined cause or location also has to hold ``open_after_s`` before it replaces
  the current one, so a borderline reading cannot make the cause flip every tick.
* Inhibition by topology: an open root whose findings explain another open incident's anchor (a
  cooling loop over its GPUs, a hot GPU over its NPO link, a switch over its links; never a GPU's own
  XID, :data:`NEVER_FOLDED`) folds it: the
  folded incident is closed (status resolved, ``resolved_at`` = the fold) and its id is listed in the
  root's ``symptoms``; :meth:`IncidentTracker.roots` returns roots only.
* Resolution: an incident whose diagnosis is gone for ``resolve_after_s`` of fresh data resolves; if
  it comes back later, that is a new incident. Silence is not health: while a source that reported
  the incident's evidence is silent (detectors/liveness.py), the incident's status is ``unknown``
  (DESIGN §5) with the silent source in its evidence, and its resolution clock does not run; it
  starts again when the source is back, so resolution needs ``resolve_after_s`` of fresh healthy
  data. The diagnosis seen again makes it ``firing`` again.
* Intermittent faults: a diagnosis that comes back within ``recur_within_s`` of its incident's last
  sighting re-opens that incident (same id, ``firing`` again, an ``episodes`` evidence entry) instead
  of a new one; from then on the incident stays open while its diagnosis is gone for up to
  :data:`HOLD_FACTOR` times the longest quiet spell seen (at least ``resolve_after_s``): the hold
  adapts to the episodes, so one intermittent connector is one incident through its quiet spells.
* Severity only escalates while firing; evidence is taken when the incident opens and whenever its
  cause, location or severity changes, so an unchanged incident is not re-emitted every tick.

Ids are ``inc-0001``, ``inc-0002``, ... in opening order, keys sorted within a tick: the same sequence
of diagnoses gives the same incidents byte for byte. A live stage 2 passes ``id_prefix``
``inc-<instance>-``; the counter is part of the snapshot, so a restored tracker never reuses an id.

Memory: in one process (demo, replay) the tracker keeps every incident, so :meth:`IncidentTracker.roots`
lists the whole run. A live stage 2, which saves the snapshot on every batch for months, passes
``prune=True``: after each tick it forgets what can no longer change (an incident resolved or folded,
past ``recur_within_s`` of its last sighting so it cannot re-open), which its store already holds
(every change is returned by :meth:`IncidentTracker.update` and stored). Pruning changes no output of
``update``; the snapshot holds the open incidents and those that may still come back.
"""

from __future__ import annotations

from typing import Any

from fabricwatch.detectors.config import EngineConfig
from fabricwatch.detectors.correlate import DIRECTION, RANK, Diagnosis
from fabricwatch.incident import Incident

# Findings that read a state rather than judge a level: link state 0 (link_state), light lost at
# about -40 dBm or a dark lane (optical_thresholds), a source silent past incident_after_s (liveness).
STEP_SYMPTOMS = frozenset({"link_down", "loss_of_light", "tx_dark", "collector_silent"})
# ... and, when critical, the driver's own report that a GPU is broken: an XID of NVIDIA's catalogue
# that needs a reset or a node drain, or a double-bit ECC error (gpu_xid.xid_critical). Other XIDs
# (application faults) keep the debounce.
CRITICAL_STEP_SYMPTOMS = frozenset({"gpu_xid"})
SILENT_METRIC = "source_silent"
COLLECTOR_TYPE = "collector_silent"  # resolves with its source's first fresh data: that is the fix
# An incident that came back after a quiet spell stays open this many times its longest quiet spell
# (issue 9 item 5: an intermittent connector opened four incidents in twenty minutes; one, held open
# through spells up to twice as long as any seen, is what an engineer wants).
HOLD_FACTOR = 2.0
EPISODES_METRIC = "episodes"  # evidence of an intermittent incident: how often it came back
# A flap is what a failing part of a link does (its downs): once a link's incident names the part
# behind its downs (light lost one way while down, correlate.py rule 4b), the flaps seen between the
# part's episodes, with the optics then normal, never turn it back into a flap; and a link found down
# or flapping takes the path's part at once, without a debounce, when light lost on the way is seen
# with the downs (an intermittent connector shows it only while an episode lasts).
PART_CAUSES = frozenset({"connector_contamination", "fiber_damage", "laser_degradation", "transceiver_fault"})
PATH_CAUSES = frozenset({"connector_contamination", "fiber_damage"})
STATE_CAUSES = frozenset({"link_down", "link_flap"})
LINK_TYPES = frozenset({"link_down", "link_degradation"})  # evidence of an unknown incident: which source went silent


class IncidentTracker:
    def __init__(self, config: EngineConfig | None = None, *, id_prefix: str = "inc-", prune: bool = False) -> None:
        self.config = config if config is not None else EngineConfig()
        self.id_prefix = id_prefix
        self.prune = prune  # forget incidents that can no longer change (live stage 2; see the module docstring)
        self._incidents: dict[str, Incident] = {}
        self._meta: dict[str, dict[str, Any]] = {}  # id -> key, anchor, last_seen, covers, folded_into, candidate
        self._open: dict[str, str] = {}  # key -> id of its firing incident
        self._pending: dict[str, list[float]] = {}  # key -> [now of its first tick, earliest first_seen]
        self._resolved: dict[str, str] = {}  # key -> id of its last resolved incident (may come back)
        self._next = 1

    # --- the tick ----------------------------------------------------------------------------------

    def update(self, diagnoses: list[Diagnosis], now: float, silent: dict[str, str] | None = None) -> list[Incident]:
        """Apply one tick's diagnoses at ``now``; returns copies of the incidents that changed.

        ``silent`` maps the entities reported by a silent source to that source (liveness findings):
        an open incident about them is ``unknown``, not resolved, while its diagnosis is not seen."""
        silent = silent or {}
        cfg = self.config
        changed: set[str] = set()
        seen: dict[str, Diagnosis] = {}
        for d in sorted(diagnoses, key=lambda d: d.key):
            seen.setdefault(incident_key(d), d)
        for key, d in seen.items():
            iid = self._open.get(key)
            if iid is not None:
                self._refresh(iid, d, now, changed)
                continue
            pending = self._pending.setdefault(key, [now, d.first_seen])
            pending[1] = min(pending[1], d.first_seen)
            if is_step(d) or now - pending[0] >= cfg.open_after_s:
                del self._pending[key]
                back = self._reattach(key, d, now, since=pending[0])
                changed.add(back if back is not None else self._start(d, now, first_seen=pending[1]))
        for key in [k for k in self._pending if k not in seen]:
            del self._pending[key]
        self._fold(now, changed)
        for key, iid in sorted(self._open.items()):
            if key in seen:
                continue
            sources = sorted({silent[e] for e in self._meta[iid].get("entities", ()) if e in silent})
            if sources:
                self._meta[iid]["last_seen"] = now  # silence is not health: the clock waits for fresh data
                if self._incidents[iid].status != "unknown":
                    self._unknown(iid, sources)
                    changed.add(iid)
            elif self._incidents[iid].type == COLLECTOR_TYPE or now - self._meta[iid]["last_seen"] >= self._hold(iid):
                self._close(iid, now)
                self._resolved[key] = iid  # may come back: an intermittent fault (see _reattach)
                changed.add(iid)
        out = [_copy(self._incidents[i]) for i in sorted(changed)]
        if self.prune:
            self._forget(now)
        return out

    def update_step(self, diagnoses: list[Diagnosis], now: float) -> list[Incident]:
        """A step tick (EngineConfig.step_tick, halfway between full ticks): open the step diagnoses
        (:func:`is_step`) whose key has no firing incident, as :meth:`update` would have at this tick,
        then fold. Nothing else moves: no refresh, no debounce started or dropped, no resolution. The
        step tick sees only the step detectors' findings, so a diagnosis it lacks says nothing, and what
        it has of an open incident is the next full tick's to add. Returns copies of what changed."""
        changed: set[str] = set()
        seen: dict[str, Diagnosis] = {}
        for d in sorted(diagnoses, key=lambda d: d.key):
            if is_step(d):
                seen.setdefault(incident_key(d), d)
        # what an open root explains (a switch over its links) would only be folded into it at once: the
        # readings of a switch coming back (a far end's last sample still dark) are that switch's
        covered = {
            a for i in self._open.values() if self._meta[i]["folded_into"] is None for a in self._meta[i]["covers"]
        }
        for key, d in seen.items():
            if key in self._open or (base_anchor(d.anchor) in covered and d.type not in NEVER_FOLDED):
                continue
            pending = self._pending.pop(key, None)  # a debounce the full ticks had started: it opens now
            since, first_seen = (pending[0], min(pending[1], d.first_seen)) if pending else (now, d.first_seen)
            back = self._reattach(key, d, now, since=since)
            changed.add(back if back is not None else self._start(d, now, first_seen=first_seen))
        if changed:
            self._fold(now, changed)
        return [_copy(self._incidents[i]) for i in sorted(changed)]

    def _forget(self, now: float) -> None:
        """Drop every incident that no later tick can change: neither open nor able to re-open.

        A resolved incident re-opens only through :meth:`_reattach`, when its key's diagnosis returns
        with ``since - last_seen <= recur_within_s``; ``since`` is the start of the key's pending
        debounce if one is running, else a later tick than ``now``. Past that, or folded, or no longer
        its key's last resolved incident, nothing reaches it again: its last change is stored."""
        for key, iid in list(self._resolved.items()):
            meta = self._meta[iid]
            since = self._pending[key][0] if key in self._pending else now
            if meta["folded_into"] is not None or since - meta["last_seen"] > self.config.recur_within_s:
                del self._resolved[key]
        keep = {*self._open.values(), *self._resolved.values()}
        for iid in [i for i in self._incidents if i not in keep]:
            del self._incidents[iid], self._meta[iid]

    def _hold(self, iid: str) -> float:
        """How long an incident stays open with its diagnosis gone: ``resolve_after_s``, or, for one
        that came back after quiet spells, :data:`HOLD_FACTOR` times its longest quiet spell (at most
        ``recur_within_s``)."""
        cfg = self.config
        quiet = float(self._meta[iid].get("quiet_max", 0.0))
        return max(cfg.resolve_after_s, min(HOLD_FACTOR * quiet, cfg.recur_within_s))

    def _reattach(self, key: str, d: Diagnosis, now: float, since: float) -> str | None:
        """The diagnosis is back: the same root's incident if it resolved less than ``recur_within_s``
        ago (an intermittent fault is one incident, its quiet spell remembered); else None."""
        iid = self._resolved.pop(key, None)
        if iid is None:
            return None
        inc, meta = self._incidents[iid], self._meta[iid]
        if meta["folded_into"] is not None or since - meta["last_seen"] > self.config.recur_within_s:
            return None
        inc.status, inc.resolved_at = "firing", None
        self._open[key] = iid
        self._episode(iid, d, quiet=since - meta["last_seen"])
        meta["last_seen"] = now
        self._refresh(iid, d, now, set())
        return iid

    def _episode(self, iid: str, d: Diagnosis, quiet: float) -> None:
        """The diagnosis is back after a quiet spell: count the episode, remember the spell, say so."""
        inc, meta = self._incidents[iid], self._meta[iid]
        meta["quiet_max"] = max(float(meta.get("quiet_max", 0.0)), quiet)
        meta["episodes"] = int(meta.get("episodes", 1)) + 1
        inc.evidence = [e for e in d.evidence(self.config.max_evidence) if e.get("metric") != EPISODES_METRIC]
        inc.evidence.append({"metric": EPISODES_METRIC, "value": meta["episodes"], "quiet_s": meta["quiet_max"]})

    def _start(self, d: Diagnosis, now: float, first_seen: float) -> str:
        iid = f"{self.id_prefix}{self._next:04d}"
        self._next += 1
        self._incidents[iid] = Incident(
            id=iid,
            type=d.type,
            cause=d.cause,
            location={"entity": d.entity, "id": d.id},
            severity=d.severity,
            first_seen=min(first_seen, d.first_seen),
            detected_at=now,
            evidence=d.evidence(self.config.max_evidence),
            runbook=d.runbook,
            forecast=d.forecast,
            source_offsets=d.source_offsets,
        )
        self._meta[iid] = {
            "key": incident_key(d),
            "anchor": d.anchor,
            "last_seen": now,
            "covers": sorted(d.covers),
            "folded_into": None,
            "candidate": None,
            "entities": _entities(d),
            "step": is_step(d),
        }
        self._open[incident_key(d)] = iid
        return iid

    def _refresh(self, iid: str, d: Diagnosis, now: float, changed: set[str]) -> None:
        inc, meta = self._incidents[iid], self._meta[iid]
        if now - meta["last_seen"] >= self.config.open_after_s and inc.status == "firing":
            # back after a spell as long as a new incident's debounce: another episode of this one
            self._episode(iid, d, quiet=now - meta["last_seen"])
            changed.add(iid)
        meta["last_seen"] = now
        meta["covers"] = sorted(set(meta["covers"]) | d.covers)
        meta["entities"] = sorted(set(meta.get("entities", ())) | set(_entities(d)))
        material = False
        if inc.status == "unknown":  # seen again: its sources speak, and it still holds
            inc.status = "firing"
            inc.evidence = [e for e in inc.evidence if e.get("metric") != SILENT_METRIC]
            changed.add(iid)
        if d.first_seen < inc.first_seen:
            inc.first_seen = d.first_seen
            changed.add(iid)
        offsets = d.source_offsets
        if offsets and not offsets.keys() <= (inc.source_offsets or {}).keys():  # a source newly shaping it
            inc.source_offsets = dict(sorted({**(inc.source_offsets or {}), **offsets}.items()))
            changed.add(iid)
        forecast = d.forecast
        if forecast is not None:
            inc.forecast = forecast  # the latest fit's (not a change worth publishing on its own)
        if RANK.get(d.severity, 9) < RANK.get(inc.severity, 9):
            inc.severity = d.severity
            material = True
        if d.runbook == "reroute" and inc.runbook != "reroute":  # mitigation first, once loss passes 1 %
            inc.runbook = d.runbook
            material = True
        diagnosis = [d.cause, d.entity, d.id]
        explains_downs = d.cause in PATH_CAUSES and inc.cause in STATE_CAUSES
        if diagnosis == [inc.cause, inc.location["entity"], inc.location["id"]] or (
            d.cause == "link_flap" and inc.cause in PART_CAUSES
        ):
            meta["candidate"] = None
        elif not explains_downs and (meta["candidate"] is None or meta["candidate"][:3] != diagnosis):
            meta["candidate"] = [*diagnosis, now]
        elif explains_downs or now - meta["candidate"][3] >= self.config.open_after_s:
            inc.cause, inc.location, inc.runbook = d.cause, {"entity": d.entity, "id": d.id}, d.runbook
            inc.type = d.type  # a link found down, then its dark lane: link_down → link_degradation
            meta["candidate"] = None
            material = True
        # opened at once on a step reading, and still within what would have been its debounce
        settling = meta.get("step", False) and now - inc.detected_at <= self.config.open_after_s
        if material or (settling and d.evidence(self.config.max_evidence) != inc.evidence):
            # a step opens on its first reading; what the debounce would have gathered (the light
            # lost with the link down, say) joins its evidence while it settles
            inc.evidence = d.evidence(self.config.max_evidence)
            changed.add(iid)

    def _fold(self, now: float, changed: set[str]) -> None:
        by_anchor: dict[str, list[str]] = {}
        for iid in sorted(self._open.values()):
            if self._incidents[iid].type not in NEVER_FOLDED:
                by_anchor.setdefault(base_anchor(self._meta[iid]["anchor"]), []).append(iid)
        for root in sorted(self._open.values()):
            if self._meta[root]["folded_into"] is not None:
                continue
            for other in (o for anchor in self._meta[root]["covers"] for o in by_anchor.get(anchor, ())):
                if other == root or self._meta[other]["folded_into"] is not None:
                    continue
                if self._incidents[other].status != "firing":
                    continue
                self._close(other, now)
                self._meta[other]["folded_into"] = root
                symptoms = self._incidents[root].symptoms
                self._incidents[root].symptoms = sorted({*symptoms, other, *self._incidents[other].symptoms})
                changed.update((root, other))

    def _unknown(self, iid: str, sources: list[str]) -> None:
        inc = self._incidents[iid]
        inc.status = "unknown"
        inc.evidence = [e for e in inc.evidence if e.get("metric") != SILENT_METRIC]
        inc.evidence += [{"metric": SILENT_METRIC, "source": s} for s in sources]

    def _close(self, iid: str, now: float) -> None:
        inc = self._incidents[iid]
        inc.status, inc.resolved_at = "resolved", now
        self._open.pop(self._meta[iid]["key"], None)

    # --- views and state ---------------------------------------------------------------------------

    def roots(self) -> list[Incident]:
        """Every root incident so far (folded ones are listed in their root's symptoms), in id order;
        with ``prune``, only those still open or able to re-open (the store has the others)."""
        return [_copy(self._incidents[i]) for i in sorted(self._incidents) if self._meta[i]["folded_into"] is None]

    def snapshot(self) -> dict[str, Any]:
        return {
            "next": self._next,
            "incidents": [self._incidents[i].to_dict() for i in sorted(self._incidents)],
            "meta": {i: dict(self._meta[i]) for i in sorted(self._meta)},
            "open": dict(sorted(self._open.items())),
            "pending": {k: list(v) for k, v in sorted(self._pending.items())},
            "resolved": dict(sorted(self._resolved.items())),
        }

    def restore(self, state: dict[str, Any]) -> None:
        self._next = int(state.get("next", 1))
        self._incidents = {d["id"]: Incident.from_dict(d) for d in state.get("incidents", [])}
        self._meta = {i: dict(m) for i, m in state.get("meta", {}).items()}
        self._open = dict(state.get("open", {}))
        self._pending = {k: [float(v[0]), float(v[1])] for k, v in state.get("pending", {}).items()}
        self._resolved = dict(state.get("resolved", {}))


# A GPU's own fault report (an XID: drain-gpu) is never folded into a root that covers the GPU: heat
# may have caused it (a cooling loop failing), but the GPU still has to be drained and reset, which no
# cooling or link runbook does.
NEVER_FOLDED = frozenset({"gpu_fault"})


def base_anchor(anchor: str) -> str:
    """The link a second problem on it hangs on (detectors/correlate.py, rule 6): what covers the
    link (a switch, a hot GPU) covers both of its problems."""
    return anchor.partition(DIRECTION)[0]


def incident_key(d: Diagnosis) -> str:
    """The tracker's key: ``<type>|<anchor>``, one ``link|<anchor>`` for both of a link's types."""
    return f"link|{d.anchor}" if d.type in LINK_TYPES else d.key


def is_step(d: Diagnosis) -> bool:
    """Whether the diagnosis rests on a step reading (opens at once), not on a noisy judgement."""
    return any(
        f.symptom in STEP_SYMPTOMS or (f.symptom in CRITICAL_STEP_SYMPTOMS and f.severity == "critical")
        for f in d.roots
    )


def _entities(d: Diagnosis) -> list[str]:
    """What the incident rests on: its location and the entities of its findings (ports, GPUs)."""
    return sorted({d.id} | {f.id for f in d.findings})


def _copy(inc: Incident) -> Incident:
    d = inc.to_dict()
    return Incident.from_dict(d)

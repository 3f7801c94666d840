"""Guards: what may refuse an action, and the state they judge it on (devices out of service, recent
actions, executions started). A refusal names the guard and says why, and is audited.

Order: idempotence, approval, blast radius, rate, circuit breaker, capacity. All are evaluated, so an
audit shows every reason an action was refused, not only the first.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabricwatch.errors import InputError
from fabricwatch.runbooks.capacity import Capacity
from fabricwatch.runbooks.targets import Target, domain_of
from fabricwatch.topology import Topology, load_yaml


@dataclass(frozen=True, slots=True)
class GuardConfig:
    min_uplink_fraction: float = 0.75  # a leaf keeps ≥ 75 % of its uplinks
    fabric_percent: float = 5.0  # breaker: at most 5 % of a kind of device out of service fabric-wide
    fabric_max: int = 16  # … and never more than 16
    domain_percent: float = 25.0  # per fault domain (a leaf's links, a rack's nodes)
    domain_max: int = 4
    rate_per_domain_per_hour: int = 6
    blast_radius: int = 16  # most devices one action may touch
    history_times: int = 3  # the same remediation this many times …
    history_days: float = 30.0  # … within these days: replace instead


@dataclass(frozen=True, slots=True)
class Refusal:
    guard: str
    reason: str


@dataclass
class Ledger:
    """What the guards count, rebuilt from the audit at start and kept current while running."""

    out: dict[tuple[str, str], str] = field(default_factory=dict)  # (kind, id) → domain
    acts: list[tuple[float, str]] = field(default_factory=list)  # (ts, domain) of executed actions
    started: dict[str, str] = field(default_factory=dict)  # incident → what was started
    # component id → incident → (ts, runbook): one remediation per incident, however many act steps
    remediations: dict[str, dict[str, tuple[float, str]]] = field(default_factory=lambda: defaultdict(dict))

    @classmethod
    def from_audit(cls, rows: list[tuple[Any, ...]]) -> Ledger:
        """Rows (ts epoch, incident_id, runbook, action, outcome, component, domain, dry_run), in time order."""
        led = cls()
        for ts, incident, runbook, action, outcome, component, domain, dry_run in rows:
            led.apply(ts, incident, runbook, action, outcome, component, domain, dry_run)
        return led

    def apply(
        self,
        ts: float,
        incident: str,
        runbook: str,
        action: str,
        outcome: str,
        component: str | None,
        domain: str | None,
        dry_run: bool,
    ) -> None:
        if dry_run:
            return
        key = tuple(component.split(":", 1)) if component and ":" in component else None
        if outcome == "started":
            self.started.setdefault(incident, action)
        elif outcome == "executed" and key:  # an act step (others carry no component)
            self.acts.append((ts, domain or ""))
            self.remediations[key[1]].setdefault(incident, (ts, runbook))
        elif outcome == "out_of_service" and key:
            self.out[key] = domain or ""  # type: ignore[index]
        elif outcome in ("returned_to_service", "rolled_back") and key:
            self.out.pop(key, None)  # type: ignore[arg-type]


class Approvals:
    """Who approved what: ``--approve`` (everything of this run) or an approval file.

    The file is YAML: ``approvals: [{incident: inc-0001, by: alice, until: 1764403600}]``, where
    ``incident`` may be ``"*"`` and ``runbook`` narrows an entry; ``until`` is epoch seconds.
    """

    def __init__(self, by: str | None = None, entries: list[dict[str, Any]] | None = None) -> None:
        self.by = by
        self.entries = entries or []

    @classmethod
    def load(cls, path: str | Path, by: str | None = None) -> Approvals:
        data, lines = load_yaml(path)
        if not isinstance(data, dict) or not isinstance(data.get("approvals"), list):
            raise InputError(f"{path}:1", "an approval file is a mapping with an 'approvals' list")
        entries = []
        for i, e in enumerate(data["approvals"]):
            where = f"{path}:{lines.get(id(e), 1)}"
            if not isinstance(e, dict) or not isinstance(e.get("by"), str) or not isinstance(e.get("incident"), str):
                raise InputError(where, f"approvals[{i}]: needs incident: ID (or '*') and by: NAME")
            unknown = set(e) - {"incident", "by", "runbook", "until"}
            if unknown:
                raise InputError(where, f"approvals[{i}]: unknown key(s) {', '.join(sorted(unknown))}")
            until = e.get("until")
            if until is not None and (isinstance(until, bool) or not isinstance(until, int | float)):
                raise InputError(where, f"approvals[{i}].until: must be epoch seconds")
            entries.append(e)
        return cls(by, entries)

    def approver(self, incident: str, runbook: str, now: float) -> str | None:
        if self.by:
            return self.by
        for e in self.entries:
            matches = e["incident"] in (incident, "*") and e.get("runbook", runbook) == runbook
            if matches and (e.get("until") is None or now <= e["until"]):
                return str(e["by"])
        return None


class Guards:
    def __init__(self, topology: Topology, config: GuardConfig) -> None:
        self.topology = topology
        self.config = config
        self.capacity = Capacity(topology, config.min_uplink_fraction)
        self.population: dict[str, int] = {
            "link": len(topology.links),
            "gpu": len(topology.gpus),
            "node": len(topology.nodes),
            "switch": len(topology.switches),
        }
        self.domain_population: dict[tuple[str, str], int] = defaultdict(int)
        for kind, ids in (
            ("link", [link.id for link in topology.links]),
            ("gpu", topology.gpus),
            ("node", [n.name for n in topology.nodes]),
            ("switch", [s.name for s in topology.switches]),
        ):
            for ident in ids:
                self.domain_population[(kind, domain_of(topology, kind, ident))] += 1

    def check(
        self,
        incident: str,
        runbook: str,
        target: Target,
        destructive: bool,
        approved_by: str | None,
        ledger: Ledger,
        links_down: set[str],
        now: float,
    ) -> list[Refusal]:
        cfg = self.config
        refusals: list[Refusal] = []
        if incident in ledger.started:
            refusals.append(
                Refusal(
                    "idempotence",
                    f"incident {incident} was already executed (step {ledger.started[incident]}); one incident, "
                    "one execution: after a crash, check the device by hand",
                )
            )
        if destructive and not approved_by:
            refusals.append(Refusal("approval", f"{runbook} is destructive: needs --approve or an approval file"))
        touched = max(len(target.out), len(target.links_out))
        if touched > cfg.blast_radius:
            refusals.append(
                Refusal("blast_radius", f"touches {touched} devices, more than the blast radius of {cfg.blast_radius}")
            )
        if target.out or touched:
            recent = sum(1 for ts, d in ledger.acts if d == target.domain and now - ts < 3600.0)
            if recent >= cfg.rate_per_domain_per_hour:
                refusals.append(
                    Refusal(
                        "rate",
                        f"{recent} actions in fault domain {target.domain} in the last hour "
                        f"(limit {cfg.rate_per_domain_per_hour})",
                    )
                )
        refusals.extend(self._breaker(target, ledger))
        if target.links_out:
            down = links_down | {i for (k, i) in ledger.out if k == "link"}
            for k, i in ledger.out:
                if k == "switch":
                    down |= {self.topology.port_link[p].id for p in self.topology.ports_of_device(i)}
            gone = {i for k, i in target.out if k == "switch"}
            why = self.capacity.check(down, target.links_out, gone)
            if why:
                refusals.append(Refusal("capacity", why))
        return refusals

    def _breaker(self, target: Target, ledger: Ledger) -> list[Refusal]:
        """Devices out of service per kind, fabric-wide and per fault domain, against both caps.

        The percentage allows at least one device (5 % of 16 nodes must not forbid the first); the
        absolute cap bounds what a percentage of a large fabric would allow.
        """
        cfg = self.config
        out = []
        for kind, ident in target.out:
            if (kind, ident) in ledger.out:
                continue  # already out: taking it out again adds nothing
            scopes = (
                ("the fabric", None, self.population.get(kind, 1), cfg.fabric_percent, cfg.fabric_max),
                (f"fault domain {target.domain}", target.domain,
                 self.domain_population.get((kind, target.domain), 1), cfg.domain_percent, cfg.domain_max),
            )  # fmt: skip
            for label, domain, size, percent, cap in scopes:
                count = 1 + sum(1 for key, d in ledger.out.items() if key[0] == kind and domain in (None, d))
                by_percent = max(1, int(size * percent / 100.0))
                if count > cap:
                    out.append(
                        Refusal("breaker_absolute", f"{count} {kind}s of {label} would be out of service, cap {cap}")
                    )
                elif count > by_percent:
                    out.append(
                        Refusal(
                            "breaker_percent",
                            f"{count} of {size} {kind}s of {label} would be out of service, over {percent:g} % "
                            f"({by_percent})",
                        )
                    )
        return out

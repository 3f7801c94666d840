"""Findings → diagnoses: one root cause per problem, located, with its downstream findings folded in.

Detectors say what is abnormal where; this module decides why, using the topology to join what
belongs together (DESIGN §4). Rules run from the widest root to the narrowest, and each claims the
findings it explains, so a finding is folded into one diagnosis at most:

0. inventory: every finding about a port that is no link end of the topology (a spare port with a
   module and no fibre, or a cable the topology file does not know) is claimed and becomes nothing:
   ``port_not_in_topology`` is an inventory finding, never an incident.
1. cooling_failure (cooling_loop): the loop is warm against the other loops, or ≥ ``loop_hot_min_gpus``
   GPUs and ≥ ``loop_hot_min_fraction`` of one loop are hot. Claims its GPUs' heat findings and the
   heat signs (module temperature, bias, BER) on their NPO ports.
2. gpu_xid (gpu): the GPU reports an XID or double-bit ECC errors.
3. npo_thermal_coupling (gpu): a hot GPU whose own NPO port shows module temperature, bias or BER up.
   Claims everything on that port's link: the root is the GPU, not the link. Otherwise gpu_thermal.
4a. switch down (switch): more than ``switch_down_min_fraction`` of one switch's links down at once
   (state 0, or dark on every lane), their far ends on two fault domains or more (so no single far
   node or switch explains them): one switch_fault diagnosis with every link-down folded in. The
   share is of the links read since the outage began, at its widest (``switch_links_down``,
   detectors/link_state.py): a link neither of whose ends has reported since is unknown, not up, and the
   last links still down while the switch comes back stay folded into it. An
   outage that begins inside a change ticket of that switch (``maintenance``: planned) is held, never
   paged; telemetry cannot tell a planned reboot from an unplanned one, the ticket can.
   Its collector, silent through the reboot (rule 8), is held the same way.
4b. link_flap / link_down (link): link-down events / state 0 (or both directions dark) at either end.
   A link that goes down while light arrives lit but low (a receive drop or the module's low-power
   alarm, no lane dark) from transmitters that read normal went down because light is lost on the
   way: a pulled cable, a reset port or a dead laser darkens, and a flap alone leaves the optics as
   they were. In one direction (the other fine) that is connector_contamination (link), in both
   fiber_damage (link), as rule 6 reads the same light with the link up; the downs are folded in (an
   intermittent connector whose episodes drop the link, a fibre crushed past the receivers' reach).
5. switch_fault (switch): errors (frames lost: BER over the FEC limit, uncorrectable codewords,
   loss) that are sustained (the BER up or frames lost, not failed codewords alone: a burst) with
   normal light (no rx/tx power finding on the link, which would explain them) on
   ≥ ``switch_fault_min_fraction`` of one switch's links (and ≥ ``switch_fault_min_links``), their far
   ends on two fault domains or more.
6. per link, from optical evidence of both ends, each direction = (transmitter, receiver):
   a dark transmitter lane, or a dark receiver lane among lit ones → transceiver_fault (that port);
   tx down at the transmitter (or bias up with the far rx down) → laser_degradation (transmitter);
   rx down in both directions → fiber_damage (link); in one direction → connector_contamination (link)
   (a direction dark on every lane with its transmitter lit is a broken fibre too);
   errors with normal optical power → transceiver_fault (the port counting the worst errors); failed
   codewords alone, with the BER known (``ber_known``) and normal and no corruption, are error bursts
   as rule 5 reads them: no link problem (a BER the collector cannot read keeps them one).
   Two faults on one link, one each way: where the cause found is one direction's (a laser, or light
   lost on one way), the other direction's own evidence is a second diagnosis: its transmitter down
   (another laser), its receiver's light down from a normal transmitter (the connector, that way), or
   frames lost at its receiver under normal light (that transceiver). Its anchor is the link's, then
   ``>`` and the port its direction enters, so it is an incident of its own; what covers the link
   covers it too.
6b. corruption (CRC / symbol errors below the 1 % loss rule) on a link no rule above explained or
   covered: transceiver_fault at the port counting them (errors with normal optical power, DESIGN §4);
   with optical evidence on the link, rule 6 has already folded it into its optical cause. A receive
   dip below the change rule's threshold (``rx_power_dip``: the lane's own noise, detectors/
   optical_baseline.py) at the corrupting port, with neither a transmit dip at the far end nor a
   receive dip there, is light lost on one direction's way: connector_contamination (link), as rule 6
   says of a drop (issue 9: "a small one-direction dip that comes with new CRC errors points at the
   connector or fibre, not at the transceiver"). Dips are hints: claimed first, never folded elsewhere
   and never an incident alone.
6w. warnings that independent sensors agree on, on a link nothing above diagnosed (a fault already
   there when monitoring started: no baseline saw the link healthy). One module warning stays a
   finding (its DOM may read ±3 dB off, SFF-8472); tx power under its warning with laser bias over its
   warning on one lane (two sensors of one laser) is laser_degradation, both receivers of a link under
   their warnings with both transmitters normal (two modules' calibrations) is fiber_damage; each at
   severity warning, a ticket, keyed as the page would be. One receiver low alone (a dirty connector
   present at start-up) is what one rx DOM's calibration error also gives: a finding only.
7. pfc_storm / incast_hotspot (port): a storm source or a congested egress; every port pausing
   upstream is folded into the nearest of them (hops over the topology). Peer comparison
   (detectors/port_peers.py) decides what the absolute levels leave open: a congested port whose peers
   of the same role and load are as congested (``congestion_shared``: a load step, a bursty phase) is
   no hotspot, its congestion claimed and kept in :attr:`Correlator.shared`; a port congested against
   its peers corroborates its hotspot, is folded into a nearer hotspot (a victim; never into a storm,
   whose victims receive its pauses and are left out of the comparison), or, with no absolute
   finding, is an incast_hotspot of its own at severity warning (a ticket before the page).

8. collector_silent (collector): a source silent for a minute (detectors/liveness.py), apart from the
   fabric; lost scrapes and shorter silences are findings only.

Anything left (a lone bias or temperature rise, pauses with no root) is not an incident on its own.

Each rule declares the symptoms it reads (:data:`CONSUMES`); every symptom a detector emits must be
among them (tests/detectors/test_contract.py). A finding whose symptom no rule reads (a new or
misspelt one) is counted per symptom in :attr:`Correlator.unconsumed` and logged once per symptom,
never dropped silently.
"""

from __future__ import annotations

import logging
import statistics
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from fabricwatch.detectors.config import EngineConfig
from fabricwatch.faults import CAUSES
from fabricwatch.incident import SEVERITIES
from fabricwatch.records import Finding
from fabricwatch.topology import Topology

RANK = {s: i for i, s in enumerate(SEVERITIES)}  # 0 = most severe

GPU_HEAT = {"gpu_hot", "gpu_hotter_than_peers", "gpu_hot_for_power"}
PORT_HEAT = {
    "module_temp_rise",
    "module_temp_high_warn",
    "module_temp_high_alarm",
    "bias_rise",
    "bias_high_warn",
    "bias_high_alarm",
    "ber_rise",
    "ber_high",
    "ber_above_limit",
}
# Errors that cost frames; a BER under the FEC limit costs nothing yet and only supports other evidence.
ERRORS = {"ber_above_limit", "fec_uncorrectable", "packet_loss"}
RX_LOW = {"rx_power_drop", "rx_power_low_alarm", "rx_power_low_warn", "path_loss_high"}
TX_LOW = {"tx_power_drop", "tx_power_low_alarm", "tx_power_low_warn"}
BIAS_UP = {"bias_rise", "bias_high_warn", "bias_high_alarm"}
STATE = {"link_down", "link_flap"}
INVENTORY = {"port_not_in_topology"}
# What makes a link's lost frames corruption rather than a burst: uncorrectable codewords alone, with
# the pre-FEC BER normal, come from error bursts (REALISM.md: burst errors fail codewords below the
# FEC limit); a corrupting link shows its BER up, or loses frames to CRC errors.
SUSTAINED = {"ber_above_limit", "ber_high", "ber_rise", "packet_loss"}
# Light lost on the way (or a dark module): explains a link's errors without its switch.
OPTICAL_LOSS = RX_LOW | TX_LOW | {"loss_of_light", "tx_dark"}
# port_peers (detectors/port_peers.py): a port congested (or pausing) against its peers at the same
# instant, or congested only as much as they are (a load step, a bursty phase): not a hotspot.
PEER_TRAFFIC = {"congestion_vs_peers", "pausing_vs_peers", "congestion_shared"}
TRAFFIC = {"pause_upstream", "pfc_storm_source", "congestion"} | PEER_TRAFFIC
DIPS = {"rx_power_dip", "tx_power_dip"}  # a change within the lane's noise floor x 10: a hint, rule 6b
FORECAST = {"tx_power_falling"}  # a trend that will cross the module's alarm: a ticket before the page
# What a link problem must include to be worth an incident (a lone rise is a hint, not a page).
ACTIONABLE = (
    RX_LOW | TX_LOW | ERRORS | STATE | {"loss_of_light", "tx_dark", "bias_high_alarm", "module_temp_high_alarm"}
)
# Readings against absolute levels that the DOM's ±3 dB calibration (SFF-8472) can put there on a healthy
# link: a warning threshold, or tx(far) - rx(near) over the budget. Evidence beside a change or an alarm,
# never an incident on their own (a warning is a finding, not a page).
NOT_ALONE = frozenset({"path_loss_high", "rx_power_low_warn", "tx_power_low_warn"})
ACTIONABLE = ACTIONABLE - NOT_ALONE
# Rule 6's second problem on a link: what a direction's transmitter shows of itself (the rest of a
# direction's evidence is at its receiver), and the frames lost that make a receiver's errors a fault
# of their own (failed codewords alone may be bursts: rule 6's _bursts_only)
TX_SIDE = TX_LOW | BIAS_UP | FORECAST | {"tx_dark"}
LOST = {"corruption", "packet_loss", "ber_above_limit"}
WARNINGS = {"tx_power_low_warn", "bias_high_warn", "rx_power_low_warn"}  # rule 6w reads them together
DIRECTION = ">"  # a second problem's anchor: the link's, then this, then the port its direction enters
PAUSE_HOPS = 4  # GPU - leaf - spine - leaf - GPU: pauses spread at most this far from their root

# rule -> the symptoms it reads (as roots, or folded in as symptoms of its diagnosis)
CONSUMES: dict[str, frozenset[str]] = {
    "inventory": frozenset(INVENTORY),
    "cooling_failure": frozenset({"cooling_loop_warm"} | GPU_HEAT | PORT_HEAT),
    "gpu_xid": frozenset({"gpu_xid"}),
    "gpu_thermal/npo_thermal_coupling": frozenset(GPU_HEAT | PORT_HEAT),
    "switch_down": frozenset({"link_down", "loss_of_light", "switch_links_down"}),
    "link_flap/link_down": frozenset(STATE | {"loss_of_light", "tx_dark"}),
    "switch_fault": frozenset(ERRORS | {"ber_high", "ber_rise"}),
    "link": frozenset(RX_LOW | TX_LOW | BIAS_UP | ERRORS | STATE | PORT_HEAT | ACTIONABLE),
    "corruption": frozenset({"corruption"} | DIPS),
    "pfc_storm/incast_hotspot": frozenset(TRAFFIC),
    "laser_degradation forecast": frozenset(FORECAST),
    "corroborated warnings": frozenset(WARNINGS),
    "collector": frozenset({"collector_silent", "seq_gap"}),  # detectors/liveness.py
}
CONSUMED: frozenset[str] = frozenset().union(*CONSUMES.values())

log = logging.getLogger("fabricwatch.detectors.correlate")


@dataclass
class Diagnosis:
    """A root cause at a location, the findings that show it (``roots``) and those it explains."""

    cause: str
    entity: str
    id: str
    anchor: str  # the incident key hangs on this: a link for every link/port cause, else the location
    roots: list[Finding]
    symptoms: list[Finding] = field(default_factory=list)
    covers: set[str] = field(default_factory=set)  # anchors of other problems this one explains
    at_most: str | None = None  # the most severe it may be whatever its findings say (rule 6w: a ticket)

    @property
    def type(self) -> str:
        return CAUSES[self.cause].incident_type

    @property
    def runbook(self) -> str:
        """The cause's repair runbook, unless a finding asks for mitigation first: a link losing ≥ 1 %
        of its frames is rerouted now (the seeds' rule), and repaired after."""
        urgent = sorted({f.attrs["runbook"] for f in self.findings if f.attrs.get("runbook") == "reroute"})
        return urgent[0] if urgent else CAUSES[self.cause].runbook

    @property
    def key(self) -> str:
        return f"{self.type}|{self.anchor}"

    @property
    def findings(self) -> list[Finding]:
        return self.roots + self.symptoms

    @property
    def severity(self) -> str:
        worst = min(RANK.get(f.severity, len(RANK)) for f in self.findings)
        if self.cause == "link_down":
            worst = 0
        if self.at_most is not None:
            worst = max(worst, RANK[self.at_most])
        return SEVERITIES[min(worst, len(SEVERITIES) - 1)]

    @property
    def first_seen(self) -> float:
        return min(f.first_seen for f in self.findings)

    @property
    def forecast(self) -> dict[str, Any] | None:
        """The soonest predicted crossing among its findings (optical_trend's), if any."""
        forecasts = [f.attrs["forecast"] for f in self.findings if f.attrs.get("forecast")]
        return dict(min(forecasts, key=lambda x: (x.get("eta_s", float("inf")), repr(x)))) if forecasts else None

    @property
    def source_offsets(self) -> dict[str, float] | None:
        """The clock offsets taken out of the stamps of its findings' sources (stage 1 notes them)."""
        out = {s: o for f in self.findings for s, o in f.attrs.get("source_offsets", {}).items()}
        return dict(sorted(out.items())) or None

    def evidence(self, limit: int) -> list[dict[str, Any]]:
        """Root evidence first, then symptoms', most severe first; deterministic and de-duplicated."""
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        for group in (self.roots, self.symptoms):
            for f in sorted(group, key=lambda f: (RANK.get(f.severity, 9), f.symptom, f.id)):
                for e in f.evidence:
                    text = repr(sorted(e.items()))
                    if text not in seen:
                        seen.add(text)
                        out.append(dict(e))
        return out[:limit]


def finding_order(f: Finding) -> tuple:
    return (f.entity, f.id, f.symptom, f.detector)


def collector_diagnoses(pool: _Pool) -> list[Diagnosis]:
    from fabricwatch.detectors.liveness import collector_diagnoses as rule

    return rule(pool)


class Correlator:
    def __init__(self, topology: Topology, config: EngineConfig | None = None) -> None:
        self.topology = topology
        self.config = config if config is not None else EngineConfig()
        t = topology
        self.device_ports: dict[str, list[str]] = {}
        for port in t.ports:
            self.device_ports.setdefault(t.port_device[port], []).append(port)
        self.loop_gpus: dict[str, list[str]] = {}
        for gpu in t.gpus:
            self.loop_gpus.setdefault(t.cooling_loop_of(gpu), []).append(gpu)
        self.switch_links = {s: len(self.device_ports.get(s, [])) for s in t.switch_by_name}
        self.neighbours: dict[str, set[str]] = {}
        for link in t.links:
            da, db = t.port_device[link.a], t.port_device[link.b]
            self.neighbours.setdefault(da, set()).add(db)
            self.neighbours.setdefault(db, set()).add(da)
        self.unconsumed: dict[str, int] = {}  # the last call's findings no rule reads, per symptom
        self.held: list[Diagnosis] = []  # the last call's planned switch outages (never paged): rule 4a
        self.inventory: list[str] = []  # the last call's ports not in the topology: rule 0
        self.shared: list[str] = []  # the last call's ports congested only as much as their peers: rule 7
        self._reported: set[str] = set()

    # --- helpers ---------------------------------------------------------------------------------

    def link_anchor(self, port: str) -> str:
        link = self.topology.port_link.get(port)
        return f"link:{link.id}" if link else f"port:{port}"

    def link_ends(self, port: str) -> list[str]:
        link = self.topology.port_link.get(port)
        return [link.a, link.b] if link else [port]

    def far_domain(self, link_id: str, device: str) -> str:
        """The fault domain at the other end of a link from ``device``: a GPU's node, else the device."""
        link = self.topology.link_by_id[link_id]
        far = link.b if self.topology.port_device[link.a] == device else link.a
        far_device = self.topology.port_device[far]
        return self.topology.gpu_node.get(far_device, far_device)

    def by_share(self, per_switch: dict[str, set[str]]) -> list[str]:
        """Switches by the share of their links involved, largest first: a rebooting leaf takes one
        link of each spine down, and is the root before any spine is considered."""
        return sorted(per_switch, key=lambda s: (-len(per_switch[s]) / (self.switch_links[s] or 1), s))

    def gpu_of_loop(self, gpu: str) -> str | None:
        return self.topology.cooling_loop_of(gpu) if gpu in self.topology.gpu_node else None

    # --- the rules -------------------------------------------------------------------------------

    def correlate(self, findings: list[Finding]) -> list[Diagnosis]:
        self._count_unconsumed(findings)
        pool = _Pool(sorted(findings, key=finding_order))
        out: list[Diagnosis] = []
        self._inventory(pool)
        dips = {(f.id, f.symptom): f for f in pool.take(pool.free(entity="port", symptoms=DIPS))}
        out += self._cooling(pool)
        out += self._xid(pool)
        out += self._gpu_heat(pool)
        out += self._switch_down(pool)
        out += self._link_state(pool)
        out += self._switch(pool)
        out += self._links(pool)
        out += self._corruption(pool, out, dips)
        out += self._forecasts(pool)
        out += self._corroborated_warnings(pool, out)
        out += self._traffic(pool)
        for d in collector_diagnoses(pool):  # a silent source: its own incident, apart from the fabric
            onset = min(f.first_seen for f in d.roots)
            if any(w.covers(d.id, onset, self.config.maintenance_slack_s) for w in self.config.maintenance):
                self.held.append(d)  # a switch silent through its change ticket's reboot: planned
            else:
                out.append(d)
        return sorted(out, key=lambda d: d.key)

    def _count_unconsumed(self, findings: list[Finding]) -> None:
        unread = Counter(f.symptom for f in findings if f.symptom not in CONSUMED)
        self.unconsumed = dict(sorted(unread.items()))
        for symptom in sorted(set(unread) - self._reported):
            self._reported.add(symptom)
            detectors = sorted({f.detector for f in findings if f.symptom == symptom})
            log.warning(
                "findings with symptom %r (from %s) match no correlation rule: counted in "
                "fabricwatch_unconsumed_findings_total, never an incident (logged once)",
                symptom,
                ", ".join(detectors),
            )

    def _cooling(self, pool: _Pool) -> list[Diagnosis]:
        cfg = self.config
        warm = {f.id: f for f in pool.free(entity="cooling_loop", symptoms={"cooling_loop_warm"})}
        hot: dict[str, set[str]] = {}
        for f in pool.free(entity="gpu", symptoms={"gpu_hot"}):
            loop = self.gpu_of_loop(f.id)
            if loop:
                hot.setdefault(loop, set()).add(f.id)
        out = []
        for loop in sorted(set(warm) | set(hot)):
            size = len(self.loop_gpus.get(loop, ())) or 1
            n_hot = len(hot.get(loop, ()))
            if loop not in warm and not (n_hot >= cfg.loop_hot_min_gpus and n_hot >= cfg.loop_hot_min_fraction * size):
                continue
            roots = pool.take([warm[loop]]) if loop in warm else []
            gpus = set(self.loop_gpus.get(loop, ()))
            gpu_findings = pool.take(pool.free(entity="gpu", symptoms=GPU_HEAT, ids=gpus))
            if not roots:
                roots, gpu_findings = gpu_findings, []
            covers = {f"gpu:{g}" for g in sorted({f.id for f in roots + gpu_findings if f.entity == "gpu"})}
            ports = [p for g in sorted(gpus) for p in self.device_ports.get(g, [])]
            port_findings = pool.take(pool.free(entity="port", symptoms=PORT_HEAT, ids=set(ports)))
            covers |= {self.link_anchor(f.id) for f in port_findings}
            out.append(
                Diagnosis("cooling_failure", "cooling_loop", loop, f"cooling_loop:{loop}", roots,
                          gpu_findings + port_findings, covers)
            )  # fmt: skip
        return out

    def _xid(self, pool: _Pool) -> list[Diagnosis]:
        out = []
        for f in pool.free(entity="gpu", symptoms={"gpu_xid"}):
            out.append(Diagnosis("gpu_xid", "gpu", f.id, f"gpu:{f.id}", pool.take([f])))
        return out

    def _gpu_heat(self, pool: _Pool) -> list[Diagnosis]:
        by_gpu: dict[str, list[Finding]] = {}
        for f in pool.free(entity="gpu", symptoms=GPU_HEAT):
            by_gpu.setdefault(f.id, []).append(f)
        out = []
        for gpu in sorted(by_gpu):
            roots = pool.take(by_gpu[gpu])
            ports = self.device_ports.get(gpu, [f"{gpu}:p0"])
            heated = pool.free(entity="port", symptoms=PORT_HEAT, ids=set(ports))
            if not heated:
                out.append(Diagnosis("gpu_thermal", "gpu", gpu, f"gpu:{gpu}", roots))
                continue
            link_ports = {e for p in sorted({f.id for f in heated}) for e in self.link_ends(p)}
            symptoms = pool.take(pool.free(entity="port", ids=link_ports, exclude=TRAFFIC))
            covers = {self.link_anchor(p) for p in link_ports}
            out.append(Diagnosis("npo_thermal_coupling", "gpu", gpu, f"gpu:{gpu}", roots, symptoms, covers))
        return out

    def _inventory(self, pool: _Pool) -> None:
        """Rule 0: findings about ports the topology does not have are inventory, never incidents."""
        known = self.topology.port_link
        strays = [f for f in pool.free(entity="port") if f.id not in known]
        self.inventory = sorted({f.id for f in pool.take(strays)})

    def _switch_down(self, pool: _Pool) -> list[Diagnosis]:
        """Rule 4a: most of one switch's links down at once is the switch, not its links."""
        cfg = self.config
        self.held = []
        down: dict[str, list[Finding]] = {}  # link id -> findings showing it down
        for f in pool.free(entity="port", symptoms={"link_down", "loss_of_light"}):
            link = self.topology.port_link.get(f.id)
            if link is not None and (f.symptom == "link_down" or _all_lanes(f)):
                down.setdefault(link.id, []).append(f)
        per_switch: dict[str, set[str]] = {}
        for lid in down:
            link = self.topology.link_by_id[lid]
            for end in (link.a, link.b):
                device = self.topology.port_device[end]
                if device in self.switch_links:
                    per_switch.setdefault(device, set()).add(lid)
        outages: dict[str, list[Finding]] = {}  # switch -> its outage as link_state saw it
        for f in pool.free(entity="switch", symptoms={"switch_links_down"}):
            outages.setdefault(f.id, []).append(f)

        def share(switch: str) -> float:
            """Of the switch's links whose state is known, the share down: link_state's count at the
            outage's widest (over the links read since it began, summed over the processors that report
            it), else the links down now over all of them (a source that does not say)."""
            seen = outages.get(switch)
            if seen:
                return sum(f.attrs.get("down", 0) for f in seen) / max(sum(f.attrs.get("read", 0) for f in seen), 1)
            return len(per_switch[switch]) / (self.switch_links[switch] or 1)

        def domains(switch: str, links: set[str]) -> int:
            seen = outages.get(switch)
            now = len({self.far_domain(lid, switch) for lid in links})
            return max(now, sum(f.attrs.get("domains", 0) for f in seen)) if seen else now

        def began(switch: str) -> float:
            """When the outage began: link_state's (detectors/link_state.py), else the median first
            sight of its links down."""
            seen = outages.get(switch)
            if seen:
                return min(f.first_seen for f in seen)
            return float(statistics.median(min(f.first_seen for f in down[lid]) for lid in per_switch[switch]))

        out = []
        taken: set[str] = set()
        for switch in sorted(per_switch, key=lambda s: (-share(s), s)):
            onset = began(switch)
            links = {  # a link down since well before the outage is a fault of its own
                lid
                for lid in per_switch[switch] - taken
                if min(f.first_seen for f in down[lid]) >= onset - cfg.switch_down_spread_s
            }
            if not links or share(switch) <= cfg.switch_down_min_fraction:
                continue
            if domains(switch, links) < 2:
                continue  # one far node or switch explains them: it is the root, not this switch
            taken |= links
            shown = [f for lid in sorted(links) for f in down[lid]]
            roots = pool.take([f for f in shown if f.symptom == "link_down"] or shown)
            ends = {e for lid in links for e in self._anchor_ends(f"link:{lid}")}
            rest = pool.take(pool.free(entity="port", ids=ends, exclude=TRAFFIC) + outages.get(switch, []))
            d = Diagnosis("switch_fault", "switch", switch, f"switch:{switch}", roots, rest,
                          {f"link:{lid}" for lid in links})  # fmt: skip
            if any(w.covers(switch, onset, cfg.maintenance_slack_s) for w in cfg.maintenance):
                self.held.append(d)
            else:
                out.append(d)
        return out

    def _link_state(self, pool: _Pool) -> list[Diagnosis]:
        links: dict[str, list[str]] = {}
        for f in pool.free(entity="port", symptoms=STATE | {"loss_of_light"}):
            links.setdefault(self.link_anchor(f.id), self.link_ends(f.id))
        out = []
        for anchor in sorted(links):
            ends = links[anchor]
            here = pool.free(entity="port", ids=set(ends), exclude=TRAFFIC)
            symptoms = {f.symptom for f in here}
            dark_ends = {f.id for f in here if f.symptom == "loss_of_light" and _all_lanes(f)}
            # a 400G-DR4 link needs all four lanes: one dead lane takes it down, and that is the
            # module's fault (rule 6), not a pulled cable or a cut fibre, which darken every lane
            one_lane_dead = "tx_dark" in symptoms or any(
                f.symptom == "loss_of_light" and not _all_lanes(f) for f in here
            )
            if "link_flap" in symptoms:
                cause = "link_flap"
            elif one_lane_dead:
                continue
            elif "link_down" in symptoms or (len(ends) == 2 and dark_ends == set(ends)):
                cause = "link_down"
            else:
                continue  # a dark lane or direction with the link up: an optical problem (rule 6)
            state = [f for f in here if f.symptom in STATE]
            lost = _path_loss(ends, here)
            if lost is not None:  # light lost on the way took the link down (rule 4b)
                cause, state = lost
            roots = pool.take(state or [f for f in here if f.symptom == "loss_of_light"])
            rest = pool.take(_without(here, roots))
            out.append(Diagnosis(cause, *_link_location(anchor), anchor, roots, rest))
        return out

    def _switch(self, pool: _Pool) -> list[Diagnosis]:
        """Rule 5: errors with normal light on a share of one switch's links, far ends apart."""
        cfg = self.config
        per_switch: dict[str, set[str]] = {}
        for f in pool.free(entity="port", symptoms=ERRORS):
            ends = self.link_ends(f.id)
            if len(ends) < 2 or pool.free(entity="port", symptoms=OPTICAL_LOSS, ids=set(ends)):
                continue  # no link, or light lost on the way explains its errors
            if not pool.free(entity="port", symptoms=SUSTAINED, ids=set(ends)):
                continue  # failed codewords with the BER normal: an error burst, not a corrupting link
            for end in ends:
                device = self.topology.port_device.get(end)
                if device in self.switch_links:
                    per_switch.setdefault(device, set()).add(self.link_anchor(f.id))
        out = []
        for switch in self.by_share(per_switch):
            links = {a for a in per_switch[switch] if a not in pool.claimed_anchors}
            total = self.switch_links[switch] or 1
            if len(links) < cfg.switch_fault_min_links or len(links) < cfg.switch_fault_min_fraction * total:
                continue
            if len({self.far_domain(a.partition(":")[2], switch) for a in links}) < 2:
                continue  # one far node or switch explains them
            ports = {e for a in links for e in self._anchor_ends(a)}
            roots = pool.take(pool.free(entity="port", symptoms=ERRORS | {"ber_high", "ber_rise"}, ids=ports))
            pool.claimed_anchors |= links
            out.append(Diagnosis("switch_fault", "switch", switch, f"switch:{switch}", roots, [], set(links)))
        return out

    def _anchor_ends(self, anchor: str) -> list[str]:
        kind, _, ident = anchor.partition(":")
        if kind == "link":
            link = self.topology.link_by_id[ident]
            return [link.a, link.b]
        return [ident]

    def _links(self, pool: _Pool) -> list[Diagnosis]:
        anchors: dict[str, list[str]] = {}
        for f in pool.free(entity="port", exclude=TRAFFIC):
            anchors.setdefault(self.link_anchor(f.id), self.link_ends(f.id))
        out = []
        for anchor in sorted(anchors):
            ends = anchors[anchor]
            here = pool.free(entity="port", ids=set(ends), exclude=TRAFFIC)
            if not any(f.symptom in ACTIONABLE for f in here) or _bursts_only(here):
                continue
            cause, entity, ident, roots = self._link_cause(anchor, ends, here)
            roots = pool.take(roots)
            other = _other_direction(anchor, ends, here, cause, roots)
            if other is not None:  # a second problem on the link, in the direction the first leaves alone
                cause2, entity2, ident2, (tx, rx), roots2 = other
                roots2 = pool.take(roots2)
                facing = [f for f in here if (f.id, f.symptom in TX_SIDE) in ((tx, True), (rx, False))]
                symptoms2 = pool.take(_without(facing, roots2))
                out.append(Diagnosis(cause2, entity2, ident2, f"{anchor}{DIRECTION}{rx}", roots2, symptoms2))
            symptoms = pool.take(_without(here, roots))
            out.append(Diagnosis(cause, entity, ident, anchor, roots, symptoms))
        return out

    def _link_cause(self, anchor: str, ends: list[str], here: list[Finding]) -> tuple[str, str, str, list[Finding]]:
        on = {end: {f.symptom: f for f in here if f.id == end} for end in ends}
        directions = [(ends[0], ends[1]), (ends[1], ends[0])] if len(ends) == 2 else [(ends[0], ends[0])]
        link_entity, link_id = _link_location(anchor)
        # a. a dark transmitter lane, or a dark receiver lane among lit ones: the module, not the path
        for tx, rx in directions:
            if "tx_dark" in on[tx]:
                return "transceiver_fault", "port", tx, [on[tx]["tx_dark"]]
            lol = on[rx].get("loss_of_light")
            if lol is not None and not _all_lanes(lol):
                return "transceiver_fault", "port", rx, [lol]
        # b. the transmitter fades: tx down, or bias up while the far end receives less
        lasers = []
        for tx, rx in directions:
            tx_low = [on[tx][s] for s in sorted(TX_LOW) if s in on[tx]]
            bias = [on[tx][s] for s in sorted(BIAS_UP) if s in on[tx]]
            rx_low = any(s in on[rx] for s in RX_LOW | {"loss_of_light"})
            if tx_low or (bias and rx_low):
                lasers.append((-max(f.score for f in tx_low + bias), tx, tx_low + bias))
        if lasers:
            _, port, roots = min(lasers)
            return "laser_degradation", "port", port, roots
        # c/d. light lost on the way: both directions → fibre, one → connector
        low = [
            (rx, [on[rx][s] for s in sorted(RX_LOW | {"loss_of_light"}) if s in on[rx]])
            for _, rx in directions
            if len(ends) == 2
        ]
        low = [(rx, fs) for rx, fs in low if fs]
        if len(low) == 2:
            return "fiber_damage", link_entity, link_id, low[0][1] + low[1][1]
        if len(low) == 1:
            rx, fs = low[0]
            lol = on[rx].get("loss_of_light")
            cause = "fiber_damage" if lol is not None and _all_lanes(lol) else "connector_contamination"
            return cause, link_entity, link_id, fs
        # e. errors with normal light: the transceiver counting the worst errors
        errors = [f for f in here if f.symptom in ERRORS]
        if errors:
            worst = min(errors, key=lambda f: (RANK.get(f.severity, 9), -f.score, f.id))
            return "transceiver_fault", "port", worst.id, [f for f in errors if f.id == worst.id]
        alarms = sorted((f for f in here if f.symptom in ACTIONABLE), key=finding_order)
        first = alarms[0]
        cause = "laser_degradation" if first.symptom == "bias_high_alarm" else "transceiver_fault"
        return cause, "port", first.id, [first]

    def _corruption(self, pool: _Pool, found: list[Diagnosis], dips: dict[tuple[str, str], Finding]) -> list[Diagnosis]:
        """Rule 6b: a corrupting link that no wider root explains (a switch fault, a hot GPU or loop
        covering it) is its transceiver's fault, located at the port that counts the errors; the
        connector's (the link) where that port's receive light dipped in its direction only."""
        explained = pool.claimed_anchors | {d.anchor for d in found} | {a for d in found for a in d.covers}
        by_anchor: dict[str, list[Finding]] = {}
        for f in pool.free(entity="port", symptoms={"corruption"}):
            by_anchor.setdefault(self.link_anchor(f.id), []).append(f)
        out = []
        for anchor in sorted(set(by_anchor) - explained):
            worst = max(by_anchor[anchor], key=lambda f: (f.score, f.id))
            roots = pool.take([worst])
            rest = pool.take(pool.free(entity="port", ids=set(self.link_ends(worst.id)), exclude=TRAFFIC))
            dip = dips.get((worst.id, "rx_power_dip"))
            far = [end for end in self.link_ends(worst.id) if end != worst.id]
            if dip is not None and far and not any((far[0], s) in dips for s in DIPS):
                entity, ident = _link_location(anchor)
                out.append(Diagnosis("connector_contamination", entity, ident, anchor, [*roots, dip], rest))
            else:
                out.append(Diagnosis("transceiver_fault", "port", worst.id, anchor, roots, rest))
        return out

    def _forecasts(self, pool: _Pool) -> list[Diagnosis]:
        """A transmitter whose trend will cross its alarm, on a link with nothing actionable yet (rule 6
        folds the forecast into its diagnosis otherwise): laser_degradation at severity warning, keyed
        on its link as rule 6's diagnosis is, so that the ticket becomes the page when it crosses."""
        by_link: dict[str, list[Finding]] = {}
        for f in pool.free(entity="port", symptoms=FORECAST):
            by_link.setdefault(self.link_anchor(f.id), []).append(f)
        out = []
        for anchor in sorted(by_link):
            first = max(by_link[anchor], key=lambda f: (f.score, f.id))  # the fastest fall
            out.append(Diagnosis("laser_degradation", "port", first.id, anchor, pool.take(by_link[anchor])))
        return out

    def _corroborated_warnings(self, pool: _Pool, found: list[Diagnosis]) -> list[Diagnosis]:
        """Rule 6w: warnings that independent sensors agree on, on a link nothing else diagnosed (a
        fault present before any baseline was learnt: issue 9, "a fault present at start-up is still
        found ... the module's own thresholds"). One module warning is a finding, never an incident:
        its DOM may read ±3 dB off (SFF-8472). Two that one calibration error cannot make:

        * tx power under its warning and laser bias over its warning on one lane: the monitor
          photodiode and the drive current are separate sensors, and a laser driven harder for less
          light is failing (laser_degradation at that transmitter);
        * both receivers of a link under their warnings, both transmitters normal: two modules' own
          calibrations do not both read low by chance (fiber_damage, the link).

        Each is at most a warning, whatever its findings say: a ticket, not a page."""
        taken = pool.claimed_anchors | {d.anchor for d in found} | {a for d in found for a in d.covers}
        anchors = {self.link_anchor(f.id) for f in pool.free(entity="port", symptoms=WARNINGS)} - taken
        out = []
        for anchor in sorted(anchors):
            ends = self._anchor_ends(anchor)
            here = pool.free(entity="port", ids=set(ends), exclude=TRAFFIC)
            on = {end: {f.symptom: f for f in here if f.id == end} for end in ends}
            found_at = _laser_by_warnings(on) or _fibre_by_warnings(anchor, on)
            if found_at is not None:
                cause, entity, ident, roots = found_at
                roots = pool.take(roots)
                rest = pool.take(_without(here, roots))
                out.append(Diagnosis(cause, entity, ident, anchor, roots, rest, at_most="warning"))
        return out

    def _traffic(self, pool: _Pool) -> list[Diagnosis]:
        shared = pool.free(entity="port", symptoms={"congestion_shared"})
        self.shared = sorted({f.id for f in shared})
        pool.take(shared + pool.free(entity="port", symptoms={"congestion"}, ids=set(self.shared)))
        roots = [
            Diagnosis(f.cause or "pfc_storm", "port", f.id, f"port:{f.id}", pool.take([f]))
            for f in pool.free(entity="port", symptoms={"pfc_storm_source", "congestion"})
        ]
        for d in roots:  # the peers' word on a hotspot (or a storm source) corroborates it
            d.symptoms += pool.take(pool.free(entity="port", symptoms=PEER_TRAFFIC, ids={d.id}))
        distance = {d.key: self._hops(self.topology.port_device.get(d.id, d.id)) for d in roots}
        by_key = {d.key: d for d in roots}
        alone = []
        # A storm's victims receive its pauses, and port_peers leaves a port receiving pauses out of the
        # queue comparison: a port congested against its peers is not held by a storm. It queues
        # behind a nearer hotspot (the same flows), or is one.
        hotspots = sorted(k for k, d in by_key.items() if d.cause == "incast_hotspot")
        for f in pool.free(entity="port", symptoms={"congestion_vs_peers"}):
            device = self.topology.port_device.get(f.id, f.id)
            near = [(distance[k][device], k) for k in hotspots if device in distance[k]]
            if near:  # queued behind a nearer hotspot: its victim, not a hotspot of its own
                root = by_key[min(near)[1]]
                root.symptoms += pool.take([f])
                root.covers.add(f"port:{f.id}")
            else:
                alone.append(f)
        for f in alone:
            d = Diagnosis("incast_hotspot", "port", f.id, f"port:{f.id}", pool.take([f]))
            roots.append(d)
            distance[d.key] = self._hops(self.topology.port_device.get(f.id, f.id))
            by_key[d.key] = d
        if not roots:
            return []
        for f in pool.free(entity="port", symptoms={"pause_upstream", "pausing_vs_peers"}):
            device = self.topology.port_device.get(f.id, f.id)
            near = [(distance[k][device], k) for k in sorted(by_key) if device in distance[k]]
            if near:
                root = by_key[min(near)[1]]
                root.symptoms += pool.take([f])
                root.covers.add(f"port:{f.id}")
        return roots

    def _hops(self, start: str) -> dict[str, int]:
        seen = {start: 0}
        queue = deque([start])
        while queue:
            device = queue.popleft()
            if seen[device] >= PAUSE_HOPS:
                continue
            for nxt in sorted(self.neighbours.get(device, ())):
                if nxt not in seen:
                    seen[nxt] = seen[device] + 1
                    queue.append(nxt)
        return seen


def _path_loss(ends: list[str], here: list[Finding]) -> tuple[str, list[Finding]] | None:
    """Rule 4b's light lost on the way: the cause and the receive findings (a drop, the low alarm) of
    the receivers that read lit but low light from transmitters reading normal, with no lane of the
    link dark: one receiver (the other reading nothing low) is the connector's, both the fibre's."""
    if len(ends) != 2 or any(f.symptom in {"loss_of_light", "tx_dark"} for f in here):
        return None
    if any(f.symptom in TX_LOW | BIAS_UP for f in here):  # a transmitter fading: rule 6's laser
        return None
    low = {end: [f for f in here if f.id == end and f.symptom in RX_LOW - NOT_ALONE] for end in ends}
    hint = {end: any(f.id == end and f.symptom in RX_LOW for f in here) for end in ends}
    a, b = ends
    if low[a] and low[b]:
        return "fiber_damage", low[a] + low[b]
    for rx, other in ((a, b), (b, a)):
        if low[rx] and not hint[other]:
            return "connector_contamination", low[rx]
    return None


def _other_direction(
    anchor: str, ends: list[str], here: list[Finding], cause: str, roots: list[Finding]
) -> tuple[str, str, str, tuple[str, str], list[Finding]] | None:
    """Rule 6's second problem on one link: the first explains one direction (a fading transmitter's,
    or the light lost on its way); the other direction's own evidence is another fault. Its
    transmitter down is another laser (laser_degradation there); its receiver's light down, from a
    transmitter reading normal, is light lost on that way too (connector_contamination, the link);
    frames lost at its receiver with its light normal are that transceiver's (transceiver_fault), as
    rules 6e and 6b read errors with normal light. A transceiver already found faulty (a dark lane)
    gets no second problem: a dead module's other readings say nothing. Returns (cause, entity, id,
    (tx, rx), roots), or None."""
    if len(ends) != 2 or cause not in ("laser_degradation", "connector_contamination"):
        return None
    a, b = ends
    # a laser's roots are at its transmitter, the light lost on the way at its receiver
    first_tx = roots[0].id if cause == "laser_degradation" else (b if roots[0].id == a else a)
    tx, rx = (b, a) if first_tx == a else (a, b)  # the other direction
    on_tx = {f.symptom: f for f in here if f.id == tx}
    on_rx = {f.symptom: f for f in here if f.id == rx}
    tx_low = [on_tx[s] for s in sorted(TX_LOW - NOT_ALONE) if s in on_tx]
    if tx_low:
        return "laser_degradation", "port", tx, (tx, rx), tx_low + [on_tx[s] for s in sorted(BIAS_UP) if s in on_tx]
    if any(s in on_tx for s in TX_LOW | {"tx_dark"}) or "loss_of_light" in on_rx:
        return None
    rx_low = [on_rx[s] for s in sorted(RX_LOW - NOT_ALONE) if s in on_rx]
    if rx_low:
        return "connector_contamination", *_link_location(anchor), (tx, rx), rx_low
    if any(s in on_rx for s in LOST) and not any(s in on_rx for s in RX_LOW):
        return "transceiver_fault", "port", rx, (tx, rx), [on_rx[s] for s in sorted(LOST | ERRORS) if s in on_rx]
    return None


def _laser_by_warnings(on: dict[str, dict[str, Finding]]) -> tuple[str, str, str, list[Finding]] | None:
    """Rule 6w: a transmitter whose tx power is under its warning and laser bias over its warning on
    one lane."""
    for end, symptoms in on.items():
        tx, bias = symptoms.get("tx_power_low_warn"), symptoms.get("bias_high_warn")
        if tx is not None and bias is not None and set(tx.attrs.get("lanes", ())) & set(bias.attrs.get("lanes", ())):
            return "laser_degradation", "port", end, [tx, bias]
    return None


def _fibre_by_warnings(anchor: str, on: dict[str, dict[str, Finding]]) -> tuple[str, str, str, list[Finding]] | None:
    """Rule 6w: both receivers of a link under their warnings, neither transmitter reading low."""
    low = [symptoms.get("rx_power_low_warn") for symptoms in on.values()]
    dim = TX_LOW | BIAS_UP | {"tx_dark", "loss_of_light"}
    if len(on) != 2 or any(f is None for f in low) or any(s in symptoms for symptoms in on.values() for s in dim):
        return None
    return "fiber_damage", *_link_location(anchor), [f for f in low if f is not None]


def _without(findings: list[Finding], drop: list[Finding]) -> list[Finding]:
    gone = {id(f) for f in drop}
    return [f for f in findings if id(f) not in gone]


def _bursts_only(here: list[Finding]) -> bool:
    """Rule 6: a link whose only actionable sign is failed codewords, with its BER known (the detector
    says so) and normal (no BER or loss finding) and no corruption: error bursts, as rule 5 reads them."""
    actionable = [f for f in here if f.symptom in ACTIONABLE]
    return all(f.symptom == "fec_uncorrectable" and f.attrs.get("ber_known") for f in actionable) and not any(
        f.symptom in SUSTAINED or f.symptom == "corruption" for f in here
    )


def _all_lanes(f: Finding) -> bool:
    return len(f.attrs.get("lanes", ())) >= f.attrs.get("lanes_total", 1)


def _link_location(anchor: str) -> tuple[str, str]:
    kind, _, ident = anchor.partition(":")
    return ("link", ident) if kind == "link" else ("port", ident)


class _Pool:
    """The tick's findings, each claimed by at most one diagnosis; indexed by entity for speed."""

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        self._claimed: set[int] = set()
        self._by_id: dict[tuple[str, str], list[int]] = {}
        for i, f in enumerate(findings):
            self._by_id.setdefault((f.entity, f.id), []).append(i)
        self.claimed_anchors: set[str] = set()

    def free(
        self,
        entity: str,
        symptoms: set[str] | None = None,
        ids: set[str] | None = None,
        exclude: set[str] | None = None,
    ) -> list[Finding]:
        """Unclaimed findings about ``entity`` (of those ``ids``), with (or without) those symptoms."""
        if ids is None:
            rows: list[int] = [i for i, f in enumerate(self.findings) if f.entity == entity]
        else:
            rows = sorted(i for ident in ids for i in self._by_id.get((entity, ident), ()))
        return [
            self.findings[i]
            for i in rows
            if i not in self._claimed
            and (symptoms is None or self.findings[i].symptom in symptoms)
            and (exclude is None or self.findings[i].symptom not in exclude)
        ]

    def take(self, findings: list[Finding]) -> list[Finding]:
        """Claim these findings (those still free); returns them in pool order."""
        taken = []
        for f in findings:
            for i in self._by_id.get((f.entity, f.id), ()):
                if self.findings[i] is f and i not in self._claimed:
                    self._claimed.add(i)
                    taken.append((i, f))
        return [f for _, f in sorted(taken, key=lambda t: t[0])]

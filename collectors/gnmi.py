"""Source ``gnmi``: switch telemetry as OpenConfig JSON → ``port``, ``optical``, ``module`` and ``switch`` rows.

Input forms are read by gnmi_json.py. Live, the source runs ``gnmic -a TARGET get --path ...
--format json`` (an argv list with a timeout; gnmic reads GNMIC_USERNAME/GNMIC_PASSWORD from the
environment, so no secret is on the command line), or re-reads ``--file`` that gnmic writes. The switch
is ``--host``, else the target named in the data (gnmic's ``source``, a notification's prefix target),
else this machine's hostname; interfaces become ports by portmap.py (``--port-style eos|nxos``).

Mapped paths (module prefixes dropped):

* ``/interfaces/interface[name]/state/counters`` (also read directly under ``state``): in-octets,
  out-octets → rx/tx_bytes_total; in-pkts, out-pkts → rx/tx_packets_total; in-fcs-errors (else
  in-crc-error-pkts, else ethernet in-crc-errors) → rx_crc_errors_total; out-discards →
  tx_drops_total; link-flap-events → link_down_total, else carrier-transitions // 2 (a flap is one
  down and one up transition, counted from a link that came up once). Ciena puts the interface
  name in a ``name`` counter leaf; it is used when the path has no key.
* ``.../state/oper-status`` → state (UP 1; DOWN, LOWER_LAYER_DOWN, NOT_PRESENT 0; others null);
  ``.../ethernet/state/negotiated-port-speed`` (else ``port-speed``) → speed_gbps (SPEED_400GB → 400);
  ``.../ethernet/state/counters/in-mac-pause-frames``/``out-mac-pause-frames`` → rx/tx_pause_total;
  ``.../state/transceiver`` ties a transceiver component to its interface.
* ``/components/component[name]/transceiver/physical-channels/channel[index]/state/`` ``output-power``,
  ``input-power`` (dBm), ``laser-bias-current`` (mA), ``/instant`` → optical rows (lane = the channel
  index as the device numbers it); ``transceiver/state/supply-voltage`` → voltage_v; the component's
  ``state/temperature/instant`` → module_temp_c; ``transceiver/thresholds/threshold[severity]/state``
  (``CRITICAL`` = alarm, ``WARNING`` = warn; input-power-lower/upper, output-power-lower,
  laser-bias-current-upper, module-temperature-upper) → module thresholds; ``transceiver/state/``
  vendor, vendor-part, ethernet-pmd (ETH_400GBASE_DR4 → 400G-DR4) → module identity; ``pre-fec-ber``,
  ``fec-corrected-bits``, ``fec-uncorrectable-blocks`` → the interface's port row.
* Junos native optics as telegraf's alias puts them (``/interfaces/interface[name]/optics``): lanediags
  ``lane_laser_output_power_dbm``, ``lane_laser_receiver_power_dbm``, ``lane_laser_bias_current``, the
  module's ``module_temp`` and its ``*_threshold(_dbm)`` values. Junos numbers lanes from 0.
* ``/qos/interfaces/interface[interface-id]/output/queues/queue/state/dropped-pkts``, summed over the
  queues → tx_drops_total when the interface reports no out-discards. OpenConfig's queue state has no
  current depth nor ECN-mark leaf, so queue_depth_bytes and ecn_marked_total stay null.
* ``switch``: the largest ``state/temperature/instant`` of components whose ``state/type`` is
  INTEGRATED_CIRCUIT (the switch ASIC) → asic_temp_c; the slowest ``fan/state/speed`` → fan_min_rpm;
  POWER_SUPPLY components' ``state/oper-status`` → psu_ok (1 when all are ACTIVE).

Everything else (subinterfaces, system memory and CPU, chassis modules, routing tables, events,
Junos laser temperature and media-side FEC per lane, deletes) is read and not mapped.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, ClassVar

from fabricwatch.collectors import fetch
from fabricwatch.collectors.gnmi_json import Leaf, leaves
from fabricwatch.collectors.portmap import STYLES, PortMap
from fabricwatch.collectors.toolsource import Options, ToolConfig, ToolSource, read_saved
from fabricwatch.collectors.values import clean_text, integer, messages, number
from fabricwatch.errors import InputError
from fabricwatch.schema import Message

DEFAULT_PATHS = ("/interfaces", "/components", "/qos/interfaces")
COUNTERS = {
    "in-octets": "rx_bytes_total",
    "out-octets": "tx_bytes_total",
    "in-pkts": "rx_packets_total",
    "out-pkts": "tx_packets_total",
    "out-discards": "tx_drops_total",
}
CRC_LEAVES = ("in-fcs-errors", "in-crc-error-pkts", "in-crc-errors")  # most specific first
OPER = {"UP": 1, "DOWN": 0, "LOWER_LAYER_DOWN": 0, "NOT_PRESENT": 0}
CHANNEL = {"output-power": "tx", "input-power": "rx", "laser-bias-current": "bias"}
OC_THRESHOLDS = {
    ("input-power-lower", "CRITICAL"): "rx_power_low_alarm_dbm",
    ("input-power-lower", "WARNING"): "rx_power_low_warn_dbm",
    ("input-power-upper", "CRITICAL"): "rx_power_high_alarm_dbm",
    ("output-power-lower", "CRITICAL"): "tx_power_low_alarm_dbm",
    ("output-power-lower", "WARNING"): "tx_power_low_warn_dbm",
    ("laser-bias-current-upper", "CRITICAL"): "bias_high_alarm_ma",
    ("laser-bias-current-upper", "WARNING"): "bias_high_warn_ma",
    ("module-temperature-upper", "CRITICAL"): "temp_high_alarm_c",
    ("module-temperature-upper", "WARNING"): "temp_high_warn_c",
}
JUNOS_THRESHOLDS = {
    "laser_rx_power_low_alarm_threshold_dbm": "rx_power_low_alarm_dbm",
    "laser_rx_power_low_warning_threshold_dbm": "rx_power_low_warn_dbm",
    "laser_rx_power_high_alarm_threshold_dbm": "rx_power_high_alarm_dbm",
    "laser_output_power_low_alarm_threshold_dbm": "tx_power_low_alarm_dbm",
    "laser_output_power_low_warning_threshold_dbm": "tx_power_low_warn_dbm",
    "laser_bias_current_high_alarm_threshold": "bias_high_alarm_ma",
    "laser_bias_current_high_warning_threshold": "bias_high_warn_ma",
    "module_temp_high_alarm_threshold": "temp_high_alarm_c",
    "module_temp_high_warning_threshold": "temp_high_warn_c",
}
JUNOS_LANE = {
    "lane_laser_output_power_dbm": "tx",
    "lane_laser_receiver_power_dbm": "rx",
    "lane_laser_bias_current": "bias",
}


def speed_gbps(value: Any) -> float | None:
    """``openconfig-if-ethernet:SPEED_400GB`` → 400.0; ``SPEED_2500MB`` → 2.5."""
    m = re.search(r"SPEED_(\d+)(GB|MB)", str(value))
    if not m:
        return None
    n = float(m.group(1))
    return n if m.group(2) == "GB" else n / 1000.0


def media_from_pmd(value: Any) -> str | None:
    """``openconfig-transport-types:ETH_400GBASE_DR4`` → ``400G-DR4``."""
    m = re.search(r"ETH_(\d+G)BASE_([A-Z0-9]+)", str(value))
    return f"{m.group(1)}-{m.group(2)}" if m else clean_text(str(value).rsplit(":", 1)[-1]) if value else None


def _iface_name(raw: str) -> str:
    """Ciena prints the name with quotes and backslashes around it (``"\\"1\\"``): keep the name."""
    return raw.strip().strip('\\"').strip()


class _Model:
    """Everything read from one batch of leaves, before it becomes rows."""

    def __init__(self) -> None:
        self.port: dict[str, dict[str, Any]] = defaultdict(dict)  # iface -> column -> value
        self.crc: dict[str, dict[str, Any]] = defaultdict(dict)  # iface -> crc leaf -> value
        self.lanes: dict[str, dict[int, dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))  # owner -> lane
        self.module: dict[str, dict[str, Any]] = defaultdict(dict)  # owner -> module column -> value
        self.module_temp: dict[str, Any] = {}
        self.voltage: dict[str, Any] = {}
        self.queue_drops: dict[str, list[int]] = defaultdict(list)
        self.component_type: dict[str, str] = {}
        self.component_temp: dict[str, float] = {}
        self.component_oper: dict[str, str] = {}
        self.fans: list[float] = []
        self.xcvr_iface: dict[str, str] = {}  # transceiver component -> interface
        self.transceivers: set[str] = set()
        self.target: str | None = None

    def interface(self, leaf: Leaf, rest: tuple[str, ...]) -> None:
        name = leaf.key("interface", "name")
        if "subinterfaces" in rest:
            return
        counter = rest[:2] == ("state", "counters") and len(rest) == 3
        if counter or (len(rest) == 2 and rest[0] == "state" and rest[1] in COUNTERS):
            if name is None:  # Ciena: the name is a counter leaf
                return
            leafname = rest[-1]
            if leafname in COUNTERS:
                self.port[name][COUNTERS[leafname]] = integer(leaf.value)
            elif leafname in CRC_LEAVES:
                self.crc[name][leafname] = integer(leaf.value)
            elif leafname == "link-flap-events":
                self.port[name]["link_flap"] = integer(leaf.value)
            elif leafname == "carrier-transitions":
                self.port[name]["carrier_transitions"] = integer(leaf.value)
        elif name is None:
            return
        elif rest == ("state", "oper-status"):
            self.port[name]["state"] = OPER.get(str(leaf.value).rsplit(":", 1)[-1])
        elif rest[:2] == ("ethernet", "state") and rest[-1] in ("negotiated-port-speed", "port-speed"):
            if rest[-1] == "negotiated-port-speed" or "speed_gbps" not in self.port[name]:
                self.port[name]["speed_gbps"] = speed_gbps(leaf.value)
        elif rest[:3] == ("ethernet", "state", "counters") and len(rest) == 4:
            if rest[3] == "in-mac-pause-frames":
                self.port[name]["rx_pause_total"] = integer(leaf.value)
            elif rest[3] == "out-mac-pause-frames":
                self.port[name]["tx_pause_total"] = integer(leaf.value)
            elif rest[3] == "in-crc-errors":
                self.crc[name][rest[3]] = integer(leaf.value)
        elif rest == ("state", "transceiver"):
            self.xcvr_iface[str(leaf.value)] = name
        elif rest and rest[0] == "optics":
            self.junos_optics(name, leaf, rest[1:])

    def junos_optics(self, iface: str, leaf: Leaf, rest: tuple[str, ...]) -> None:
        self.transceivers.add(iface)
        self.xcvr_iface.setdefault(iface, iface)
        if rest == ("module_temp",):
            self.module_temp[iface] = number(leaf.value)
        elif len(rest) == 1 and rest[0] in JUNOS_THRESHOLDS:
            self.module[iface][JUNOS_THRESHOLDS[rest[0]]] = number(leaf.value)
        elif rest[:2] == ("lanediags", "lane") and len(rest) == 3 and rest[2] in JUNOS_LANE:
            lane = integer(leaf.key("lane", "lane_number"))
            if lane is not None:
                self.lanes[iface][lane][JUNOS_LANE[rest[2]]] = number(leaf.value)

    def component(self, leaf: Leaf, rest: tuple[str, ...]) -> None:
        name = leaf.key("component", "name")
        if name is None:
            return
        if rest[:1] == ("transceiver",):
            self.transceivers.add(name)
        if rest == ("state", "type"):
            self.component_type[name] = str(leaf.value).rsplit(":", 1)[-1]
        elif rest in (("state", "temperature", "instant"), ("state", "temperature")):
            value = number(leaf.value)
            if value is not None:
                self.component_temp[name] = value
        elif rest == ("state", "oper-status"):
            self.component_oper[name] = str(leaf.value).rsplit(":", 1)[-1]
        elif rest in (("fan", "state", "speed"),):
            value = number(leaf.value)
            if value is not None:
                self.fans.append(value)
        elif rest[:3] == ("transceiver", "physical-channels", "channel") and len(rest) >= 5 and rest[3] == "state":
            what = CHANNEL.get(rest[4])
            index = integer(leaf.key("channel", "index"))
            if what and index is not None and rest[5:] in ((), ("instant",)):
                self.lanes[name][index][what] = number(leaf.value)
        elif rest[:2] == ("transceiver", "state") and len(rest) >= 3:
            self.transceiver_state(name, rest[2], rest[3:], leaf.value)
        elif rest[:3] == ("transceiver", "thresholds", "threshold") and len(rest) == 5 and rest[3] == "state":
            severity = str(leaf.key("threshold", "severity") or "").rsplit(":", 1)[-1]
            column = OC_THRESHOLDS.get((rest[4], severity))
            if column:
                self.module[name][column] = number(leaf.value)

    def transceiver_state(self, name: str, leafname: str, sub: tuple[str, ...], value: Any) -> None:
        if leafname == "supply-voltage" and sub in ((), ("instant",)):
            self.voltage[name] = number(value)
        elif leafname == "vendor":
            self.module[name]["vendor"] = clean_text(value)
        elif leafname == "vendor-part":
            self.module[name]["part_number"] = clean_text(value)
        elif leafname == "ethernet-pmd":
            self.module[name]["media"] = media_from_pmd(value)
        elif leafname == "pre-fec-ber" and sub in ((), ("instant",)):
            self.module[name]["@pre_fec_ber"] = number(value)
        elif leafname == "fec-corrected-bits":
            self.module[name]["@fec_corrected_total"] = integer(value)
        elif leafname == "fec-uncorrectable-blocks":
            self.module[name]["@fec_uncorrectable_total"] = integer(value)

    def qos(self, leaf: Leaf, rest: tuple[str, ...]) -> None:
        iface = leaf.key("interface", "interface-id")
        if iface and rest[-2:] == ("state", "dropped-pkts") and "output" in rest:
            value = integer(leaf.value)
            if value is not None:
                self.queue_drops[iface].append(value)

    def read(self, leaf: Leaf) -> None:
        names = leaf.names()
        self.target = self.target or leaf.target
        if names[:2] == ("interfaces", "interface"):
            self.interface(leaf, names[2:])
            if names[2:4] == ("state", "counters") and len(names) == 5 and names[4] == "name":
                self.port[_iface_name(str(leaf.value))].update(self.port.pop("", {}))
        elif names[:2] == ("components", "component"):
            self.component(leaf, names[2:])
        elif names[:3] == ("qos", "interfaces", "interface"):
            self.qos(leaf, names[3:])


def _read_ciena(items: list[Leaf], model: _Model) -> None:
    """Counters without an interface key (Ciena): a notification's ``name`` leaf names the interface."""
    keyless = [lf for lf in items if lf.names()[:4] == ("interfaces", "interface", "state", "counters")]
    keyless = [lf for lf in keyless if lf.key("interface", "name") is None and len(lf.names()) == 5]
    names = [lf for lf in keyless if lf.names()[4] == "name"]
    if len(names) != 1:
        return
    iface = _iface_name(str(names[0].value))
    for lf in keyless:
        path = list(lf.path)
        path[1] = ("interface", (("name", iface),))
        model.interface(Leaf(tuple(path), lf.value, lf.target), lf.names()[2:])


def parse_json(text: str, device: str | None, fallback: str, port_map: PortMap, style: str, ts: float, place: str):
    """gNMI JSON → messages for one switch (see the module doc); [] when nothing maps."""
    items = leaves(text, place)
    model = _Model()
    for leaf in items:
        model.read(leaf)
    _read_ciena(items, model)
    dev = device or model.target or fallback
    rows: dict[str, list[dict[str, Any]]] = {"port": [], "optical": [], "module": [], "switch": []}

    def port_of(owner: str) -> str:
        return port_map.switch_port(dev, model.xcvr_iface.get(owner, owner), style)

    ifaces = sorted(set(model.port) | set(model.crc) | set(model.queue_drops))
    fec = {model.xcvr_iface.get(c, c): m for c, m in model.module.items() if any(k.startswith("@") for k in m)}
    for iface in sorted(set(ifaces) | set(fec)):
        p = dict(model.port.get(iface, {}))
        crc = model.crc.get(iface, {})
        row: dict[str, Any] = {"port": port_map.switch_port(dev, iface, style)}
        row.update({k: v for k, v in p.items() if k not in ("link_flap", "carrier_transitions")})
        row["rx_crc_errors_total"] = next((crc[k] for k in CRC_LEAVES if crc.get(k) is not None), None)
        if p.get("link_flap") is not None:
            row["link_down_total"] = p["link_flap"]
        elif p.get("carrier_transitions") is not None:
            row["link_down_total"] = p["carrier_transitions"] // 2
        if row.get("tx_drops_total") is None and model.queue_drops.get(iface):
            row["tx_drops_total"] = sum(model.queue_drops[iface])
        for k, v in fec.get(iface, {}).items():
            if k.startswith("@"):
                row[k[1:]] = v
        if len(row) > 1:
            rows["port"].append(row)
    for owner in sorted(model.lanes):
        for lane in sorted(model.lanes[owner]):
            v = model.lanes[owner][lane]
            rows["optical"].append(
                {
                    "port": port_of(owner),
                    "lane": lane,
                    "tx_power_dbm": v.get("tx"),
                    "rx_power_dbm": v.get("rx"),
                    "bias_ma": v.get("bias"),
                    "module_temp_c": model.module_temp.get(owner, model.component_temp.get(owner)),
                    "voltage_v": model.voltage.get(owner),
                }
            )
    for owner in sorted(set(model.module) | set(model.lanes)):
        info = {k: v for k, v in model.module.get(owner, {}).items() if not k.startswith("@")}
        if info:
            rows["module"].append({"port": port_of(owner), "lanes": len(model.lanes.get(owner, {})) or None, **info})
    asic = [model.component_temp[c] for c, t in model.component_type.items() if t == "INTEGRATED_CIRCUIT"]
    asic = [t for t in asic if t is not None]
    psus = [model.component_oper.get(c) for c, t in model.component_type.items() if t == "POWER_SUPPLY"]
    if asic or model.fans or psus:
        rows["switch"].append(
            {
                "device": dev,
                "asic_temp_c": max(asic) if asic else None,
                "fan_min_rpm": min(model.fans) if model.fans else None,
                "psu_ok": (1 if all(s == "ACTIVE" for s in psus) else 0) if psus else None,
            }
        )
    return messages(dev, ts, rows)


class GnmiConfig(ToolConfig):
    target: str | None = None  # the switch's gNMI address HOST:PORT (gnmic -a)
    gnmic: str = "gnmic"  # the gnmic binary
    gnmi_path: tuple[str, ...] = ()  # paths to get (empty: DEFAULT_PATHS)
    skip_verify: bool = False  # gnmic --skip-verify (TLS without checks)
    insecure: bool = False  # gnmic --insecure (no TLS)
    port_style: str = "generic"  # how to number EthernetA/B names (one of STYLES)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.port_style not in STYLES:
            raise ValueError(f"port_style must be one of {', '.join(STYLES)}, not {self.port_style!r}")


class GnmiSource(ToolSource):
    name: ClassVar[str] = "gnmi"
    Config = GnmiConfig
    saved_input = "gNMI notifications or gnmic output (JSON, JSON Lines or gnmic event format)"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--target", metavar="HOST:PORT", help="the switch's gNMI address (gnmic -a)")
        parser.add_argument("--gnmic", default="gnmic", metavar="PATH", help="the gnmic binary")
        parser.add_argument(
            "--gnmi-path", action="append", metavar="PATH", help=f"paths to get (repeatable; {' '.join(DEFAULT_PATHS)})"
        )
        parser.add_argument("--skip-verify", action="store_true", help="gnmic --skip-verify (TLS without checks)")
        parser.add_argument("--insecure", action="store_true", help="gnmic --insecure (no TLS)")
        parser.add_argument("--port-style", choices=STYLES, default="generic", help="how to number EthernetA/B names")

    @classmethod
    def parse_saved(cls, path: Path, opts: Options, ts: float) -> list[Message]:
        device = opts.host if opts.host_given else None
        style = opts.config.port_style
        text = read_saved(path, cls.name)
        return parse_json(text, device, opts.host, opts.port_map, style, ts, f"{cls.name} {path}")

    def scrape_live(self, now: float) -> list[Message]:
        target = self.opts.config.target
        if not target:
            raise InputError(self.name, "give --target HOST:PORT (or --file)")
        argv = [self.opts.config.gnmic, "-a", target, "--format", "json"]
        if self.opts.config.skip_verify:
            argv.append("--skip-verify")
        if self.opts.config.insecure:
            argv.append("--insecure")
        argv.append("get")
        for p in self.opts.config.gnmi_path or DEFAULT_PATHS:
            argv += ["--path", p]
        text = fetch.run(argv, self.opts.timeout_s, f"{self.name} {target}")
        device = self.opts.host if self.opts.host_given else target.rsplit(":", 1)[0]
        style = self.opts.config.port_style
        return parse_json(text, device, self.opts.host, self.opts.port_map, style, now, f"{self.name} {target}")

"""Source ``switchcli``: switch CLI transceiver tables (Arista EOS, Cisco NX-OS) → ``optical`` and ``module`` rows.

For switches without gNMI, or to check it. Formats (recognised by content):

* EOS ``show interfaces transceiver``: one row per interface lane (Temp, Voltage, Bias, Tx/Rx power);
* EOS ``show interfaces transceiver detail``: one table per quantity with the module's thresholds;
* EOS ``show interfaces transceiver hardware``: media type per interface (module rows only);
* NX-OS ``show interface transceiver [details]``: identity (type, name, part number, lanes) and the
  ``SFP Detail Diagnostics`` table (value, high/low alarm, high/low warning) per lane
  (``Lane Number : N``), also the Fibre Channel ``SFP Diagnostics Information`` of an N5K.

EOS names lanes as interfaces: ``Et6/2`` is lane 2 of the module in port 6 (``Et3/17/2``: card 3,
port 17), so the module is the name without its last number (``Ethernet6``) and the lane that number
minus one; a one-number name (``Et49``) is a one-lane module. Ports follow portmap.py (``Ethernet6`` →
``p05``; NX-OS ``Ethernet1/35`` → ``p34``); names it cannot number keep their name. Values are taken as
printed (dBm, mA, °C, V; ``N/A`` → null); EOS A2D readouts in parentheses are ignored.

Not mapped: voltage thresholds and low temperature/bias thresholds (no schema column), high/low flags
(``++``, ``--``: they follow from the values), serial numbers, cable lengths, "Last Update", the parsed
YAML beside ntc-templates' samples. ``transceiver is not applicable``/``not present`` and ``DOM is
Disabled`` give no optical rows. Live, ``--command`` is run as an argv list (``ssh leaf0 show ...``,
split like a shell would, but never run by one) with the ``--timeout``.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from typing import Any, ClassVar

from fabricwatch.collectors import fetch
from fabricwatch.collectors.ethtool_module import media_name
from fabricwatch.collectors.portmap import PortMap, canonical_ifname
from fabricwatch.collectors.toolsource import Options, ToolConfig, ToolSource, read_saved
from fabricwatch.collectors.values import clean_text, integer, messages, number
from fabricwatch.errors import InputError
from fabricwatch.schema import Message

_VALUE = re.compile(r"(\bN/A\b|\bNA\b|[-+]?\d+(?:\.\d+)?)", re.IGNORECASE)
QUANTITY = {"temperature": "temp", "voltage": "volt", "current": "bias", "tx power": "tx", "rx power": "rx"}
LANE_COLUMN = {
    "tx": "tx_power_dbm",
    "rx": "rx_power_dbm",
    "bias": "bias_ma",
    "temp": "module_temp_c",
    "volt": "voltage_v",
}
COMMON = -1  # NX-OS "Lane Number:1 Common Diagnostic Information": module-wide temperature and voltage
# (quantity, threshold) -> module column; thresholds are (high alarm, high warn, low alarm, low warn)
THRESHOLDS = {
    ("temp", "high_alarm"): "temp_high_alarm_c",
    ("temp", "high_warn"): "temp_high_warn_c",
    ("bias", "high_alarm"): "bias_high_alarm_ma",
    ("bias", "high_warn"): "bias_high_warn_ma",
    ("tx", "low_alarm"): "tx_power_low_alarm_dbm",
    ("tx", "low_warn"): "tx_power_low_warn_dbm",
    ("rx", "high_alarm"): "rx_power_high_alarm_dbm",
    ("rx", "low_alarm"): "rx_power_low_alarm_dbm",
    ("rx", "low_warn"): "rx_power_low_warn_dbm",
}


class _Modules:
    """Lanes and module facts by module interface name, in order of appearance."""

    def __init__(self) -> None:
        self.lanes: dict[str, dict[int, dict[str, Any]]] = {}
        self.info: dict[str, dict[str, Any]] = {}

    def lane(self, module: str, lane: int) -> dict[str, Any]:
        return self.lanes.setdefault(module, {}).setdefault(lane, {})

    def module(self, module: str) -> dict[str, Any]:
        return self.info.setdefault(module, {})

    def rows(self, device: str, port_map: PortMap, style: str) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {"optical": [], "module": []}
        for module, lanes in self.lanes.items():
            port = port_map.switch_port(device, module, style)
            common = lanes.get(COMMON, {})
            network = sorted(lane for lane in lanes if lane != COMMON)
            if network and common:  # NX-OS counts the common lane in "number of lanes"
                self.module(module)["lanes"] = len(network)
            for lane in network:
                values = {**common, **{k: v for k, v in lanes[lane].items() if v is not None}}
                values = {k: values.get(k) for k in LANE_COLUMN}
                if any(v is not None for v in values.values()):
                    out["optical"].append(
                        {"port": port, "lane": lane, **{LANE_COLUMN[k]: v for k, v in values.items()}}
                    )
        for module, info in self.info.items():
            if any(v is not None for v in info.values()):
                out["module"].append({"port": port_map.switch_port(device, module, style), **info})
        return out


def eos_module_lane(name: str) -> tuple[str, int]:
    """``Et6/2`` → (``Ethernet6``, 1); ``Et3/17/1`` → (``Ethernet3/17``, 0); ``Et49`` → (``Ethernet49``, 0)."""
    full = canonical_ifname(name)
    m = re.match(r"^(.*\d)/(\d+)$", full)
    if m:
        return m.group(1), int(m.group(2)) - 1
    return full, 0


def _strip_a2d(text: str) -> str:
    return re.sub(r"\([^)]*\)", " ", text)


def parse_eos_table(text: str, mods: _Modules) -> None:
    for line in text.splitlines():
        tokens = _strip_a2d(line).split()
        if len(tokens) >= 6 and re.match(r"^(Et|Ethernet)\d", tokens[0]):
            module, lane = eos_module_lane(tokens[0])
            values = mods.lane(module, lane)
            for key, tok in zip(("temp", "volt", "bias", "tx", "rx"), tokens[1:6], strict=True):
                values[key] = number(tok)


def parse_eos_detail(text: str, mods: _Modules) -> None:
    quantity = None
    for line in text.splitlines():
        header = line.strip().lower()
        for name, key in (("temperature", "temp"), ("voltage", "volt"), ("current", "bias")):
            if header.startswith(name):
                quantity = key
        if header.startswith("tx power"):
            quantity = "tx"
        elif header.startswith("rx power"):
            quantity = "rx"
        tokens = _strip_a2d(line).split()
        if quantity and len(tokens) >= 6 and re.match(r"^(Et|Ethernet)\d", tokens[0]):
            module, lane = eos_module_lane(tokens[0])
            mods.lane(module, lane)[quantity] = number(tokens[1])
            levels = ("high_alarm", "high_warn", "low_alarm", "low_warn")
            for level, tok in zip(levels, tokens[2:6], strict=True):
                column = THRESHOLDS.get((quantity, level))
                if column and mods.module(module).get(column) is None:
                    mods.module(module)[column] = number(tok)


def parse_eos_hardware(text: str, mods: _Modules) -> None:
    for block in re.split(r"\n\s*\n", text):
        fields = dict(
            (k.strip().lower(), v.strip()) for k, _, v in (ln.partition(":") for ln in block.splitlines()) if v
        )
        name = fields.get("name")
        if name and "media type" in fields and "not detected" not in fields.get("module presence", ""):
            module, _lane = eos_module_lane(name)
            mods.module(module)["media"] = media_name(fields["media type"])


def parse_nxos(text: str, mods: _Modules) -> None:
    module: str | None = None
    lane, network = 0, 0
    for line in text.splitlines():
        if m := re.match(r"^((?:Ethernet|Eth|fc)\S+)(?:\s+sfp is present)?\s*$", line):
            module, lane, network = canonical_ifname(m.group(1)), 0, 0
            continue
        if module is None:
            continue
        stripped = line.strip()
        low = stripped.lower()
        if m := re.match(r"^lane number\s*:\s*\d+\s*(.*)$", low):
            if "common" in m.group(1):
                lane = COMMON
            else:
                lane, network = network, network + 1
        elif m := re.match(r"^(type|name|part number|media interface advertising code) is (.*)$", stripped, re.I):
            key, value = m.group(1).lower(), clean_text(m.group(2))
            info = mods.module(module)
            if key == "type" and value and info.get("media") is None:
                info["media"] = media_name(value)
            elif key == "media interface advertising code" and value:
                info["media"] = value
            elif key == "name":
                info["vendor"] = value
            elif key == "part number":
                info["part_number"] = value
        elif m := re.match(r"^(?:number of lanes|media lane count is)\s*(\d+)", low):
            mods.module(module)["lanes"] = integer(m.group(1))
        elif m := re.match(r"^(?:optical\s+)?(temperature|voltage|current|tx power|rx power)\s*:?\s+(.*)$", low):
            quantity = QUANTITY[m.group(1)]
            values = [None if v.upper() in ("N/A", "NA") else float(v) for v in _VALUE.findall(stripped[m.start(2) :])]
            if not values:
                continue
            mods.lane(module, lane)[quantity] = values[0]
            for level, v in zip(("high_alarm", "low_alarm", "high_warn", "low_warn"), values[1:5], strict=False):
                column = THRESHOLDS.get((quantity, level))
                if column:
                    mods.module(module)[column] = v


def parse_text(text: str, device: str, port_map: PortMap, ts: float, place: str) -> list[Message]:
    """Any supported transceiver table → optical and module messages of ``device``."""
    if not text.strip():
        raise InputError(place, "empty output, expected a 'show interface(s) transceiver' table")
    mods = _Modules()
    if re.search(r"^(?:Ethernet|Eth|fc)\S+\s*(?:sfp is present)?\s*$", text, re.M) and (
        "transceiver is" in text or "sfp is" in text
    ):
        style = "nxos"
        parse_nxos(text, mods)
    elif "High Alarm" in text and "Threshold" in text:
        style = "eos"
        parse_eos_detail(text, mods)
    elif re.search(r"^Name: ", text, re.M) and "Media type" in text:
        style = "eos"
        parse_eos_hardware(text, mods)
    elif re.search(r"^Port\s+\(Celsius\)", text, re.M) or "Last Update" in text:
        style = "eos"
        parse_eos_table(text, mods)
    else:
        raise InputError(place, "not an EOS or NX-OS 'show interface(s) transceiver' output")
    return messages(device, ts, mods.rows(device, port_map, style))


class SwitchCliConfig(ToolConfig):
    tool_command: str | None = None  # command printing the table (--command), run without a shell


class SwitchCliSource(ToolSource):
    name: ClassVar[str] = "switchcli"
    Config = SwitchCliConfig
    saved_input = "EOS 'show interfaces transceiver [detail|hardware]' or NX-OS 'show interface transceiver'"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--command",
            dest="tool_command",
            metavar="CMD",
            help="command printing the table, e.g. 'ssh leaf0 show interfaces transceiver'",
        )

    @classmethod
    def parse_saved(cls, path: Path, opts: Options, ts: float) -> list[Message]:
        return parse_text(read_saved(path, cls.name), opts.host, opts.port_map, ts, f"{cls.name} {path}")

    def scrape_live(self, now: float) -> list[Message]:
        command = self.opts.config.tool_command
        if not command:
            raise InputError(self.name, "give --command (or --file)")
        text = fetch.run(shlex.split(command), self.opts.timeout_s, self.name)
        return parse_text(text, self.opts.host, self.opts.port_map, now, self.name)

"""Source ``ibtools``: InfiniBand diagnostics: ``perfquery -x`` → ``port`` rows, ``ibswinfo`` → ``switch`` rows.

``perfquery -x`` prints a port's extended (64-bit) PortCounters in blocks headed ``# Port extended
counters: Lid L port N``. Columns: ``PortRcvData``/``PortXmitData`` × 4 → rx/tx_bytes_total (IBTA counts
data in 4-octet words), ``PortRcvPkts``/``PortXmitPkts`` → rx/tx_packets_total, ``SymbolErrorCounter`` →
symbol_errors_total, ``LinkDownedCounter`` → link_down_total, ``PortXmitDiscards`` → tx_drops_total.
``--node-type switch`` (default) names port N ``<host>:p<N-1>`` (two digits, like topology files);
``ca`` names it as an HCA port, ``<host>/hca:p<N-1>``. Not mapped: PortRcvErrors (every receive error
in one count), the other error counters, PortXmitWait and the PortRcvErrorDetails block.

``ibswinfo`` prints a Mellanox switch's health: ``temperature (C)`` (the ASIC's sensor) →
asic_temp_c, the slowest ``fan#N (rpm)`` → fan_min_rpm, and psu_ok = 1 when every PSU's ``status``
and ``DC power`` read OK, 0 when one reads anything else, null when a PSU's status is blank. A field
that is not a number (``foo``) is null; the rest of the report is still read.

Not telemetry, so not read: ``ibnetdiscover`` (the fabric's cabling: that is topology input, compare
with ``fabricwatch topology --check``) and Prometheus rule files.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from typing import Any, ClassVar, Literal

from fabricwatch.collectors import fetch
from fabricwatch.collectors.portmap import PortMap
from fabricwatch.collectors.toolsource import Options, ToolConfig, ToolSource, read_saved
from fabricwatch.collectors.values import integer, messages, number
from fabricwatch.errors import InputError
from fabricwatch.schema import Message

PERFQUERY = {
    "PortRcvPkts": "rx_packets_total",
    "PortXmitPkts": "tx_packets_total",
    "SymbolErrorCounter": "symbol_errors_total",
    "LinkDownedCounter": "link_down_total",
    "PortXmitDiscards": "tx_drops_total",
}
PERFQUERY_DATA = {"PortRcvData": "rx_bytes_total", "PortXmitData": "tx_bytes_total"}
_BLOCK = re.compile(r"^# Port (?:extended )?counters: Lid (\d+) port (\d+)", re.IGNORECASE)
_FIELD = re.compile(r"^(\w+):\.*(.*)$")


def port_id(port_map: PortMap, host: str, port: int, node_type: str) -> str:
    if node_type == "ca":
        return port_map.host_port(host, "hca", port)
    return port_map.switch_port(host, str(port))


def parse_perfquery(text: str, host: str, port_map: PortMap, node_type: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    row: dict[str, Any] | None = None
    for line in text.splitlines():
        if m := _BLOCK.match(line.strip()):
            row = {"port": port_id(port_map, host, int(m.group(2)), node_type)}
            rows.append(row)
        elif line.startswith("#"):
            row = None  # another kind of block (PortRcvErrorDetails): nothing we map
        elif row is not None and (m := _FIELD.match(line.strip())):
            name, value = m.group(1), m.group(2).strip()
            if name in PERFQUERY:
                row[PERFQUERY[name]] = integer(value)
            elif name in PERFQUERY_DATA:
                words = integer(value)
                row[PERFQUERY_DATA[name]] = None if words is None else words * 4
    return [r for r in rows if len(r) > 1]


def parse_ibswinfo(text: str, device: str) -> dict[str, Any]:
    fields: list[tuple[str, str]] = []
    for line in text.splitlines():
        key, sep, value = line.partition("|")
        if sep:
            fields.append((key.strip(), value.strip()))
    temp = next((number(v) for k, v in fields if k == "temperature (C)"), None)
    fans = [number(v) for k, v in fields if re.fullmatch(r"fan#\d+ \(rpm\)", k)]
    fans = [f for f in fans if f is not None]
    psu_states: list[str] = []
    current = False
    for key, value in fields:
        if re.fullmatch(r"PSU\d+ status", key):
            psu_states.append(value)
            current = True
        elif key == "DC power" and current:
            psu_states.append(value)
        elif not key.startswith(("P/N", "S/N", "fan status", "power (W)")):
            current = False
    if not psu_states:
        psu_ok = None
    elif any(s and s.upper() != "OK" for s in psu_states):
        psu_ok = 0
    elif any(not s for s in psu_states):
        psu_ok = None
    else:
        psu_ok = 1
    return {"device": device, "asic_temp_c": temp, "fan_min_rpm": min(fans) if fans else None, "psu_ok": psu_ok}


def parse_text(text: str, host: str, port_map: PortMap, node_type: str, ts: float, place: str) -> list[Message]:
    if not text.strip():
        raise InputError(place, "empty output, expected perfquery -x or ibswinfo")
    if _BLOCK.search(text) or re.search(r"^# Port", text, re.M):
        return messages(host, ts, {"port": parse_perfquery(text, host, port_map, node_type)})
    if re.search(r"^temperature \(C\)\s*\||^PSU\d+ status\s*\||^fan#\d+", text, re.M):
        return messages(host, ts, {"switch": [parse_ibswinfo(text, host)]})
    raise InputError(place, "not perfquery -x nor ibswinfo output")


class IbToolsConfig(ToolConfig):
    tool_command: str | None = None  # e.g. 'perfquery -x -a' (--command), run without a shell
    node_type: Literal["switch", "ca"] = "switch"  # what perfquery reads


class IbToolsSource(ToolSource):
    name: ClassVar[str] = "ibtools"
    Config = IbToolsConfig
    saved_input = "perfquery -x or ibswinfo output"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--command",
            dest="tool_command",
            metavar="CMD",
            help="e.g. 'perfquery -x -a' or 'ibswinfo -d lid-2052' (run without a shell)",
        )
        parser.add_argument("--node-type", choices=("switch", "ca"), default="switch", help="what perfquery reads")

    @classmethod
    def parse_saved(cls, path: Path, opts: Options, ts: float) -> list[Message]:
        text = read_saved(path, cls.name)
        return parse_text(text, opts.host, opts.port_map, opts.config.node_type, ts, f"{cls.name} {path}")

    def scrape_live(self, now: float) -> list[Message]:
        command = self.opts.config.tool_command
        if not command:
            raise InputError(self.name, "give --command (or --file)")
        text = fetch.run(shlex.split(command), self.opts.timeout_s, self.name)
        node_type = self.opts.config.node_type
        return parse_text(text, self.opts.host, self.opts.port_map, node_type, now, self.name)

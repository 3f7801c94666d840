"""``ethtool -m IFACE`` (text) and ``ethtool --json -m IFACE`` → one module's lanes and thresholds.

Field names are ethtool's own (sfpdiag.c for SFF-8472, qsfp.c for SFF-8636, cmis.c for CMIS, and
sff-common.c / module-common.c for the shared lines and the JSON keys), across versions:

* per lane: ``Laser tx bias current (Channel N)``, ``Transmit avg optical power (Channel N)``,
  ``Rcvr signal avg optical power (Channel N)`` (older ethtool: no space before the parenthesis;
  ``Chan``/``Lane`` are accepted too); one-lane SFPs print ``Laser bias current``, ``Laser output power``
  and ``Receiver signal average optical power``;
* per module: ``Module temperature``, ``Module voltage``, and the thresholds ``Laser bias current high
  alarm threshold`` ... ``Laser rx power low warning threshold``;
* JSON: ``laser_tx_bias_current``/``laser_bias_current`` and ``transmit_avg_optical_power``/
  ``laser_output_power`` (a number for SFP, a list per bank of 8 lanes for QSFP/CMIS), ``rx_power``
  ``{value|values, type}``, and threshold objects (``module_temperature: {high_alarm_threshold, ...}``;
  ethtool prints the measurement and the thresholds under the same key, which is why the JSON is
  read keeping duplicate keys; the later ``*_threshold(s)`` names are read too).

Units: powers are read in mW (4 decimals, more precise than the 2-decimal dBm beside them) and
converted exactly, dBm = 10·log10(mW); a measured 0 mW (ethtool prints ``-inf dBm``) is -40 dBm, the
register's floor (see values.LOS_DBM); a power ethtool does not print stays null. Bias in mA,
temperature in °C, voltage in V, as printed.

Not mapped: received power given as OMA (``Receiver signal OMA``: modulation amplitude, not the
average power the ``rx_power_dbm`` column holds), alarm/warning flags and loss-of-signal/lock lane
status (they follow from the values and thresholds), and the remaining identification lines.

CMIS prints 8 lanes per bank whatever the module uses: when the upper four of eight are all zero
(no bias, no light either way) and the lower four are not, the module is read as a four-lane one
(400G-DR4 on an 8-lane host interface). ``lanes`` overrides this when the caller knows the count.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from fabricwatch.collectors.values import clean_text, mw_to_dbm, number
from fabricwatch.errors import InputError

_LANE_KEY = re.compile(r"^(?P<what>.+?)\s*\((?:Channel|Chan|Lane)\s*(?P<n>\d+)\)$")
LANE_FIELDS = {
    "laser tx bias current": "bias",
    "transmit avg optical power": "tx",
    "rcvr signal avg optical power": "rx",
    "receiver signal average optical power": "rx",
}
SINGLE_LANE_FIELDS = {
    "laser bias current": "bias",
    "laser output power": "tx",
    "receiver signal average optical power": "rx",
}
THRESHOLDS_TEXT = {
    "laser rx power low alarm threshold": "rx_power_low_alarm_dbm",
    "laser rx power low warning threshold": "rx_power_low_warn_dbm",
    "laser rx power high alarm threshold": "rx_power_high_alarm_dbm",
    "laser output power low alarm threshold": "tx_power_low_alarm_dbm",
    "laser output power low warning threshold": "tx_power_low_warn_dbm",
    "laser bias current high alarm threshold": "bias_high_alarm_ma",
    "laser bias current high warning threshold": "bias_high_warn_ma",
    "module temperature high alarm threshold": "temp_high_alarm_c",
    "module temperature high warning threshold": "temp_high_warn_c",
}
# JSON threshold objects: (object name without a _threshold(s) suffix, level) -> column
THRESHOLDS_JSON = {
    ("laser_rx_power", "low_alarm"): "rx_power_low_alarm_dbm",
    ("laser_rx_power", "low_warning"): "rx_power_low_warn_dbm",
    ("laser_rx_power", "high_alarm"): "rx_power_high_alarm_dbm",
    ("laser_output_power", "low_alarm"): "tx_power_low_alarm_dbm",
    ("laser_output_power", "low_warning"): "tx_power_low_warn_dbm",
    ("laser_bias_current", "high_alarm"): "bias_high_alarm_ma",
    ("laser_bias_current", "high_warning"): "bias_high_warn_ma",
    ("module_temperature", "high_alarm"): "temp_high_alarm_c",
    ("module_temperature", "high_warning"): "temp_high_warn_c",
}
POWER_THRESHOLDS = {c for c in THRESHOLDS_TEXT.values() if c.endswith("_dbm")}


@dataclass
class ModuleReading:
    """What one ``ethtool -m`` says, in the tool's units (mW, mA, °C, V)."""

    lanes: dict[int, dict[str, float | None]] = field(default_factory=dict)  # 0-based lane -> tx/rx/bias
    temp_c: float | None = None
    voltage_v: float | None = None
    thresholds: dict[str, float | None] = field(default_factory=dict)  # module column -> value (dBm for powers)
    vendor: str | None = None
    part_number: str | None = None
    media: str | None = None

    def lane(self, index: int) -> dict[str, float | None]:
        return self.lanes.setdefault(index, {"tx": None, "rx": None, "bias": None})


def power_mw(text: str) -> float | None:
    """``'0.5760 mW / -2.40 dBm'`` → 0.576; a value printed in dBm only is converted back."""
    m = re.search(r"([-+]?\d+(?:\.\d*)?)\s*mW", text)
    if m:
        return float(m.group(1))
    m = re.search(r"([-+]?\d+(?:\.\d*)?)\s*dBm", text)
    return 10 ** (float(m.group(1)) / 10) if m else None


def media_name(transceiver_type: str | None) -> str | None:
    """``'100G Ethernet: 100G Base-SR4 or 25GBase-SR'`` → ``'100G-SR4'``; unknown text is kept as printed."""
    if not transceiver_type:
        return None
    m = re.search(r"(?<![\d.])(\d+G)\s*Base-?([A-Z0-9]+)", transceiver_type, re.IGNORECASE)
    if m:
        return f"{m.group(1).upper()}-{m.group(2).upper()}"
    text = re.sub(r"^[\w ]*Ethernet:\s*", "", transceiver_type).strip()
    return text or None


def parse_text(text: str, place: str) -> ModuleReading:
    """``ethtool -m`` text → :class:`ModuleReading`; raises InputError when it is not that output."""
    reading = ModuleReading()
    pairs: list[tuple[str, str]] = []
    for line in text.splitlines():
        key, sep, value = line.partition(" : ")
        if sep:
            pairs.append((key.strip(), value.strip()))
    if not any(k.lower() == "identifier" for k, _ in pairs):
        raise InputError(place, "no 'Identifier' line: not ethtool -m output (or no module in the cage)")
    media_texts: list[str] = []
    for key, value in pairs:
        low = key.lower()
        if m := _LANE_KEY.match(key):
            what = LANE_FIELDS.get(m.group("what").lower())
            if what:
                lane = reading.lane(int(m.group("n")) - 1)
                lane[what] = number(value) if what == "bias" else power_mw(value)
        elif low in SINGLE_LANE_FIELDS:
            what = SINGLE_LANE_FIELDS[low]
            reading.lane(0)[what] = number(value) if what == "bias" else power_mw(value)
        elif low in THRESHOLDS_TEXT:
            column = THRESHOLDS_TEXT[low]
            reading.thresholds[column] = mw_to_dbm(power_mw(value)) if column in POWER_THRESHOLDS else number(value)
        elif low == "module temperature":
            reading.temp_c = number(value)
        elif low == "module voltage":
            reading.voltage_v = number(value)
        elif low == "vendor name":
            reading.vendor = clean_text(value)
        elif low == "vendor pn":
            reading.part_number = clean_text(value)
        elif low == "transceiver type":
            media_texts.append(value)
    ethernet = [t for t in media_texts if re.search(r"\d+G\s*Base", t, re.IGNORECASE)]
    reading.media = media_name((ethernet or media_texts or [None])[0])
    return reading


def _pairs(obj: Any) -> list[tuple[str, Any]]:
    return obj if isinstance(obj, list) and all(isinstance(p, tuple) for p in obj) else []


def parse_json(text: str, place: str) -> ModuleReading:
    """``ethtool --json -m`` → :class:`ModuleReading` (duplicate keys kept, see the module doc)."""
    try:
        data = json.loads(text, object_pairs_hook=list)
    except json.JSONDecodeError as exc:
        raise InputError(f"{place}:{exc.lineno}", f"not JSON: {exc.msg}") from None
    if isinstance(data, list) and data and not isinstance(data[0], tuple):
        data = data[0]  # ethtool wraps its object in an array
    pairs = _pairs(data)
    if not pairs:
        raise InputError(place, "not ethtool --json -m output (expected an object of module fields)")
    if not any(k == "identifier" for k, _ in pairs):
        raise InputError(place, "no 'identifier' field: not ethtool --json -m output")
    reading = ModuleReading()
    lists: dict[str, list[float | None]] = {"bias": [], "tx": [], "rx": []}
    for key, value in pairs:
        sub = dict(_pairs(value))
        if key in ("laser_tx_bias_current", "laser_bias_current", "transmit_avg_optical_power", "laser_output_power"):
            what = "bias" if "bias" in key else "tx"
            if isinstance(value, list) and not sub:
                lists[what] += [number(v) for v in value]
            elif not isinstance(value, list):
                lists[what].append(number(value))
            else:
                _json_thresholds(reading, key, sub)
        elif key == "rx_power" and sub:
            if "oma" in str(sub.get("type", "")).lower():
                continue
            values = sub.get("values", [sub.get("value")])
            lists["rx"] += [number(v) for v in (values if isinstance(values, list) else [values])]
        elif key in ("module_temperature", "module_temperature_measurement") and not sub:
            reading.temp_c = number(value)
        elif key in ("module_voltage", "module_voltage_measurement") and not sub:
            reading.voltage_v = number(value)
        elif sub:
            _json_thresholds(reading, key, sub)
        elif key == "vendor_name":
            reading.vendor = clean_text(value)
        elif key == "vendor_pn":
            reading.part_number = clean_text(value)
        elif key == "transceiver_type" and reading.media is None:
            reading.media = media_name(clean_text(value))
    for what, values in lists.items():
        for i, v in enumerate(values):
            reading.lane(i)[what] = v
    return reading


def _json_thresholds(reading: ModuleReading, key: str, obj: dict[str, Any]) -> None:
    base = re.sub(r"_thresholds?$", "", key)
    for level_key, value in obj.items():
        level = level_key.removesuffix("_threshold")
        column = THRESHOLDS_JSON.get((base, level))
        if column:
            v = number(value)
            reading.thresholds[column] = mw_to_dbm(v) if column in POWER_THRESHOLDS else v


def parse(text: str, place: str) -> ModuleReading:
    """Text or JSON, whichever ``text`` is."""
    if not text.strip():
        raise InputError(place, "empty output, expected ethtool -m")
    return parse_json(text, place) if text.lstrip()[:1] in "[{" else parse_text(text, place)


def _dark(lane: dict[str, float | None]) -> bool:
    return all(not v for v in lane.values())


def lane_count(reading: ModuleReading, lanes: int | None = None) -> int:
    """How many lanes the module uses: ``lanes`` if given, else the printed count, CMIS rule applied."""
    printed = len(reading.lanes)
    if lanes:
        return min(lanes, printed)
    if printed == 8:
        upper = [reading.lanes.get(i, {}) for i in range(4, 8)]
        lower = [reading.lanes.get(i, {}) for i in range(4)]
        if all(_dark(ln) for ln in upper) and not all(_dark(ln) for ln in lower):
            return 4
    return printed


def rows(reading: ModuleReading, port: str, lanes: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """``optical`` rows (one per used lane) and the ``module`` row of one port."""
    n = lane_count(reading, lanes)
    optical = [
        {
            "port": port,
            "lane": i,
            "tx_power_dbm": mw_to_dbm(reading.lanes[i]["tx"]),
            "rx_power_dbm": mw_to_dbm(reading.lanes[i]["rx"]),
            "bias_ma": reading.lanes[i]["bias"],
            "module_temp_c": reading.temp_c,
            "voltage_v": reading.voltage_v,
        }
        for i in sorted(reading.lanes)[:n]
    ]
    module = {
        "port": port,
        "media": reading.media,
        "vendor": reading.vendor,
        "part_number": reading.part_number,
        "lanes": n or None,
        **reading.thresholds,
    }
    return {"optical": optical, "module": [module]}

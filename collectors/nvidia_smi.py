"""Source ``nvidia-smi``: ``nvidia-smi -q -x`` XML → ``gpu`` rows, for hosts without the NVML bindings.

The parser reads the XML of driver 418 to 595 (DTD v10-v13): the readings moved over the years
(``power_readings`` → ``gpu_power_readings``, ``power_draw`` → ``average_power_draw``/``instant_power_draw``,
``clocks_throttle_reasons`` → ``clocks_event_reasons``) and each column takes the first that is present.

GPU ``i`` is the i-th ``<gpu>`` element, which is nvidia-smi's own index (``nvidia-smi -i``) and NVML's
(both enumerate in PCI bus order), so this source and ``nvml`` name a GPU the same way. Columns:

* ``power_w``: ``power_draw`` (≤ v12), else ``average_power_draw`` (v13; what NVML's power usage
  returns on Ampere and later), else ``instant_power_draw``. The module's power (``module_power_readings``)
  is a different quantity and is not used.
* ``power_limit_w``: ``enforced_power_limit``, else ``current_power_limit`` (its v12 name), else
  ``power_limit``.
* ``throttle_mask``: the clocks-event reasons as NVML's bits (GpuIdle 0x1 ... DisplayClockSetting 0x100);
  null when any reason is printed as something other than Active/Not Active.
* ``ecc_dbe_total``: volatile uncorrectable errors, DRAM + SRAM (v13 splits SRAM into parity and
  SECDED), or the pre-v11 ``double_bit/total``; null unless every part is a number (ECC off prints N/A).
* ``pcie_replay_total``: ``pci/replay_counter``.
* ``xid``: null: nvidia-smi -q does not report XID events (use the ``nvml`` or ``dcgm`` source).

Not mapped: clocks other than SM, fan speed, memory usage, MIG devices, retired pages and remapped
rows, encoder statistics, processes; ``<timestamp>`` (local time without a zone: the scrape's own
time is used instead).
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import ClassVar

from fabricwatch.collectors import fetch
from fabricwatch.collectors.toolsource import Options, ToolConfig, ToolSource, read_saved
from fabricwatch.collectors.values import integer, messages, number
from fabricwatch.errors import InputError
from fabricwatch.schema import Message

# NVML's clocks-event reason bits (nvml.h nvmlClocksEventReason*), by nvidia-smi's element suffix.
THROTTLE_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}


def _text(gpu: ET.Element, *paths: str) -> str | None:
    """The text of the first path that exists (older and newer element names)."""
    for path in paths:
        el = gpu.find(path)
        if el is not None and el.text is not None:
            return el.text
    return None


def _first_number(gpu: ET.Element, *paths: str) -> float | None:
    for path in paths:
        value = number(_text(gpu, path))
        if value is not None:
            return value
    return None


def throttle_mask(gpu: ET.Element) -> int | None:
    reasons = gpu.find("clocks_event_reasons")
    if reasons is None:
        reasons = gpu.find("clocks_throttle_reasons")
    if reasons is None:
        return None
    mask, seen = 0, False
    for el in reasons:
        suffix = el.tag.removeprefix("clocks_event_reason_").removeprefix("clocks_throttle_reason_")
        bit = THROTTLE_BITS.get(suffix)
        if bit is None:
            continue
        state = (el.text or "").strip()
        if state == "Active":
            mask |= bit
        elif state != "Not Active":
            return None
        seen = True
    return mask if seen else None


def ecc_dbe_total(gpu: ET.Element) -> int | None:
    volatile = gpu.find("ecc_errors/volatile")
    if volatile is None:
        return None
    legacy = volatile.find("double_bit/total")
    if legacy is not None:
        return integer(legacy.text)
    parts = ["dram_uncorrectable"]
    if volatile.find("sram_uncorrectable") is not None:
        parts.append("sram_uncorrectable")
    else:
        parts += ["sram_uncorrectable_parity", "sram_uncorrectable_secded"]
    values = [integer(_text(volatile, p)) for p in parts]
    if any(v is None for v in values):
        return None
    return sum(values)  # type: ignore[arg-type]


def gpu_row(gpu: ET.Element, device: str) -> dict[str, object]:
    power = ("gpu_power_readings", "power_readings")
    return {
        "device": device,
        "util_pct": number(_text(gpu, "utilization/gpu_util")),
        "mem_util_pct": number(_text(gpu, "utilization/memory_util")),
        "temp_c": number(_text(gpu, "temperature/gpu_temp")),
        "mem_temp_c": number(_text(gpu, "temperature/memory_temp")),
        "power_w": _first_number(
            gpu, *(f"{p}/{leaf}" for leaf in ("power_draw", "average_power_draw", "instant_power_draw") for p in power)
        ),
        "power_limit_w": _first_number(
            gpu,
            *(f"{p}/{leaf}" for leaf in ("enforced_power_limit", "current_power_limit", "power_limit") for p in power),
        ),
        "sm_clock_mhz": number(_text(gpu, "clocks/sm_clock")),
        "throttle_mask": throttle_mask(gpu),
        "xid": None,
        "ecc_dbe_total": ecc_dbe_total(gpu),
        "pcie_replay_total": integer(_text(gpu, "pci/replay_counter")),
    }


def parse_xml(text: str, host: str, ts: float, place: str = "nvidia-smi") -> list[Message]:
    """``nvidia-smi -q -x`` output → one ``gpu`` message (empty list when the host has no GPU)."""
    if not text.strip():
        raise InputError(place, "empty output, expected nvidia-smi -q -x XML")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, _col = exc.position
        raise InputError(f"{place}:{line}", f"not valid XML: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise InputError(place, f"root element is <{root.tag}>, expected <nvidia_smi_log> (nvidia-smi -q -x)")
    rows = [gpu_row(gpu, f"{host}/gpu{i}") for i, gpu in enumerate(root.findall("gpu"))]
    return messages(host, ts, {"gpu": rows})


class NvidiaSmiConfig(ToolConfig):
    nvidia_smi: str = "nvidia-smi"  # the nvidia-smi binary


class NvidiaSmiSource(ToolSource):
    name: ClassVar[str] = "nvidia-smi"
    Config = NvidiaSmiConfig
    saved_input = "nvidia-smi -q -x output (XML)"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--nvidia-smi", default="nvidia-smi", metavar="PATH", help="the nvidia-smi binary")

    @classmethod
    def parse_saved(cls, path: Path, opts: Options, ts: float) -> list[Message]:
        return parse_xml(read_saved(path, cls.name), opts.host, ts, f"{cls.name} {path}")

    def scrape_live(self, now: float) -> list[Message]:
        argv = [self.opts.config.nvidia_smi, "-q", "-x"]
        text = fetch.run(argv, self.opts.timeout_s, self.name)
        return parse_xml(text, self.opts.host, now, self.name)

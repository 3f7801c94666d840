"""Source ``dcgm``: a dcgm-exporter ``/metrics`` page (Prometheus text format) → ``gpu`` rows.

The page is parsed with prometheus-client's own text parser. One row per (Hostname, gpu) label pair;
the GPU is ``<host>/gpu<gpu label>`` where host is ``--host`` when given, else the exporter's
``Hostname`` label (dcgm-exporter is usually scraped from elsewhere, so the machine running fabricwatch
is rarely the GPU's host), else the machine's hostname. Fields (from dcgm-exporter's counter lists):

=====================================  ==============  =======================================================
DCGM field                             column          note
=====================================  ==============  =======================================================
DCGM_FI_DEV_GPU_UTIL                   util_pct
DCGM_FI_DEV_MEM_COPY_UTIL              mem_util_pct
DCGM_FI_DEV_GPU_TEMP                   temp_c
DCGM_FI_DEV_MEMORY_TEMP                mem_temp_c      0 → null: DCGM reports 0 on boards without a memory
                                                       sensor (L4, T4, L40S: nvidia-smi says N/A there)
DCGM_FI_DEV_POWER_USAGE                power_w
DCGM_FI_DEV_POWER_MGMT_LIMIT           power_limit_w   else DCGM_FI_DEV_ENFORCED_POWER_LIMIT
DCGM_FI_DEV_SM_CLOCK                   sm_clock_mhz
DCGM_FI_DEV_CLOCKS_EVENT_REASONS       throttle_mask   or its old name DCGM_FI_DEV_CLOCK_THROTTLE_REASONS
DCGM_FI_DEV_XID_ERRORS                 xid             the last XID, 0 = none
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL          ecc_dbe_total
DCGM_FI_DEV_PCIE_REPLAY_COUNTER        pcie_replay_total
=====================================  ==============  =======================================================

Not mapped: memory clock, framebuffer usage, energy, encoder/decoder use, remapped rows, vGPU
licence, NVLink bandwidth and the DCP profiling ratios (DCGM_FI_PROF_*); series of MIG instances
(``GPU_I_ID`` label), which are not whole GPUs. A series listed twice (some captures repeat the page)
keeps its last value.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, ClassVar

from fabricwatch.collectors import fetch
from fabricwatch.collectors.toolsource import Options, ToolConfig, ToolSource, read_saved
from fabricwatch.collectors.values import integer, messages, number
from fabricwatch.errors import InputError
from fabricwatch.schema import Message

FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "mem_util_pct",
    "DCGM_FI_DEV_GPU_TEMP": "temp_c",
    "DCGM_FI_DEV_MEMORY_TEMP": "mem_temp_c",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": "power_limit_w",
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": "power_limit_w",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "throttle_mask",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "throttle_mask",
    "DCGM_FI_DEV_XID_ERRORS": "xid",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_dbe_total",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "pcie_replay_total",
}
# When two fields feed one column, the first listed here wins.
PREFERRED = ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
INT_COLUMNS = {"throttle_mask", "xid", "ecc_dbe_total", "pcie_replay_total"}


def _value(column: str, raw: float) -> Any:
    if column in INT_COLUMNS:
        return integer(raw)
    value = number(raw)
    if column == "mem_temp_c" and value == 0.0:
        return None
    return value


def parse_metrics(text: str, host: str | None, fallback_host: str, ts: float, place: str = "dcgm") -> list[Message]:
    """A dcgm-exporter page → one ``gpu`` message per GPU host found on it (see the module doc)."""
    from prometheus_client.parser import text_string_to_metric_families  # lazy: only this source needs it

    if not text.strip():
        raise InputError(place, "empty page, expected dcgm-exporter /metrics text")
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    chosen: dict[tuple[str, str, str], str] = {}  # (host, gpu, column) -> field that set it
    seen_dcgm = False
    try:
        for family in text_string_to_metric_families(text):
            name = family.name.removesuffix("_total")
            seen_dcgm |= name.startswith("DCGM_FI_")
            column = FIELDS.get(name)
            if column is None:
                continue
            for sample in family.samples:
                labels = sample.labels
                if labels.get("GPU_I_ID") or "gpu" not in labels:
                    continue
                gpu_host = host or labels.get("Hostname") or fallback_host
                key = (gpu_host, labels["gpu"])
                owner = chosen.get((*key, column))
                if owner is not None and owner != name and owner in PREFERRED:
                    continue
                chosen[(*key, column)] = name
                row = rows.setdefault(key, {"device": f"{gpu_host}/gpu{labels['gpu']}"})
                row[column] = _value(column, sample.value)
    except ValueError as exc:
        raise InputError(place, f"not Prometheus text format: {exc}") from None
    if not seen_dcgm:
        raise InputError(place, "no DCGM_FI_* metrics on the page: is this a dcgm-exporter /metrics?")
    by_host: dict[str, list[dict[str, Any]]] = {}
    for (gpu_host, _gpu), row in sorted(rows.items(), key=lambda kv: (kv[0][0], _index(kv[0][1]))):
        by_host.setdefault(gpu_host, []).append(row)
    return [m for h, host_rows in by_host.items() for m in messages(h, ts, {"gpu": host_rows})]


def _index(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)


class DcgmConfig(ToolConfig):
    url: str = "http://localhost:9400/metrics"  # dcgm-exporter's default endpoint


class DcgmSource(ToolSource):
    name: ClassVar[str] = "dcgm"
    Config = DcgmConfig
    saved_input = "a dcgm-exporter /metrics page"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--url", default="http://localhost:9400/metrics", help="dcgm-exporter endpoint (default %(default)s)"
        )

    @classmethod
    def parse_saved(cls, path: Path, opts: Options, ts: float) -> list[Message]:
        host = opts.host if opts.host_given else None
        return parse_metrics(read_saved(path, cls.name), host, opts.host, ts, f"{cls.name} {path}")

    def scrape_live(self, now: float) -> list[Message]:
        url = self.opts.config.url
        text = fetch.http_get(url, self.opts.timeout_s, f"{self.name} {url}")
        host = self.opts.host if self.opts.host_given else None
        return parse_metrics(text, host, self.opts.host, now, f"{self.name} {url}")

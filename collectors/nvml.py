"""Source ``nvml``: GPUs through NVIDIA's management library (nvidia-ml-py) → ``gpu`` rows.

Every DESIGN §3 ``gpu`` column NVML offers, per GPU index (NVML's enumeration, PCI bus order, the
index nvidia-smi shows): utilization (GPU and memory controller, %), GPU temperature, memory
temperature (field NVML_FI_DEV_MEMORY_TEMP), power usage and enforced limit (NVML reports mW; W
here), SM clock (MHz), the clocks-event reasons bitmask (nvmlDeviceGetCurrentClocksEventReasons, its
bits are nvmlClocksEventReason*), volatile uncorrectable ECC errors and the PCIe replay counter.

XIDs come from NVML events (nvmlEventTypeXidCriticalError), drained without waiting at each
scrape; ``xid`` is the last XID seen on that GPU since the collector started (0 = none). Where the
driver cannot register events, ``xid`` is null.

A value the GPU does not support (NVML_ERROR_NOT_SUPPORTED, NO_PERMISSION, ...) is null. A GPU that
is lost (NVML_ERROR_GPU_IS_LOST, what XID 79 looks like from here) keeps its row with nulls and
the scrape counts as failed with reason ``no_device``. On a host without the NVIDIA driver or
without nvidia-ml-py the source says so at start-up and ``collect`` exits with status 2; it never
invents values. The library is passed in, so tests run against a fake that returns recorded values.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from fabricwatch.collectors.fetch import PartialScrape, ScrapeError
from fabricwatch.collectors.toolsource import Options, ToolSource
from fabricwatch.collectors.values import messages
from fabricwatch.errors import InputError
from fabricwatch.schema import Message

# NVML errors that mean "this GPU does not offer this value": the column is null, nothing failed.
UNSUPPORTED = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_NOT_FOUND",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_NO_DATA",
    "NVML_ERROR_INVALID_ARGUMENT",
)


def load_library() -> ModuleType:
    try:
        import pynvml
    except ImportError:
        raise InputError("nvml", "nvidia-ml-py is not installed (pip install 'fabricwatch[nvml]')") from None
    return pynvml


class NvmlReader:
    """Holds the NVML session: device handles and the XID event set. ``nvml`` is the pynvml module."""

    def __init__(self, nvml: Any, host: str) -> None:
        self.nvml = nvml
        self.host = host
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise InputError(
                "nvml", f"cannot start NVML ({exc}): no NVIDIA driver on this host, or it is not loaded"
            ) from None
        self._unsupported = {getattr(nvml, name) for name in UNSUPPORTED if hasattr(nvml, name)}
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self.last_xid: dict[int, int] = dict.fromkeys(range(len(self.handles)), 0)
        self.events = self._register_xid_events()

    def _register_xid_events(self) -> Any:
        nvml = self.nvml
        try:
            events = nvml.nvmlEventSetCreate()
            for handle in self.handles:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
        except nvml.NVMLError:
            return None  # XIDs cannot be watched here: the xid column stays null
        return events

    def _drain_xids(self) -> None:
        nvml = self.nvml
        if self.events is None:
            return
        while True:
            try:
                data = nvml.nvmlEventSetWait_v2(self.events, 0)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) != nvml.NVML_ERROR_TIMEOUT:
                    raise
                return
            if data.eventType == nvml.nvmlEventTypeXidCriticalError:
                self.last_xid[nvml.nvmlDeviceGetIndex(data.device)] = int(data.eventData)

    def _get(self, fn: Any, problems: list[str], device: str, what: str) -> Any:
        try:
            return fn()
        except self.nvml.NVMLError as exc:
            value = getattr(exc, "value", None)
            if value == self.nvml.NVML_ERROR_GPU_IS_LOST:
                raise
            if value not in self._unsupported:
                problems.append(f"{device} {what}: {exc}")
            return None

    def _memory_temp(self, handle: Any) -> float | None:
        nvml = self.nvml
        field = nvml.nvmlDeviceGetFieldValues(handle, [nvml.NVML_FI_DEV_MEMORY_TEMP])[0]
        if field.nvmlReturn != nvml.NVML_SUCCESS:
            return None
        member = {
            nvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
            nvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
            nvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
            nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
            nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        }.get(field.valueType)
        return float(getattr(field.value, member)) if member else None

    def _throttle(self, handle: Any) -> int:
        fn = getattr(self.nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if fn is None:  # nvidia-ml-py before 12.535 has only the old name
            fn = self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(fn(handle))

    def gpu_row(self, index: int, problems: list[str]) -> dict[str, Any]:
        nvml, handle = self.nvml, self.handles[index]
        device = f"{self.host}/gpu{index}"
        row: dict[str, Any] = {"device": device}
        try:
            util = self._get(lambda: nvml.nvmlDeviceGetUtilizationRates(handle), problems, device, "utilization")
            row["util_pct"] = float(util.gpu) if util is not None else None
            row["mem_util_pct"] = float(util.memory) if util is not None else None
            row["temp_c"] = self._get(
                lambda: float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
                problems,
                device,
                "temp",
            )
            row["mem_temp_c"] = self._get(lambda: self._memory_temp(handle), problems, device, "memory temperature")
            row["power_w"] = self._get(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0, problems, device, "power")
            row["power_limit_w"] = self._get(
                lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0, problems, device, "power limit"
            )
            row["sm_clock_mhz"] = self._get(
                lambda: float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)), problems, device, "SM clock"
            )
            row["throttle_mask"] = self._get(lambda: self._throttle(handle), problems, device, "clocks-event reasons")
            row["ecc_dbe_total"] = self._get(
                lambda: int(
                    nvml.nvmlDeviceGetTotalEccErrors(
                        handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                    )
                ),
                problems,
                device,
                "ECC errors",
            )
            row["pcie_replay_total"] = self._get(
                lambda: int(nvml.nvmlDeviceGetPcieReplayCounter(handle)), problems, device, "PCIe replays"
            )
        except nvml.NVMLError:  # the GPU is lost: nothing more can be read from it
            return {"device": device, "xid": self.last_xid.get(index) if self.events is not None else None}
        row["xid"] = self.last_xid[index] if self.events is not None else None
        return row

    def read(self, ts: float) -> list[Message]:
        lost: list[str] = []
        problems: list[str] = []
        try:
            self._drain_xids()
        except self.nvml.NVMLError as exc:
            problems.append(f"XID events: {exc}")
        rows = []
        for i in range(len(self.handles)):
            row = self.gpu_row(i, problems)
            if "temp_c" not in row:
                lost.append(row["device"])
            rows.append(row)
        result = messages(self.host, ts, {"gpu": rows})
        if lost:
            error = ScrapeError("nvml", f"GPU lost (fallen off the bus?): {', '.join(lost)}", "no_device")
            raise PartialScrape([error], result)
        if problems:
            raise PartialScrape([ScrapeError("nvml", "; ".join(problems), "error")], result)
        return result

    def close(self) -> None:
        try:
            if self.events is not None:
                self.nvml.nvmlEventSetFree(self.events)
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


class NvmlSource(ToolSource):
    name: ClassVar[str] = "nvml"
    saved_input = "(none: NVML is read live; for a saved output use --source nvidia-smi)"

    def __init__(self, opts: Options, library: Any = None) -> None:
        super().__init__(opts)
        if opts.file is not None:
            raise InputError(
                "--file", "nvml reads the driver live; a saved nvidia-smi -q -x is read by --source nvidia-smi"
            )
        self.reader = NvmlReader(library if library is not None else load_library(), opts.host)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        return None

    @classmethod
    def parse_saved(cls, path: Path, opts: Options, ts: float) -> list[Message]:
        raise InputError(
            "--source nvml", "NVML is read live and has no saved output; use --source nvidia-smi on nvidia-smi -q -x"
        )

    def scrape_live(self, now: float) -> list[Message]:
        return self.reader.read(now)

    def close(self) -> None:
        self.reader.close()

"""A stand-in for the ``pynvml`` module: the real constants and error classes, recorded readings.

Readings are what NVML returns for two real GPUs whose ``nvidia-smi -q -x`` is in shared/data
(nvidia-smi prints NVML's values): an A100-SXM4-80GB in MIG mode (a100-sxm4-v12.xml: utilization
N/A under MIG) and a Tesla T4 (tesla-t4.xml: no memory temperature sensor). A reading given as an
``NVML_ERROR_*`` name makes the call raise that NVML error, as the driver would.
"""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace
from typing import Any

import pynvml as real

A100 = {
    "utilization": "NVML_ERROR_NOT_SUPPORTED",
    "temperature": 27,
    "memory_temp": 44,
    "power_mw": 67030,
    "power_limit_mw": 500000,
    "sm_clock": 1275,
    "clocks_event_reasons": 0,
    "ecc_dbe_volatile": 0,
    "pcie_replay": 0,
}
T4 = {
    "utilization": (0, 0),
    "temperature": 40,
    "memory_temp": "NVML_ERROR_NOT_SUPPORTED",
    "power_mw": 26780,
    "power_limit_mw": 70000,
    "sm_clock": 585,
    "clocks_event_reasons": 0,
    "ecc_dbe_volatile": 0,
    "pcie_replay": 0,
}


class FakeNvml:
    NVMLError = real.NVMLError

    def __init__(self, gpus: list[dict[str, Any]], init_error: str | None = None, events: bool = True) -> None:
        for name in dir(real):
            if name.startswith(("NVML_", "nvmlEventType", "nvmlClocks")):
                setattr(self, name, getattr(real, name))
        self.gpus = gpus
        self.init_error = init_error
        self.events_supported = events
        self.pending: deque[tuple[int, int]] = deque()
        self.shut_down = False

    def xid(self, gpu: int, code: int) -> None:
        """The driver reports XID ``code`` on GPU ``gpu``."""
        self.pending.append((gpu, code))

    def _read(self, handle: int, key: str) -> Any:
        value = self.gpus[handle][key]
        if isinstance(value, str):
            raise real.NVMLError(getattr(real, value))
        return value

    def nvmlInit(self) -> None:
        if self.init_error:
            raise real.NVMLError(getattr(real, self.init_error))

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        return handle

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        gpu, memory = self._read(handle, "utilization")
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == real.NVML_TEMPERATURE_GPU
        return self._read(handle, "temperature")

    def nvmlDeviceGetFieldValues(self, handle: int, field_ids: list[int]) -> list[Any]:
        assert field_ids == [real.NVML_FI_DEV_MEMORY_TEMP]
        value = self.gpus[handle]["memory_temp"]
        if isinstance(value, str):
            return [SimpleNamespace(nvmlReturn=getattr(real, value), valueType=0, value=None)]
        return [
            SimpleNamespace(
                nvmlReturn=real.NVML_SUCCESS,
                valueType=real.NVML_VALUE_TYPE_UNSIGNED_INT,
                value=SimpleNamespace(uiVal=value),
            )
        ]

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self._read(handle, "power_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return self._read(handle, "power_limit_mw")

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        assert clock == real.NVML_CLOCK_SM
        return self._read(handle, "sm_clock")

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return self._read(handle, "clocks_event_reasons")

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter_type: int) -> int:
        assert (error_type, counter_type) == (real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, real.NVML_VOLATILE_ECC)
        return self._read(handle, "ecc_dbe_volatile")

    def nvmlDeviceGetPcieReplayCounter(self, handle: int) -> int:
        return self._read(handle, "pcie_replay")

    def nvmlEventSetCreate(self) -> str:
        if not self.events_supported:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: int, event_types: int, event_set: str) -> None:
        assert event_types == real.nvmlEventTypeXidCriticalError

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> Any:
        assert timeout_ms == 0, "a scrape must never wait for events"
        if not self.pending:
            raise real.NVMLError(real.NVML_ERROR_TIMEOUT)
        gpu, code = self.pending.popleft()
        return SimpleNamespace(eventType=real.nvmlEventTypeXidCriticalError, eventData=code, device=gpu)

    def nvmlEventSetFree(self, event_set: str) -> None:
        pass

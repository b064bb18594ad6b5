"""A stand-in for ``pynvml`` (nvidia-ml-py): this machine has no GPU and no
NVIDIA driver, so the sampler's contract with NVML is tested against a module
that imitates the functions it calls, their units (milliwatts, millijoules,
bytes) and their errors (``NVMLError`` for unsupported fields and a missing
library). It is not NVML: values are scripted per call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return {NVML_ERROR_NOT_SUPPORTED: "Not Supported", NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found"}.get(
            self.value, f"NVML error {self.value}"
        )


@dataclass
class FakeGpu:
    name: str
    uuid: str
    power_mw: int | None = 250_000  # None: not supported on this board
    energy_mj_start: int | None = 1_000_000  # None: no energy counter (pre-Volta)
    energy_mj_per_call: int = 500
    util: tuple[int, int] = (87, 40)
    used_bytes: int = 3 * 2**30
    sm_mhz: int = 1410
    mem_mhz: int = 1215
    temp_c: int = 66
    energy_calls: int = field(default=0)


class NvmlStandIn:
    """Module-like object: attributes named as pynvml's."""

    NVMLError = NVMLError
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU

    def __init__(self, gpus: list[FakeGpu], library_present: bool = True):
        self.gpus = gpus
        self.library_present = library_present
        self.initialised = 0
        self.shutdowns = 0

    def nvmlInit(self):
        if not self.library_present:
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.gpus[i]

    def nvmlDeviceGetHandleByUUID(self, uuid):
        for g in self.gpus:
            if g.uuid == uuid:
                return g
        raise NVMLError(13)

    def nvmlDeviceGetIndex(self, h):
        return self.gpus.index(h)

    def nvmlDeviceGetName(self, h):
        return h.name

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=h.util[0], memory=h.util[1])

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=16 * 2**30, free=16 * 2**30 - h.used_bytes, used=h.used_bytes)

    def nvmlDeviceGetPowerUsage(self, h):
        if h.power_mw is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return h.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if h.energy_mj_start is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        value = h.energy_mj_start + h.energy_calls * h.energy_mj_per_call
        h.energy_calls += 1
        return value

    def nvmlDeviceGetClockInfo(self, h, kind):
        return h.sm_mhz if kind == NVML_CLOCK_SM else h.mem_mhz

    def nvmlDeviceGetTemperature(self, h, sensor):
        return h.temp_c

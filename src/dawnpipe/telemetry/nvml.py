"""NVIDIA GPUs through NVML (``nvidia-ml-py``, imported as ``pynvml``).

Only the devices the run can see are sampled: those named by
``CUDA_VISIBLE_DEVICES`` (indices or ``GPU-...`` UUIDs, as Slurm and users
set it), else every device. Fields a device does not support (power on some
boards, the energy counter before Volta) are left empty, not failed on. The
energy counter (millijoules since the driver loaded) is preferred to
integrating power samples when the device has it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any


@dataclass
class Gpu:
    index: int  # NVML index
    handle: Any
    name: str
    energy_start_mj: int | None  # None: no energy counter on this device

    @property
    def device(self) -> str:
        return f"gpu{self.index}"


class NvmlGpus:
    """Open NVML, find the visible devices, read one sample per device."""

    def __init__(self, nvml=None, visible: str | None = None):
        self.nvml = nvml
        self.gpus: list[Gpu] = []
        self.status = ""
        self._open = False
        if self.nvml is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError:
                self.status = "NVML: nvidia-ml-py is not installed"
                return
            self.nvml = pynvml
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as e:
            self.status = f"NVML unavailable: {_msg(e)}"
            return
        self._open = True
        try:
            self.gpus = [self._gpu(h) for h in self._handles(os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible)]
        except self.nvml.NVMLError as e:
            self.status = f"NVML: cannot list devices: {_msg(e)}"
            self.close()
            return
        self.status = f"NVML: {len(self.gpus)} device(s)" + (f" ({', '.join(g.name for g in self.gpus)})" if self.gpus else "")

    def _handles(self, visible: str | None) -> list[tuple[int, Any]]:
        n = self.nvml
        count = n.nvmlDeviceGetCount()
        if visible is None or visible.strip() == "":
            wanted = [str(i) for i in range(count)] if visible is None else []
        else:
            wanted = [v.strip() for v in visible.split(",") if v.strip()]
        handles = []
        for v in wanted:
            if v.startswith(("GPU-", "MIG-")):
                h = n.nvmlDeviceGetHandleByUUID(v)
                index = n.nvmlDeviceGetIndex(h)
            elif v.isdigit() and int(v) < count:
                index, h = int(v), n.nvmlDeviceGetHandleByIndex(int(v))
            else:
                continue  # CUDA ignores the rest of the list after an invalid id; sampling nothing for it is the same
            handles.append((index, h))
        return handles

    def _gpu(self, index_handle: tuple[int, Any]) -> Gpu:
        index, h = index_handle
        name = self.nvml.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else str(name)
        return Gpu(index, h, name, self._call(self.nvml.nvmlDeviceGetTotalEnergyConsumption, h))

    def _call(self, fn, *args):
        """A field's value, or None where the device does not support it."""
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return None

    def sample(self) -> list[dict[str, Any]]:
        n, rows = self.nvml, []
        for g in self.gpus:
            util = self._call(n.nvmlDeviceGetUtilizationRates, g.handle)
            mem = self._call(n.nvmlDeviceGetMemoryInfo, g.handle)
            power_mw = self._call(n.nvmlDeviceGetPowerUsage, g.handle)
            energy_mj = self._call(n.nvmlDeviceGetTotalEnergyConsumption, g.handle) if g.energy_start_mj is not None else None
            rows.append(
                {
                    "device": g.device,
                    "kind": "gpu",
                    "name": g.name,
                    "utilization_pct": _num(util.gpu if util is not None else None),
                    "memory_utilization_pct": _num(util.memory if util is not None else None),
                    "memory_used_mb": _num(mem.used / 2**20 if mem is not None else None),
                    "power_w": _num(power_mw / 1000.0 if power_mw is not None else None),
                    "energy_j": _num((energy_mj - g.energy_start_mj) / 1000.0 if energy_mj is not None else None),
                    "sm_clock_mhz": _num(self._call(n.nvmlDeviceGetClockInfo, g.handle, n.NVML_CLOCK_SM)),
                    "memory_clock_mhz": _num(self._call(n.nvmlDeviceGetClockInfo, g.handle, n.NVML_CLOCK_MEM)),
                    "temperature_c": _num(self._call(n.nvmlDeviceGetTemperature, g.handle, n.NVML_TEMPERATURE_GPU)),
                }
            )
        return rows

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass


def _num(value) -> float:
    return float(value) if value is not None else math.nan


def _msg(err) -> str:
    return str(err) or type(err).__name__

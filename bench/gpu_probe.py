"""The machine the GPU check runs on, as JSON on stdout (a step of
bench/gpu_check.py, run after the bundle's wheels are installed): Python and
package versions, torch's CUDA devices, NVML's names, driver and limits,
ONNX Runtime's execution providers, and the row of
src/dawnpipe/telemetry/peaks.yaml each GPU name finds (none: the peak is
unknown, and the check says so rather than guessing).

    python bench/gpu_probe.py > probe.json
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

PACKAGES = (
    "torch",
    "numpy",
    "pandas",
    "pyarrow",
    "onnx",
    "onnxruntime",
    "onnxruntime-gpu",
    "nvidia-ml-py",
    "triton",
    "pandera",
    "pydantic",
    "jsonschema",
    "mlperf-logging",
    "typing-extensions",
    "psutil",
)


def versions() -> dict[str, str | None]:
    from importlib import metadata

    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def torch_facts() -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {"version": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(), "devices": []}
    facts["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    if not facts["cuda_available"]:
        facts["reason"] = "torch.cuda.is_available() is False"
        return facts
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        facts["devices"].append(
            {
                "index": i,
                "name": torch.cuda.get_device_name(i),
                "compute_capability": f"{p.major}.{p.minor}",
                "multiprocessors": p.multi_processor_count,
                "memory_gib": round(p.total_memory / 2**30, 2),
            }
        )
    return facts


def nvml_facts() -> dict[str, Any]:
    from dawnpipe.telemetry.nvml import NvmlGpus

    gpus = NvmlGpus()
    facts: dict[str, Any] = {"status": gpus.status, "devices": []}
    if not gpus.gpus:
        return facts
    n = gpus.nvml
    try:
        facts["driver"] = _text(n.nvmlSystemGetDriverVersion())
        for g in gpus.gpus:
            limit = gpus._call(n.nvmlDeviceGetPowerManagementLimit, g.handle)
            memory = gpus._call(n.nvmlDeviceGetMemoryInfo, g.handle)
            facts["devices"].append(
                {
                    "index": g.index,
                    "name": g.name,
                    "memory_total_mib": round(memory.total / 2**20) if memory is not None else None,
                    "power_limit_w": limit / 1000.0 if limit is not None else None,
                    "energy_counter": g.energy_start_mj is not None,
                }
            )
    finally:
        gpus.close()
    return facts


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def peak_rows(names: list[str]) -> dict[str, Any]:
    """The peaks.yaml row each reported name finds, or None with the reason."""
    from dawnpipe.telemetry.peaks import gpu_peak

    rows: dict[str, Any] = {}
    for name in dict.fromkeys(names):
        row = gpu_peak(name)
        rows[name] = row if row is not None else {"device": None, "reason": f"{name!r} is not in src/dawnpipe/telemetry/peaks.yaml"}
    return rows


def probe() -> dict[str, Any]:
    from dawnpipe.runinfo import cpu_model

    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "packages": versions(),
    }
    try:
        import psutil

        facts["memory_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        facts["memory_gib"] = None
    facts["torch"] = torch_facts()
    facts["nvml"] = nvml_facts()
    try:
        import onnxruntime

        facts["onnxruntime_providers"] = onnxruntime.get_available_providers()
    except ImportError as e:
        facts["onnxruntime_providers"] = None
        facts["onnxruntime_reason"] = str(e)
    names = [d["name"] for d in facts["torch"]["devices"]] + [d["name"] for d in facts["nvml"]["devices"]]
    facts["peaks"] = peak_rows(names)
    return facts


if __name__ == "__main__":
    print(json.dumps(probe(), indent=1))

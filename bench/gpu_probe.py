"""The machine the GPU check runs on, as JSON on stdout (the check's probe
step, run after the bundle's wheels are installed): Python and package
versions (the check's requirements beside constraints.txt's pins, and which
are missing), the torch it runs with (version, CUDA build, where it is
installed: the node's own or the bundle's), torch's CUDA devices, NVML's
names, driver and limits, ONNX Runtime's execution providers, and the row of
src/dawnpipe/telemetry/peaks.yaml each GPU name finds (none: the peak is
unknown, and the check says so rather than guessing).

    python bench/gpu_probe.py [--site DIR] > probe.json
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT / "src", ROOT / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

PACKAGES = (
    "torch",
    "torchvision",
    "snakemake",
    "numpy",
    "pandas",
    "pyarrow",
    "onnx",
    "onnxruntime",
    "onnxruntime-gpu",
    "nvidia-ml-py",
    "triton",
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
    facts["path"] = str(Path(torch.__file__).parent)
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
        cuda = gpus._call(n.nvmlSystemGetCudaDriverVersion_v2) if hasattr(n, "nvmlSystemGetCudaDriverVersion_v2") else None
        facts["driver_cuda"] = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None
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


def requirements() -> dict[str, Any]:
    """The check's requirements (bench/gpu_bundle.py) as this interpreter has them, beside the pins."""
    import gpu_bundle

    pinned = gpu_bundle.pins()
    rows = {name: {"installed": gpu_bundle.installed_version(name), "pinned": pinned.get(name)} for name in gpu_bundle.requirements()}
    absent = [n for n, r in rows.items() if r["installed"] is None]
    return {
        "packages": rows,
        "missing": [n for n in absent if n not in gpu_bundle.OPTIONAL],
        "missing_optional": [n for n in absent if n in gpu_bundle.OPTIONAL],
    }


def probe(site: Path | None = None) -> dict[str, Any]:
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
    facts["requirements"] = requirements()
    facts["torch"] = torch_facts()
    inside = site is not None and Path(facts["torch"]["path"]).resolve().is_relative_to(site.resolve())
    facts["torch"]["origin"] = "the bundle (installed by the check)" if inside else "this Python's own"
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
    import argparse

    parser = argparse.ArgumentParser(prog="python bench/gpu_probe.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, help="where the check installed the bundle's wheels")
    print(json.dumps(probe(parser.parse_args().site), indent=1))

"""Peak rates of a run's device: the GPU table (peaks.yaml, with the source of
every number) or, for CPUs, a short probe measured on the machine.

The CPU probe multiplies square matrices for a fraction of a second with the
run's framework and thread count and keeps the best rate, then copies a
buffer much larger than the caches for the memory ceiling. It is a practical
peak (what this software reaches on this machine), not a datasheet figure;
on a busy machine it is lower, so the load average at probe time is kept
with it.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

from dawnpipe.fileio import parse_yaml

# The arithmetic a run or a backend uses; each is compared with the peak of
# the same arithmetic (int8: tera integer multiply-adds x 2 per second, kept
# under the same ``<precision>_tflops`` key).
PRECISIONS = ("fp32", "bf16", "fp16", "int8")

# Seconds of each measurement of the CPU probe (each precision's multiplies,
# then the copy): the default of config key telemetry.cpu_peak_probe_s.
PROBE_SECONDS = 0.4


@functools.cache
def peak_table() -> dict[str, dict[str, Any]]:
    return checked_peaks(parse_yaml(resources.files("dawnpipe.telemetry").joinpath("peaks.yaml").read_text(encoding="utf-8")))["devices"]


def checked_peaks(doc: Any, source: str = "dawnpipe/telemetry/peaks.yaml") -> dict[str, Any]:
    """The peak table as schemas/peaks.schema.yaml has it, or an error naming the field."""
    from dawnpipe.schemas import jsonschema_check

    jsonschema_check.check(doc, jsonschema_check.package_schema("peaks"), source)
    return doc


def _norm(name: str) -> str:
    name = name.strip().lower()
    return name.removeprefix("nvidia ").strip()


def gpu_peak(device_name: str) -> dict[str, Any] | None:
    """The table row of a GPU (with its key as ``device``), or None."""
    wanted = _norm(device_name)
    for key, row in peak_table().items():
        if wanted in {_norm(key), *(_norm(a) for a in row.get("aliases") or [])}:
            return {"device": key, **row}
    return None


def _best_rate(step: Callable[[], None], work: float, seconds: float) -> tuple[float, int]:
    """(best work/s over repeated steps, repeats) within about ``seconds``."""
    step()
    step()  # warm-up: allocation, thread pool start, kernel selection
    best, n, deadline = 0.0, 0, time.perf_counter() + seconds
    while n < 3 or time.perf_counter() < deadline:
        t = time.perf_counter()
        step()
        best = max(best, work / max(time.perf_counter() - t, 1e-12))
        n += 1
    return best, n


def probe_cpu(
    framework: str, precisions: tuple[str, ...] = ("fp32",), *, size: int = 1024, seconds: float = PROBE_SECONDS, copy_mb: int = 128
) -> dict[str, Any]:
    """Measured CPU ceilings: matrix-multiply TFLOP/s per precision and copy GB/s,
    each the best rate of repeated steps within ``seconds`` (three at least).

    ``framework`` pytorch uses torch (the thread count the run set); anything
    else uses numpy's BLAS (the record says which)."""
    rates: dict[str, float | None] = {}
    flops = 2.0 * size**3
    elems = copy_mb * 2**20 // 4
    if framework == "pytorch":
        import torch

        threads = torch.get_num_threads()
        for p in precisions:
            try:
                if p == "int8":  # int8 x int8 -> int32, as quantised inference multiplies
                    a, b = (torch.randint(-128, 128, (size, size), dtype=torch.int8) for _ in range(2))
                    rates[p] = _best_rate(lambda a=a, b=b: torch._int_mm(a, b), flops, seconds)[0] / 1e12
                    continue
                dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[p]
                a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
                out = torch.empty(size, size, dtype=dtype)
                rates[p] = _best_rate(lambda a=a, b=b, out=out: torch.mm(a, b, out=out), flops, seconds)[0] / 1e12
            except RuntimeError:  # a dtype this CPU build cannot multiply
                rates[p] = None
        src, dst = torch.ones(elems), torch.empty(elems)
        copy = _best_rate(lambda: dst.copy_(src), 2.0 * elems * 4, seconds)[0]
        method = f"torch.mm {size}x{size} (int8: torch._int_mm), best of repeated runs in {seconds:g} s; torch copy of {copy_mb} MB"
    else:
        import numpy as np

        threads = None  # numpy's BLAS decides
        for p in precisions:
            if p != "fp32":
                rates[p] = None  # numpy has no bf16, no fast fp16 and no int8 matrix multiply
                continue
            a, b = np.random.rand(size, size).astype(np.float32), np.random.rand(size, size).astype(np.float32)
            out = np.empty((size, size), dtype=np.float32)
            rates[p] = _best_rate(lambda a=a, b=b, out=out: np.matmul(a, b, out=out), flops, seconds)[0] / 1e12
        src, dst = np.ones(elems, dtype=np.float32), np.empty(elems, dtype=np.float32)
        copy = _best_rate(lambda: np.copyto(dst, src), 2.0 * elems * 4, seconds)[0]
        method = f"numpy.matmul {size}x{size} (framework {framework}), best of repeated runs in {seconds:g} s; numpy copy of {copy_mb} MB"
    return {
        "kind": "measured",
        "method": method,
        "threads": threads,
        **{f"{p}_tflops": rates.get(p) for p in PRECISIONS if p in rates},
        "memory_gbps": copy / 1e9,
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "cpu_count": os.cpu_count(),
    }


def device_peak(environment: dict[str, Any], telemetry: dict[str, Any] | None, precision: str) -> dict[str, Any]:
    """The ceilings of the device a run trained on, for its precision:
    ``{"device", "precision", "compute_tflops", "memory_gbps", "source", "method", "devices"}``;
    compute/memory None where unknown. ``precision`` is the arithmetic whose
    peak ``compute_tflops`` is: the run's own, never fp32 standing in for it."""
    device = str(environment.get("device", "cpu"))
    if device.startswith("cuda"):
        # NVML's names are the hardware's; a framework's may be logical ("/device:GPU:0" in TensorFlow)
        gpus = [d["name"] for d in (telemetry or {}).get("devices", []) if d.get("kind") == "gpu"] or environment.get("gpus") or []
        count = int(environment.get("world_size") or 1)
        name = gpus[0] if gpus else "unknown GPU"
        row = gpu_peak(name)
        if row is None:
            return {
                "device": name,
                "precision": precision,
                "method": None,
                "compute_tflops": None,
                "memory_gbps": None,
                "devices": count,
                "source": f"{name!r} is not in dawnpipe/telemetry/peaks.yaml",
            }
        rate = row.get(precision)
        return {
            "device": row["device"],
            "precision": precision,
            "method": "datasheet",
            "compute_tflops": rate * count if rate is not None else None,
            "memory_gbps": row["memory_gbps"] * count,
            "devices": count,
            "source": row["source"],
        }
    probe = (telemetry or {}).get("cpu_peak") or {}
    rate = probe.get(f"{precision}_tflops")
    return {
        "device": environment.get("cpu_model", "CPU"),
        "precision": precision,
        "method": probe.get("method"),
        "compute_tflops": rate,
        "memory_gbps": probe.get("memory_gbps"),
        "devices": 1,
        "source": (
            f"measured on the machine: {probe['method']}"
            + ("" if rate is not None else f" (no {precision} rate in the probe: no fraction of peak against another precision's)")
            if probe
            else "no CPU probe in run.json"
        ),
    }

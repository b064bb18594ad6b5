"""What "fp32" means on a GPU: IEEE single precision, not TF32; and what
``precision: auto`` means: bf16 where the device computes it natively, else fp32.

PyTorch lets cuDNN run float32 convolutions in TF32 on Ampere and later GPUs
by default (a 10-bit mantissa, on the tensor cores), while its matrix
products stay IEEE unless asked. An entry or an inference backend that says
``fp32`` is trained, checked against its checkpoint (``infer.predictor.ATOL``)
and compared with the fp32 peak (``telemetry/peaks.yaml``) as fp32, so both
flags are turned off before a CUDA device is used. bf16 and fp16 autocast
are unaffected: their products are not float32.

The flags are the ones every supported torch has (``allow_tf32``); torch
refuses to read them once the newer ``fp32_precision`` settings were mixed
in, and ``tf32_allowed`` then says it does not know.
"""

from __future__ import annotations


def use_ieee_fp32() -> dict[str, bool | None]:
    """Turn TF32 off for cuDNN convolutions and CUDA matrix products; the flags as they now are."""
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    return tf32_allowed()


def tf32_allowed() -> dict[str, bool | None]:
    """Whether float32 convolutions (cuDNN) and matrix products may run in TF32 (run.json's environment)."""
    import torch

    try:
        return {"cudnn": bool(torch.backends.cudnn.allow_tf32), "matmul": bool(torch.backends.cuda.matmul.allow_tf32)}
    except RuntimeError:  # set through the newer API in a way these flags cannot express
        return {"cudnn": None, "matmul": None}


# --- precision: auto ------------------------------------------------------------
# An entry (or a program's author) may ask for ``auto``: bf16 where the device
# computes it natively, else fp32. bf16 on a CPU without bf16 instructions is
# emulated: the same numbers, several times slower than fp32 (the reason a fast
# recipe asks for auto rather than bf16). The run records what it used and why
# (run.json's environment: ``precision``, ``precision_from``).

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux's /proc/cpuinfo; none elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def native_bf16(device_kind: str) -> tuple[bool, str]:
    """Whether ``device_kind`` (cpu or cuda) computes bf16 natively, and what says so."""
    if device_kind == "cuda":
        try:
            import torch

            if torch.cuda.is_available():
                try:  # bf16 in the GPU's arithmetic, not emulated (pre-Ampere GPUs emulate it)
                    ok = bool(torch.cuda.is_bf16_supported(including_emulation=False))
                except TypeError:  # a torch without the argument
                    ok = bool(torch.cuda.is_bf16_supported())
                name = torch.cuda.get_device_name()
                return ok, f"the GPU ({name}) {'computes bf16' if ok else 'has no bf16 arithmetic'}"
        except ImportError:
            pass
        try:
            import pynvml

            pynvml.nvmlInit()
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(0))
            finally:
                pynvml.nvmlShutdown()
            ok = (major, minor) >= (8, 0)
            return ok, f"the GPU's compute capability is {major}.{minor} ({'8.0 or later: bf16' if ok else 'before 8.0: no bf16 arithmetic'})"
        except Exception:  # no driver, no library
            return False, "no way to ask the GPU whether it computes bf16"
    found = sorted(set(CPU_BF16_FLAGS) & cpu_flags())
    if found:
        return True, f"this CPU has {' and '.join(found)}"
    return False, f"this CPU has no bf16 instructions ({' or '.join(CPU_BF16_FLAGS)}): bf16 would be emulated, several times slower than fp32"


def used_precision(requested: str, device_kind: str) -> tuple[str, str]:
    """The precision a run computes in for ``requested`` (fp32, bf16, fp16 or auto) on ``device_kind``, and why."""
    if requested != "auto":
        return requested, "as the entry states"
    ok, why = native_bf16(device_kind)
    return ("bf16" if ok else "fp32"), f"auto: {why}"

"""What "fp32" means on a GPU: IEEE single precision, not TF32.

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

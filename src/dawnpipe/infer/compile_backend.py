"""Backend ``compile``: the inference net compiled by ``torch.compile``
(TorchInductor: generated C++/OpenMP kernels on CPUs, Triton on GPUs) for the
fixed shape of one item.

Compilation happens before timing, on the first call with the item's shape,
and its time is recorded (``prepare_seconds``); warm-up and timed items run
compiled code. Needs a C++ compiler on CPUs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dawnpipe.errors import DawnpipeError
from dawnpipe.infer.predictor import Predictor


def compile_module(module, example):
    import torch

    # dynamic=False: one graph for the one shape that is timed; fullgraph: a
    # graph break would put Python back between the ops.
    compiled = torch.compile(module, dynamic=False, fullgraph=True)
    try:
        with torch.inference_mode():
            compiled(example)
    except Exception as e:  # inductor reports a missing compiler etc. with its own exception types
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DawnpipeError(f"backend compile: torch.compile failed on this machine: {type(e).__name__}: {first}") from None
    return compiled


def prepare(checkpoint: Path, *, device: str, threads: int, check_items: np.ndarray, topk: int = 1) -> Predictor:
    from dawnpipe.infer.torch_model import prepare_torch

    return prepare_torch(
        "compile", checkpoint, device=device, threads=threads, check_items=check_items, topk=topk, transform=compile_module, mode="default", dynamic=False
    )

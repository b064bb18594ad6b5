"""Backend ``eager``: the PyTorch model run op by op, as written.

The fair eager baseline, not a naive one: ``torch.inference_mode``, NHWC
(channels_last) layout, batch norm folded into the convolutions, fp32 (on this
CPU a bf16 autocast at batch 1 re-casts every weight on every call and is
slower; the accuracy gate decides whether a precision is good enough).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dawnpipe.infer.predictor import Predictor


def prepare(checkpoint: Path, *, device: str, threads: int, check_items: np.ndarray, topk: int = 1) -> Predictor:
    from dawnpipe.infer.torch_model import prepare_torch

    return prepare_torch("eager", checkpoint, device=device, threads=threads, check_items=check_items, topk=topk)

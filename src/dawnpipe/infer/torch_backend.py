"""Backend ``eager``: the PyTorch model run op by op, as written.

The fair eager baseline, not a naive one: ``torch.inference_mode``, NHWC
(channels_last) layout, batch norm folded into the convolutions, fp32 (on this
CPU a bf16 autocast at batch 1 re-casts every weight on every call and is
slower; the accuracy gate decides whether a precision is good enough).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dawnpipe.infer.predictor import Predictor


def prepare(checkpoint: Path, *, device: str, threads: int, check_items: np.ndarray, topk: int = 1) -> Predictor:
    from dawnpipe.infer.torch_model import prepare_torch

    return prepare_torch("eager", checkpoint, device=device, threads=threads, check_items=check_items, topk=topk)


def eager_predictor(ckpt: dict[str, Any], device, topk: int = 1) -> Callable[[np.ndarray], int | list[int]]:
    """The eager answer function of a loaded checkpoint, without the check:
    uint8 item (H x W or H x W x C) -> class id, or the ``topk`` best ids."""
    from dawnpipe.infer.torch_model import as_predict_fn, inference_net

    module, _ = inference_net(ckpt)
    return as_predict_fn(module.to(device), device, topk)

"""Eager PyTorch inference of a training checkpoint, one item at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from dawnpipe.models.torch_zoo import build_model


def load_checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=False)


def eager_predictor(ckpt: dict[str, Any], device: torch.device, topk: int = 1) -> Callable[[np.ndarray], int | list[int]]:
    """A function uint8 item (H x W or H x W x C) -> predicted class id, or
    the ``topk`` most likely ids, best first, when ``topk`` > 1."""
    model = build_model(ckpt["model"], in_channels=ckpt["in_channels"], num_classes=ckpt["num_classes"], **ckpt["model_args"])
    model.load_state_dict(ckpt["state_dict"])
    fmt = torch.channels_last if ckpt["channels_last"] else torch.contiguous_format
    model = model.to(device, memory_format=fmt).eval()
    mean = torch.tensor(ckpt["mean"], device=device).reshape(1, -1, 1, 1)
    std = torch.tensor(ckpt["std"], device=device).reshape(1, -1, 1, 1)
    amp = ckpt["precision"] != "fp32"
    dtype = torch.bfloat16 if ckpt["precision"] == "bf16" else torch.float16
    tta = ckpt["tta_flip"]

    @torch.inference_mode()
    def predict(item: np.ndarray) -> int:
        x = torch.from_numpy(item).to(device)
        x = x[None, None] if x.ndim == 2 else x.permute(2, 0, 1)[None]
        x = ((x.float() / 255.0 - mean) / std).contiguous(memory_format=fmt)
        if tta:
            x = torch.cat([x, x.flip(3)])
        with torch.autocast(device.type, dtype=dtype, enabled=amp):
            logits = model(x)
        scores = logits.float().sum(0)
        if topk > 1:  # .tolist() and int() wait for the device: the time is complete
            return scores.topk(min(topk, scores.numel())).indices.tolist()
        return int(scores.argmax())

    return predict

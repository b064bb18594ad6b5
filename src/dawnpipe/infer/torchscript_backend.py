"""Backend ``torchscript``: the inference net traced to TorchScript, saved,
loaded back, frozen (weights become constants) and, on CPUs, optimised for
inference (``torch.jit.optimize_for_inference``: oneDNN convolutions with
fused ReLU and pre-packed weights).

The saved file is loaded back before anything is checked or timed, so the
check covers the export/import round trip. TorchScript is deprecated in
PyTorch 2.x (torch.compile is its successor) but still ships and still runs
whole graphs without Python between ops, which is what one-item latency
needs; its deprecation warnings are silenced here, on purpose.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np

from dawnpipe.infer.predictor import Predictor


def export_and_load(module, example):
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with torch.no_grad():
            traced = torch.jit.trace(module, example)
        with tempfile.TemporaryDirectory(prefix="dawnpipe-torchscript-") as tmp:
            path = Path(tmp) / "model.pt"
            torch.jit.save(traced, str(path))
            loaded = torch.jit.load(str(path), map_location=example.device).eval()
        frozen = torch.jit.freeze(loaded)
        return torch.jit.optimize_for_inference(frozen) if example.device.type == "cpu" else frozen


def prepare(checkpoint: Path, *, device: str, threads: int, check_items: np.ndarray, topk: int = 1) -> Predictor:
    from dawnpipe.infer.torch_model import prepare_torch

    return prepare_torch("torchscript", checkpoint, device=device, threads=threads, check_items=check_items, topk=topk, transform=export_and_load)

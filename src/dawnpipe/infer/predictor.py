"""What every inference backend hands to the timing loop, whatever its framework.

A backend module (registered in ``dawnpipe.infer.backends``) turns a training
checkpoint into a :class:`Predictor`: ``predict`` answers one item (for image
tasks the uint8 array as stored, answered with a class id) and is the only
thing timed. Preprocessing (scaling, normalisation, test-time augmentation,
tokenisation) happens inside it, so every backend is timed on the same work:
from the stored item to the answer.

Before a backend is timed, its exported/compiled model is checked against the
checkpoint as trained (``check_outputs``): the same items, logits equal within
a tolerance. A backend that changes the answers is an error, not a result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dawnpipe.errors import DawnpipeError

# Logits of fp32 backends differ from the checkpoint's eager fp32 forward pass
# only by the order of floating-point operations (folded batch norm, other
# convolution kernels): ~1e-5 on logits of magnitude ~1..10. 1e-3 leaves room
# for that and still catches a wrong weight, layout or preprocessing step.
ATOL = 1e-3
RTOL = 1e-3


@dataclass
class Predictor:
    backend: str
    predict: Callable[[Any], Any]  # one item -> its answer (what is timed); dawnpipe.infer.items
    device: str  # "cpu", "cuda:0", ...
    threads: int  # CPU threads the framework uses while answering
    precision: str  # arithmetic of the forward pass: fp32, bf16, fp16, int8
    framework_version: str  # e.g. "torch 2.13.0+cpu", "onnxruntime 1.31.1 (export: torch 2.13.0+cpu)"
    # Waits until the device has finished queued work; the timing loop calls it
    # before starting and before stopping the clock of every item (CUDA). None
    # where answers are synchronous (CPU; results copied to the host).
    sync: Callable[[], None] | None = None
    export_check: dict[str, Any] | None = None  # result of check_outputs
    # The checkpoint as the trainer saved it: epoch, its metric then, whether
    # it is the first epoch at the threshold (else the last epoch of a DNC run).
    checkpoint: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)  # backend facts for the record (folded batch norms, ...)
    # A batch of items (a stacked array of images, a list of questions) -> their
    # answers, in order: what throughput is measured with (dawnpipe.infer.throughput).
    predict_batch: Callable[[Any], list[Any]] | None = None


def compare_outputs(reference: np.ndarray, candidate: np.ndarray, *, backend: str) -> dict[str, Any]:
    """How far a backend's logits are from the reference's on the same items."""
    reference = np.asarray(reference, dtype=np.float64)
    candidate = np.asarray(candidate, dtype=np.float64)
    if reference.shape != candidate.shape:
        raise DawnpipeError(f"backend {backend}: exported model gives logits of shape {candidate.shape}, the checkpoint {reference.shape}")
    if not np.isfinite(candidate).all():
        raise DawnpipeError(f"backend {backend}: exported model gives non-finite logits on {int((~np.isfinite(candidate)).any(axis=-1).sum())} items")
    return {
        "items": int(reference.shape[0]),
        "max_abs_diff": float(np.abs(candidate - reference).max()),
        "differing_predictions": int((candidate.argmax(-1) != reference.argmax(-1)).sum()),
    }


def check_outputs(reference: np.ndarray, candidate: np.ndarray, *, backend: str, atol: float = ATOL, rtol: float = RTOL) -> dict[str, Any]:
    """Compare a backend's logits with the checkpoint's on the same items.

    Raises DawnpipeError when they differ beyond ``atol + rtol * |reference|``
    anywhere; otherwise returns what was checked, for the result record.
    Predictions may still differ on an item whose two best logits are closer
    than the tolerance; they are counted, not forbidden.
    """
    found = compare_outputs(reference, candidate, backend=backend)
    reference = np.asarray(reference, dtype=np.float64)
    candidate = np.asarray(candidate, dtype=np.float64)
    excess = np.abs(candidate - reference) - (atol + rtol * np.abs(reference))
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    if excess[worst] > 0:
        raise DawnpipeError(
            f"backend {backend}: exported model disagrees with the checkpoint: item {worst[0]}, logit {worst[-1]}: "
            f"{candidate[worst]:.6g} instead of {reference[worst]:.6g} (tolerance {atol:g} + {rtol:g} x |value|; "
            f"max |difference| {found['max_abs_diff']:.3g} over {found['items']} items)"
        )
    return {**found, "atol": atol, "rtol": rtol}

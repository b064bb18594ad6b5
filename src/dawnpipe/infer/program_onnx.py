"""Backend ``onnxruntime`` of a program entry's run: the program's own ONNX
model (the one dawnpipe scored at the threshold epoch, from the run's
model.pt archive) run by ONNX Runtime with all graph optimisations.

Nothing is exported, so nothing is compared with a checkpoint: the timed
model is the very file the train stage verified (``export_check`` is None;
``backend_notes`` says which epoch and what dawnpipe measured). Items go in
as the contract says: the stored array as float32, one item a batch of one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dawnpipe.errors import DawnpipeError
from dawnpipe.infer.predictor import Predictor
from dawnpipe.programs import model_files


def archive_facts(model: model_files.ModelFile, facts: dict[str, Any]) -> dict[str, Any]:
    """What the predictor records of the program's model (checkpoint_facts' fields)."""
    return {"epoch": model.epoch, "metric_value": facts.get("measured"), "claimed": facts.get("claimed"), "reached_threshold": facts.get("reached")}


def load(checkpoint: Path, want: str) -> tuple[model_files.ModelFile, dict[str, Any]]:
    model, facts = model_files.load_archive(checkpoint)
    if model.format != want:
        raise DawnpipeError(f"{checkpoint}: the program handed over a {model.format} model, not {want}")
    return model, facts


def predictors(logits, topk: int):
    """(one item -> its answer, a stacked batch -> their answers) of a logits function taking float32 batches."""

    def predict(item: np.ndarray):
        scores = logits(np.asarray(item, dtype=np.float32)[None])[0]
        return int(scores.argmax()) if topk == 1 else np.argsort(-scores, kind="stable")[:topk].tolist()

    def predict_batch(items: np.ndarray) -> list:
        scores = logits(np.asarray(items, dtype=np.float32))
        return scores.argmax(1).tolist() if topk == 1 else np.argsort(-scores, axis=1, kind="stable")[:, :topk].tolist()

    return predict, predict_batch


def prepare(checkpoint: Path, *, device: str, threads: int, check_items: np.ndarray, topk: int = 1) -> Predictor:
    import time

    started = time.perf_counter()
    model, facts = load(checkpoint, model_files.ONNX)
    loaded = model_files.load_onnx(model, threads=threads, device=device, item_shape=tuple(check_items.shape[1:]))
    predict, predict_batch = predictors(loaded.logits, topk)
    return Predictor(
        backend="onnxruntime",
        predict=predict,
        predict_batch=predict_batch,
        device=loaded.device,
        threads=threads,
        precision="fp32",
        framework_version=f"{loaded.runtime} (the program's own ONNX model)",
        export_check=None,
        checkpoint=archive_facts(model, facts),
        notes={
            "prepare_seconds": time.perf_counter() - started,
            "onnx_bytes": model.bytes,
            "input": loaded.input_name,
            "provider": loaded.session.get_providers()[0],
        },
    )

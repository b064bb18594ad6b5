"""Backend ``tf-function`` of a program entry's run that handed over a
TensorFlow SavedModel: its ``serving_default`` concrete function (a traced
tf.function graph) answering one item at a time. The SavedModel's graph is
checked before it is loaded (dawnpipe.programs.model_files.check_savedmodel_ops);
its files are written to a private temporary directory for TensorFlow.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from dawnpipe.infer.predictor import Predictor
from dawnpipe.infer.program_onnx import archive_facts, load, predictors
from dawnpipe.programs import model_files


def prepare(checkpoint: Path, *, device: str, threads: int, check_items: np.ndarray, topk: int = 1) -> Predictor:
    started = time.perf_counter()
    model, facts = load(checkpoint, model_files.SAVEDMODEL)
    with model_files.savedmodel_dir(model) as root:
        loaded = model_files.load_savedmodel(model, root, threads=threads, item_shape=tuple(check_items.shape[1:]))
    predict, predict_batch = predictors(loaded.logits, topk)
    return Predictor(
        backend="tf-function",
        predict=predict,
        predict_batch=predict_batch,
        device=loaded.device,
        threads=threads,
        precision="fp32",
        framework_version=f"{loaded.runtime} (the program's own SavedModel)",
        export_check=None,
        checkpoint=archive_facts(model, facts),
        notes={"prepare_seconds": time.perf_counter() - started, "savedmodel_bytes": model.bytes, "input": loaded.input_name},
    )

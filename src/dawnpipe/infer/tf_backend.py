"""Backend ``tf-function``: a Keras training checkpoint answered one item at a
time by one ``tf.function`` graph (TensorFlow's normal way to serve a model;
``model.predict`` is built for batches and costs milliseconds per call).

The graph does the whole answer: uint8 item -> scaling, normalisation,
(flip test-time augmentation) -> model -> argmax; ``int()`` of the result
copies it to the host, so the timed call is complete when it returns. Before
anything is timed, the graph's logits are checked against the checkpoint's
model run by Keras directly (eager, batched) on the first items.

``prepare`` has the signature of the inference backends
(``dawnpipe.infer.backends``, where this backend is registered);
:class:`TFPredictor` has the fields of ``dawnpipe.infer.predictor.Predictor``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dawnpipe import tf_runtime
from dawnpipe.errors import DawnpipeError
from dawnpipe.infer.predictor import check_outputs

tf = tf_runtime.tf

BACKEND = "tf-function"
CHECK_ITEMS = 256  # items whose logits are compared before timing


@dataclass
class TFPredictor:
    backend: str
    predict: Callable[[np.ndarray], int]  # one stored item -> class id (what is timed)
    device: str
    threads: int
    precision: str
    framework_version: str
    sync: Callable[[], None] | None = None  # None: the answer is already on the host
    export_check: dict[str, Any] | None = None
    checkpoint: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    predict_batch: Callable[[np.ndarray], list] | None = None  # stacked items -> their answers (throughput)


def prepare(checkpoint: Path, *, device: str = "auto", threads: int = 1, check_items: np.ndarray | None = None, topk: int = 1) -> TFPredictor:
    """The predictor of ``checkpoint``: item -> class id, or the ``topk`` most likely ids (best first) when topk > 1."""
    import keras

    # One thread for each op and one op at a time: a batch of one has no
    # parallel work worth a second pool.
    tf_runtime.configure_threads(threads, 1)
    tf_device = tf_runtime.pick_device(device)
    started = time.perf_counter()
    with tf.device(tf_device):
        model, meta = tf_runtime.load_model(checkpoint)
        answer, item_logits = make_graphs(model, meta, topk)
        batch_answer = make_batch_graph(model, meta, topk)
    if check_items is None or len(check_items) == 0:
        raise DawnpipeError(f"{checkpoint}: no items to check the {BACKEND} graph against the checkpoint")
    items = np.asarray(check_items[:CHECK_ITEMS])
    with tf.device(tf_device):
        check = check_outputs(reference_logits(model, meta, items), np.stack([item_logits(x).numpy() for x in items]), backend=BACKEND)
    intra = tf.config.threading.get_intra_op_parallelism_threads()
    return TFPredictor(
        backend=BACKEND,
        predict=(lambda item: int(answer(item))) if topk == 1 else (lambda item: answer(item).numpy().tolist()),
        predict_batch=lambda items: batch_answer(items).numpy().tolist(),
        device=tf_runtime.device_label(tf_device),
        # 0: never set, TensorFlow's own choice (every core), as run.json records it (runinfo.tf_environment)
        threads=intra or os.cpu_count(),
        precision=meta["precision"],
        framework_version=f"tensorflow {tf.__version__} (keras {keras.__version__})",
        export_check=check,
        checkpoint={k: meta.get(k) for k in ("epoch", "metric", "metric_value", "reached_threshold")},
        notes={
            "prepare_seconds": time.perf_counter() - started,
            "layout": "NHWC",
            "mixed_precision_policy": keras.mixed_precision.global_policy().name,
            "threads_set": bool(intra),
        },
    )


def _normalise(meta: dict[str, Any]):
    mean = tf.constant(meta["mean"], tf.float32)
    std = tf.constant(meta["std"], tf.float32)
    return lambda images: (tf.cast(images, tf.float32) / 255.0 - mean) / std


def make_graphs(model, meta: dict[str, Any], topk: int = 1):
    """(answer(item) -> class id or top-k ids, item_logits(item) -> logits): the same graph, two outputs."""
    h, w, c = meta["image_shape"]
    normalise = _normalise(meta)
    tta = meta["tta_flip"]

    def logits_of(item):
        x = tf.reshape(normalise(item), [1, h, w, c])
        if tta:
            x = tf.concat([x, tf.reverse(x, axis=[2])], axis=0)
        return tf.reduce_sum(tf.cast(model(x, training=False), tf.float32), axis=0)

    spec = [tf.TensorSpec(None, tf.uint8)]  # the stored item as it is: H x W or H x W x C
    if topk == 1:
        answer = tf.function(lambda item: tf.argmax(logits_of(item), output_type=tf.int32), input_signature=spec)
    else:
        k = min(topk, meta["num_classes"])
        answer = tf.function(lambda item: tf.math.top_k(logits_of(item), k=k).indices, input_signature=spec)
    return answer, tf.function(logits_of, input_signature=spec)


def make_batch_graph(model, meta: dict[str, Any], topk: int = 1):
    """answer(items) -> class ids (or top-k ids each) of a stacked batch, one graph, the same work per item as ``make_graphs``'s."""
    h, w, c = meta["image_shape"]
    normalise = _normalise(meta)
    tta = meta["tta_flip"]

    def logits_of(items):
        x = tf.reshape(normalise(items), [-1, h, w, c])
        logits = tf.cast(model(x, training=False), tf.float32)
        if tta:
            logits += tf.cast(model(tf.reverse(x, axis=[2]), training=False), tf.float32)
        return logits

    spec = [tf.TensorSpec(None, tf.uint8)]
    if topk == 1:
        return tf.function(lambda items: tf.argmax(logits_of(items), axis=1, output_type=tf.int32), input_signature=spec)
    k = min(topk, meta["num_classes"])
    return tf.function(lambda items: tf.math.top_k(logits_of(items), k=k).indices, input_signature=spec)


def reference_logits(model, meta: dict[str, Any], items: np.ndarray) -> np.ndarray:
    """The checkpoint's model run by Keras itself, eagerly, on a batch."""
    x = _normalise(meta)(items.reshape(len(items), *meta["image_shape"]))
    logits = tf.cast(model(x, training=False), tf.float32)
    if meta["tta_flip"]:
        logits += tf.cast(model(tf.reverse(x, axis=[2]), training=False), tf.float32)
    return logits.numpy()

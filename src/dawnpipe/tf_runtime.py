"""TensorFlow for dawnpipe's TF jobs: imported with quiet INFO logs, plus the
runtime set-up both of them need (threads, device, seeds, device sync) and the
checkpoint format of Keras runs.

Only ``train/tf_trainer.py`` and ``infer/tf_backend.py`` import this module,
so PyTorch jobs never load TensorFlow.

Logs: ``TF_CPP_MIN_LOG_LEVEL=1`` (unless already set) hides TensorFlow's C++
INFO lines; warnings and errors still reach the job log. Two lines printed
while TensorFlow loads (abseil's "before absl::InitializeLog()" notice and
oneDNN's "custom operations are on") ignore that variable in TF 2.19+
(tensorflow/tensorflow#100442) and stay.

Checkpoints (``model.pt``, the name the workflow gives every run's model) of
Keras runs are NumPy ``.npz`` archives: a JSON ``meta`` string (model, shapes,
normalisation, threshold facts, variable names) and one array per model
variable, in ``model.weights`` order. Loading needs no pickle and runs no code
from the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import atomic_path, check_shape
from dawnpipe.tensorflow_import import tensorflow

tf = tensorflow()

CHECKPOINT_FORMAT = "dawnpipe-keras-npz-1"
# an entry's precision -> Keras' global dtype policy (variables stay float32)
POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def configure_threads(intra: int | None, inter: int | None) -> None:
    """Thread pools of the TF runtime. Only possible before the runtime starts;
    a second call in the same process (tests) keeps the first settings, says so,
    and run.json records the threads actually in use."""
    try:
        if intra:
            tf.config.threading.set_intra_op_parallelism_threads(intra)
        if inter:
            tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError:
        current = (tf.config.threading.get_intra_op_parallelism_threads(), tf.config.threading.get_inter_op_parallelism_threads())
        if (intra or current[0], inter or current[1]) != current:
            print(
                f"tensorflow: runtime already started with {current[0]} intra-op / {current[1]} inter-op threads; "
                f"cannot change to {intra} / {inter} in this process"
            )


def pick_device(requested: str) -> str:
    """A TF device name for the entry's ``device`` (auto/cpu/cuda); call before any op runs."""
    gpus = tf.config.list_physical_devices("GPU")
    if requested == "cuda" and not gpus:
        raise DawnpipeError("entry asks for device: cuda but TensorFlow sees no GPU (envs/train-tf.yaml installs tensorflow-cpu)")
    if requested == "cpu" and gpus:
        tf.config.set_visible_devices([], "GPU")
        return "/CPU:0"
    if not gpus:
        return "/CPU:0"
    # fp32 is fp32 on a GPU: TensorFlow, like cuDNN under PyTorch, would run float32 products in TF32 (dawnpipe.models.precision)
    tf.config.experimental.enable_tensor_float_32_execution(False)
    return "/GPU:0"


def device_label(device: str) -> str:
    """run.json's device field in the PyTorch trainer's words: cpu or cuda:<i>."""
    kind, _, index = device.strip("/").partition(":")
    return f"cuda:{index}" if kind.upper() == "GPU" else "cpu"


def sync(device: str) -> None:
    """Wait for queued GPU work (TF's torch.cuda.synchronize); CPU ops already ran."""
    if device_label(device).startswith("cuda"):
        tf.test.experimental.sync_devices()


def seed_everything(seed: int) -> tf.random.Generator:
    """Python, NumPy, TF's global seed (weight initialisation); the returned
    generator drives shuffling and augmentation and is saved for resuming."""
    import keras

    keras.utils.set_random_seed(seed)
    return tf.random.Generator.from_seed(seed)


def save_npz(path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, meta=np.array(json.dumps(meta, allow_nan=True)), **arrays)


def load_npz(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (ValueError, OSError) as e:  # not a zip / truncated
        raise DawnpipeError(f"{path}: not a Keras checkpoint of dawnpipe ({e})") from None
    if "meta" not in arrays:
        raise DawnpipeError(f"{path}: no 'meta' record (not a Keras checkpoint of dawnpipe)")
    try:
        meta = check_shape(json.loads(str(arrays.pop("meta"))), path)
    except (ValueError, RecursionError) as e:
        raise DawnpipeError(f"{path}: its 'meta' record is not valid JSON ({str(e)[:120]})") from None
    return meta, arrays


def variable_arrays(prefix: str, variables) -> dict[str, np.ndarray]:
    return {f"{prefix}/{i}": np.asarray(v.numpy()) for i, v in enumerate(variables)}


def assign_variables(variables, arrays: dict[str, np.ndarray], prefix: str, source: Path) -> None:
    """Assign ``prefix/<i>`` arrays to ``variables`` after checking count and shapes."""
    stored = sorted((k for k in arrays if k.startswith(prefix + "/")), key=lambda k: int(k.rsplit("/", 1)[1]))
    if len(stored) != len(variables):
        raise DawnpipeError(f"{source}: {len(stored)} {prefix} arrays, but the model has {len(variables)} variables")
    for key, var in zip(stored, variables):
        if tuple(arrays[key].shape) != tuple(var.shape):
            raise DawnpipeError(f"{source}: {key} has shape {arrays[key].shape}, variable {var.path} needs {tuple(var.shape)}")
        var.assign(arrays[key])


def save_checkpoint(path: Path, meta: dict[str, Any], model) -> None:
    meta = {**meta, "format": CHECKPOINT_FORMAT, "variables": [v.path for v in model.weights]}
    save_npz(path, meta, variable_arrays("weights", model.weights))


def load_model(path: Path) -> tuple[Any, dict[str, Any]]:
    """(Keras model with the checkpoint's weights, in the precision it was trained in; its meta record)."""
    import keras

    from dawnpipe.models.tf_zoo import build_model

    meta, arrays = load_npz(path)
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise DawnpipeError(f"{path}: format {meta.get('format')!r}, expected {CHECKPOINT_FORMAT!r}")
    keras.mixed_precision.set_global_policy(POLICIES[meta["precision"]])
    model = build_model(meta["model"], input_shape=tuple(meta["image_shape"]), num_classes=meta["num_classes"], **meta["model_args"])
    assign_variables(model.weights, arrays, "weights", path)
    return model, meta

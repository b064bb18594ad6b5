"""Backend ``onnxruntime-int8`` of a program entry's run: the program's own
ONNX model statically quantised to int8 by ONNX Runtime's tool (as the
``onnxruntime-int8`` backend of zoo entries: QDQ, weights per channel,
activations calibrated min/max on training items, never on the scored set),
then run by ONNX Runtime. Its logits are compared with the fp32 model's on the
first items (recorded, not required equal); the accuracy gate decides.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from dawnpipe.errors import DawnpipeError
from dawnpipe.infer.onnx_int8_backend import quantize
from dawnpipe.infer.predictor import Predictor, compare_outputs
from dawnpipe.infer.program_onnx import archive_facts, load, predictors
from dawnpipe.programs import model_files

CHECK_ITEMS = 256


def prepare(checkpoint: Path, *, device: str, threads: int, check_items: np.ndarray, topk: int = 1, calibration_items: np.ndarray | None = None) -> Predictor:
    if calibration_items is None or len(calibration_items) == 0:
        raise DawnpipeError("backend onnxruntime-int8: needs calibration items from the training set (none given)")
    started = time.perf_counter()
    model, facts = load(checkpoint, model_files.ONNX)
    shape = tuple(check_items.shape[1:])
    exact = model_files.load_onnx(model, threads=threads, item_shape=shape)
    with tempfile.TemporaryDirectory(prefix="dawnpipe-program-int8-") as tmp:
        fp32, int8 = Path(tmp) / "model.onnx", Path(tmp) / "model.int8.onnx"
        fp32.write_bytes(model.onnx)
        try:
            quantize(fp32, int8, np.asarray(calibration_items, dtype=np.float32), Path(tmp), input_name=exact.input_name)
        except DawnpipeError:
            raise
        except Exception as e:  # the quantisation tool on a model it cannot handle: this backend's failure, named
            raise DawnpipeError(
                f"backend onnxruntime-int8: ONNX Runtime's quantisation refused the program's model ({str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__})"
            ) from None
        quantized = model_files.ModelFile(model.epoch, model_files.ONNX, onnx=int8.read_bytes(), source=f"{checkpoint} (int8)")
    loaded = model_files.load_onnx(quantized, threads=threads, device=device, item_shape=shape)
    items = np.asarray(check_items[:CHECK_ITEMS], dtype=np.float32)
    # no tolerance: quantisation is allowed to move logits; the gate judges accuracy
    check = {**compare_outputs(exact.logits(items), loaded.logits(items), backend="onnxruntime-int8"), "reference": "the program's fp32 ONNX model"}
    predict, predict_batch = predictors(loaded.logits, topk)
    return Predictor(
        backend="onnxruntime-int8",
        predict=predict,
        predict_batch=predict_batch,
        device=loaded.device,
        threads=threads,
        precision="int8",
        framework_version=f"{loaded.runtime} (the program's own ONNX model, quantised by onnxruntime.quantization)",
        export_check=check,
        checkpoint=archive_facts(model, facts),
        notes={
            "prepare_seconds": time.perf_counter() - started,
            "onnx_bytes": quantized.bytes,
            "input": loaded.input_name,
            "provider": loaded.session.get_providers()[0],
            "calibration_items": int(len(calibration_items)),
            "quantization": "static QDQ, weights int8 per channel, activations uint8 (min/max)",
        },
    )

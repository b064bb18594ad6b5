"""Backend ``onnxruntime-int8``: the ONNX export of the ``onnxruntime``
backend, statically quantised to 8-bit integers by ONNX Runtime's
quantisation tool, run by ONNX Runtime.

- Weights int8, per output channel; activations uint8 with ranges calibrated
  (min/max) on ``calibration_items``, a prefix of the *training* set
  (``dawnpipe.infer.items.CALIBRATION_ITEMS``), never on the scored inference set.
- QDQ format: ONNX Runtime fuses each QuantizeLinear/DequantizeLinear pair
  around a convolution into an integer convolution (VNNI on CPUs that have it;
  on x86 CPUs without VNNI, u8s8 arithmetic can saturate: check the accuracy).
- The fp32 export is checked against the checkpoint exactly like the
  ``onnxruntime`` backend. The quantised model is a different model: its
  answers are compared with the fp32 export's on the same items (recorded,
  not required to be equal), and the accuracy gate on the whole inference set
  decides whether the result counts, as for every backend.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from dawnpipe.errors import DawnpipeError
from dawnpipe.infer.predictor import Predictor


def quantize(fp32: Path, out: Path, calibration_items: np.ndarray, work: Path, input_name: str = "item") -> None:
    """Quantise the ONNX model ``fp32`` into ``out``, calibrating on ``calibration_items`` (fed to ``input_name`` one at a time, as given)."""
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Items(CalibrationDataReader):
        def __init__(self):
            self._items = iter(range(len(calibration_items)))

        def get_next(self):
            i = next(self._items, None)
            return None if i is None else {input_name: np.ascontiguousarray(calibration_items[i : i + 1])}

    pre = work / "model.pre.onnx"
    quant_pre_process(str(fp32), str(pre))  # shape inference + graph cleanup, as the tool recommends
    quantize_static(
        str(pre),
        str(out),
        Items(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
    )


def prepare(checkpoint: Path, *, device: str, threads: int, check_items: np.ndarray, topk: int = 1, calibration_items: np.ndarray | None = None) -> Predictor:
    from dawnpipe.infer import onnx_backend as ob
    from dawnpipe.infer import torch_model as tm
    from dawnpipe.infer.predictor import compare_outputs

    if calibration_items is None or len(calibration_items) == 0:
        raise DawnpipeError("backend onnxruntime-int8: needs calibration items from the training set (none given)")
    ckpt = tm.load_checkpoint(checkpoint)
    calibration = calibration_items
    notes: dict[str, Any] = {}
    with tm.stopwatch(notes, "prepare_seconds"):
        module, facts = tm.inference_net(ckpt, channels_last=False)
        with tempfile.TemporaryDirectory(prefix="dawnpipe-onnx-int8-") as tmp:
            fp32, int8 = Path(tmp) / "model.onnx", Path(tmp) / "model.int8.onnx"
            ob.export_onnx(module, check_items[0], fp32)
            exact = ob.open_session(fp32, threads=threads, device="cpu")
            quantize(fp32, int8, calibration, Path(tmp))
            session = ob.open_session(int8, threads=threads, device=device)
            notes["onnx_bytes"] = int8.stat().st_size
    exact_logits, _ = ob.session_fns(exact)
    logits, predict = ob.session_fns(session, topk)
    check = tm.check_against_checkpoint(ckpt, exact_logits, check_items, "onnxruntime-int8 (its fp32 export)")
    items = np.ascontiguousarray(check_items[: check["items"]])
    reference = np.stack([exact_logits(x) for x in items])
    quantized = np.stack([logits(x) for x in items])
    # no tolerance: quantisation is allowed to move logits; the gate judges accuracy
    check["quantized_vs_fp32"] = compare_outputs(reference, quantized, backend="onnxruntime-int8")
    return Predictor(
        backend="onnxruntime-int8",
        predict=predict,
        predict_batch=ob.batch_fn(session, topk),
        device=ob.session_device(session),
        threads=threads,
        precision="int8",
        framework_version=ob.framework_version(", quantised by onnxruntime.quantization"),
        export_check=check,
        checkpoint=tm.checkpoint_facts(ckpt),
        notes={
            **facts,
            **notes,
            "provider": session.get_providers()[0],
            "calibration_items": int(len(calibration)),
            "quantization": "static QDQ, weights int8 per channel, activations uint8 (min/max)",
        },
    )

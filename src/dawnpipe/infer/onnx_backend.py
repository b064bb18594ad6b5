"""Backend ``onnxruntime``: the inference net exported to ONNX, written to a
file, and run by ONNX Runtime with all graph optimisations (constant folding,
Conv+ReLU fusion, NCHWc layout transforms on x86).

The exported file is loaded back into an ONNX Runtime session before anything
is checked or timed, so the check against the checkpoint covers the
export/import round trip. The export uses PyTorch's TorchScript-based exporter
(``dynamo=False``): the torch.export-based one needs the onnxscript package,
which dawnpipe does not depend on. Batch norm is folded before export (ONNX
Runtime would fold it too).
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dawnpipe.infer.predictor import Predictor

OPSET = 17


def export_onnx(module, example_item: np.ndarray, path: Path) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript-based exporter
        torch.onnx.export(
            module,
            (torch.from_numpy(np.ascontiguousarray(example_item[None])),),
            str(path),
            dynamo=False,
            opset_version=OPSET,
            input_names=["item"],
            output_names=["logits"],
            dynamic_axes={"item": {0: "batch"}, "logits": {0: "batch"}},  # one item timed for latency, batches for throughput
            do_constant_folding=True,
        )


def open_session(path: Path, *, threads: int, device: str):
    """An ONNX Runtime session of ``path``: sequential, ``threads`` intra-op threads (the same session a program's model gets)."""
    from dawnpipe.programs.model_files import onnx_session

    return onnx_session(str(path), threads=threads, device=device, source="backend onnxruntime")


def session_fns(session, topk: int = 1) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], int | list[int]]]:
    """(logits of one item, its class id or ``topk`` best ids, best first);
    outputs come back as numpy arrays on the host, so an answer is complete
    when run() returns. ``batch_fn`` answers a batch."""
    run = session.run

    def logits(item: np.ndarray) -> np.ndarray:
        return run(None, {"item": item[None]})[0][0]

    def predict(item: np.ndarray) -> int:
        return int(run(None, {"item": item[None]})[0].argmax())

    def predict_topk(item: np.ndarray) -> list[int]:
        return np.argsort(-run(None, {"item": item[None]})[0][0], kind="stable")[:topk].tolist()

    return logits, (predict if topk == 1 else predict_topk)


def batch_fn(session, topk: int = 1) -> Callable[[np.ndarray], list]:
    """items (a stacked batch, as stored) -> their class ids, or ``topk`` best ids each."""
    run = session.run

    def predict_batch(items: np.ndarray) -> list:
        scores = run(None, {"item": items})[0]
        if topk == 1:
            return scores.argmax(1).tolist()
        return np.argsort(-scores, axis=1, kind="stable")[:, :topk].tolist()

    return predict_batch


def session_device(session) -> str:
    return "cuda" if session.get_providers()[0].startswith("CUDA") else "cpu"


def framework_version(extra: str = "") -> str:
    import onnxruntime as ort
    import torch

    return f"onnxruntime {ort.__version__} (opset {OPSET}, exported by torch {torch.__version__}{extra})"


def prepare(checkpoint: Path, *, device: str, threads: int, check_items: np.ndarray, topk: int = 1) -> Predictor:
    from dawnpipe.infer import torch_model as tm

    ckpt = tm.load_checkpoint(checkpoint)
    notes: dict[str, Any] = {}
    with tm.stopwatch(notes, "prepare_seconds"):
        module, facts = tm.inference_net(ckpt, channels_last=False)  # ONNX Runtime picks its own layout
        with tempfile.TemporaryDirectory(prefix="dawnpipe-onnx-") as tmp:
            path = Path(tmp) / "model.onnx"
            export_onnx(module, check_items[0], path)
            session = open_session(path, threads=threads, device=device)
            notes["onnx_bytes"] = path.stat().st_size
    logits, predict = session_fns(session, topk)
    check = tm.check_against_checkpoint(ckpt, logits, check_items, "onnxruntime")
    return Predictor(
        backend="onnxruntime",
        predict=predict,
        predict_batch=batch_fn(session, topk),
        device=session_device(session),
        threads=threads,
        precision="fp32",
        framework_version=framework_version(),
        export_check=check,
        checkpoint=tm.checkpoint_facts(ckpt),
        notes={**facts, **notes, "provider": session.get_providers()[0]},
    )

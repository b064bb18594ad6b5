"""The inference backends dawnpipe can time (the ``backend`` of each inference
result and the ``{backend}`` of results/runs/<entry>/seed<k>/latency/).

A backend is a module with

    prepare(checkpoint: Path, *, device: str, threads: int, check_items, topk: int = 1) -> Predictor

(plus ``calibration_items=`` for backends registered with ``calibrates``)
that loads a training checkpoint of its framework, exports or compiles it,
checks the result against the checkpoint (``Predictor.export_check``) and
returns the callable that the framework-agnostic timing loop times
(``dawnpipe.infer.predictor``). ``device`` is "auto" (CUDA when present),
"cpu" or "cuda"; ``check_items`` are items of the inference set; ``topk`` > 1
asks for the ``topk`` best class ids, best first, instead of one (ImageNet).

Each backend answers one kind of item (``dawnpipe.infer.items``): two
backends may share a name ("eager") for different kinds. The first backend
listed for a framework and kind of item is its default. Adding a backend is
adding its module and one line here. This module imports no framework.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from dawnpipe.errors import DawnpipeError


@dataclass(frozen=True)
class Backend:
    name: str
    module: str
    framework: str  # the entry framework whose checkpoints it reads (entry.schema.yaml)
    description: str
    items: str = "image"  # the kind of item it answers (dawnpipe.infer.items.KINDS)
    calibrates: bool = False  # takes calibration_items= (training items)
    model_format: str | None = None  # a program run's model file it reads (onnx, savedmodel); None: a framework's checkpoint


BACKENDS: list[Backend] = [
    Backend("eager", "dawnpipe.infer.torch_backend", "pytorch", "PyTorch eager: inference_mode, channels_last, batch norm folded"),
    Backend("torchscript", "dawnpipe.infer.torchscript_backend", "pytorch", "TorchScript: traced, frozen, optimize_for_inference"),
    Backend("compile", "dawnpipe.infer.compile_backend", "pytorch", "torch.compile (TorchInductor) for the one-item shape"),
    Backend("onnxruntime", "dawnpipe.infer.onnx_backend", "pytorch", "ONNX export run by ONNX Runtime, all graph optimisations"),
    Backend(
        "onnxruntime-int8",
        "dawnpipe.infer.onnx_int8_backend",
        "pytorch",
        "ONNX export quantised to int8 (static, calibrated on training items), ONNX Runtime",
        calibrates=True,
    ),
    Backend("eager", "dawnpipe.infer.squad_predictor", "pytorch", "PyTorch eager reader, tokenisation included", items="question"),
    Backend(
        "tf-function",
        "dawnpipe.infer.tf_backend",
        "tensorflow",
        "TensorFlow: one tf.function graph of the Keras model",
    ),
    # A program entry's run hands over its own model file (docs/programs.md): ONNX, or a TensorFlow SavedModel.
    Backend(
        "onnxruntime",
        "dawnpipe.infer.program_onnx",
        "program",
        "the program's own ONNX model run by ONNX Runtime, all graph optimisations",
        model_format="onnx",
    ),
    Backend(
        "onnxruntime-int8",
        "dawnpipe.infer.program_onnx_int8",
        "program",
        "the program's own ONNX model quantised to int8 (static, calibrated on training items), ONNX Runtime",
        calibrates=True,
        model_format="onnx",
    ),
    Backend(
        "tf-function",
        "dawnpipe.infer.program_savedmodel",
        "program",
        "TensorFlow: the program's SavedModel, its serving_default function",
        model_format="savedmodel",
    ),
]


def names() -> list[str]:
    return list(dict.fromkeys(b.name for b in BACKENDS))


def get_backend(name: str, items: str = "image", framework: str | None = None) -> Backend:
    """The backend ``name`` for ``items`` (and, where given, reading ``framework``'s checkpoints or model files)."""
    for b in BACKENDS:
        if b.name == name and b.items == items and framework in (None, b.framework):
            return b
    if name not in names():
        raise DawnpipeError(f"unknown inference backend {name!r} (known: {', '.join(names())})")
    raise DawnpipeError(f"inference backend {name!r} does not answer {items} items (it answers: {', '.join(b.items for b in BACKENDS if b.name == name)})")


def backends_for(framework: str, items: str = "image", wanted: list[str] | None = None, model_format: str | None = None) -> list[str]:
    """Backends (of ``wanted``, in its order; all when None) that read ``framework``'s
    checkpoints (a program run's: its ``model_format``, where given) and answer
    ``items``. An unknown name in ``wanted`` is an error."""
    for name in wanted or []:
        if name not in names():
            raise DawnpipeError(f"unknown inference backend {name!r} (known: {', '.join(names())})")
    candidates = names() if wanted is None else wanted

    def reads(b: Backend) -> bool:
        return b.framework == framework and b.items == items and (model_format is None or b.model_format == model_format)

    return [n for n in candidates if any(b.name == n and reads(b) for b in BACKENDS)]


def default_backend(framework: str, items: str = "image", model_format: str | None = None) -> str:
    found = backends_for(framework, items, model_format=model_format)
    if not found:
        raise DawnpipeError(f"no inference backend answers {items} items from {framework} checkpoints")
    return found[0]


def load_backend(backend: Backend) -> ModuleType:
    """The backend's module (imports its framework)."""
    return importlib.import_module(backend.module)

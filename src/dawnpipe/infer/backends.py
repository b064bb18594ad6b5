"""The inference backends dawnpipe can time, by name (the ``backend`` of each
inference result and the ``{backend}`` of results/runs/<entry>/seed<k>/latency/).

A backend is a module with

    prepare(ctx: PrepareContext) -> Predictor        (dawnpipe.infer.predictor)

that loads a training checkpoint of its framework, exports/compiles it, checks
the result against the checkpoint (``Predictor.export_check``) and returns the
callable that the framework-agnostic timing loop times. Adding a backend is
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
    uses: tuple[str, ...] = ()  # other dawnpipe modules it runs (the workflow reruns it when they change)


_TORCH = ("dawnpipe.infer.torch_model", "dawnpipe.models.torch_zoo")

BACKENDS: dict[str, Backend] = {b.name: b for b in [
    Backend("eager", "dawnpipe.infer.torch_backend", "pytorch", "PyTorch eager: inference_mode, channels_last, batch norm folded", _TORCH),
    Backend("torchscript", "dawnpipe.infer.torchscript_backend", "pytorch", "TorchScript: traced, frozen, optimize_for_inference", _TORCH),
    Backend("compile", "dawnpipe.infer.compile_backend", "pytorch", "torch.compile (TorchInductor) for the one-item shape", _TORCH),
    Backend("onnxruntime", "dawnpipe.infer.onnx_backend", "pytorch", "ONNX export run by ONNX Runtime, all graph optimisations", _TORCH),
    Backend("onnxruntime-int8", "dawnpipe.infer.onnx_int8_backend", "pytorch",
            "ONNX export quantised to int8 (static, calibrated on training items), ONNX Runtime", (*_TORCH, "dawnpipe.infer.onnx_backend")),
]}

# The framework-agnostic part of every inference result (the infer command).
COMMON_MODULES = ("dawnpipe.infer.cli", "dawnpipe.infer.timing", "dawnpipe.infer.latency", "dawnpipe.infer.predictor",
                  "dawnpipe.infer.result", "dawnpipe.infer.backends", "dawnpipe.data.loader")


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise DawnpipeError(f"unknown inference backend {name!r} (known: {', '.join(BACKENDS)})") from None


def backends_for(framework: str, wanted: list[str] | None = None) -> list[str]:
    """Backends (of ``wanted``, in its order; all when None) that read ``framework``'s checkpoints."""
    names = list(BACKENDS) if wanted is None else wanted
    return [n for n in names if get_backend(n).framework == framework]


def code_modules(name: str) -> list[str]:
    """Every dawnpipe module a result of backend ``name`` depends on."""
    backend = get_backend(name)
    return [*COMMON_MODULES, backend.module, *backend.uses]


def load_backend(name: str) -> ModuleType:
    """The backend's module (imports its framework)."""
    return importlib.import_module(get_backend(name).module)

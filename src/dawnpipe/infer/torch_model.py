"""A PyTorch training checkpoint, made ready for inference; shared by the
PyTorch-based backends (eager, TorchScript, torch.compile, ONNX export).

- ``reference_logits``: the checkpoint's model exactly as training evaluated
  it (eager, fp32, batch norm unfolded, the trainer's own preprocessing). Every
  backend's output is checked against it.
- ``fold_batch_norms``: each inference-mode BatchNorm that follows a
  convolution is folded into the convolution's weight and bias (one op less
  per layer, same function).
- ``InferenceNet``: one module from a stored uint8 item to the logits, with
  the normalisation and the flip test-time augmentation of the recipe inside,
  so that exported and compiled graphs contain the whole answer.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from dawnpipe import checkpoint
from dawnpipe.errors import DawnpipeError
from dawnpipe.infer.predictor import Predictor
from dawnpipe.models.precision import use_ieee_fp32
from dawnpipe.models.torch_zoo import Normalizer, build_model
from dawnpipe.schemas import jsonschema_check
from dawnpipe.schemas import model_args as family_args

CHECK_ITEMS = 64  # items of the inference set compared against the checkpoint before timing


def load_checkpoint(path: Path) -> dict[str, Any]:
    """A training checkpoint of an image model, its values checked
    (schemas/checkpoint.schema.yaml, the model family's model_args) and its
    weights against the model they describe: what is wrong is one line naming
    the file and the field, before a model is built for real."""
    ckpt = checkpoint.load_checkpoint(path)
    missing = [k for k in ("model", "model_args", "in_channels", "num_classes", "state_dict", "mean", "std", "tta_flip") if k not in ckpt]
    if missing:
        raise DawnpipeError(f"{path}: not a dawnpipe training checkpoint (missing {', '.join(missing)})")
    values = {k: v for k, v in ckpt.items() if k != "state_dict"}
    jsonschema_check.check(values, jsonschema_check.package_schema("checkpoint")["image"], str(path))
    family_args.check({"model": ckpt["model"], "framework": "pytorch", "model_args": ckpt["model_args"]}, "image", str(path))
    for name in ("mean", "std"):
        if len(ckpt[name]) != ckpt["in_channels"]:
            raise DawnpipeError(
                f"{path}: field '{name}': {len(ckpt[name])} values for {ckpt['in_channels']} input channel{'s' if ckpt['in_channels'] != 1 else ''}"
            )
    check_weights(ckpt, path)
    return ckpt


def check_weights(ckpt: dict[str, Any], path: Path) -> None:
    """The state_dict against the model the checkpoint's values build (on the
    meta device: no memory, no computation), name for name and shape for shape."""
    try:
        with torch.device("meta"):
            want = build_model(ckpt["model"], in_channels=ckpt["in_channels"], num_classes=ckpt["num_classes"], **ckpt["model_args"]).state_dict()
    except (ValueError, TypeError, KeyError) as e:  # the zoo's own refusal (an unknown model, a depth that is not 6n+2)
        raise DawnpipeError(f"{path}: field 'model': {str(e).strip(chr(39))[:200]}") from None
    check_state_dict(ckpt["state_dict"], want, path, f"a {ckpt['model']} with these model_args")


def check_state_dict(have: Any, want: dict[str, torch.Tensor], path: Path, what: str) -> None:
    """A checkpoint's state_dict against the one of the model it should load into (``want``), name for name and shape for shape."""
    if not isinstance(have, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in have.items()):
        raise DawnpipeError(f"{path}: field 'state_dict': expected a mapping of names to tensors")
    problems = [f"missing {k}" for k in want if k not in have]
    problems += [f"unexpected {k}" for k in have if k not in want]
    problems += [f"{k} has shape {tuple(have[k].shape)}, not {tuple(want[k].shape)}" for k in want if k in have and have[k].shape != want[k].shape]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise DawnpipeError(f"{path}: field 'state_dict': {'; '.join(problems[:3])}{more}: not the weights of {what}")


def checkpoint_facts(ckpt: dict[str, Any]) -> dict[str, Any]:
    return {
        "epoch": ckpt.get("epoch"),
        "metric": ckpt.get("metric"),
        "metric_value": ckpt.get("metric_value"),
        "reached_threshold": ckpt.get("reached_threshold"),
        "training_precision": ckpt.get("precision"),
    }


def trained_model(ckpt: dict[str, Any]) -> nn.Module:
    """The checkpoint's network in eval mode, fp32, contiguous layout, nothing folded."""
    model = build_model(ckpt["model"], in_channels=ckpt["in_channels"], num_classes=ckpt["num_classes"], **ckpt["model_args"])
    model.load_state_dict(ckpt["state_dict"])
    return model.eval()


def fold_batch_norms(model: nn.Module) -> tuple[nn.Module, int]:
    """Fold every BatchNorm2d that directly follows a Conv2d in an nn.Sequential
    (how dawnpipe's models are built) into that convolution; returns the
    folded copy and the number folded. Any other BatchNorm stays."""
    import copy

    model = copy.deepcopy(model).eval()
    folded = 0
    for seq in [m for m in model.modules() if isinstance(m, nn.Sequential)]:
        names = list(seq._modules)
        for conv_name, bn_name in zip(names, names[1:]):
            conv, bn = seq._modules.get(conv_name), seq._modules.get(bn_name)
            if isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d) and bn.track_running_stats:
                seq._modules[conv_name] = fuse_conv_bn_eval(conv, bn)
                del seq._modules[bn_name]  # Sequential runs its remaining modules in order
                folded += 1
    return model, folded


def count_batch_norms(model: nn.Module) -> int:
    return sum(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


class InferenceNet(nn.Module):
    """uint8 items (N, H, W) or (N, H, W, C), as stored -> logits (N, classes).

    With flip test-time augmentation the item and its mirror image go through
    the network as one batch and their logits are summed (the trainer's
    evaluation sums them too; the argmax is the same as the mean's)."""

    def __init__(self, net: nn.Module, mean: list[float], std: list[float], *, tta_flip: bool, channels_last: bool):
        super().__init__()
        self.net = net
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).reshape(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).reshape(1, -1, 1, 1))
        self.tta_flip = tta_flip
        self.channels_last = channels_last

    def forward(self, items: torch.Tensor) -> torch.Tensor:
        x = items.float()
        x = x.unsqueeze(1) if x.dim() == 3 else x.permute(0, 3, 1, 2)
        x = (x / 255.0 - self.mean) / self.std
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        if not self.tta_flip:
            return self.net(x)
        n = x.shape[0]
        both = self.net(torch.cat([x, x.flip(3)]))
        return both[:n] + both[n:]


def inference_net(ckpt: dict[str, Any], *, fold: bool = True, channels_last: bool = True) -> tuple[InferenceNet, dict[str, Any]]:
    """The checkpoint as an InferenceNet in eval mode, and facts for the record."""
    net = trained_model(ckpt)
    folded = 0
    if fold:
        net, folded = fold_batch_norms(net)
    module = InferenceNet(net, ckpt["mean"], ckpt["std"], tta_flip=bool(ckpt["tta_flip"]), channels_last=channels_last).eval()
    if channels_last:
        module = module.to(memory_format=torch.channels_last)
    return module, {
        "folded_batch_norms": folded,
        "remaining_batch_norms": count_batch_norms(net),
        "channels_last": channels_last,
        "tta_flip": bool(ckpt["tta_flip"]),
    }


@torch.inference_mode()
def reference_logits(ckpt: dict[str, Any], items: np.ndarray) -> np.ndarray:
    """Logits of ``items`` as the trainer's evaluation computes them, in fp32."""

    model = trained_model(ckpt)
    t = torch.from_numpy(np.array(items))
    t = t.unsqueeze(1) if t.ndim == 3 else t.permute(0, 3, 1, 2)  # N x H x W (x C) -> N x C x H x W, as the trainer loads them
    x = Normalizer(ckpt["mean"], ckpt["std"], "cpu")(t.float() / 255.0)
    logits = model(x)
    if ckpt["tta_flip"]:
        logits = logits + model(x.flip(3))
    return logits.float().numpy()


def pick_device(requested: str) -> torch.device:
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise DawnpipeError("infer: --device cuda but no CUDA device is available")
        use_ieee_fp32()  # the backends say fp32 and are checked against the fp32 checkpoint: no TF32 (dawnpipe.models.precision)
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def set_threads(threads: int) -> int:
    """Intra-op threads of PyTorch on the CPU; returns what PyTorch reports using."""
    torch.set_num_threads(threads)
    return torch.get_num_threads()


def cuda_sync(device: torch.device) -> Callable[[], None] | None:
    """``torch.cuda.synchronize`` for a CUDA device (called around each timed
    item by the timing loop), None on the CPU."""
    if device.type != "cuda":
        return None

    def sync() -> None:
        torch.cuda.synchronize(device)

    return sync


def as_logits_fn(module: Callable[[torch.Tensor], torch.Tensor], device: torch.device) -> Callable[[np.ndarray], np.ndarray]:
    @torch.inference_mode()
    def logits(item: np.ndarray) -> np.ndarray:
        return module(torch.from_numpy(item).to(device)[None])[0].float().cpu().numpy()

    return logits


def as_predict_fn(module: Callable[[torch.Tensor], torch.Tensor], device: torch.device, topk: int = 1) -> Callable[[np.ndarray], int | list[int]]:
    """item -> class id, or the ``topk`` most likely ids, best first (ImageNet's answer is five)."""

    @torch.inference_mode()
    def predict(item: np.ndarray) -> int:
        # int() copies the answer to the host, which on CUDA waits for the kernels
        return int(module(torch.from_numpy(item).to(device)[None]).argmax(1))

    @torch.inference_mode()
    def predict_topk(item: np.ndarray) -> list[int]:
        scores = module(torch.from_numpy(item).to(device)[None])[0]
        return scores.topk(min(topk, scores.numel())).indices.tolist()  # .tolist() waits for the device too

    return predict if topk == 1 else predict_topk


def as_batch_fn(module: Callable[[torch.Tensor], torch.Tensor], device: torch.device, topk: int = 1) -> Callable[[np.ndarray], list]:
    """items (N x H x W (x C), uint8) -> their class ids, or their ``topk`` best ids each."""

    @torch.inference_mode()
    def predict_batch(items: np.ndarray) -> list:
        scores = module(torch.from_numpy(items).to(device))
        if topk == 1:
            return scores.argmax(1).tolist()  # .tolist() copies to the host, waiting for the device
        return scores.topk(min(topk, scores.shape[1]), dim=1).indices.tolist()

    return predict_batch


def check_against_checkpoint(ckpt: dict[str, Any], logits_fn: Callable[[np.ndarray], np.ndarray], items: np.ndarray, backend: str) -> dict[str, Any]:
    """Logits of ``logits_fn`` (one item at a time, as timed) against the checkpoint's."""
    from dawnpipe.infer.predictor import check_outputs

    items = np.ascontiguousarray(items[:CHECK_ITEMS])
    reference = reference_logits(ckpt, items)
    candidate = np.stack([logits_fn(items[i]) for i in range(len(items))])
    return check_outputs(reference, candidate, backend=backend)


@contextlib.contextmanager
def stopwatch(notes: dict[str, Any], key: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    notes[key] = time.perf_counter() - start


def prepare_torch(
    backend: str,
    checkpoint: Path,
    *,
    device: str,
    threads: int,
    check_items: np.ndarray,
    topk: int = 1,
    transform: Callable[[nn.Module, torch.Tensor], Callable] | None = None,
    **extra_notes: Any,
) -> Predictor:
    """The PyTorch backends' common path: load the checkpoint, fold batch norms,
    NHWC layout, ``transform(module, example_item)`` (trace, compile, ...),
    then check the result against the checkpoint, one item at a time."""
    ckpt = load_checkpoint(checkpoint)
    device = pick_device(device)
    threads = set_threads(threads)
    notes: dict[str, Any] = {}
    with stopwatch(notes, "prepare_seconds"):
        module, facts = inference_net(ckpt)
        module = module.to(device)
        if transform is not None:
            example = torch.from_numpy(np.ascontiguousarray(check_items[:1])).to(device)
            module = transform(module, example)
    check = check_against_checkpoint(ckpt, as_logits_fn(module, device), check_items, backend)
    return Predictor(
        backend=backend,
        predict=as_predict_fn(module, device, topk),
        predict_batch=as_batch_fn(module, device, topk),
        device=str(device),
        threads=threads,
        precision="fp32",
        framework_version=f"torch {torch.__version__}",
        sync=cuda_sync(device),
        export_check=check,
        checkpoint=checkpoint_facts(ckpt),
        notes={**facts, **notes, **extra_notes},
    )

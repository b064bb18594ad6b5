"""Helpers of the tests/test_infer*.py files: small real checkpoints in the
trainer's format, a run.json, and a prepared data directory, without training."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CLASSES = [f"class{i}" for i in range(10)]


def scramble_batch_norm(net):
    """Random, non-trivial batch-norm statistics and affine weights (in place;
    returns ``net``), so that eval-mode batch norm, and folding it, matter."""
    import torch

    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return net


def make_checkpoint(
    path: Path,
    *,
    model: str = "fastnet",
    model_args: dict | None = None,
    seed: int = 0,
    tta_flip: bool = True,
    in_channels: int = 1,
    epoch: int = 3,
    reached: bool = True,
) -> Path:
    """A checkpoint as the PyTorch trainer writes it, with random weights and
    random (non-trivial) batch-norm statistics, so folding them matters."""
    import torch

    from dawnpipe.models.torch_zoo import build_model

    torch.manual_seed(seed)
    model_args = dict(model_args if model_args is not None else ({"widths": [8, 16, 16, 32]} if model == "fastnet" else {"width": 4}))
    net = scramble_batch_norm(build_model(model, in_channels=in_channels, num_classes=10, **model_args))
    ckpt = {
        "entry_id": "tiny",
        "task": "fashion-mnist",
        "framework": "pytorch",
        "model": model,
        "model_args": model_args,
        "in_channels": in_channels,
        "num_classes": 10,
        "mean": [0.29] * in_channels,
        "std": [0.35] * in_channels,
        "precision": "fp32",
        "channels_last": True,
        "tta_flip": tta_flip,
        "threshold": 70.0,
        "metric": "top1Accuracy",
        "state_dict": net.state_dict(),
        "epoch": epoch,
        "metric_value": 71.0,
        "reached_threshold": reached,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    return path


def make_run_json(path: Path, *, threshold: float, entry: str = "tiny", seed: int = 0, hardware: str = "local-cpu") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "entry": entry,
                "seed": seed,
                "task": "fashion-mnist",
                "framework": "pytorch",
                "model": "fastnet",
                "hardware": hardware,
                "threshold": threshold,
                "official_threshold": 93.0,
                "demo_threshold": threshold != 93.0,
            }
        )
    )
    return path


def make_prepared(path: Path, images: np.ndarray, labels: np.ndarray, train_items: int = 64) -> Path:
    """A prepared data directory (the prepare stage's layout): ``images`` as the
    test split, and random training items (for calibrating backends)."""
    path.mkdir(parents=True, exist_ok=True)
    train_images, train_labels = random_items(train_items, seed=99, shape=images.shape[1:])
    splits = {}
    for split, (x, y) in {"test": (images, labels), "train": (train_images, train_labels)}.items():
        np.save(path / f"{split}_images.npy", x)
        np.save(path / f"{split}_labels.npy", y)
        splits[split] = {"images": {"file": f"{split}_images.npy", "shape": list(x.shape)}, "labels": {"file": f"{split}_labels.npy", "shape": list(y.shape)}}
    manifest = {"task": "fashion-mnist", "classes": CLASSES, "splits": splits}
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def random_items(n: int, seed: int = 0, shape=(28, 28)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, *shape), dtype=np.uint8), rng.integers(0, 10, size=n, dtype=np.uint8)

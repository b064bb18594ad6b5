"""What every PyTorch trainer shares (the image trainer, the SQuAD reader):
seeding, the device, autocast, the optimizer, and its side of the training
loop (dawnpipe.train.loop): the clock's synchronisation, agreement between
ranks, and the state and threshold checkpoint in and out of files.

Checkpoints hold tensors and plain values only (dawnpipe.checkpoint reads
them with ``weights_only=True``).
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dawnpipe.checkpoint import load_checkpoint, save_checkpoint
from dawnpipe.errors import DawnpipeError
from dawnpipe.models.precision import use_ieee_fp32
from dawnpipe.train import EntryError, optimizers
from dawnpipe.train import distributed as ddp
from dawnpipe.train.distributed import SINGLE, Rank
from dawnpipe.train.settings import Recipe


def seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def pick_device(requested: str, rank: Rank = SINGLE) -> torch.device:
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise DawnpipeError(
                f"entry asks for device: cuda but no CUDA device is available (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
            )
        if rank.distributed:  # one GPU per process
            torch.cuda.set_device(ddp.cuda_device_index(rank, torch.cuda.device_count()))
        use_ieee_fp32()  # an fp32 entry computes in fp32, not cuDNN's default TF32 (dawnpipe.models.precision)
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def autocast(device: torch.device, precision: str):
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision not in ("bf16", "fp16"):  # auto is resolved before training (RunSettings.computing_in), never here
        raise ValueError(f"autocast precision {precision!r}: expected fp32, bf16 or fp16")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    if device.type == "cpu" and dtype is torch.float16:
        raise DawnpipeError("precision fp16 needs a CUDA device (use bf16 on CPUs)")
    return torch.autocast(device.type, dtype=dtype)


def check_optimizer(recipe: Recipe) -> None:
    """What torch.optim's classes refuse of the values the entry schema
    allows, said before any data is read (the trainers' check_entry)."""
    if recipe.optimizer == "sgd" and recipe.nesterov and recipe.momentum <= 0:
        raise EntryError("hyperparameters.nesterov: true needs a momentum above 0 (Nesterov momentum is a kind of momentum)")
    if recipe.optimizer != "sgd" and recipe.momentum >= 1:
        raise EntryError(f"hyperparameters.momentum {recipe.momentum} is {recipe.optimizer}'s beta1, which must be below 1")


def build_optimizer(model, recipe: Recipe) -> optimizers.SGD | optimizers.Adam:
    """The recipe's optimizer: torch.optim's SGD, Adam or AdamW update (dawnpipe.train.optimizers)."""
    params = model.parameters()
    if recipe.optimizer == "sgd":
        return optimizers.SGD(params, lr=recipe.lr, momentum=recipe.momentum, nesterov=recipe.nesterov, weight_decay=recipe.weight_decay)
    betas = (float(recipe.momentum), 0.999)
    return optimizers.Adam(params, lr=recipe.lr, betas=betas, weight_decay=recipe.weight_decay, decoupled_weight_decay=recipe.optimizer == "adamw")


def threshold_payload(meta: dict[str, Any], model, row: dict[str, Any], metric_column: str, reached: bool) -> dict[str, Any]:
    """The payload of model.pt: the weights after the epoch of ``row`` (the
    first at the threshold, or the last when none reached it) with what
    inference needs to rebuild the model."""
    return {**meta, "state_dict": model.state_dict(), "epoch": row["epoch"], "metric_value": row[metric_column], "reached_threshold": reached}


class TorchTrainer:
    """The PyTorch half of the loop's Trainer protocol; subclasses add the
    epoch, the evaluation, ``describe`` and ``summary``. ``model`` is the
    module whose weights are saved (unwrapped from DistributedDataParallel)."""

    state_file = "last.pt"
    threshold_file = "threshold.pt"

    def __init__(
        self, *, model, optimizer, scaler, gen: torch.Generator, device: torch.device, rank: Rank, checkpoint_meta: dict[str, Any], metric_column: str
    ):
        self.model, self.optimizer, self.scaler, self.gen = model, optimizer, scaler, gen
        self.device, self.rank = device, rank
        self.checkpoint_meta, self.metric_column = checkpoint_meta, metric_column
        self.is_main, self.distributed = rank.is_main, rank.distributed

    # -- the clock and the ranks
    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        ddp.barrier(self.rank)

    def any_rank(self, flag: bool) -> bool:
        return ddp.any_rank(flag, self.rank, self.device)

    def barrier(self) -> None:
        ddp.barrier(self.rank)

    # -- files
    def save_state(self, path: Path, common: dict[str, Any]) -> None:
        """Everything a restarted job needs to continue as if never stopped:
        weights, optimizer, scaler, every random generator (the data
        generator, torch's CPU and CUDA ones; Python's and NumPy's are in
        ``common``), and the loop's log and clocks."""
        save_checkpoint(
            path,
            {
                **common,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict(),
                "generator": self.gen.get_state(),
                "torch_rng": torch.get_rng_state(),
                # Once CUDA is in use; before that its generators still hold the seed's
                # state, which seed_everything recreates (and asking would start CUDA on a CPU run).
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
                "world_size": self.rank.world_size,
            },
        )

    def read_state(self, path: Path) -> tuple[dict[str, Any], Callable[[], None]]:
        state = load_checkpoint(path, map_location=self.device)

        def apply() -> None:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])  # a ValueError: the train loop names the file
            self.scaler.load_state_dict(state["scaler"])
            # generator states must be CPU byte tensors, wherever map_location put them
            self.gen.set_state(state["generator"].cpu())
            torch.set_rng_state(state["torch_rng"].cpu())
            if state["cuda_rng"] is not None and torch.cuda.is_available():
                for index, cuda_state in enumerate(state["cuda_rng"][: torch.cuda.device_count()]):
                    torch.cuda.set_rng_state(cuda_state.cpu(), index)

        return state, apply

    def save_threshold(self, path: Path, row: dict[str, Any], reached: bool) -> None:
        save_checkpoint(path, threshold_payload(self.checkpoint_meta, self.model, row, self.metric_column, reached))

    def progress_suffix(self, row: dict[str, Any]) -> str:
        return ""

"""PyTorch trainer of image tasks: one entry, one seed, driven by the one
training loop (dawnpipe.train.loop), which owns the clock, the log,
checkpoints, resuming and interruptions. This module supplies the epoch (the
timed region: shuffling, augmentation, host-to-device copies, forward,
backward and the optimizer step) and the evaluation.

The whole data set is moved to the device once, before the clock starts, as
uint8 (like airbench), and batches are augmented on the device. Sets too
large for memory (ImageNet) are streamed from memory-mapped shards instead:
see dawnpipe.train.data_source.

Data-parallel (an entry's ``distributed:``): one process per rank, started by
the CLI (dawnpipe.train.distributed); each trains on its share of every
global batch under DistributedDataParallel, the clock is read on rank 0 after
a barrier, evaluation is split across the ranks, and rank 0 alone writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from dawnpipe.data.loader import evaluation_sets, held_out_size, load_split
from dawnpipe.models.torch_zoo import Normalizer, build_model
from dawnpipe.tasks import get_task
from dawnpipe.train import EntryError, loop, naming_the_model
from dawnpipe.train import distributed as ddp
from dawnpipe.train.data_source import device_images, draw_resized_crop, epoch_batches, image_stats, resized_crop
from dawnpipe.train.distributed import SINGLE, Rank
from dawnpipe.train.finish import FinishedRun
from dawnpipe.train.interruptions import StopRequest
from dawnpipe.train.logbook import Logbook, extra_set_summary, extra_set_text, held_out_columns
from dawnpipe.train.outputs import Outputs
from dawnpipe.train.schedule import lr_at, steps_per_epoch
from dawnpipe.train.settings import Entry, RunSettings
from dawnpipe.train.torch_base import TorchTrainer, autocast, build_optimizer, check_optimizer, pick_device, seed_everything


def augment(x: torch.Tensor, pad: int, flip: bool, gen: torch.Generator) -> torch.Tensor:
    """Per-item random crop (after zero padding) and horizontal flip of a float batch."""
    return apply_augment(x, draw_augment(x.shape[0], pad, flip, gen), pad)


def draw_augment(n: int, pad: int, flip: bool, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """The random choices of ``augment`` for n items. Drawn for a whole global
    batch on every rank, then sliced to the rank's share, they make a
    data-parallel run augment each item exactly as one process would."""
    params = {}
    if pad:
        params["dy"] = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
        params["dx"] = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    if flip:
        params["flip"] = torch.rand(n, generator=gen) < 0.5
    return params


def apply_augment(x: torch.Tensor, params: dict[str, torch.Tensor], pad: int) -> torch.Tensor:
    n, _, h, w = x.shape
    if "dy" in params:
        xp = F.pad(x, (pad, pad, pad, pad))
        dy, dx = params["dy"].to(x.device), params["dx"].to(x.device)
        rows = (torch.arange(h, device=x.device)[None, :] + dy[:, None])[:, :, None]
        cols = (torch.arange(w, device=x.device)[None, :] + dx[:, None])[:, None, :]
        # advanced indexing puts the indexed dims first: (n, h, w, c) -> (n, c, h, w)
        x = xp[torch.arange(n, device=x.device)[:, None, None], :, rows, cols].permute(0, 3, 1, 2)
    if "flip" in params:
        mask = params["flip"].to(x.device)[:, None, None, None]
        x = torch.where(mask, x.flip(3), x)
    return x


def topk_correct(logits: torch.Tensor, labels: torch.Tensor, ks: tuple[int, ...]) -> dict[int, int]:
    top = logits.topk(min(max(ks), logits.shape[1]), dim=1).indices  # top-5 of 3 classes: all of them
    hits = top.eq(labels[:, None])
    return {k: int(hits[:, :k].any(dim=1).sum()) for k in ks}


@torch.inference_mode()
def evaluate(model, images, labels, normalize, hp: Mapping[str, Any], device, metric_columns, rank: Rank = SINGLE) -> tuple[dict[str, float], float]:
    """Metrics in percent for ``metric_columns`` (top1Accuracy/top5Accuracy) and
    the mean loss. ``hp``: the recipe's hyperparameters (of them, eval_batch_size,
    precision, channels_last and tta_flip). With several processes each
    evaluates its share of the items and the counts are summed."""
    model.eval()
    ks = tuple(k for k, col in ((1, "top1Accuracy"), (5, "top5Accuracy")) if col in metric_columns) or (1,)
    correct = dict.fromkeys(ks, 0)
    loss_sum = 0.0
    fmt = torch.channels_last if hp["channels_last"] else torch.contiguous_format
    lo, hi = ddp.shard(images.shape[0], rank)
    for start in range(lo, hi, hp["eval_batch_size"]):
        end = min(start + hp["eval_batch_size"], hi)
        x = normalize(images[start:end].to(device).float() / 255.0).contiguous(memory_format=fmt)
        y = labels[start:end].to(device).long()
        with autocast(device, hp["precision"]):
            logits = model(x)
            if hp["tta_flip"]:
                logits = logits + model(x.flip(3))
        logits = logits.float()
        loss_sum += float(F.cross_entropy(logits / (2.0 if hp["tta_flip"] else 1.0), y, reduction="sum"))
        for k, n in topk_correct(logits, y, ks).items():
            correct[k] += n
    if rank.distributed:
        totals = ddp.all_reduce_sum(torch.tensor([loss_sum, *correct.values()], dtype=torch.float64, device=device), rank).tolist()
        loss_sum, correct = totals[0], {k: int(round(v)) for k, v in zip(ks, totals[1:])}
    n = images.shape[0]
    metrics = {col: 100.0 * correct[k] / n for k, col in ((1, "top1Accuracy"), (5, "top5Accuracy")) if k in correct}
    return metrics, loss_sum / n


def model_from_entry(entry: Entry, *, in_channels: int, num_classes: int) -> torch.nn.Module:
    """The entry's network; an unknown ``model`` or a bad ``model_args`` is an error naming both."""
    with naming_the_model(entry.model, entry.model_args):
        return build_model(entry.model, in_channels=in_channels, num_classes=num_classes, **entry.model_args)


def check_entry(entry: Entry) -> None:
    """What can be checked before any data is read or any process started
    (train.cli calls it): the model is built on the meta device, which
    allocates and initialises nothing. Channels and classes are placeholders
    here; the real ones come with the data."""
    with torch.device("meta"):
        model_from_entry(entry, in_channels=3, num_classes=10)
    check_optimizer(entry.recipe)
    world = entry.layout.world_size
    if entry.recipe.batch_size < world:
        raise EntryError(
            f"hyperparameters.batch_size {entry.recipe.batch_size} is smaller than the {world} "
            "processes of distributed: (the batch is global, split across the processes)"
        )


def train(settings: RunSettings, data_dir: Path, out: Outputs, *, threads: int | None = None, resume: bool = True, rank: Rank = SINGLE) -> FinishedRun | None:
    """Train one entry with one seed; what it did (None on ranks other than 0)."""
    if threads:
        torch.set_num_threads(threads)
    gen = seed_everything(settings.seed)
    device = pick_device(settings.entry.device, rank)
    rank = ddp.init(rank, device.type)
    try:
        with ddp.peers_watched(rank), StopRequest().active() as stop:
            trainer = ImageTrainer(settings, data_dir, rank=rank, gen=gen, device=device)
            task = trainer.task
            logbook = Logbook(
                task.log_columns, task.metric_column, settings.threshold, demo=settings.demo_threshold, extra_columns=held_out_columns(settings.entry.document)
            )
            return loop.run(trainer, settings, out, logbook, resume=resume, stop=stop)
    finally:
        ddp.shutdown(rank)


class ImageTrainer(TorchTrainer):
    """An image classifier's epoch and evaluation (the loop's Trainer)."""

    def __init__(self, settings: RunSettings, data_dir: Path, *, rank: Rank, gen: torch.Generator, device: torch.device):
        entry, recipe = settings.entry, settings.entry.recipe
        task = get_task(entry.task)
        self.settings, self.recipe, self.task, self.layout = settings, recipe, task, entry.layout
        held = held_out_size(entry.document)
        train_split = load_split(data_dir, "train", settings.train_limit, held_out=held)
        test_split = load_split(data_dir, "test", settings.test_limit)
        # the held-out split (never trained on) and the task's new test set, scored at every evaluation
        self.extra_sets = [
            (prefix, device_images(split, device), torch.from_numpy(np.array(split.labels)).to(device), about)
            for prefix, split, about in evaluation_sets(data_dir, entry.document)
        ]
        # in memory, or streamed from shards for ImageNet-sized sets (dawnpipe.train.data_source)
        self.train_x, self.train_y = device_images(train_split, device), torch.from_numpy(np.array(train_split.labels)).to(device)
        self.test_x, self.test_y = device_images(test_split, device), torch.from_numpy(np.array(test_split.labels)).to(device)
        mean, std = image_stats(train_split, self.train_x)
        self.normalize = Normalizer(mean, std, device)
        n_classes = len(train_split.classes)
        self.fmt = torch.channels_last if recipe.channels_last else torch.contiguous_format
        model = model_from_entry(entry, in_channels=int(self.train_x.shape[1]), num_classes=n_classes).to(device).to(memory_format=self.fmt)
        super().__init__(
            model=model,
            optimizer=build_optimizer(model, recipe),
            scaler=torch.amp.GradScaler("cuda", enabled=(device.type == "cuda" and recipe.precision == "fp16")),
            gen=gen,
            device=device,
            rank=rank,
            metric_column=task.metric_column,
            checkpoint_meta={
                "entry_id": entry.id,
                "task": task.name,
                "framework": "pytorch",
                "model": entry.model,
                "model_args": entry.model_args,
                "in_channels": int(self.train_x.shape[1]),
                "num_classes": n_classes,
                "mean": mean,
                "std": std,
                "precision": recipe.precision,
                "channels_last": recipe.channels_last,
                "tta_flip": recipe.tta_flip,
                "threshold": settings.threshold,
                "metric": task.metric_column,
            },
        )
        self.n_train, self.batch = self.train_x.shape[0], recipe.batch_size
        self.steps = steps_per_epoch(self.n_train, self.batch, settings.train_limit, rank.world_size)
        lo, hi = ddp.shard(self.batch, rank)
        self.rank_batch = hi - lo  # this rank's share of a full batch
        self.train_model = ddp.wrap(model, rank, device)

    def describe(self) -> str:
        s, rank = self.settings, self.rank
        return (
            f"train: {s.label} on {self.device} ({torch.get_num_threads()} threads"
            + (f" x {rank.world_size} processes, {rank.backend}" if rank.distributed else "")
            + f"): {self.n_train} training items, {self.test_x.shape[0]} test items{extra_set_text([(p, int(y.shape[0]), a) for p, _, y, a in self.extra_sets])}, "
            f"{self.recipe.epochs} epochs of {self.steps} steps, "
            f"threshold {self.task.metric_column} >= {s.threshold:g}" + (" (demo threshold)" if s.demo_threshold else "")
        )

    def rank_perm(self, perm: torch.Tensor) -> torch.Tensor:
        """This rank's items of an epoch, step after step: its share of each global batch."""
        if not self.rank.distributed:
            return perm
        shares = [perm[s * self.batch : (s + 1) * self.batch] for s in range(self.steps)]
        return torch.cat([g[slice(*ddp.shard(len(g), self.rank))] for g in shares])

    def epoch(self, epoch: int, steps: loop.Steps) -> loop.EpochResult:
        recipe, rank, device, world = self.recipe, self.rank, self.device, self.rank.world_size
        aug = recipe.augment
        self.train_model.train()
        perm = torch.randperm(self.n_train, generator=self.gen)
        loss_sum = torch.zeros((), device=device)
        seen, lr = 0, recipe.lr
        for step, (xb, yb) in enumerate(epoch_batches(self.train_x, self.train_y, self.rank_perm(perm), self.rank_batch, self.steps)):
            if not steps.keep_going(step):
                return loop.EpochResult(float(loss_sum), seen, lr, interrupted=True)
            # one generator, the same draws on every rank for the whole global batch; each rank takes its share
            global_items = min(self.batch, self.n_train - step * self.batch)
            lo, hi = ddp.shard(global_items, rank)
            x = xb.float() / 255.0
            if aug.resized_crop_size:
                x = resized_crop(x, aug.resized_crop_size, draw_resized_crop(global_items, aug.resized_crop_min_scale, self.gen)[lo:hi])
            choices = draw_augment(global_items, aug.crop_padding, aug.flip, self.gen)
            x = apply_augment(x, {k: v[lo:hi] for k, v in choices.items()}, aug.crop_padding)
            x = self.normalize(x).contiguous(memory_format=self.fmt)
            y = yb.long()
            lr = lr_at(epoch + step / self.steps, recipe.lr, recipe.schedule, recipe.epochs)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            with autocast(device, recipe.precision):
                loss = F.cross_entropy(self.train_model(x), y, label_smoothing=recipe.label_smoothing)
            # weighted by this rank's share, so DDP's average over ranks is the global batch's mean
            objective = loss * (y.shape[0] * world / global_items) if rank.distributed else loss
            self.optimizer.zero_grad()
            self.scaler.scale(objective).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            loss_sum += loss.detach().float() * y.shape[0]
            seen += y.shape[0]
        if rank.distributed:
            totals = ddp.all_reduce_sum(torch.stack([loss_sum, torch.tensor(float(seen), device=device)]), rank)
            loss_sum, seen = totals[0], int(totals[1].item())
        return loop.EpochResult(float(loss_sum), seen, lr)

    def evaluate(self) -> tuple[dict[str, float], float]:
        ddp.sync_buffers(self.model, self.rank)
        hp = self.recipe.hyperparameters
        metrics, loss = evaluate(self.model, self.test_x, self.test_y, self.normalize, hp, self.device, self.task.log_columns, self.rank)
        column = self.task.metric_column
        for prefix, x, y, _ in self.extra_sets:
            extra, _ = evaluate(self.model, x, y, self.normalize, hp, self.device, (column,), self.rank)
            metrics[prefix + column] = extra[column]
        return metrics, loss

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        from dawnpipe.runinfo import torch_environment

        return {
            "world_size": self.rank.world_size,
            "distributed": ddp.layout_record(self.layout, self.rank),
            "train_items": int(self.n_train),
            **extra_set_summary([(prefix, int(y.shape[0]), about) for prefix, _, y, about in self.extra_sets]),
            "test_items": int(self.test_x.shape[0]),
            # world_size: the peak of a data-parallel run is that of all its devices (telemetry.peaks.device_peak)
            "environment": {**torch_environment(self.device), "world_size": self.rank.world_size},
        }

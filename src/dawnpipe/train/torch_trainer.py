"""PyTorch trainer: one entry, one seed.

The training clock (SPEC.md, objective 1) covers each epoch's training loop:
shuffling, augmentation, host-to-device copies, forward, backward and the
optimizer step. Evaluation, checkpointing and log writing run with the clock
stopped. On CUDA the clock is read only after ``torch.cuda.synchronize()``, so
queued kernels are not left outside it. The whole data set is moved to the
device once, before the clock starts, as uint8 (like airbench), and batches are
augmented on the device. Sets too large for memory (ImageNet) are streamed
from memory-mapped shards instead: see dawnpipe.train.data_source.
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from dawnpipe.data.loader import load_split
from dawnpipe.entries import config_hash
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import atomic_path, move_into_place
from dawnpipe.models.torch_zoo import build_model
from dawnpipe.tasks import get_task
from dawnpipe.telemetry import mark_training_clock
from dawnpipe.train.data_source import device_images, epoch_batches, image_stats, random_resized_crop
from dawnpipe.train.logbook import Logbook
from dawnpipe.train.schedule import lr_at


@dataclass(frozen=True)
class Outputs:
    tsv: Path
    parquet: Path
    checkpoint: Path
    run_json: Path
    work_dir: Path


class TrainingClock:
    """Accumulates seconds spent inside ``with clock.running():`` blocks."""

    def __init__(self, device: torch.device, elapsed: float = 0.0):
        self.device = device
        self.elapsed = elapsed

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextlib.contextmanager
    def running(self):
        self._sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.elapsed += time.perf_counter() - start


def seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def pick_device(requested: str) -> torch.device:
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise DawnpipeError("entry asks for device: cuda but no CUDA device is available")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def autocast(device: torch.device, precision: str):
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    if device.type == "cpu" and dtype is torch.float16:
        raise DawnpipeError("precision fp16 needs a CUDA device (use bf16 on CPUs)")
    return torch.autocast(device.type, dtype=dtype)


def augment(x: torch.Tensor, pad: int, flip: bool, gen: torch.Generator) -> torch.Tensor:
    """Per-item random crop (after zero padding) and horizontal flip of a float batch."""
    n, _, h, w = x.shape
    if pad:
        xp = F.pad(x, (pad, pad, pad, pad))
        dy = torch.randint(0, 2 * pad + 1, (n,), generator=gen).to(x.device)
        dx = torch.randint(0, 2 * pad + 1, (n,), generator=gen).to(x.device)
        rows = (torch.arange(h, device=x.device)[None, :] + dy[:, None])[:, :, None]
        cols = (torch.arange(w, device=x.device)[None, :] + dx[:, None])[:, None, :]
        # advanced indexing puts the indexed dims first: (n, h, w, c) -> (n, c, h, w)
        x = xp[torch.arange(n, device=x.device)[:, None, None], :, rows, cols].permute(0, 3, 1, 2)
    if flip:
        mask = (torch.rand(n, generator=gen) < 0.5).to(x.device)[:, None, None, None]
        x = torch.where(mask, x.flip(3), x)
    return x


class Normalizer:
    def __init__(self, mean: float | list[float], std: float | list[float], device):
        self.mean = torch.tensor(mean, dtype=torch.float32, device=device).reshape(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32, device=device).reshape(1, -1, 1, 1)

    def __call__(self, x01: torch.Tensor) -> torch.Tensor:
        return (x01 - self.mean) / self.std


def topk_correct(logits: torch.Tensor, labels: torch.Tensor, ks: tuple[int, ...]) -> dict[int, int]:
    top = logits.topk(min(max(ks), logits.shape[1]), dim=1).indices  # top-5 of 3 classes: all of them
    hits = top.eq(labels[:, None])
    return {k: int(hits[:, :k].any(dim=1).sum()) for k in ks}


@torch.inference_mode()
def evaluate(model, images, labels, normalize, hp, device, metric_columns) -> tuple[dict[str, float], float]:
    """Metrics in percent for ``metric_columns`` (top1Accuracy/top5Accuracy) and the mean loss."""
    model.eval()
    ks = tuple(k for k, col in ((1, "top1Accuracy"), (5, "top5Accuracy")) if col in metric_columns) or (1,)
    correct = dict.fromkeys(ks, 0)
    loss_sum = 0.0
    fmt = torch.channels_last if hp["channels_last"] else torch.contiguous_format
    for start in range(0, images.shape[0], hp["eval_batch_size"]):
        x = normalize(images[start:start + hp["eval_batch_size"]].to(device).float() / 255.0).contiguous(memory_format=fmt)
        y = labels[start:start + hp["eval_batch_size"]].to(device).long()
        with autocast(device, hp["precision"]):
            logits = model(x)
            if hp["tta_flip"]:
                logits = logits + model(x.flip(3))
        logits = logits.float()
        loss_sum += float(F.cross_entropy(logits / (2.0 if hp["tta_flip"] else 1.0), y, reduction="sum"))
        for k, n in topk_correct(logits, y, ks).items():
            correct[k] += n
    n = images.shape[0]
    metrics = {col: 100.0 * correct[k] / n for k, col in ((1, "top1Accuracy"), (5, "top5Accuracy")) if k in correct}
    return metrics, loss_sum / n


def build_optimizer(model, hp):
    params = model.parameters()
    if hp["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=hp["lr"], momentum=hp["momentum"], nesterov=hp["nesterov"], weight_decay=hp["weight_decay"])
    cls = torch.optim.Adam if hp["optimizer"] == "adam" else torch.optim.AdamW
    return cls(params, lr=hp["lr"], betas=(hp["momentum"], 0.999), weight_decay=hp["weight_decay"])


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def train(settings: dict[str, Any], data_dir: Path, out: Outputs, *, threads: int | None = None, resume: bool = True) -> dict[str, Any]:
    entry, hp = settings["entry"], settings["entry"]["hyperparameters"]
    task = get_task(entry["task"])
    if threads:
        torch.set_num_threads(threads)
    gen = seed_everything(settings["seed"])
    device = pick_device(entry["device"])
    settings_hash = config_hash(settings)

    train_split = load_split(data_dir, "train", settings["train_limit"])
    test_split = load_split(data_dir, "test", settings["test_limit"])
    # in memory, or streamed from shards for ImageNet-sized sets (dawnpipe.train.data_source)
    train_x, train_y = device_images(train_split, device), torch.from_numpy(np.array(train_split.labels)).to(device)
    test_x, test_y = device_images(test_split, device), torch.from_numpy(np.array(test_split.labels)).to(device)
    mean, std = image_stats(train_split, train_x)
    normalize = Normalizer(mean, std, device)
    n_classes = len(train_split.classes)

    model = build_model(entry["model"], in_channels=train_x.shape[1], num_classes=n_classes, **entry["model_args"]).to(device)
    fmt = torch.channels_last if hp["channels_last"] else torch.contiguous_format
    model = model.to(memory_format=fmt)
    optimizer = build_optimizer(model, hp)
    scaler = torch.amp.GradScaler("cuda", enabled=(device.type == "cuda" and hp["precision"] == "fp16"))
    logbook = Logbook(task.log_columns, task.metric_column, settings["threshold"])
    clock = TrainingClock(device)
    wall_offset, start_epoch, resumed_from = 0.0, 0, None

    last_path = out.work_dir / "last.pt"
    work_threshold = out.work_dir / "threshold.pt"
    if resume and last_path.exists():
        state = torch.load(last_path, map_location=device, weights_only=False)
        if state.get("settings_hash") == settings_hash:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scaler.load_state_dict(state["scaler"])
            gen.set_state(state["generator"])
            torch.set_rng_state(state["torch_rng"])
            logbook.rows = state["rows"]
            clock.elapsed, wall_offset, start_epoch = state["clock_seconds"], state["wall_seconds"], state["epoch"]
            resumed_from = start_epoch
            print(f"train: resuming after epoch {start_epoch} from {last_path} (training clock {clock.elapsed:.1f}s so far)")
        else:
            print(f"train: ignoring {last_path}: it belongs to a different configuration")

    n_train, batch = train_x.shape[0], hp["batch_size"]
    steps = n_train // batch + (1 if n_train % batch > 1 else 0)  # a lone last item would break batch norm
    aug = hp["augment"]
    checkpoint_meta = {
        "entry_id": entry["id"], "task": task.name, "framework": "pytorch", "model": entry["model"],
        "model_args": entry["model_args"], "in_channels": int(train_x.shape[1]), "num_classes": n_classes,
        "mean": mean, "std": std, "precision": hp["precision"], "channels_last": hp["channels_last"],
        "tta_flip": hp["tta_flip"], "threshold": settings["threshold"], "metric": task.metric_column,
    }
    print(f"train: {entry['id']} seed {settings['seed']} on {device} ({torch.get_num_threads()} threads): "
          f"{n_train} training items, {test_x.shape[0]} test items, {hp['epochs']} epochs of {steps} steps, "
          f"threshold {task.metric_column} >= {settings['threshold']:g}" + (" (demo threshold)" if settings["demo_threshold"] else ""))

    wall_start = time.perf_counter() - wall_offset
    mark_training_clock(wall_start)  # places the log's wall_hours on the telemetry samples
    stopped_early = False
    for epoch in range(start_epoch, hp["epochs"]):
        if logbook.reached_row is not None and settings["stop_at_threshold"]:  # resumed after reaching it
            stopped_early = True
            break
        model.train()
        epoch_clock_before = clock.elapsed
        with clock.running():
            perm = torch.randperm(n_train, generator=gen)
            loss_sum = torch.zeros((), device=device)
            seen = 0
            for step, (xb, yb) in enumerate(epoch_batches(train_x, train_y, perm, batch, steps)):
                x = xb.float() / 255.0
                if aug["random_resized_crop"]["size"]:
                    x = random_resized_crop(x, aug["random_resized_crop"]["size"], aug["random_resized_crop"]["min_scale"], gen)
                x = augment(x, aug["crop_padding"], aug["flip"], gen)
                x = normalize(x).contiguous(memory_format=fmt)
                y = yb.long()
                lr = lr_at(epoch + step / steps, hp["lr"], hp["schedule"], hp["epochs"])
                for group in optimizer.param_groups:
                    group["lr"] = lr
                with autocast(device, hp["precision"]):
                    loss = F.cross_entropy(model(x), y, label_smoothing=hp["label_smoothing"])
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                loss_sum += loss.detach().float() * y.shape[0]
                seen += y.shape[0]
            train_loss = float(loss_sum) / seen
        epoch_seconds = clock.elapsed - epoch_clock_before
        if not np.isfinite(train_loss):
            raise DawnpipeError(f"{entry['id']} seed {settings['seed']}: training loss became {train_loss} in epoch {epoch + 1}; the recipe diverged")

        t_eval = time.perf_counter()
        metrics, eval_loss = evaluate(model, test_x, test_y, normalize, hp, device, task.log_columns)
        eval_seconds = time.perf_counter() - t_eval

        row = {
            "epoch": epoch + 1, "hours": clock.elapsed / 3600.0, **metrics,
            "wall_hours": None, "train_loss": train_loss, "eval_loss": eval_loss, "eval_seconds": eval_seconds,
            "checkpoint_seconds": 0.0, "epoch_train_seconds": epoch_seconds, "lr": lr,
            "items_per_second": seen / epoch_seconds if epoch_seconds > 0 else float("nan"),
        }
        t_ckpt = time.perf_counter()
        first_reached = logbook.add(row)
        if first_reached:
            save_checkpoint(work_threshold, {**checkpoint_meta, "state_dict": model.state_dict(), "epoch": epoch + 1,
                                             "metric_value": row[task.metric_column], "reached_threshold": True})
        row["wall_hours"] = (time.perf_counter() - wall_start) / 3600.0
        logbook.write(out.work_dir / "train.tsv", out.work_dir / "train.parquet")
        save_checkpoint(last_path, {
            "settings_hash": settings_hash, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict(), "generator": gen.get_state(), "torch_rng": torch.get_rng_state(),
            "rows": logbook.rows, "clock_seconds": clock.elapsed, "epoch": epoch + 1,
            "wall_seconds": time.perf_counter() - wall_start,
        })
        row["checkpoint_seconds"] = time.perf_counter() - t_ckpt
        print(logbook.progress_line(row, hp["epochs"], first_reached), flush=True)
        if first_reached and settings["stop_at_threshold"] and epoch + 1 < hp["epochs"]:
            stopped_early = True
            print(f"train: stopping at the threshold (stop_at_threshold); {hp['epochs'] - epoch - 1} epochs of the budget not run")
            break

    reached = logbook.reached_row
    if reached is None:
        last = logbook.rows[-1]
        save_checkpoint(work_threshold, {**checkpoint_meta, "state_dict": model.state_dict(), "epoch": last["epoch"],
                                         "metric_value": last[task.metric_column], "reached_threshold": False})
        print(f"train: did not converge: best {task.metric_column} {max(r[task.metric_column] for r in logbook.rows):.2f} "
              f"< threshold {settings['threshold']:g} after {last['epoch']} epochs")
    logbook.write(out.tsv, out.parquet)
    move_into_place(work_threshold, out.checkpoint)
    return {
        "reached": reached is not None,
        "threshold_epoch": reached["epoch"] if reached else None,
        "time_to_accuracy_hours": reached["hours"] if reached else None,
        "epochs_run": logbook.rows[-1]["epoch"],
        "stopped_at_threshold": stopped_early,
        "training_hours": clock.elapsed / 3600.0,
        "wall_hours": (time.perf_counter() - wall_start) / 3600.0,
        "best_metric": max(r[task.metric_column] for r in logbook.rows),
        "resumed_from_epoch": resumed_from,
        "train_items": int(n_train), "test_items": int(test_x.shape[0]),
        "environment": _environment(device),
    }


def _environment(device) -> dict[str, Any]:
    from dawnpipe.runinfo import torch_environment

    return torch_environment(device)

"""PyTorch trainer: one entry, one seed.

The training clock (SPEC.md, objective 1) covers each epoch's training loop:
shuffling, augmentation, host-to-device copies, forward, backward and the
optimizer step. Evaluation, checkpointing and log writing run with the clock
stopped. On CUDA the clock is read only after ``torch.cuda.synchronize()``, so
queued kernels are not left outside it. The whole data set is moved to the
device once, before the clock starts, as uint8 (like airbench), and batches are
augmented on the device. Sets too large for memory (ImageNet) are streamed
from memory-mapped shards instead: see dawnpipe.train.data_source.

Resuming and interruptions: after every epoch the whole training state
(model, optimizer, gradient scaler, every random generator, the schedule's
position, log rows, clocks) goes to ``<work-dir>/last.pt``; a restarted run
with the same settings continues from there, and the training time an
interruption lost is counted in its clock and recorded
(dawnpipe.train.interruptions). SIGTERM stops the run at the next step (with
several processes, at the next multiple of STOP_CHECK_STEPS).

Data-parallel (an entry's ``distributed:``): one process per rank, started by
the CLI (dawnpipe.train.distributed); each trains on its share of every
global batch under DistributedDataParallel, the clock is read on rank 0 after
a barrier, evaluation is split across the ranks, and rank 0 alone writes.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from dawnpipe.data.loader import load_split
from dawnpipe.entries import config_hash
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import atomic_path
from dawnpipe.models.torch_zoo import build_model
from dawnpipe.tasks import get_task
from dawnpipe.telemetry import mark_training_clock
from dawnpipe.train import EntryError, naming_the_model
from dawnpipe.train import distributed as ddp
from dawnpipe.train.data_source import device_images, draw_resized_crop, epoch_batches, image_stats, resized_crop
from dawnpipe.train.distributed import SINGLE, Rank
from dawnpipe.train.interruptions import EpochGuard, StopRequest
from dawnpipe.train.logbook import Logbook
from dawnpipe.train.outputs import Outputs, publish_checkpoint
from dawnpipe.train.schedule import lr_at, steps_per_epoch
from dawnpipe.train.state import common_state, restore_common, why_not_resumable

# With several processes, a stop request (a SIGTERM that reached any rank) is
# looked for every STOP_CHECK_STEPS steps, not every step: looking is an
# all-reduce whose answer the host must wait for, which on CUDA drains the
# queue of kernels the GPU would otherwise run ahead on. Every rank counts
# the same steps, so all of them look, and stop, at the same step. 20 steps
# keep the delay well inside Slurm's 30 s between SIGTERM and SIGKILL even at
# one second a step. One process reads its own flag at every step (no sync).
STOP_CHECK_STEPS = 20


class TrainingClock:
    """Accumulates seconds spent inside ``with clock.running():`` blocks. With
    several processes every rank waits at a barrier before each reading, so
    rank 0's clock (the one logged) spans the slowest rank's work."""

    def __init__(self, device: torch.device, elapsed: float = 0.0, rank: Rank = SINGLE):
        self.device = device
        self.elapsed = elapsed
        self.rank = rank

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        ddp.barrier(self.rank)

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


def pick_device(requested: str, rank: Rank = SINGLE) -> torch.device:
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise DawnpipeError(
                f"entry asks for device: cuda but no CUDA device is available (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
            )
        if rank.distributed:  # one GPU per process
            torch.cuda.set_device(ddp.cuda_device_index(rank, torch.cuda.device_count()))
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
def evaluate(model, images, labels, normalize, hp, device, metric_columns, rank: Rank = SINGLE) -> tuple[dict[str, float], float]:
    """Metrics in percent for ``metric_columns`` (top1Accuracy/top5Accuracy) and
    the mean loss. With several processes each evaluates its share of the
    items and the counts are summed."""
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


def build_optimizer(model, hp):
    params = model.parameters()
    if hp["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=hp["lr"], momentum=hp["momentum"], nesterov=hp["nesterov"], weight_decay=hp["weight_decay"])
    cls = torch.optim.Adam if hp["optimizer"] == "adam" else torch.optim.AdamW
    return cls(params, lr=hp["lr"], betas=(hp["momentum"], 0.999), weight_decay=hp["weight_decay"])


def model_from_entry(entry: dict[str, Any], *, in_channels: int, num_classes: int) -> torch.nn.Module:
    """The entry's network; an unknown ``model`` or a bad ``model_args`` is an error naming both."""
    with naming_the_model(entry):
        return build_model(entry["model"], in_channels=in_channels, num_classes=num_classes, **entry["model_args"])


def check_entry(entry: dict[str, Any]) -> None:
    """What can be checked before any data is read or any process started
    (train.cli calls it): the model is built on the meta device, which
    allocates and initialises nothing. Channels and classes are placeholders
    here; the real ones come with the data."""
    with torch.device("meta"):
        model_from_entry(entry, in_channels=3, num_classes=10)
    world = ddp.Layout.of(entry).world_size
    if entry["hyperparameters"]["batch_size"] < world:
        raise EntryError(
            f"hyperparameters.batch_size {entry['hyperparameters']['batch_size']} is smaller than the {world} "
            "processes of distributed: (the batch is global, split across the processes)"
        )


def stop_due(stop: StopRequest, step: int, rank: Rank, device) -> bool:
    """Whether to stop before ``step`` of an epoch: every rank gives the same
    answer (see STOP_CHECK_STEPS)."""
    if not rank.distributed:
        return stop.requested
    return step % STOP_CHECK_STEPS == 0 and ddp.any_rank(stop.requested, rank, device)


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def threshold_checkpoint(meta: dict[str, Any], model, row: dict[str, Any], metric_column: str, reached: bool) -> dict[str, Any]:
    """The payload of model.pt: the weights after the epoch of ``row`` (the
    first at the threshold, or the last when none reached it) with what
    inference needs to rebuild the model."""
    return {**meta, "state_dict": model.state_dict(), "epoch": row["epoch"], "metric_value": row[metric_column], "reached_threshold": reached}


def training_state(
    settings_hash: str,
    epochs_done: int,
    wall_seconds: float,
    *,
    hp: dict[str, Any],
    model,
    optimizer,
    scaler,
    gen,
    logbook: Logbook,
    clock: TrainingClock,
    **extra,
) -> dict[str, Any]:
    """Everything a restarted job needs to continue after ``epochs_done``
    epochs as if never stopped: weights, optimizer, scaler, the schedule's
    position, every random generator (the data generator, torch's CPU and CUDA
    ones, Python's and NumPy's), the log and the clocks so far."""
    return {
        **common_state(settings_hash, epochs_done, hp=hp, rows=logbook.rows, clock_seconds=clock.elapsed, wall_seconds=wall_seconds),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(),
        "generator": gen.get_state(),
        "torch_rng": torch.get_rng_state(),
        # Once CUDA is in use; before that its generators still hold the seed's
        # state, which seed_everything recreates (and asking would start CUDA on a CPU run).
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
        **extra,
    }


def restore_state(
    path: Path, settings_hash: str, device, *, model, optimizer, scaler, gen, logbook: Logbook, clock: TrainingClock, say: bool = True
) -> tuple[float, int] | None:
    """Load a ``training_state`` saved by a run of the same settings into the
    given objects: (wall seconds so far, epochs done); None (start over) when
    it belongs to other settings or another state format."""
    state = torch.load(path, map_location=device, weights_only=False)
    if (reason := why_not_resumable(state, settings_hash)) is not None:
        if say:
            print(f"train: ignoring {path}: {reason}")
        return None
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    # generator states must be CPU byte tensors, wherever map_location put them
    gen.set_state(state["generator"].cpu())
    torch.set_rng_state(state["torch_rng"].cpu())
    if state["cuda_rng"] is not None and torch.cuda.is_available():
        for index, cuda_state in enumerate(state["cuda_rng"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state.cpu(), index)
    logbook.rows, clock.elapsed, wall_seconds, epochs_done = restore_common(state)
    if say:
        print(f"train: resuming after epoch {epochs_done} from {path} (training clock {clock.elapsed:.1f}s so far)")
    return wall_seconds, epochs_done


def train(
    settings: dict[str, Any], data_dir: Path, out: Outputs, *, threads: int | None = None, resume: bool = True, rank: Rank = SINGLE
) -> dict[str, Any] | None:
    """Train one entry with one seed; the summary for run.json (None on ranks other than 0)."""
    if threads:
        torch.set_num_threads(threads)
    gen = seed_everything(settings["seed"])
    device = pick_device(settings["entry"]["device"], rank)
    rank = ddp.init(rank, device.type)
    try:
        with StopRequest().active() as stop:
            return _train(settings, data_dir, out, resume=resume, rank=rank, gen=gen, device=device, stop=stop)
    finally:
        ddp.shutdown(rank)


def _train(
    settings, data_dir: Path, out: Outputs, *, resume: bool, rank: Rank, gen: torch.Generator, device: torch.device, stop: StopRequest
) -> dict[str, Any] | None:
    entry, hp = settings["entry"], settings["entry"]["hyperparameters"]
    task = get_task(entry["task"])
    settings_hash = config_hash(settings)
    world = rank.world_size

    train_split = load_split(data_dir, "train", settings["train_limit"])
    test_split = load_split(data_dir, "test", settings["test_limit"])
    # in memory, or streamed from shards for ImageNet-sized sets (dawnpipe.train.data_source)
    train_x, train_y = device_images(train_split, device), torch.from_numpy(np.array(train_split.labels)).to(device)
    test_x, test_y = device_images(test_split, device), torch.from_numpy(np.array(test_split.labels)).to(device)
    mean, std = image_stats(train_split, train_x)
    normalize = Normalizer(mean, std, device)
    n_classes = len(train_split.classes)

    model = model_from_entry(entry, in_channels=int(train_x.shape[1]), num_classes=n_classes).to(device)
    fmt = torch.channels_last if hp["channels_last"] else torch.contiguous_format
    model = model.to(memory_format=fmt)
    optimizer = build_optimizer(model, hp)
    scaler = torch.amp.GradScaler("cuda", enabled=(device.type == "cuda" and hp["precision"] == "fp16"))
    logbook = Logbook(task.log_columns, task.metric_column, settings["threshold"], demo=settings["demo_threshold"])
    clock = TrainingClock(device, rank=rank)
    guard = EpochGuard(stop, out.work_dir, settings_hash, resume=resume, keeps_journal=rank.is_main)
    wall_offset, start_epoch, resumed_from = 0.0, 0, None

    last_path = out.work_dir / "last.pt"
    work_threshold = out.work_dir / "threshold.pt"
    if resume and last_path.exists():
        restored = restore_state(
            last_path, settings_hash, device, model=model, optimizer=optimizer, scaler=scaler, gen=gen, logbook=logbook, clock=clock, say=rank.is_main
        )
        if restored is not None:
            wall_offset, start_epoch = restored
            resumed_from = start_epoch
    # spent, and paid for: counted in the training clock (and the wall clock, which never runs behind it)
    pending = guard.lost_before(start_epoch + 1)
    clock.elapsed += pending
    wall_offset += pending

    n_train, batch = train_x.shape[0], hp["batch_size"]
    steps = steps_per_epoch(n_train, batch, settings["train_limit"], world)
    aug, rrc = hp["augment"], hp["augment"]["random_resized_crop"]
    rank_batch = ddp.shard(batch, rank)[1] - ddp.shard(batch, rank)[0]  # this rank's share of a full batch
    train_model = ddp.wrap(model, rank, device)

    def rank_perm(perm: torch.Tensor) -> torch.Tensor:
        """This rank's items of an epoch, step after step: its share of each global batch."""
        if not rank.distributed:
            return perm
        shares = [perm[s * batch : (s + 1) * batch] for s in range(steps)]
        return torch.cat([g[slice(*ddp.shard(len(g), rank))] for g in shares])

    checkpoint_meta = {
        "entry_id": entry["id"],
        "task": task.name,
        "framework": "pytorch",
        "model": entry["model"],
        "model_args": entry["model_args"],
        "in_channels": int(train_x.shape[1]),
        "num_classes": n_classes,
        "mean": mean,
        "std": std,
        "precision": hp["precision"],
        "channels_last": hp["channels_last"],
        "tta_flip": hp["tta_flip"],
        "threshold": settings["threshold"],
        "metric": task.metric_column,
    }
    if rank.is_main:
        print(
            f"train: {entry['id']} seed {settings['seed']} on {device} ({torch.get_num_threads()} threads"
            + (f" x {world} processes, {rank.backend}" if rank.distributed else "")
            + "): "
            f"{n_train} training items, {test_x.shape[0]} test items, {hp['epochs']} epochs of {steps} steps, "
            f"threshold {task.metric_column} >= {settings['threshold']:g}" + (" (demo threshold)" if settings["demo_threshold"] else ""),
            flush=True,
        )

    wall_start = time.perf_counter() - wall_offset
    mark_training_clock(wall_start)  # places the log's wall_hours on the telemetry samples
    stopped_early = False
    for epoch in range(start_epoch, hp["epochs"]):
        if logbook.reached_row is not None and settings["stop_at_threshold"]:  # resumed after reaching it
            stopped_early = True
            break
        guard.stop_before(epoch + 1, ddp.any_rank(stop.requested, rank, device))
        train_model.train()
        epoch_clock_before = clock.elapsed
        guard.begin(epoch + 1, clock.elapsed)
        interrupted = False
        with clock.running():
            perm = torch.randperm(n_train, generator=gen)
            loss_sum = torch.zeros((), device=device)
            seen = 0
            for step, (xb, yb) in enumerate(epoch_batches(train_x, train_y, rank_perm(perm), rank_batch, steps)):
                if stop_due(stop, step, rank, device):
                    interrupted = True
                    break
                # one generator, the same draws on every rank for the whole global batch; each rank takes its share
                global_items = min(batch, n_train - step * batch)
                lo, hi = ddp.shard(global_items, rank)
                x = xb.float() / 255.0
                if rrc["size"]:
                    x = resized_crop(x, rrc["size"], draw_resized_crop(global_items, rrc["min_scale"], gen)[lo:hi])
                choices = draw_augment(global_items, aug["crop_padding"], aug["flip"], gen)
                x = apply_augment(x, {k: v[lo:hi] for k, v in choices.items()}, aug["crop_padding"])
                x = normalize(x).contiguous(memory_format=fmt)
                y = yb.long()
                lr = lr_at(epoch + step / steps, hp["lr"], hp["schedule"], hp["epochs"])
                for group in optimizer.param_groups:
                    group["lr"] = lr
                with autocast(device, hp["precision"]):
                    loss = F.cross_entropy(train_model(x), y, label_smoothing=hp["label_smoothing"])
                # weighted by this rank's share, so DDP's average over ranks is the global batch's mean
                objective = loss * (y.shape[0] * world / global_items) if rank.distributed else loss
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(objective).backward()
                scaler.step(optimizer)
                scaler.update()
                loss_sum += loss.detach().float() * y.shape[0]
                seen += y.shape[0]
                guard.heartbeat()
            if not interrupted and rank.distributed:
                totals = ddp.all_reduce_sum(torch.stack([loss_sum, torch.tensor(float(seen), device=device)]), rank)
                loss_sum, seen = totals[0], int(totals[1].item())
        if interrupted:
            guard.stop_within(epoch + 1, clock.elapsed - epoch_clock_before)
        epoch_seconds = clock.elapsed - epoch_clock_before
        train_loss = float(loss_sum) / seen
        guard.trained(epoch + 1, epoch_seconds)
        if not np.isfinite(train_loss):
            raise DawnpipeError(f"{entry['id']} seed {settings['seed']}: training loss became {train_loss} in epoch {epoch + 1}; the recipe diverged")

        t_eval = time.perf_counter()
        ddp.sync_buffers(model, rank)
        metrics, eval_loss = evaluate(model, test_x, test_y, normalize, hp, device, task.log_columns, rank)
        t_evaluated = time.perf_counter()

        row = logbook.epoch_row(
            epoch + 1,
            clock.elapsed,
            metrics,
            train_loss=train_loss,
            eval_loss=eval_loss,
            eval_seconds=t_evaluated - t_eval,
            wall_seconds=t_evaluated - wall_start,
            epoch_seconds=epoch_seconds,
            lr=lr,
            items=seen,
            lost_seconds=guard.lost_in(epoch + 1),
        )
        t_ckpt = time.perf_counter()
        first_reached = logbook.add(row)  # on every rank: the metrics are global, so every rank decides alike
        if rank.is_main:
            if first_reached:
                save_checkpoint(work_threshold, threshold_checkpoint(checkpoint_meta, model, row, task.metric_column, True))
            logbook.write(out.work_dir / "train.tsv", out.work_dir / "train.parquet")
            save_checkpoint(
                last_path,
                training_state(
                    settings_hash,
                    epoch + 1,
                    time.perf_counter() - wall_start,
                    hp=hp,
                    model=model,
                    optimizer=optimizer,
                    scaler=scaler,
                    gen=gen,
                    logbook=logbook,
                    clock=clock,
                    world_size=world,
                ),
            )
            guard.saved(epoch + 1)
            row["checkpoint_seconds"] = time.perf_counter() - t_ckpt
            print(logbook.progress_line(row, hp["epochs"], first_reached), flush=True)
        if logbook.stops_early(first_reached, epoch + 1, hp["epochs"], settings["stop_at_threshold"], say=rank.is_main):  # every rank alike
            stopped_early = True
            break

    ddp.barrier(rank)
    if not rank.is_main:
        return None
    if logbook.reached_row is None:
        save_checkpoint(work_threshold, threshold_checkpoint(checkpoint_meta, model, logbook.rows[-1], task.metric_column, False))
        print(logbook.not_converged_message())
    logbook.write(out.tsv, out.parquet)
    publish_checkpoint(work_threshold, out.checkpoint)
    return {
        **logbook.summary(clock_seconds=clock.elapsed, wall_seconds=time.perf_counter() - wall_start, stopped_early=stopped_early, resumed_from=resumed_from),
        **guard.summary(),
        "world_size": world,
        "distributed": ddp.layout_record(ddp.Layout.of(entry), rank),
        "train_items": int(n_train),
        "test_items": int(test_x.shape[0]),
        "environment": _environment(device),
    }


def _environment(device) -> dict[str, Any]:
    from dawnpipe.runinfo import torch_environment

    return torch_environment(device)

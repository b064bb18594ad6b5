"""The training loop, once for every trainer (PyTorch images, the SQuAD
reader, TensorFlow): the timed region, the interruption guard, the per-epoch
log, checkpoints, resuming and stopping at the threshold.

A trainer supplies only what differs between frameworks and tasks (the
``Trainer`` protocol): one epoch of training, an evaluation, and its state
in and out of a file. Everything a reader of a result must trust is here, in
one place:

- the training clock (docs/rules.md#1-training-time) runs around
  ``trainer.epoch()`` alone, read after ``trainer.sync()`` (CUDA's
  synchronize, TensorFlow's, and with several processes a barrier, so rank 0's
  clock spans the slowest rank); evaluation, checkpointing and log writing run
  with it stopped;
- the time an interruption lost is added to the clock (train.interruptions);
- an epoch's row is logged, the threshold checkpoint taken at the first epoch
  at the threshold, and the state saved for resuming, in that order, by the
  process that writes (rank 0) only;
- the run ends as a program entry's does (dawnpipe.train.finish): the log and
  the threshold checkpoint published, run.json's result, the MLLOG.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError
from dawnpipe.telemetry import mark_training_clock
from dawnpipe.train.finish import Ending, FinishedRun, finish
from dawnpipe.train.interruptions import EpochGuard, StopRequest
from dawnpipe.train.logbook import Logbook, epoch_row
from dawnpipe.train.outputs import Outputs
from dawnpipe.train.settings import RunSettings
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
    """Seconds spent inside ``with clock.running():`` blocks, each read after
    ``sync`` so that no queued work is left outside the clock."""

    def __init__(self, sync: Callable[[], None], elapsed: float = 0.0):
        self.sync = sync
        self.elapsed = elapsed

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        self.sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            self.sync()
            self.elapsed += time.perf_counter() - start


@dataclass
class EpochResult:
    """What one epoch of training did: the summed loss over its items (every
    rank's, with several), how many items, the last learning rate."""

    loss_sum: float
    items: int
    lr: float
    interrupted: bool = False


class Steps:
    """Given to ``Trainer.epoch``: ``keep_going(step)`` before every step says
    whether to go on (False: a stop was requested) and keeps the epoch's
    heartbeat (the kill estimate of train.interruptions)."""

    def __init__(self, stop: StopRequest, guard: EpochGuard, any_rank: Callable[[bool], bool], distributed: bool):
        self.stop, self.guard, self.any_rank, self.distributed = stop, guard, any_rank, distributed

    def keep_going(self, step: int) -> bool:
        if step:
            self.guard.heartbeat()
        if not self.distributed:
            return not self.stop.requested
        return not (step % STOP_CHECK_STEPS == 0 and self.any_rank(self.stop.requested))


class Trainer(Protocol):
    """What a framework's trainer supplies to the loop."""

    is_main: bool  # the process that writes (rank 0, or the only one)
    distributed: bool
    state_file: str  # name of its resumable state in the work directory (last.pt, last.npz)
    threshold_file: str  # name of its threshold checkpoint in the work directory

    def describe(self) -> str: ...  # the run's first line: what trains, on what, how much
    def sync(self) -> None: ...  # before each reading of the clock
    def any_rank(self, flag: bool) -> bool: ...  # whether any process has ``flag`` (itself, alone)
    def barrier(self) -> None: ...
    def epoch(self, epoch: int, steps: Steps) -> EpochResult: ...  # epoch is 0-based; runs on the clock
    def evaluate(self) -> tuple[dict[str, float], float]: ...  # (metrics, eval loss); clock stopped
    def save_state(self, path: Path, common: dict[str, Any]) -> None: ...  # common: dawnpipe.train.state
    def read_state(self, path: Path) -> tuple[dict[str, Any], Callable[[], None]]: ...  # (common part, apply the rest)
    def save_threshold(self, path: Path, row: dict[str, Any], reached: bool) -> None: ...
    def progress_suffix(self, row: dict[str, Any]) -> str: ...  # more for the epoch's line ("" for none)
    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]: ...  # its part of run.json's result, given the log's rows, and its "environment"


def damage(e: Exception) -> str:
    """What is wrong with a resume state, from the error reading it raised."""
    if isinstance(e, KeyError) and e.args:
        return f"it lacks {e.args[0]!r}"
    text = str(e).strip()[:200]
    return text if isinstance(e, ValueError) else f"{type(e).__name__}: {text}"


def run(trainer: Trainer, settings: RunSettings, out: Outputs, logbook: Logbook, *, resume: bool, stop: StopRequest) -> FinishedRun | None:
    """Train ``trainer`` to its epoch budget (or the threshold, when
    settings say stop_at_threshold); what it did, or None on ranks other
    than 0. SIGTERM/SIGUSR1 stop it between steps, leaving a resumable
    state (Interrupted)."""
    recipe, main, settings_hash = settings.entry.recipe, trainer.is_main, settings.config_hash
    guard = EpochGuard(stop, out.work_dir, settings_hash, resume=resume, keeps_journal=main)
    clock = TrainingClock(trainer.sync)
    last_path, threshold_path = out.work_dir / trainer.state_file, out.work_dir / trainer.threshold_file
    wall_offset, start_epoch, resumed_from = 0.0, 0, None
    if resume and last_path.exists():
        common, apply = trainer.read_state(last_path)
        if (reason := why_not_resumable(common, settings_hash)) is not None:
            if main:
                print(terminal_safe(f"train: ignoring {last_path}: {reason}"))  # the reason quotes values of the state file
        else:
            try:
                logbook.rows, clock.elapsed, wall_offset, start_epoch = restore_common(common)
                apply()
            except (KeyError, ValueError, TypeError, IndexError, AttributeError, RuntimeError) as e:
                if isinstance(e, RuntimeError) and not str(e).startswith("Error(s) in loading state_dict"):
                    raise  # out of memory, a device error: not the file's fault
                raise DawnpipeError(f"{last_path}: cannot resume from it ({damage(e)}); remove it to train from the start") from None
            resumed_from = start_epoch
            if main:
                print(terminal_safe(f"train: resuming after epoch {start_epoch} from {last_path} (training clock {clock.elapsed:.1f}s so far)"))
    # spent, and paid for: counted in the training clock (and the wall clock, which never runs behind it)
    pending = guard.lost_before(start_epoch + 1)
    clock.elapsed += pending
    wall_offset += pending
    if main:
        print(trainer.describe(), flush=True)

    steps = Steps(stop, guard, trainer.any_rank, trainer.distributed)
    wall_start = time.perf_counter() - wall_offset
    mark_training_clock(wall_start)  # places the log's wall_hours on the telemetry samples
    stopped_early = False
    for epoch in range(start_epoch, recipe.epochs):
        if logbook.reached_row is not None and settings.stop_at_threshold:  # resumed after reaching it
            stopped_early = True
            break
        guard.stop_before(epoch + 1, trainer.any_rank(stop.requested))
        before = clock.elapsed
        guard.begin(epoch + 1, clock.elapsed)
        with clock.running():  # the timed region: one epoch of training, nothing else
            result = trainer.epoch(epoch, steps)
        if result.interrupted:
            guard.stop_within(epoch + 1, clock.elapsed - before)
        epoch_seconds = clock.elapsed - before
        guard.trained(epoch + 1, epoch_seconds)
        train_loss = result.loss_sum / result.items
        if not math.isfinite(train_loss):
            raise DawnpipeError(f"{settings.label}: training loss became {train_loss} in epoch {epoch + 1}; the recipe diverged")

        t_eval = time.perf_counter()
        metrics, eval_loss = trainer.evaluate()
        t_evaluated = time.perf_counter()
        row = epoch_row(
            epoch + 1,
            clock.elapsed,
            metrics,
            train_loss=train_loss,
            eval_loss=eval_loss,
            eval_seconds=t_evaluated - t_eval,
            wall_seconds=t_evaluated - wall_start,
            epoch_seconds=epoch_seconds,
            lr=result.lr,
            items=result.items,
            lost_seconds=guard.lost_in(epoch + 1),
        )
        t_saving = time.perf_counter()
        first_reached = logbook.add(row)  # on every rank: the metrics are global, so every rank decides alike
        if main:
            if first_reached:
                trainer.save_threshold(threshold_path, row, True)
            logbook.write(out.work_dir / "train.tsv", out.work_dir / "train.parquet")
            wall_seconds = time.perf_counter() - wall_start
            trainer.save_state(
                last_path,
                common_state(settings_hash, epoch + 1, hp=recipe.hyperparameters, rows=logbook.rows, clock_seconds=clock.elapsed, wall_seconds=wall_seconds),
            )
            guard.saved(epoch + 1)
            row["checkpoint_seconds"] = time.perf_counter() - t_saving
            print(logbook.progress_line(row, recipe.epochs, first_reached) + trainer.progress_suffix(row), flush=True)
        if logbook.stops_early(first_reached, epoch + 1, recipe.epochs, settings.stop_at_threshold, say=main):
            stopped_early = True
            break

    trainer.barrier()
    if not main:
        return None
    if logbook.reached_row is None:
        trainer.save_threshold(threshold_path, logbook.rows[-1], False)  # the last epoch's model, then
    own = trainer.summary(logbook.rows)
    environment = own.pop("environment")
    interruptions, lost_seconds = guard.interruptions()
    ending = Ending(
        clock_seconds=clock.elapsed,
        wall_start=wall_start,
        wall_end=None,
        stopped_early=stopped_early,
        resumed_from=resumed_from,
        interruptions=interruptions,
        lost_seconds=lost_seconds,
    )
    result = finish(logbook, out, settings, ending, threshold_checkpoint=threshold_path, own=own)
    return FinishedRun(result, environment)

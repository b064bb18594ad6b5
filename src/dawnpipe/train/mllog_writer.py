"""A run's MLLOG (``train.mllog``), written through MLCommons' own
``mlperf_logging.mllog``, so their parser, checkers and summarizer can read
our runs. (A program entry's own MLLOG, as it prints it, is read by
dawnpipe.programs.mllog_reader.)

What the times mean. MLPerf's time to train is ``run_stop - run_start`` in
wall-clock milliseconds, evaluation included; dawnpipe's objective
(docs/rules.md#1-training-time) is the training clock, evaluation excluded.
The log keeps MLPerf's meaning and says ours beside it: every ``time_ms`` is
on the run's wall clock (``wall_hours`` of train.parquet), and each
``epoch_stop`` carries the training clock in its metadata
(``training_clock_ms``), so MLCommons' tools compute our wall time to accuracy
and the DAWNBench time is there too. ``run_stop`` comes after the evaluation
of the first epoch at the threshold (status ``success``), or after the last
epoch (``aborted``: never reached).

The log is written once, when the run completes, from the per-epoch log:
a run that was interrupted and resumed gets one epoch_start/epoch_stop per
epoch, never a duplicate; its wall clock, like wall_hours, leaves out the
time no attempt was running and counts the training an interruption lost.
``init_start`` is when this process started (imports, reading data, building
the model: all of it is initialisation in MLPerf's sense), ``init_stop`` is
``run_start``.

Submission keys, honestly: ``submission_benchmark`` is our task (not an
MLPerf benchmark, so MLPerf's closed-division checks do not apply), division
``open``, status ``research`` (a run of a benchmark pipeline, not a system on
sale), platform the run's hardware column, org "dawnpipe".
"""

from __future__ import annotations

import io
import logging
import os
import time
from pathlib import Path
from typing import Any

from dawnpipe.fileio import write_text
from dawnpipe.train.distributed import hardware_tag
from dawnpipe.train.settings import Recipe, RunSettings


def _optimizer_keys(recipe: Recipe) -> dict[str, Any]:
    from mlperf_logging.mllog import constants as c

    opt = recipe.optimizer
    keys: dict[str, Any] = {c.OPT_NAME: opt, c.OPT_BASE_LR: recipe.lr, c.OPT_WEIGHT_DECAY: recipe.weight_decay}
    if opt == "sgd":
        keys["sgd_opt_momentum"] = recipe.momentum
    else:
        prefix = "opt_adam" if opt == "adam" else "opt_adamw"
        keys |= {f"{prefix}_beta_1": recipe.momentum, f"{prefix}_beta_2": 0.999, f"{prefix}_epsilon": 1e-8}
    schedule = recipe.schedule
    if schedule["kind"] == "step":
        keys |= {
            c.OPT_LR_WARMUP_EPOCHS: schedule["warmup_epochs"],
            c.OPT_LR_DECAY_BOUNDARY_EPOCHS: list(schedule["milestones"]),
            c.OPT_LR_DECAY_FACTOR: schedule["gamma"],
        }
    elif schedule["kind"] == "onecycle":
        keys |= {c.OPT_LR_WARMUP_EPOCHS: schedule["peak_epoch"], c.OPT_LR_DECAY_SCHEDULE: "linear one-cycle to end_fraction x lr"}
        if "decay_epoch" in schedule:
            keys[c.OPT_LR_DECAY_SCHEDULE] = f"held at lr until epoch {schedule['decay_epoch']:g}, then linear to end_fraction x lr"
    return keys


def recipe_keys(recipe: Recipe) -> dict[str, Any]:
    """The MLLOG keys of a zoo entry's recipe: batch, accumulation, optimizer and schedule."""
    from mlperf_logging.mllog import constants as c

    return {c.GLOBAL_BATCH_SIZE: recipe.batch_size, c.GRADIENT_ACCUMULATION_STEPS: 1, **_optimizer_keys(recipe)}


def write(
    path: Path,
    *,
    settings: RunSettings,
    rows: list[dict[str, Any]],
    metric: str,
    run_start_unix: float,
    train_samples: int,
    keys: dict[str, Any] | None = None,
) -> None:
    """train.mllog for a run whose per-epoch log is ``rows`` and whose wall
    clock started at ``run_start_unix`` (seconds since the epoch). ``keys``:
    the recipe's MLLOG keys (default: a zoo entry's, ``recipe_keys``; a
    program's are those it logged itself)."""
    from mlperf_logging.mllog import constants as c
    from mlperf_logging.mllog.mllog import MLLogger

    stream = io.StringIO()
    logger = logging.Logger("dawnpipe.mllog")
    logger.addHandler(logging.StreamHandler(stream))
    log = MLLogger(logger=logger)
    entry = settings.entry
    layout = entry.layout

    def ms(seconds_after_start: float) -> int:
        return int(round((run_start_unix + seconds_after_start) * 1000))

    start = ms(0.0)
    try:
        import psutil

        init_start = int(round(psutil.Process(os.getpid()).create_time() * 1000))
    except (ImportError, OSError):
        init_start = start
    log.start(c.INIT_START, time_ms=min(init_start, start))
    for key, value in (
        (c.SUBMISSION_BENCHMARK, entry.task),
        (c.SUBMISSION_ORG, "dawnpipe"),
        (c.SUBMISSION_DIVISION, c.OPEN),
        (c.SUBMISSION_STATUS, c.RESEARCH),
        (c.SUBMISSION_PLATFORM, hardware_tag(entry.hardware, layout)),
        (c.SUBMISSION_ENTRY, entry.id),
        (c.SEED, settings.seed),
        *(recipe_keys(entry.recipe) if keys is None else keys).items(),
        (c.TRAIN_SAMPLES, train_samples),
    ):
        log.event(key, value, time_ms=min(init_start, start))
    log.end(c.INIT_STOP, time_ms=start)
    log.start(c.RUN_START, time_ms=start, metadata={"threshold": settings.threshold, "demo_threshold": settings.demo_threshold})
    reached = None
    for row in rows:
        trained_until = row["wall_hours"] * 3600.0 - row["eval_seconds"]
        epoch = int(row["epoch"])
        log.start(c.EPOCH_START, time_ms=ms(trained_until - row["epoch_train_seconds"]), metadata={"epoch_num": epoch})
        log.end(c.EPOCH_STOP, time_ms=ms(trained_until), metadata={"epoch_num": epoch, "training_clock_ms": int(round(row["hours"] * 3.6e6))})
        log.start(c.EVAL_START, time_ms=ms(trained_until), metadata={"epoch_num": epoch})
        log.event(c.EVAL_ACCURACY, row[metric], time_ms=ms(row["wall_hours"] * 3600.0), metadata={"epoch_num": epoch, "metric": metric})
        log.end(c.EVAL_STOP, time_ms=ms(row["wall_hours"] * 3600.0), metadata={"epoch_num": epoch})
        if row[metric] >= settings.threshold:
            reached = row
            break
    last = reached or rows[-1]
    status = c.SUCCESS if reached else c.ABORTED
    log.end(c.RUN_STOP, time_ms=ms(last["wall_hours"] * 3600.0), metadata={"status": status, "epoch_num": int(last["epoch"]), "world_size": layout.world_size})
    write_text(path, stream.getvalue())


def run_start_unix(wall_start_perf: float) -> float:
    """The unix time at which a wall clock read as ``time.perf_counter() - wall_start_perf`` was zero."""
    return time.time() - (time.perf_counter() - wall_start_perf)

"""How a training run ends, once for every run: dawnpipe's own trainers
(dawnpipe.train.loop) and program entries (dawnpipe.train.program) both call
``finish``, so the two cannot drift; and run.json's document
(``run_document``), written by train.cli from the run's settings.

``finish``, on the process that writes, once the last epoch is logged:

1. says so when no epoch reached the threshold;
2. writes the per-epoch log (TSV and Parquet) to the declared outputs;
3. publishes the threshold checkpoint from the work directory (copied, never
   moved: dawnpipe.train.outputs);
4. builds run.json's ``result``: the log's summary (dawnpipe.train.logbook),
   the interruptions and the training time they lost, then the trainer's own
   part (its items, its sets, ...);
5. writes the run's MLLOG (dawnpipe.train.mllog_writer).

What a run does not know stays unknown, never a stand-in value: a program's
training loss, evaluation loss and learning rate are inside the program, so
its rows carry ``logbook.UNKNOWN`` there, null in train.parquet. Its
interruptions and the time they lost are as real as a zoo run's: both sides
must give them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dawnpipe.train import mllog_writer
from dawnpipe.train.distributed import hardware_tag
from dawnpipe.train.logbook import Logbook
from dawnpipe.train.outputs import Outputs, publish_checkpoint
from dawnpipe.train.settings import RunSettings


@dataclass(frozen=True)
class FinishedRun:
    """What a trainer's ``train`` gives back on the process that writes (None on the others)."""

    result: dict[str, Any]  # run.json's result
    environment: dict[str, Any]  # what the trainer knows of where it ran (framework, device, threads), added to dawnpipe.runinfo's
    program: dict[str, Any] | None = None  # a program entry's claims, clocks and verdict (run.json's program)


@dataclass(frozen=True)
class Ending:
    """How the run's clocks stood when it ended, and how it got there."""

    clock_seconds: float  # the training clock at the last epoch, the time interruptions lost included
    wall_start: float  # time.perf_counter() when the run's wall clock read zero (earlier attempts' wall time lies before it)
    wall_end: float | None  # time.perf_counter() when the run ended; None: when its result is built, once the log is written
    stopped_early: bool  # stop_at_threshold ended it before its budget
    resumed_from: int | None  # the epoch this attempt resumed after, else None
    interruptions: list[dict[str, Any]]  # each interruption: its epoch, the seconds it lost, how
    lost_seconds: float  # their total, counted in the clock (run.json's result.lost_training_seconds)


def finish(
    logbook: Logbook,
    out: Outputs,
    settings: RunSettings,
    ending: Ending,
    *,
    threshold_checkpoint: Path,
    own: dict[str, Any],
    mllog_keys: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """End a run whose epochs are all in ``logbook``; run.json's ``result``.

    ``threshold_checkpoint``: the work directory's model of the first epoch at
    the threshold, else of the last. ``own``: the trainer's part of the result
    (``train_items``, the items of one epoch, is required: the MLLOG's
    train_samples). ``mllog_keys``: the recipe's MLLOG keys (default: a zoo
    entry's; a program's are those it logged)."""
    if logbook.reached_row is None:
        print(logbook.not_converged_message(), flush=True)
    logbook.write(out.tsv, out.parquet)
    publish_checkpoint(threshold_checkpoint, out.checkpoint)
    wall_end = ending.wall_end if ending.wall_end is not None else time.perf_counter()
    result = {
        **logbook.summary(
            clock_seconds=ending.clock_seconds,
            wall_seconds=wall_end - ending.wall_start,
            stopped_early=ending.stopped_early,
            resumed_from=ending.resumed_from,
        ),
        "lost_training_seconds": ending.lost_seconds,
        "interruptions": ending.interruptions,
        **own,
    }
    if out.mllog is not None:
        mllog_writer.write(
            out.mllog,
            settings=settings,
            rows=logbook.rows,
            metric=logbook.threshold_column,
            run_start_unix=mllog_writer.run_start_unix(ending.wall_start),
            train_samples=result["train_items"],
            keys=mllog_keys,
        )
    return result


def run_document(
    settings: RunSettings,
    run: FinishedRun,
    *,
    environment: dict[str, Any],
    threads_from: str,
    data_manifest_sha256: str,
    started: str,
    finished: str,
    telemetry: dict[str, Any],
) -> dict[str, Any]:
    """run.json of a finished run (its readers' fields: schemas/run_files.schema.yaml, ``run``)."""
    entry, layout = settings.entry, settings.entry.layout
    return {
        "entry": entry.id,
        "seed": settings.seed,
        "task": entry.task,
        "framework": entry.framework,
        "model": entry.model,
        # the leaderboard's hardware column: the priced tag, with the process layout when there are several
        "hardware": hardware_tag(entry.hardware, layout),
        "hardware_price_tag": entry.hardware,
        "world_size": layout.world_size,
        "nodes": layout.nodes,
        # what the run actually used: the framework's threads in (rank 0's) process, and where that number came from
        "processes": layout.world_size,
        "threads_per_process": environment["threads"],
        "threads_from": threads_from,
        "threshold": settings.threshold,
        "official_threshold": settings.official_threshold,
        "demo_threshold": settings.demo_threshold,
        "config_hash": settings.config_hash,
        "data_manifest_sha256": data_manifest_sha256,
        "started": started,
        "finished": finished,
        "result": run.result,
        "environment": environment,
        "settings": settings.document,
        "telemetry": telemetry,
        **({"program": run.program} if run.program is not None else {}),
    }

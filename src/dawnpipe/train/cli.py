"""train: one entry with one seed, writing the per-epoch logs and run.json.

    python -m dawnpipe train --entry config/entries/fastnet.yaml --seed 0 \\
        --data data/prepared/fashion-mnist --tsv results/runs/fastnet/seed0/train.tsv \\
        --log-parquet results/runs/fastnet/seed0/train.parquet \\
        --checkpoint results/runs/fastnet/seed0/model.pt --run-json results/runs/fastnet/seed0/run.json

``--work-dir`` keeps the per-epoch state (resumable after an interruption);
the declared outputs appear only when the run completes, run.json last. A run
stopped by SIGTERM (a Slurm walltime) or killed resumes from its last finished
epoch when started again with the same arguments, and counts the training
time it lost (run.json ``result.interruptions``).

An entry with ``distributed:`` (several processes) makes this command start
them itself, with srun inside a Slurm allocation and torchrun elsewhere (see
dawnpipe.train.distributed); ``--threads`` is then per process. An entry's
``threads`` field takes precedence over ``--threads`` (dawnpipe.train.cli.process_threads);
run.json records the processes and threads the run used.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
from pathlib import Path

from dawnpipe import telemetry
from dawnpipe.argtypes import add_flag, add_task_options, fraction, non_negative, optional_int, seconds, task_option
from dawnpipe.argtypes import seed as seed_value
from dawnpipe.argtypes import threshold as threshold_value
from dawnpipe.data.loader import prepared_dir
from dawnpipe.entries import config_hash, precision_of, run_settings
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import read_json, write_json
from dawnpipe.runinfo import base_environment, now_iso
from dawnpipe.studies import load_entry_ref
from dawnpipe.tasks import get_task
from dawnpipe.telemetry.peaks import PROBE_SECONDS
from dawnpipe.train import DATA_PARALLEL, TRAINERS, EntryError, TrainerModule
from dawnpipe.train.distributed import SINGLE, Layout, rank_from_env, run_launcher
from dawnpipe.train.finish import run_document
from dawnpipe.train.outputs import Outputs
from dawnpipe.train.settings import Entry, RunSettings


def configure(p) -> None:
    p.add_argument("--entry", required=True, type=Path, help="entry YAML (config/entries/<id>.yaml), or a study variant: <study file>#<variant id>")
    p.add_argument(
        "--entries-dir", type=Path, default=None, help="where a study variant's base entry is (default: config/entries beside the study's directory)"
    )
    p.add_argument("--seed", required=True, type=seed_value, help="random seed of this run (0 .. 2**32 - 1)")
    p.add_argument("--data", required=True, type=Path, help="prepared data directory (with manifest.json), or a directory of them named by task")
    p.add_argument("--tsv", required=True, type=Path, help="output: DAWNBench v1 per-epoch TSV")
    p.add_argument("--log-parquet", required=True, type=Path, help="output: per-epoch Parquet log with every column")
    p.add_argument("--checkpoint", required=True, type=Path, help="output: model of the first epoch at the threshold (else the last)")
    p.add_argument("--run-json", required=True, type=Path, help="output: run.json (environment, settings, summary)")
    p.add_argument("--mllog", type=Path, help="output: the run's MLLOG for MLCommons' tools (default: train.mllog beside --tsv)")
    p.add_argument("--work-dir", type=Path, help="per-epoch state for resuming (default: <run-json dir>/.work)")
    p.add_argument("--threshold", type=threshold_value, help="threshold of the task metric (default: the task's official one)")
    p.add_argument("--train-limit", type=optional_int, help="use only the first N training items (demo/test configs; null = all)")
    p.add_argument("--test-limit", type=optional_int, help="use only the first N test items (demo/test configs; null = all)")
    add_flag(p, "--stop-at-threshold", "end training after the first epoch at the threshold")
    p.add_argument("--threads", type=int, help="CPU threads for the framework, per process (default: its own choice)")
    p.add_argument("--no-resume", action="store_true", help="ignore saved per-epoch state and start from scratch")
    rules = p.add_argument_group("program entries (config key programs; docs/programs.md)")
    rules.add_argument("--startup-allowance", type=seconds, help="CPU seconds of a program's start-up off its clock (default 15)")
    rules.add_argument(
        "--evaluation-factor", type=non_negative, help="contract 1: a program's evaluation window off its clock, x dawnpipe's scoring (default 2)"
    )
    rules.add_argument("--held-back", type=fraction, help="share of each class of the test split a program is never given (default 0.2)")
    add_task_options(p, what="demo threshold", dest="threshold_for", type=threshold_value, metavar="VALUE")
    p.add_argument("--telemetry", type=Path, help="output: hardware samples, Parquet (default: telemetry.parquet beside --run-json)")
    p.add_argument("--telemetry-interval", type=seconds, default=1.0, help="seconds between hardware samples; 0 turns sampling off (default 1)")
    p.add_argument(
        "--cpu-peak-probe-seconds",
        type=seconds,
        default=PROBE_SECONDS,
        help=f"a CPU run's peak probe after training: seconds of each of its measurements (default {PROBE_SECONDS:g}; dawnpipe.telemetry.peaks)",
    )


def trainer_name(entry: Entry) -> str:
    items = get_task(entry.task).data_kind.items
    try:
        return TRAINERS[(items, entry.framework)]
    except KeyError:
        raise DawnpipeError(f"field 'framework': no {entry.framework} trainer for {items} items (task {entry.task})") from None


def trainer_for(entry: Entry) -> TrainerModule:
    """The module that trains ``entry`` (dawnpipe.train.TrainerModule); imported
    only when used, so PyTorch jobs never import TensorFlow and the reverse."""
    return importlib.import_module(trainer_name(entry))


def check_entry(trainer: TrainerModule, entry_file: Path, entry: Entry) -> None:
    """The trainer's checks of the entry, before any data is read or process
    started: a wrong model or model_args is named with the entry's file, not
    found after minutes of loading data."""
    try:
        trainer.check_entry(entry)
    except EntryError as e:
        raise DawnpipeError(f"{entry_file}: {e}") from None


def settings_from_args(args) -> dict:
    """The run's settings document (dawnpipe.entries.run_settings): what is hashed and written to run.json."""
    entry = load_entry_ref(args.entry, args.entries_dir)
    task = get_task(entry["task"])
    threshold = args.threshold if args.threshold is not None else task_option(args, "threshold_for", task.name)
    return run_settings(
        entry,
        seed=args.seed,
        threshold=task.threshold if threshold is None else threshold,
        official_threshold=task.threshold,
        train_limit=args.train_limit,
        test_limit=args.test_limit,
        stop_at_threshold=args.stop_at_threshold,
        programs={
            key: value
            for key, value in (
                ("startup_allowance_cpu_seconds", args.startup_allowance),
                ("evaluation_factor", args.evaluation_factor),
                ("held_back_fraction", args.held_back),
            )
            if value is not None
        },
    )


def device_kind(entry: Entry) -> str:
    """cpu or cuda: where the run will compute (the entry's device; auto: cuda where the framework sees a GPU)."""
    if entry.device != "auto":
        return entry.device
    if entry.is_program:
        from dawnpipe.train.program import visible_device

        return visible_device("auto")
    if entry.framework == "tensorflow":
        from dawnpipe.tensorflow_import import tensorflow

        return "cuda" if tensorflow().config.list_physical_devices("GPU") else "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def computing_precision(settings: RunSettings) -> tuple[RunSettings, dict[str, str]]:
    """The settings with the precision the run computes in (an entry's ``auto`` resolved for its device:
    dawnpipe.models.precision.used_precision), and run.json's environment of it: ``precision``, ``precision_from``."""
    from dawnpipe.models.precision import used_precision

    entry = settings.entry
    requested = precision_of(entry.document)
    used, why = used_precision(requested, device_kind(entry)) if requested == "auto" else (requested, "as the entry states")
    return settings.computing_in(used), {"precision": used, "precision_from": why}


def run(args) -> int:
    settings = RunSettings.of(settings_from_args(args))  # typed, once, after the entry's validation
    settings, precision = computing_precision(settings)
    entry = settings.entry
    layout = entry.layout
    try:
        trainer = trainer_for(entry)
    except DawnpipeError as e:
        raise DawnpipeError(f"{args.entry}: {e}") from None
    rank = SINGLE
    if layout.data_parallel:  # several processes (or one, forced: dawnpipe.train.distributed.FORCE_DDP)
        if trainer.__name__ not in DATA_PARALLEL:
            raise DawnpipeError(
                f"{args.entry}: distributed: data-parallel training is implemented for the PyTorch image trainer only; "
                "a TensorFlow or SQuAD entry runs in one process (distributed: {nodes: 1, processes_per_node: 1})"
            )
        rank = rank_from_env(os.environ, layout.world_size)
    if rank is None or rank.is_main:  # once: in the launcher, or in the process that trains alone
        check_entry(trainer, args.entry, entry)
    threads, threads_from = process_threads(entry, args.threads, layout)
    if rank is None:  # not one of the ranks yet: start them, and let them write everything
        work_dir = args.work_dir or args.run_json.parent / ".work"
        return run_launcher(layout, command_line(args), threads, label=settings.label, ranks_dir=work_dir / "ranks")
    data = prepared_dir(args.data, entry.task)
    work_dir = args.work_dir or args.run_json.parent / ".work"
    work_dir.mkdir(parents=True, exist_ok=True)
    started = now_iso()
    outputs = Outputs(args.tsv, args.log_parquet, args.checkpoint, args.run_json, work_dir, args.mllog or args.tsv.parent / "train.mllog")
    train = trainer.train
    extra = {"rank": rank} if rank.distributed else {}  # only the PyTorch trainer knows ranks
    if not rank.is_main:  # rank 0 samples the node's telemetry and writes every output
        train(settings, data, outputs, threads=threads, resume=not args.no_resume, **extra)
        return 0
    with telemetry.sampling(
        args.telemetry or args.run_json.parent / "telemetry.parquet",
        args.telemetry_interval,
        partial_path=work_dir / "telemetry.partial.parquet",
        tree=entry.is_program,  # a program's work is in its own processes: the whole tree is sampled
    ) as sampler:
        finished = train(settings, data, outputs, threads=threads, resume=not args.no_resume, **extra)
    environment = {**base_environment(), **finished.environment, **precision}
    telemetry_record = telemetry.run_record(
        sampler,
        args.telemetry_interval,
        framework=entry.framework,
        environment=environment,
        precision=precision["precision"],
        probe_seconds=args.cpu_peak_probe_seconds,
    )
    write_json(
        args.run_json,
        run_document(
            settings,
            finished,
            environment=environment,
            threads_from=threads_from,
            data_manifest_sha256=_manifest_hash(data),
            started=started,
            finished=now_iso(),
            telemetry=telemetry_record,
        ),
    )
    shutil.rmtree(work_dir, ignore_errors=True)  # resume state is only for unfinished runs
    return 0


def process_threads(entry: Entry, job_threads: int | None, layout: Layout) -> tuple[int | None, str]:
    """The framework threads of each training process, and where the number
    comes from: the entry's ``threads`` (a study varies it), else the job's
    share (``--threads``: Snakemake's cores for the job, per process), else,
    with several processes and no ``--threads`` (DVC), the cores this process
    may use divided among the node's processes, else the framework's default
    (every core)."""
    if entry.threads:
        return entry.threads, "entry"
    if job_threads:
        return job_threads, "job"
    if layout.world_size > 1:
        return max(1, len(os.sched_getaffinity(0)) // layout.processes_per_node), "job"
    return None, "framework default"


def command_line(args) -> list[str]:
    """``train`` and the arguments of ``args``, to start the same run once per rank."""
    parser = argparse.ArgumentParser()
    configure(parser)
    argv = ["train"]
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        value = getattr(args, action.dest)
        if isinstance(action, argparse._StoreTrueAction):
            argv += [action.option_strings[0]] if value else []
        elif isinstance(value, (list, tuple)):
            argv += [action.option_strings[0], *map(str, value)]
        elif value is not None:
            argv += [action.option_strings[0], str(value)]  # booleans as True/False, which their types read back
    return argv


def _manifest_hash(data: Path) -> str:
    return config_hash(read_json(data / "manifest.json"))

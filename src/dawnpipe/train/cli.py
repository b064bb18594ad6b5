"""train: one entry with one seed, writing the per-epoch logs and run.json.

    python -m dawnpipe train --entry config/entries/fastnet.yaml --seed 0 \\
        --data data/prepared/fashion-mnist --tsv results/runs/fastnet/seed0/train.tsv \\
        --log-parquet results/runs/fastnet/seed0/train.parquet \\
        --checkpoint results/runs/fastnet/seed0/model.pt --run-json results/runs/fastnet/seed0/run.json

``--work-dir`` keeps the per-epoch state (resumable after an interruption);
the declared outputs appear only when the run completes, run.json last.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from dawnpipe import telemetry
from dawnpipe.argtypes import add_flag, add_task_options, optional_int, task_option
from dawnpipe.data.loader import prepared_dir
from dawnpipe.entries import config_hash, load_entry, run_settings
from dawnpipe.fileio import read_json, write_json
from dawnpipe.runinfo import base_environment, now_iso
from dawnpipe.tasks import get_task


def configure(p) -> None:
    p.add_argument("--entry", required=True, type=Path, help="entry YAML (config/entries/<id>.yaml)")
    p.add_argument("--seed", required=True, type=int, help="random seed of this run")
    p.add_argument("--data", required=True, type=Path, help="prepared data directory (with manifest.json), or a directory of them named by task")
    p.add_argument("--tsv", required=True, type=Path, help="output: DAWNBench v1 per-epoch TSV")
    p.add_argument("--log-parquet", required=True, type=Path, help="output: per-epoch Parquet log with every column")
    p.add_argument("--checkpoint", required=True, type=Path, help="output: model of the first epoch at the threshold (else the last)")
    p.add_argument("--run-json", required=True, type=Path, help="output: run.json (environment, settings, summary)")
    p.add_argument("--work-dir", type=Path, help="per-epoch state for resuming (default: <run-json dir>/.work)")
    p.add_argument("--threshold", type=float, help="threshold of the task metric (default: the task's official one)")
    p.add_argument("--train-limit", type=optional_int, help="use only the first N training items (demo/test configs; null = all)")
    p.add_argument("--test-limit", type=optional_int, help="use only the first N test items (demo/test configs; null = all)")
    add_flag(p, "--stop-at-threshold", "end training after the first epoch at the threshold")
    p.add_argument("--threads", type=int, help="CPU threads for the framework (default: its own choice)")
    p.add_argument("--no-resume", action="store_true", help="ignore saved per-epoch state and start from scratch")
    add_task_options(p, what="demo threshold", dest="threshold_for", type=float, metavar="VALUE")
    p.add_argument("--telemetry", type=Path, help="output: hardware samples, Parquet (default: telemetry.parquet beside --run-json)")
    p.add_argument("--telemetry-interval", type=float, default=1.0, help="seconds between hardware samples; 0 turns sampling off (default 1)")


def trainer_for(entry: dict):
    """(Outputs, train) of the module that trains ``entry``; imported only when used,
    so PyTorch jobs never import TensorFlow and the reverse."""
    if get_task(entry["task"]).data.get("kind") == "squad":  # question answering, not images
        from dawnpipe.train.squad_trainer import Outputs, train
    elif entry["framework"] == "tensorflow":
        from dawnpipe.train.tf_trainer import Outputs, train
    else:
        from dawnpipe.train.torch_trainer import Outputs, train
    return Outputs, train


def settings_from_args(args) -> dict:
    entry = load_entry(args.entry)
    task = get_task(entry["task"])
    threshold = args.threshold if args.threshold is not None else task_option(args, "threshold_for", task.name)
    return run_settings(
        entry, seed=args.seed, threshold=task.threshold if threshold is None else threshold,
        official_threshold=task.threshold, train_limit=args.train_limit, test_limit=args.test_limit,
        stop_at_threshold=args.stop_at_threshold,
    )


def run(args) -> int:
    settings = settings_from_args(args)
    entry = settings["entry"]
    data = prepared_dir(args.data, entry["task"])
    work_dir = args.work_dir or args.run_json.parent / ".work"
    work_dir.mkdir(parents=True, exist_ok=True)
    started = now_iso()
    Outputs, train = trainer_for(entry)
    with telemetry.sampling(args.telemetry or args.run_json.parent / "telemetry.parquet", args.telemetry_interval,
                            partial_path=work_dir / "telemetry.partial.parquet") as sampler:
        summary = train(settings, data, Outputs(args.tsv, args.log_parquet, args.checkpoint, args.run_json, work_dir),
                        threads=args.threads, resume=not args.no_resume)
    environment = {**base_environment(), **summary.pop("environment")}
    telemetry_record = telemetry.run_record(sampler, args.telemetry_interval, framework=entry["framework"],
                                            environment=environment, precision=entry["hyperparameters"]["precision"])
    write_json(args.run_json, {
        "entry": entry["id"], "seed": settings["seed"], "task": entry["task"], "framework": entry["framework"],
        "model": entry["model"], "hardware": entry["hardware"],
        "threshold": settings["threshold"], "official_threshold": settings["official_threshold"],
        "demo_threshold": settings["demo_threshold"],
        "config_hash": config_hash(settings),
        "data_manifest_sha256": _manifest_hash(data),
        "started": started, "finished": now_iso(),
        "result": summary, "environment": environment, "settings": settings, "telemetry": telemetry_record,
    })
    shutil.rmtree(work_dir, ignore_errors=True)  # resume state is only for unfinished runs
    return 0


def _manifest_hash(data: Path) -> str:
    return config_hash(read_json(data / "manifest.json"))

"""extract: time-to-accuracy, epochs-to-accuracy and cost of one training run.

    python -m dawnpipe extract --tsv results/runs/E/seed0/train.tsv \\
        --log-parquet results/runs/E/seed0/train.parquet --run-json results/runs/E/seed0/run.json \\
        --prices config/prices.yaml --out results/runs/E/seed0/time_to_accuracy.json

Recomputed from the TSV (not taken from run.json), so a hand-edited or
re-submitted log is judged by what it says. The wall-clock time to the same
epoch comes from the Parquet log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import write_json
from dawnpipe.logs import read_run_parquet, read_run_tsv
from dawnpipe.metrics.tta import TimeToAccuracy, cost_usd, time_to_accuracy
from dawnpipe.prices import load_prices, price_per_hour
from dawnpipe.runfiles import read_run_info
from dawnpipe.schemas.results import TimeToAccuracyResult, validate
from dawnpipe.tasks import get_task


def extract(tsv: Path, parquet: Path, run_json: Path, prices: Path) -> dict[str, Any]:
    run = read_run_info(run_json)
    task = get_task(run["task"])
    log = read_run_tsv(tsv, task)
    tta = time_to_accuracy(log["epoch"].tolist(), log["hours"].tolist(), log[task.metric_column].tolist(), run["threshold"])
    # a program entry's run whose claims dawnpipe's scoring contradicted is not ranked (dawnpipe.train.program)
    excluded = (run.get("program") or {}).get("excluded")
    if excluded:
        tta = TimeToAccuracy(False, None, None, None, None, tta.best_metric)
    wall = None
    if tta.reached:
        full = read_run_parquet(parquet, task)
        match = full.loc[full["epoch"] == tta.epoch, "wall_hours"]
        if match.empty:
            raise DawnpipeError(f"{parquet}: no row for epoch {tta.epoch:g}, which {tsv} logs")
        wall = float(match.iloc[0])
    # prices are per machine (node); a data-parallel run pays for all its nodes
    usd_per_hour = price_per_hour(load_prices(prices), run.get("hardware_price_tag", run["hardware"]))
    if usd_per_hour is not None:
        usd_per_hour *= int(run.get("nodes", 1))
    record = {
        "entry": run["entry"],
        "seed": int(run["seed"]),
        "task": task.name,
        "model": run["model"],
        "framework": run["framework"],
        "hardware": run["hardware"],
        "threshold": float(run["threshold"]),
        "official_threshold": float(run["official_threshold"]),
        "demo_threshold": bool(run["demo_threshold"]),
        "reached": tta.reached,
        "epochs_to_accuracy": tta.epoch,
        "time_to_accuracy_hours": tta.hours,
        "wall_time_to_accuracy_hours": wall,
        "usd_per_hour": usd_per_hour,
        "cost_usd": cost_usd(tta.hours, usd_per_hour),
        "best_metric": tta.best_metric,
        "epochs_run": float(log["epoch"].iloc[-1]),
        "training_hours": float(log["hours"].iloc[-1]),
        "metric": task.metric_column,
        "reason": None
        if tta.reached
        else excluded
        if excluded
        else (
            f"did not converge: best {task.metric_column} {task.format_metric(tta.best_metric)} "
            f"< {task.format_metric(run['threshold'])}{' (demo threshold)' if run['demo_threshold'] else ''}"
            f" in {log['epoch'].iloc[-1]:g} epochs"
        ),
    }
    validate(TimeToAccuracyResult, pd.DataFrame([record]), f"time-to-accuracy of {tsv}")
    return record


def configure(p) -> None:
    p.add_argument("--tsv", required=True, type=Path, help="DAWNBench v1 per-epoch TSV of the run")
    p.add_argument("--log-parquet", required=True, type=Path, help="the run's Parquet log (for wall-clock hours)")
    p.add_argument("--run-json", required=True, type=Path, help="the run's run.json (entry, threshold, hardware)")
    p.add_argument("--prices", required=True, type=Path, help="price table (config/prices.yaml)")
    p.add_argument("--out", required=True, type=Path, help="output JSON")


def run(args) -> int:
    record = extract(args.tsv, args.log_parquet, args.run_json, args.prices)
    write_json(args.out, record)
    status = "reached" if record["reached"] else "DID NOT CONVERGE"
    line = f"extract: {record['entry']} seed {record['seed']}: {status}" + (
        f" at epoch {record['epochs_to_accuracy']:g} after {record['time_to_accuracy_hours'] * 3600:.1f} s of training"
        if record["reached"]
        else f" ({record['reason']})"
    )
    print(terminal_safe(line))  # the entry is run.json's text (a file from dvc pull or a colleague)
    return 0

"""A run directory as the report reads it: run.json, time_to_accuracy.json,
the per-epoch log, every inference result (one per backend) and the
optional analysis files (utilization, sensitivity)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dawnpipe.errors import DawnpipeError
from dawnpipe.infer.summary import headline
from dawnpipe.logs import read_run_parquet
from dawnpipe.runfiles import latency_files, read_run_file
from dawnpipe.tasks import get_task

# Columns of train.parquet the report reads beyond the task's metric and the
# clocks (the frameworks and scaling sections); every trainer writes them.
LOG_COLUMNS = ("epoch_train_seconds", "items_per_second")


def load_run(run_dir: Path) -> dict[str, Any]:
    needed = ["run.json", "time_to_accuracy.json", "train.parquet"]
    missing = [n for n in needed if not (run_dir / n).is_file()]
    if missing:
        raise DawnpipeError(f"{run_dir}: missing {', '.join(missing)} (did the train/extract stages run?)")
    latencies = sorted((load_latency(p) for p in latency_files(run_dir)), key=lambda r: r["latency_mean_ms"])
    info = read_run_file(run_dir / "run.json", "run_complete")
    run = {
        "dir": run_dir,
        "run": info,
        "tta": read_run_file(run_dir / "time_to_accuracy.json", "time_to_accuracy"),
        # checked as the extract stage checks it, with what the report's sections read of it
        "log": read_run_parquet(run_dir / "train.parquet", get_task(info["task"]), LOG_COLUMNS),
        "latencies": latencies,  # every inference result, one per backend (fastest first)
        "latency": headline(latencies),  # the run's headline among them (dawnpipe.infer.summary)
        **{
            name: read_run_file(run_dir / f"{name}.json", name) if (run_dir / f"{name}.json").is_file() else None for name in ("utilization", "sensitivity")
        },  # optional: the analysis stages' files (docs/rules.md#analysis-metrics), None where a run has none
    }
    run["generalization"] = generalization(run)
    return run


def load_latency(path: Path) -> dict[str, Any]:
    """One inference result, with the path of its per-item table (None where
    the tool that wrote it kept none: no distribution plot then)."""
    per_item = Path(path).with_suffix(".parquet")
    return {**read_run_file(path, "latency"), "per_item_path": str(per_item) if per_item.is_file() else None}


def generalization(run: dict[str, Any]) -> dict[str, Any] | None:
    """Test against held-out accuracy of a run scored on a held-out split
    (entry field held_out) and/or its task's new test set (new_test:
    CIFAR-10.1 for CIFAR-10), at the checkpoint that first reached the
    threshold, or at the last epoch when none did; None for a run with
    neither. gap = test - held-out, in points: positive where the test set flatters."""
    from dawnpipe.logs import HELD_OUT_PREFIX, NEW_TEST_PREFIX

    column = get_task(run["run"]["task"]).metric_column
    log = run["log"]
    held_col, new_col = HELD_OUT_PREFIX + column, NEW_TEST_PREFIX + column
    if (held_col not in log and new_col not in log) or log.empty:
        return None
    tta = run["tta"]
    at = log[log["epoch"] == tta["epochs_to_accuracy"]] if tta["reached"] else log.iloc[0:0]
    row, where = (at.iloc[0], "threshold") if len(at) else (log.iloc[-1], "last epoch")
    test = float(row[column])
    held = float(row[held_col]) if held_col in log else None
    new = float(row[new_col]) if new_col in log else None
    result = run["run"].get("result", {})
    return {
        "at": where,
        "epoch": float(row["epoch"]),
        "test": test,
        "held_out": held,
        "gap": test - held if held is not None else None,
        "items": result.get("held_out_items") if held is not None else None,
        "new_test": new,  # the task's new test set (new_test_<metric>), with its name and whether its files were verified
        "new_test_gap": test - new if new is not None else None,
        "new_test_items": result.get("new_test_items") if new is not None else None,
        "new_test_title": (result.get("new_test") or {}).get("title") if new is not None else None,
        "new_test_verified": (result.get("new_test") or {}).get("verified") if new is not None else None,
    }

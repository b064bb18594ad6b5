"""The framework comparison: one model, one recipe, one machine, several
frameworks (DAWNBench's seed entries came in PyTorch and TensorFlow).

Rows are grouped by (task, model, hardware, threshold); only groups trained
in at least two frameworks are compared. Per framework:

- time per epoch: the median over every logged epoch of every seed of the
  training clock of that epoch (evaluation and checkpointing excluded), and
  the first epoch on its own, because that is where one-off costs land
  (TensorFlow traces its graph, oneDNN creates its kernels);
- time to accuracy: mean over the seeds that reached the threshold, with how
  many did;
- inference latency: mean over seeds of the mean ms per item, with the
  backend(s) that measured it.

Each figure also as a ratio to the best framework of its group (1.00 = best).
Pure: ``runs`` are the report's loaded runs (run.json, time_to_accuracy.json,
latency.json, train.parquet).
"""

from __future__ import annotations

from typing import Any

import numpy as np

# figure -> its ratio to the group's best (lowest) value
RATIOS = {"epoch_seconds_median": "epoch_ratio", "time_to_accuracy_hours_mean": "tta_ratio", "latency_mean_ms": "latency_ratio"}


def framework_comparison(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple, dict[str, list[dict]]] = {}
    for r in runs:
        info = r["run"]
        key = (info["task"], info["model"], info["hardware"], float(info["threshold"]), bool(info["demo_threshold"]))
        groups.setdefault(key, {}).setdefault(info["framework"], []).append(r)
    rows: list[dict[str, Any]] = []
    for (task, model, hardware, threshold, demo), by_framework in sorted(groups.items()):
        if len(by_framework) < 2:
            continue
        group = [_framework_row(framework, mine) for framework, mine in sorted(by_framework.items())]
        for field, ratio in RATIOS.items():
            best = min((row[field] for row in group if row[field] is not None), default=None)
            for row in group:
                row[ratio] = row[field] / best if row[field] is not None and best else None
        rows += [{"task": task, "model": model, "hardware": hardware, "threshold": threshold, "demo_threshold": demo, **row}
                 for row in group]
    return rows


def _framework_row(framework: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    epochs = np.concatenate([r["log"]["epoch_train_seconds"].to_numpy(dtype=np.float64) for r in runs])
    first = [float(r["log"].loc[r["log"]["epoch"] == 1, "epoch_train_seconds"].iloc[0]) for r in runs if (r["log"]["epoch"] == 1).any()]
    rates = np.concatenate([r["log"]["items_per_second"].to_numpy(dtype=np.float64) for r in runs])
    reached = [r["tta"]["time_to_accuracy_hours"] for r in runs if r["tta"]["reached"]]
    latencies = [r["latency"]["latency_mean_ms"] for r in runs if r.get("latency")]
    return {
        "framework": framework,
        "framework_versions": sorted({str(r["run"]["environment"].get("framework_version")) for r in runs}),
        "seeds": sorted(int(r["run"]["seed"]) for r in runs),
        "epoch_seconds_median": float(np.median(epochs)) if epochs.size else None,
        "first_epoch_seconds_mean": float(np.mean(first)) if first else None,
        "items_per_second_median": float(np.median(rates)) if rates.size else None,
        "reached_runs": len(reached),
        "time_to_accuracy_hours_mean": float(np.mean(reached)) if reached else None,
        "latency_mean_ms": float(np.mean(latencies)) if latencies else None,
        "inference_backends": sorted({r["latency"]["backend"] for r in runs if r.get("latency")}),
    }

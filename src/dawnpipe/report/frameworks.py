"""The framework comparison: one model, one recipe, one machine, several
frameworks (DAWNBench's seed entries came in PyTorch and TensorFlow).

Rows are grouped by (task, model, hardware, threshold); only groups trained
in at least two frameworks are compared. One row per entry (an entry is one
recipe in one framework; two entries of a framework are two rows, never
merged). Per entry:

- time per epoch: the median over every logged epoch of every seed of the
  training clock of that epoch (evaluation and checkpointing excluded), and
  the first epoch on its own, because that is where one-off costs land
  (TensorFlow traces its graph, oneDNN creates its kernels);
- time to accuracy: mean over the seeds that reached the threshold, with how
  many did;
- inference latency: mean over seeds of the mean ms per item of the
  framework's own runtime (``NATIVE_BACKEND``: PyTorch eager, TensorFlow's
  tf.function graph), like with like; not the run's headline backend, which
  for PyTorch is usually an export to another runtime (ONNX Runtime, int8).
  Only results that meet the threshold count; none: no latency (and no ratio).

Each figure also as a ratio to the best framework of its group (1.00 = best).
Pure: ``runs`` are the report's loaded runs (run.json, time_to_accuracy.json,
latency.json, train.parquet).
"""

from __future__ import annotations

from typing import Any

import numpy as np

# the backend that is each framework's own way to answer one item (dawnpipe.infer.backends)
NATIVE_BACKEND = {"pytorch": "eager", "tensorflow": "tf-function"}

# figure -> its ratio to the group's best (lowest) value
RATIOS = {"epoch_seconds_median": "epoch_ratio", "time_to_accuracy_hours_mean": "tta_ratio", "latency_mean_ms": "latency_ratio"}


def framework_comparison(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple, dict[str, list[dict]]] = {}
    for r in runs:
        info = r["run"]
        key = (info["task"], info["model"], info["hardware"], float(info["threshold"]), bool(info["demo_threshold"]))
        groups.setdefault(key, {}).setdefault((info["framework"], info["entry"]), []).append(r)
    rows: list[dict[str, Any]] = []
    for (task, model, hardware, threshold, demo), by_entry in sorted(groups.items()):
        if len({framework for framework, _ in by_entry}) < 2:
            continue
        group = [_framework_row(framework, entry, mine) for (framework, entry), mine in sorted(by_entry.items())]
        for field, ratio in RATIOS.items():
            best = min((row[field] for row in group if row[field] is not None), default=None)
            for row in group:
                row[ratio] = row[field] / best if row[field] is not None and best else None
        rows += [{"task": task, "model": model, "hardware": hardware, "threshold": threshold, "demo_threshold": demo, **row} for row in group]
    return rows


def native_latencies(framework: str, run: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's inference results by its framework's own backend that meet the threshold."""
    return [lat for lat in native_results(framework, run) if lat.get("meets_threshold", True)]


def native_results(framework: str, run: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's inference results by its framework's own backend, whatever their accuracy."""
    native = NATIVE_BACKEND.get(framework)
    results = run.get("latencies") or ([run["latency"]] if run.get("latency") else [])
    return [lat for lat in results if lat["backend"] == native]


def _framework_row(framework: str, entry: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    epochs = np.concatenate([r["log"]["epoch_train_seconds"].to_numpy(dtype=np.float64) for r in runs])
    first = [float(r["log"].loc[r["log"]["epoch"] == 1, "epoch_train_seconds"].iloc[0]) for r in runs if (r["log"]["epoch"] == 1).any()]
    rates = np.concatenate([r["log"]["items_per_second"].to_numpy(dtype=np.float64) for r in runs])
    reached = [r["tta"]["time_to_accuracy_hours"] for r in runs if r["tta"]["reached"]]
    native = [lat for r in runs for lat in native_latencies(framework, r)]
    latencies = [lat["latency_mean_ms"] for lat in native]
    return {
        "framework": framework,
        "entry": entry,
        "framework_versions": sorted({str(r["run"]["environment"].get("framework_version")) for r in runs}),
        "seeds": sorted(int(r["run"]["seed"]) for r in runs),
        "epoch_seconds_median": float(np.median(epochs)) if epochs.size else None,
        "first_epoch_seconds_mean": float(np.mean(first)) if first else None,
        "items_per_second_median": float(np.median(rates)) if rates.size else None,
        "reached_runs": len(reached),
        "time_to_accuracy_hours_mean": float(np.mean(reached)) if reached else None,
        "latency_mean_ms": float(np.mean(latencies)) if latencies else None,
        "latency_results": len(latencies),  # seeds whose native result met the threshold
        "inference_backends": sorted({lat["backend"] for lat in native}) or [NATIVE_BACKEND.get(framework, "none")],
        # why there is no latency: measured but below the threshold, or never measured (not the same thing)
        "latency_note": None if latencies else "none at the threshold" if any(native_results(framework, r) for r in runs) else "not measured",
    }

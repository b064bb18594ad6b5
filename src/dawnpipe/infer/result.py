"""One inference result (docs/rules.md#3-inference-latency,
docs/rules.md#4-inference-cost) from the timed answers: latency statistics,
accuracy and the gate, cost; no framework imported.

Each backend of each run is its own result, with what a DAWNBench v1
inference submission needs (latency, cost, accuracy, model, framework,
hardware, date) and what makes it comparable (backend, threads, device,
precision, warm-up, the export check).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dawnpipe.infer.backends import get_backend
from dawnpipe.infer.items import ImageItems, QuestionItems, Scored
from dawnpipe.infer.latency import latency_stats
from dawnpipe.infer.predictor import Predictor
from dawnpipe.infer.timing import ItemTimes
from dawnpipe.metrics.tta import inference_cost_per_10k
from dawnpipe.schemas.results import LatencyResult, validate
from dawnpipe.tasks import Task


def latency_record(
    *,
    run_info: dict[str, Any],
    task: Task,
    kind: ImageItems | QuestionItems,
    predictor: Predictor,
    times: ItemTimes,
    scored: Scored,
    usd_per_hour: float | None,
    checkpoint: Path,
    cpu_model: str,
    measured: str,
    throughput: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """The result record (latency/<backend>.json) and the per-item table (latency/<backend>.parquet)."""
    accuracy = scored.value
    threshold = float(run_info["threshold"])
    meets = accuracy >= threshold
    stats = latency_stats(times.seconds)
    n = len(times.seconds)
    warmup_ms = [float(s * 1000.0) for s in times.warmup_seconds]
    record = {
        "entry": run_info["entry"],
        "seed": int(run_info["seed"]),
        "task": task.name,
        "model": run_info["model"],
        "framework": run_info["framework"],
        "framework_version": predictor.framework_version,
        "hardware": run_info["hardware"],
        "cpu_model": cpu_model,
        "device": predictor.device,
        "backend": predictor.backend,
        "backend_description": get_backend(predictor.backend, kind.name, run_info["framework"]).description,
        "threads": int(predictor.threads),
        "precision": predictor.precision,
        "item": kind.description,
        "timer": "perf_counter" + (" + device synchronisation around each item" if predictor.sync else ""),
        "items": n,
        "official_items": task.inference_items,
        "full_inference_set": n >= task.inference_items,
        "warmup_items": len(warmup_ms),
        "warmup_ms": warmup_ms,
        "warmup_mean_ms": float(np.mean(warmup_ms)) if warmup_ms else None,
        "metric": task.inference_accuracy_field,
        "accuracy": accuracy,
        **scored.extra,
        "threshold": threshold,
        "official_threshold": float(run_info["official_threshold"]),
        "demo_threshold": bool(run_info["demo_threshold"]),
        "meets_threshold": bool(meets),
        "reason": None
        if meets
        else (
            f"inference {task.inference_accuracy_field} {task.format_metric(accuracy)} with backend {predictor.backend} "
            f"< threshold {task.format_metric(threshold)}"
        ),
        **stats,
        "usd_per_hour": usd_per_hour,
        "cost_per_10k_usd": inference_cost_per_10k(stats["latency_mean_ms"], usd_per_hour),
        "checkpoint": str(checkpoint),
        "checkpoint_epoch": predictor.checkpoint.get("epoch"),
        "checkpoint_reached_threshold": predictor.checkpoint.get("reached_threshold"),
        "export_check": predictor.export_check,
        "backend_notes": predictor.notes,
        "measured": measured,
        **(throughput or {}),  # throughput_items_per_second and how (dawnpipe.infer.throughput)
    }
    scalars = {k: v for k, v in record.items() if not isinstance(v, (dict, list))}
    validate(LatencyResult, pd.DataFrame([scalars]), f"latency of {checkpoint} with backend {predictor.backend}")
    per_item = pd.DataFrame({"item": np.arange(n, dtype=np.int64), "latency_ms": times.seconds * 1000.0, **scored.columns})
    return record, per_item

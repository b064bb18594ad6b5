"""Charts of the inference results for the leaderboard page: the distribution
of per-item latencies of each result, and inference latency against training
time per task (the DAWNBench paper's comparison of hardware, frameworks and
models). Jinja globals of the page (``report.render``)."""

from __future__ import annotations

from typing import Any

import pandas as pd
from markupsafe import Markup

from dawnpipe.report.charts import histogram, scatter, time_axis


def latency_distribution(result: dict[str, Any]) -> Markup:
    """Histogram of one result's per-item latencies (its latency/<backend>.parquet)."""
    if not result.get("per_item_path"):
        return Markup('<p class="empty">no per-item latencies beside this result</p>')
    ms = pd.read_parquet(result["per_item_path"], columns=["latency_ms"])["latency_ms"].tolist()
    marks = [(name, result[f"latency_{name}_ms"]) for name in ("mean", "p50", "p90", "p99")]
    title = f"{result['entry']} s{result['seed']}: {result['backend']}, {result['threads']} thr., {result['items']} items"
    return histogram(ms, x_label="latency per item (ms, log scale)", marks=marks, title=title)


def latency_against_training(runs: list[dict[str, Any]], task_name: str) -> Markup:
    """One point per ranked inference result of the runs that reached the
    threshold: x their training time to the threshold, y the mean latency."""

    mine = [r for r in runs if r["run"]["task"] == task_name and r["tta"]["reached"]]
    if not mine:
        return Markup('<p class="empty">no run of this task reached the threshold</p>')
    label, factor = time_axis(max(r["tta"]["time_to_accuracy_hours"] for r in mine))
    points = [
        (lat["backend"], f"{r['run']['entry']} seed {r['run']['seed']}", r["tta"]["time_to_accuracy_hours"] * factor, lat["latency_mean_ms"])
        for r in mine
        for lat in r.get("latencies", [])
        if lat["meets_threshold"]
    ]
    return scatter(points, x_label=label, y_label="mean inference latency (ms, log scale)", log_y=True, title="inference latency against training time")

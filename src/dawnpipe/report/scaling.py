"""Scaling: time per epoch and time-to-accuracy against the number of
processes (docs/rules.md#analysis-metrics, scaling: the DAWNBench analysis
paper's scaling study).

Runs belong to one study when they train the same recipe on the same
hardware and differ only in their data-parallel layout (an entry's
``distributed:``), whatever the entries are called. Speed-ups are relative to
the smallest world size in the study; efficiency is speed-up / (world size
ratio), 1 for linear scaling, where the cost to accuracy stays flat.

Pure functions over the report's loaded runs (run.json, the Parquet log and
time_to_accuracy.json of each).
"""

from __future__ import annotations

import math
from statistics import mean
from typing import Any

from dawnpipe.entries import config_hash

# Entry fields that name or place a run but do not change the recipe.
NOT_RECIPE = ("id", "description", "distributed")


def recipe_key(run_json: dict[str, Any]) -> str:
    """Equal for runs of the same recipe, data and threshold, any seed or layout."""
    settings = dict(run_json.get("settings") or {})
    entry = {k: v for k, v in (settings.pop("entry", None) or {}).items() if k not in NOT_RECIPE}
    settings.pop("seed", None)
    return config_hash({"entry": entry, "settings": settings, "hardware": run_json.get("hardware_price_tag", run_json.get("hardware"))})


def world_size(run_json: dict[str, Any]) -> int:
    return int(run_json.get("world_size", 1))


def studies(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One study per recipe that has a data-parallel run or several world sizes."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault(recipe_key(r["run"]), []).append(r)
    out = []
    for members in groups.values():
        sizes = sorted({world_size(r["run"]) for r in members})
        if max(sizes) == 1:
            continue
        points = [_point(w, [r for r in members if world_size(r["run"]) == w]) for w in sizes]
        base = points[0]
        for p in points:
            ratio = p["world_size"] / base["world_size"]
            p["epoch_speedup"] = _ratio(base["epoch_seconds"], p["epoch_seconds"])
            p["epoch_efficiency"] = None if p["epoch_speedup"] is None else p["epoch_speedup"] / ratio
            p["tta_speedup"] = _ratio(base["tta_hours"], p["tta_hours"])
            p["tta_efficiency"] = None if p["tta_speedup"] is None else p["tta_speedup"] / ratio
        first = members[0]["run"]
        out.append(
            {
                "task": first["task"],
                "model": first["model"],
                "hardware": first.get("hardware_price_tag", first["hardware"]),
                "entries": sorted({r["run"]["entry"] for r in members}),
                "threshold": first["threshold"],
                "demo_threshold": first["demo_threshold"],
                "points": points,
            }
        )
    return sorted(out, key=lambda s: (s["task"], s["entries"]))


def _point(world: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    reached = [r for r in runs if r["tta"]["reached"]]
    epoch_means = [float(r["log"]["epoch_train_seconds"].mean()) for r in runs if len(r["log"])]
    costs = [r["tta"]["cost_usd"] for r in reached if r["tta"]["cost_usd"] is not None]
    info = runs[0]["run"]
    return {
        "world_size": world,
        "nodes": int(info.get("nodes", 1)),
        "entries": sorted({r["run"]["entry"] for r in runs}),
        "seeds": sorted(int(r["run"]["seed"]) for r in runs),
        "runs": len(runs),
        "reached_runs": len(reached),
        "epoch_seconds": mean(epoch_means) if epoch_means else None,
        "tta_hours": mean(r["tta"]["time_to_accuracy_hours"] for r in reached) if reached else None,
        "epochs_to_accuracy": mean(r["tta"]["epochs_to_accuracy"] for r in reached) if reached else None,
        "cost_usd": mean(costs) if costs else None,
    }


def _ratio(base: float | None, value: float | None) -> float | None:
    if base is None or value is None or not value or not math.isfinite(value):
        return None
    return base / value


def chart(study: dict[str, Any]):
    """Speed-up against world size, with the linear ideal."""
    from dawnpipe.report.charts import line_chart

    pts = study["points"]
    ws = [p["world_size"] for p in pts]
    series = [("ideal (linear)", ws, [w / ws[0] for w in ws])]
    for label, key in (("time per epoch", "epoch_speedup"), ("time to accuracy", "tta_speedup")):
        got = [(p["world_size"], p[key]) for p in pts if p[key] is not None]
        if got:
            series.append((label, [w for w, _ in got], [s for _, s in got]))
    return line_chart(
        series, x_label="processes (world size)", y_label="speed-up", title=f"{study['model']} on {study['hardware']}: speed-up against processes"
    )


def wants_section(ctx: dict[str, Any]) -> bool:
    """SECTIONS predicate of the report: puts the studies (and their charts)
    into the page context as ``scaling``; True when there is one to show."""
    found = studies(ctx["runs"])
    for s in found:
        s["chart"] = chart(s) if len(s["points"]) > 1 else None
    ctx["scaling"] = found
    return bool(found)

"""Report context of the "where the time goes" sections: hardware utilization
(roofline), energy, and threshold sensitivity (docs/rules.md#analysis-metrics).

Each run dict may carry ``utilization`` and ``sensitivity`` (the per-run
JSON of those stages, None when absent); runs without them are skipped.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from dawnpipe.display import format_hours, format_joules
from dawnpipe.report.charts import line_chart, roofline_chart, time_axis
from dawnpipe.tasks import all_tasks


def _label(r: dict[str, Any]) -> str:
    return f"{r['run']['entry']} s{r['run']['seed']}"


def roofline_by_device(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One chart per device: a point per run (intensity, median achieved FLOP/s)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        u = r.get("utilization")
        if u:
            groups.setdefault(u["peak"]["device"], []).append(r)
    charts = []
    for device, mine in sorted(groups.items()):
        points = [
            (_label(r), r["utilization"]["flops"]["arithmetic_intensity"], (r["utilization"]["achieved_tflops_median"] or 0) * 1e12)
            for r in mine
            # a program run's estimate from its model graph has FLOPs but no operand traffic: no intensity, no point
            if r["utilization"]["flops"].get("counted") and r["utilization"]["flops"].get("arithmetic_intensity") is not None
        ]
        ceilings, seen = [], set()
        for r in mine:
            p = r["utilization"]["peak"]
            key = (r["utilization"]["precision"], p["compute_tflops"], p["memory_gbps"])
            if key in seen or not (p["compute_tflops"] or p["memory_gbps"]):
                continue
            seen.add(key)
            compute = f"{p['compute_tflops'] * 1e3:.3g} GFLOP/s" if p["compute_tflops"] else "compute unknown"
            memory = f"{p['memory_gbps']:.3g} GB/s" if p["memory_gbps"] else "memory unknown"
            ceilings.append(
                (
                    f"{r['utilization']['precision']} peak: {compute}, {memory}",
                    p["compute_tflops"] * 1e12 if p["compute_tflops"] else None,
                    p["memory_gbps"] * 1e9 if p["memory_gbps"] else None,
                )
            )
        sources = sorted({r["utilization"]["peak"]["source"] for r in mine})
        charts.append({"device": device, "chart": roofline_chart(points, ceilings, title=f"roofline: {device}"), "sources": sources})
    return charts


def energy_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        u = r.get("utilization")
        if not u:
            continue
        e, t = u["energy"], u["telemetry"]
        rows.append(
            {
                "run": _label(r),
                "source": e["source"],
                "run_j": e["run_j"],
                "to_accuracy_j": e["energy_to_accuracy_j"],
                "wall_to_accuracy_j": e["wall_energy_to_accuracy_j"],
                "reason": e["reason"],
                "achieved_tflops": u["estimate"]["achieved_tflops"] if "estimate" in u else u["achieved_tflops_median"],
                "fraction_of_peak": u["estimate"]["fraction_of_peak"] if "estimate" in u else u["fraction_of_peak_median"],
                "flops_per_item": u["flops"].get("flops_per_item"),
                "intensity": u["flops"].get("arithmetic_intensity"),
                "flops_reason": u["flops"].get("reason"),
                # a program run: estimated from the model graph, to its ranked epoch (dawnpipe.metrics.program_flops)
                "flops_estimated": "estimate" in u,
                "estimate_reason": (u.get("estimate") or {}).get("reason"),
                "peak_device": u["peak"]["device"],
                "peak_tflops": u["peak"]["compute_tflops"],
                "precision": u["precision"],
                "cpu_pct": t.get("process_cpu_pct_mean"),
                "rss_mb": t.get("process_rss_mb_max"),
                "gpus": t.get("gpus") or [],
                "samples": t.get("samples", 0),
                "interval_s": t.get("interval_s"),
                "inference_energy_per_item_j": (u.get("inference_telemetry") or {}).get("energy_per_item_j"),
            }
        )
        row = rows[-1]
        for key in ("run_j", "to_accuracy_j", "wall_to_accuracy_j", "inference_energy_per_item_j"):
            row[key + "_display"] = format_joules(row[key]) if row[key] is not None else "-"
    return rows


def sensitivity_by_task(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task: a chart of median time to accuracy against threshold per
    entry, and a table marking entries that are fastest at a lower rung but
    never reach the official threshold.

    The chart and the cells show the median over the seeds that reached a
    rung (with how many did). Who is fastest at a rung ("wins") is decided on
    the median over every seed that had the chance, a seed that did not reach
    the rung counting as infinitely slow: an entry whose one seed of three
    reached it is not ranked as if all three had. Seeds that stopped below
    the rung ("not observed") say nothing and are left out of both."""

    tasks = all_tasks()
    by_task: dict[str, dict[str, list[dict]]] = {}
    for r in runs:
        s = r.get("sensitivity")
        if s:
            by_task.setdefault(s["task"], {}).setdefault(s["entry"], []).append(s)
    out = []
    for task_name, entries in sorted(by_task.items()):
        task = tasks[task_name]
        ladder = sorted({g["threshold"] for recs in entries.values() for rec in recs for g in rec["rungs"]})
        table: dict[str, dict[float, dict[str, Any]]] = {}
        for entry, recs in entries.items():
            table[entry] = {}
            for t in ladder:
                cells = [g for rec in recs for g in rec["rungs"] if g["threshold"] == t]
                hours = [g["hours"] for g in cells if g["status"] == "reached"]
                statuses = {g["status"] for g in cells}
                median = statistics.median(hours) if hours else None
                tried = hours + [math.inf] * sum(g["status"] == "not reached" for g in cells)  # DNC: never, not "not counted"
                rank = statistics.median(tried) if tried else None
                table[entry][t] = {
                    "median_hours": median,
                    "display": format_hours(median) if median is not None else None,
                    "rank_hours": rank if rank is not None and math.isfinite(rank) else None,
                    "reached": len(hours),
                    "runs": len(cells),
                    "status": "reached" if hours else ("not reached" if statuses == {"not reached"} else "not observed"),
                }
        official = task.threshold
        rows = []
        for entry in sorted(table):
            wins = [
                t
                for t in ladder
                if len(table) > 1
                and t < official
                and table[entry][t]["rank_hours"] is not None
                and table[entry][t]["rank_hours"] <= min(table[e][t]["rank_hours"] for e in table if table[e][t]["rank_hours"] is not None)
            ]
            at_official = table[entry].get(official, {}).get("status", "not observed")
            rows.append(
                {
                    "entry": entry,
                    "cells": [table[entry][t] for t in ladder],
                    "wins_at": wins,
                    "official": at_official,
                    "flag": bool(wins) and at_official == "not reached",
                    "unknown": bool(wins) and at_official == "not observed",
                }
            )
        max_hours = max((c["median_hours"] for row in rows for c in row["cells"] if c["median_hours"] is not None), default=0.0)
        label, factor = time_axis(max_hours or 1 / 3600)
        series = []
        for row in rows:
            pts = [(t, c["median_hours"] * factor) for t, c in zip(ladder, row["cells"]) if c["median_hours"] is not None]
            name = row["entry"] + (" (never reaches official)" if row["flag"] else "")
            series.append((name, [p[0] for p in pts], [p[1] for p in pts]))
        span = (ladder[-1] - ladder[0]) or 1.0
        chart = line_chart(
            series,
            x_label=f"threshold ({task.metric_label})",
            y_label=f"median {label}",
            title=f"{task.title}: time to accuracy against threshold",
            x_min=ladder[0] - 0.05 * span,
        )
        out.append({"task": task, "ladder": ladder, "official": official, "rows": rows, "chart": chart})
    return out


def context(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"roofline": roofline_by_device(runs), "energy": energy_rows(runs), "sensitivity": sensitivity_by_task(runs)}

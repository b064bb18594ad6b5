"""Leaderboard rows from our own runs, one per objective of objectives.yaml
that a run has a value for; runs that do not reach the threshold, and
inference results below it, are excluded with the reason.

A run's records, as an objective's ``run`` path names them: ``tta``
(time_to_accuracy.json), ``utilization`` (utilization.json) and, for each
inference result (one per backend), ``result`` (latency/<backend>.json).
"""

from __future__ import annotations

from typing import Any

from dawnpipe.objectives import Objective, lookup, of_result
from dawnpipe.runfiles import run_source
from dawnpipe.tasks import get_task


def _row(objective: Objective, records: dict[str, Any], common: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
    value = lookup(records, objective.run)
    if value is None:
        return None
    fields = {name: lookup(records, path) for name, path in objective.fields.items()}
    return {**common, **(extra or {}), **fields, "objective": objective.name, "value": value}


def objective_rows(runs: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """Leaderboard rows and exclusions for our own runs."""
    rows, excluded = [], []
    for r in runs:
        tta, info = r["tta"], r["run"]
        common = {
            "task": tta["task"],
            "threshold": tta["threshold"],
            "demo_threshold": tta["demo_threshold"],
            "model": info["model"],
            "hardware": info["hardware"],
            "framework": info["framework"],
            "timestamp": info["finished"][:10],
            "source": run_source(info),
            "entry": info["entry"],
            "seed": info["seed"],
            "audit_anchor": f"run-{info['entry']}-{info['seed']}",
        }
        records = {"tta": tta, "utilization": r.get("utilization")}
        nodes = info.get("nodes") or 1
        if tta["reached"]:
            for objective in of_result("train"):
                row = _row(objective, records, common)
                if row is not None and objective.node_local and nodes > 1:
                    # rank 0 samples its own node: a part of the whole, not to be ranked against wholes
                    excluded.append(
                        {
                            "source": common["source"],
                            "objectives": [objective.name],
                            "reason": f"measured on node 0 of {nodes} only (each node's counters are not collected)",
                        }
                    )
                elif row is not None:
                    rows.append(row)
        else:
            missed = [o.name for o in of_result("train") if not o.optional or (o.measured and lookup(records, o.measured) is not None)]
            excluded.append({"source": common["source"], "objectives": missed, "reason": tta["reason"]})
        latencies = r.get("latencies") or ([r["latency"]] if r.get("latency") else [])  # hand-made runs may hold only one
        program_excluded = (info.get("program") or {}).get("excluded")
        if program_excluded and latencies:  # a program whose claims were contradicted: nothing of the run is ranked
            excluded.append({"source": common["source"], "objectives": [o.name for o in of_result("inference")], "reason": program_excluded})
            latencies = []
        for result in latencies:
            found, excl = inference_rows(result, common)
            rows += found
            excluded += excl
    return rows, excluded


def inference_rows(result: dict[str, Any], common: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """One inference result (one backend of one run): a row per inference
    objective, or, below the threshold, its exclusion with the accuracy it reached."""
    source = common["source"]  # the run; the row's backend and threads tell its results apart
    names = [o.name for o in of_result("inference")]
    if not result["meets_threshold"]:
        task = get_task(common["task"])
        reason = result.get("reason") or (
            f"inference {result['metric']} {task.format_metric(result['accuracy'])} with backend {result['backend']} "
            f"< threshold {task.format_metric(result['threshold'])}"
        )
        return [], [{"source": source, "objectives": names, "reason": reason}]
    items, official = result["items"], result.get("official_items")
    extra = {
        "backend": result["backend"],
        "threads": result["threads"],
        "device": result.get("device"),
        "precision": result.get("precision"),
        "accuracy": result["accuracy"],
        "items": items,
        "official_items": official,
        # the page's Backend column; a result over fewer items than the test set is tagged so
        "backend_label": f"{result['backend']}, {result['threads']} thr.",
        "backend_label_tag": f"{items} of {official} items" if official and items < official else None,
    }
    rows = [row for o in of_result("inference") if (row := _row(o, {"result": result}, common, extra)) is not None]
    return rows, []

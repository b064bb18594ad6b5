"""Leaderboard rows from our own runs: one row per entry (and, for
inference, per backend, threads, device and precision) and objective of
objectives.yaml, over the entry's seeds; runs that do not reach the
threshold, and inference results below it, are excluded with the reason.

A run's records, as an objective's ``run`` path names them: ``tta``
(time_to_accuracy.json), ``utilization`` (utilization.json) and, for each
inference result (one per backend), ``result`` (latency/<backend>.json).

An entry's row (``entry_rows``) carries its seeds (``seeds``, ``seed_values``,
``seed_sources``): a seed that did not reach the threshold, or whose
inference result is below it, counts as infinitely slow (``"inf"``), never as
missing. Its value is the median over the seeds; with half or more of them
not reaching, there is none and the entry is listed as not converged. Its
other figures (epochs, wall time, latency percentiles, ...) are medians over
the seeds that reached. How entries are ranked against each other, ties
included, is dawnpipe.leaderboard's (docs/rules.md, "Ranking and exclusions").
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from dawnpipe.objectives import Objective, lookup, of_result
from dawnpipe.runfiles import run_source
from dawnpipe.tasks import get_task
from dawnpipe.verdict import as_times, json_number

# What makes rows of one entry the same result over seeds: its table and, for
# inference, which backend answered, with how many threads, where, and in what precision.
GROUP = ("task", "objective", "threshold", "demo_threshold", "entry", "backend", "threads", "device", "precision")


def _row(objective: Objective, records: dict[str, Any], common: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
    value = lookup(records, objective.run)
    if value is None:
        return None
    fields = {name: lookup(records, path) for name, path in objective.fields.items()}
    return {**common, **(extra or {}), **fields, "objective": objective.name, "value": value}


def objective_rows(runs: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """Leaderboard rows (one per entry over its seeds: ``entry_rows``) and exclusions for our own runs."""
    rows, excluded, missed = run_rows(runs)
    entries, not_converged = entry_rows(rows, missed)
    return entries, [*excluded, *not_converged]


def run_rows(runs: list[dict[str, Any]]) -> tuple[list[dict], list[dict], list[dict]]:
    """One row per run (and inference result) and objective, the exclusions,
    and the seeds that count as not reaching: a row's group fields, its seed
    and source, for each objective a run that did not converge (or an
    inference result below the threshold) has no value for."""
    rows, excluded, missed = [], [], []
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
            names = [o.name for o in of_result("train") if not o.optional or (o.measured and lookup(records, o.measured) is not None)]
            excluded.append({"source": common["source"], "objectives": names, "reason": tta["reason"]})
            missed += [{**common, "objective": name} for name in names]
        latencies = r.get("latencies") or ([r["latency"]] if r.get("latency") else [])  # hand-made runs may hold only one
        program_excluded = (info.get("program") or {}).get("excluded")
        if program_excluded and latencies:  # a program whose claims were contradicted: nothing of the run is ranked
            excluded.append({"source": common["source"], "objectives": [o.name for o in of_result("inference")], "reason": program_excluded})
            latencies = []
        for result in latencies:
            found, excl = inference_rows(result, common)
            rows += found
            excluded += excl
            if excl:  # below the threshold: this seed of the backend counts as not reaching
                backend = {"backend": result["backend"], "threads": result["threads"], "device": result.get("device"), "precision": result.get("precision")}
                missed += [{**common, **backend, "objective": o.name} for o in of_result("inference")]
    return rows, excluded, missed


def _key(row: dict[str, Any]) -> tuple:
    return tuple(row.get(k) for k in GROUP)


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def entry_rows(rows: list[dict[str, Any]], missed: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """One row per entry (and inference backend) over its seeds, from the rows
    of single runs and the seeds that did not reach (see the module's
    docstring); entries with no median are excluded, with how many seeds did
    not reach. A group whose every seed missed has no row: each of its runs is
    excluded already, with its own reason."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(_key(row), []).append(row)
    for miss in missed:
        if _key(miss) in groups:
            groups[_key(miss)].append({**miss, "value": None})
    out, excluded = [], []
    for members in groups.values():
        members = sorted(members, key=lambda r: r["seed"])
        reached = [r for r in members if r["value"] is not None]
        values = as_times(r["value"] for r in members)
        first = reached[0]
        source = f"runs/{first['entry']}"
        median = statistics.median(values)
        if math.isinf(median):
            never = len(members) - len(reached)
            excluded.append(
                {
                    "source": source,
                    "objectives": [first["objective"]],
                    "reason": f"{never} of {len(members)} seeds did not reach the threshold"
                    + (f" with backend {first['backend']}" if first.get("backend") else "")
                    + ": no median (did not converge)",
                }
            )
            continue
        row = {k: v for k, v in first.items() if k not in ("seed", "audit_anchor")}
        for k, v in first.items():  # the other figures: medians over the seeds that reached
            if k not in ("value", "seed", *GROUP) and _number(v) and all(_number(r.get(k)) for r in reached):
                row[k] = statistics.median(r[k] for r in reached)
        row.update(
            value=median,
            source=source,
            timestamp=max(r["timestamp"] for r in reached),
            seeds=[r["seed"] for r in members],
            seed_values=[json_number(v) for v in values],
            seed_sources=[r["source"] for r in members],
        )
        out.append(row)
    return out, excluded


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

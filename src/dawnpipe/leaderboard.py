"""The leaderboard: every task's four objective tables (SPEC.md section 2).

Rows come from our own runs and from audited submissions alike, as plain
dicts with ``task, objective, value`` and the descriptive fields. Rows are
ordered by the unrounded value (best first) and ranked; equal values share a
rank. Results measured against a different threshold than the table's (a demo
threshold) go into a table of their own, never mixed with official ones.
"""

from __future__ import annotations

from typing import Any, Iterable

from dawnpipe.display import format_value
from dawnpipe.tasks import all_tasks

OBJECTIVES = {
    "train_time": {"unit": "hours", "title": "Training time", "what": "time to reach the threshold"},
    "train_cost": {"unit": "USD", "title": "Training cost", "what": "training hours x price per hour"},
    "inference_latency": {"unit": "ms", "title": "Inference latency", "what": "mean ms per item, one item at a time"},
    "inference_cost": {"unit": "USD per 10,000 items", "title": "Inference cost", "what": "cost of answering 10,000 items"},
    # The metric DAWNBench planned but never shipped: only where a meter measured it (NVML, RAPL), so
    # its tables exist only when they have rows ("optional").
    "train_energy": {"unit": "J", "title": "Energy to accuracy", "what": "joules of the training time to the threshold", "optional": True},
}
# DAWNBench's own tasks first, in the order of the original leaderboard.
TASK_ORDER = ["imagenet", "cifar10", "squad", "fashion-mnist"]

ROW_FIELDS = ("model", "hardware", "framework", "timestamp", "source")


def _task_order() -> list[str]:
    return [t for t in TASK_ORDER if t in all_tasks()] + sorted(set(all_tasks()) - set(TASK_ORDER))


def rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ordered = sorted(rows, key=lambda r: (r["value"], r.get("source", "")))
    ranked, prev_value, prev_rank = [], None, 0
    for i, row in enumerate(ordered, start=1):
        r = prev_rank if row["value"] == prev_value else i
        ranked.append({"rank": r, **row})
        prev_value, prev_rank = row["value"], r
    return ranked


def build(results: Iterable[dict[str, Any]], excluded: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """``results``: dicts with task, objective, threshold, demo_threshold, value and ROW_FIELDS (+ extras)."""
    tasks = all_tasks()
    groups: dict[tuple, list[dict]] = {}
    for res in results:
        key = (res["task"], res["objective"], float(res["threshold"]), bool(res.get("demo_threshold", False)))
        row = {k: v for k, v in res.items() if k not in ("task", "objective", "threshold", "demo_threshold")}
        row["unit"] = OBJECTIVES[res["objective"]]["unit"]
        row["display"] = format_value(row["value"], row["unit"])
        groups.setdefault(key, []).append(row)
    # every task's official tables exist, empty or not
    for name in _task_order():
        for objective in (o for o, spec in OBJECTIVES.items() if not spec.get("optional")):
            groups.setdefault((name, objective, tasks[name].threshold, False), [])
    order = {name: i for i, name in enumerate(_task_order())}
    objective_order = {name: i for i, name in enumerate(OBJECTIVES)}
    tables = []
    for (task, objective, threshold, demo) in sorted(groups, key=lambda k: (order.get(k[0], 99), k[3], -k[2], objective_order[k[1]])):
        tables.append({
            "task": task, "objective": objective, "threshold": threshold, "demo_threshold": demo,
            "official_threshold": tasks[task].threshold if task in tasks else None,
            "rows": rank(groups[(task, objective, threshold, demo)]),
        })
    return {"objectives": tables, "excluded": sorted(excluded, key=lambda e: e["source"])}

"""The leaderboard: rows ranked into one table per (task, objective,
threshold) (SPEC.md section 2). Nothing else: rows are built by the report
from our runs (dawnpipe.report.rows) and from audited submissions
(dawnpipe.audit.rows); objectives and their display rules are data
(dawnpipe.objectives).

Rows are plain dicts with ``task, objective, threshold, value`` and the
descriptive fields. They are ordered by the unrounded value (best first) and
ranked; equal values share a rank. Results measured against a different
threshold than the table's (a demo threshold) go into a table of their own,
never mixed with official ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dawnpipe import objectives
from dawnpipe.display import format_value
from dawnpipe.tasks import all_tasks, leaderboard_order


def rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ordered = sorted(rows, key=lambda r: (r["value"], r.get("source", "")))
    ranked, prev_value, prev_rank = [], None, 0
    for i, row in enumerate(ordered, start=1):
        r = prev_rank if row["value"] == prev_value else i
        ranked.append({"rank": r, **row})
        prev_value, prev_rank = row["value"], r
    return ranked


def build(results: Iterable[dict[str, Any]], excluded: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """``results``: dicts with task, objective, threshold, demo_threshold, value
    and the descriptive fields (a ``unit`` of their own, or the objective's;
    ``columns`` of their own, field -> heading, added to their table's)."""
    tasks, table_of = all_tasks(), objectives.objectives()
    groups: dict[tuple, list[dict]] = {}
    columns: dict[tuple, dict[str, str]] = {}  # a row's own extra columns (MLPerf's system, division, ...)
    for res in results:
        key = (res["task"], res["objective"], float(res["threshold"]), bool(res.get("demo_threshold", False)))
        row = {k: v for k, v in res.items() if k not in ("task", "objective", "threshold", "demo_threshold", "columns")}
        columns.setdefault(key, {}).update(res.get("columns") or {})
        row["unit"] = res.get("unit") or table_of[res["objective"]].unit
        row["display"] = format_value(row["value"], row["unit"])
        groups.setdefault(key, []).append(row)
    order = leaderboard_order()
    # every task's official tables exist, empty or not
    for name in order:
        for objective in (o for o in table_of.values() if not o.optional):
            groups.setdefault((name, objective.name, tasks[name].threshold, False), [])
    task_rank = {name: i for i, name in enumerate(order)}
    objective_rank = {name: i for i, name in enumerate(table_of)}
    tables = []
    for task, objective, threshold, demo in sorted(
        groups, key=lambda k: (task_rank.get(k[0], len(order)), k[0], k[3], -k[2], objective_rank.get(k[1], len(table_of)))
    ):
        spec = table_of.get(objective)
        tables.append(
            {
                "task": task,
                "objective": objective,
                "threshold": threshold,
                "demo_threshold": demo,
                "official_threshold": tasks[task].threshold if task in tasks else None,
                "title": spec.title if spec else objective,
                "what": spec.what if spec else "",
                "columns": {**(spec.columns if spec else {}), **columns.get((task, objective, threshold, demo), {})},
                "rows": rank(groups[(task, objective, threshold, demo)]),
            }
        )
    return {"objectives": tables, "excluded": sorted(excluded, key=lambda e: e["source"])}

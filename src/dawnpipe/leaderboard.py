"""The leaderboard: rows ranked into one table per (task, objective,
threshold) (docs/rules.md#ranking-and-exclusions). Nothing else: rows are built by the report
from our runs (dawnpipe.report.rows) and from audited submissions
(dawnpipe.audit.rows); objectives and their display rules are data
(dawnpipe.objectives).

Rows are plain dicts with ``task, objective, threshold, value`` and the
descriptive fields. A row of our own is an entry over its seeds
(``seed_values``, dawnpipe.report.rows); a published row (a DAWNBench
submission, an MLPerf score) has one value. Results measured against a
different threshold than the table's (a demo threshold) go into a table of
their own, never mixed with official ones.

Ranking (docs/rules.md, "Ranking and exclusions"): a row is *faster* than
another when the two-sample rule of dawnpipe.verdict says so from their seeds
(a published row is one value), except between two published rows, which are
ordered by value as published (one run each). A row's rank is 1 + the number
of rows faster than it, so ranks stay well defined when ties are not
transitive (A ties B, B ties C, A beats C: A and B rank 1, C ranks 2); rows
are listed by rank, then by value, and a row the rule cannot tell apart from
the row above it says so (``tied_with_above``, with each one's seeds).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from dawnpipe import objectives
from dawnpipe.display import format_value
from dawnpipe.tasks import all_tasks, leaderboard_order
from dawnpipe.verdict import RATIO, from_json_number, json_number, median_interval, two_sample


def seed_values(row: dict[str, Any]) -> list[float] | None:
    """A row's per-seed values (inf: never reached), or None for a published row."""
    values = row.get("seed_values")
    return None if values is None else [from_json_number(v) for v in values]


def _order(a: dict[str, Any], b: dict[str, Any], sa: list[float] | None, sb: list[float] | None) -> tuple[bool, bool]:
    """(a faster than b, b faster than a)."""
    if sa is None and sb is None:  # published against published: as published, by value
        return a["value"] < b["value"], b["value"] < a["value"]
    # the interval of b's values over a's: wholly above 1, a is faster; wholly below, b is
    iv = two_sample(sa or [a["value"]], sb or [b["value"]], RATIO)
    return bool(iv.exists and iv.low > 1.0), bool(iv.exists and iv.high < 1.0)


def rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows listed by rank (1 + the number of rows faster), then by value;
    each row says whether the rule cannot tell it apart from the row above."""
    samples = [seed_values(r) for r in rows]
    n = len(rows)
    faster = [[False] * n for _ in range(n)]  # faster[i][j]: row i is faster than row j
    for i in range(n):
        for j in range(i + 1, n):
            faster[i][j], faster[j][i] = _order(rows[i], rows[j], samples[i], samples[j])
    ranks = [1 + sum(faster[j][i] for j in range(n)) for i in range(n)]
    order = sorted(range(n), key=lambda i: (ranks[i], rows[i]["value"], rows[i].get("source", "")))
    ranked = []
    for pos, i in enumerate(order):
        above = order[pos - 1] if pos else None
        tied = None
        if above is not None and not faster[above][i]:
            tied = {"source": rows[above].get("source"), "seeds": seeds_of(samples[above]), "own_seeds": seeds_of(samples[i])}
        ranked.append({"rank": ranks[i], **rows[i], "tied_with_above": tied})
    return ranked


def seeds_of(values: list[float] | None) -> int | None:
    """How many seeds a row ran (None: a published row, one run)."""
    return None if values is None else len(values)


def spread(row: dict[str, Any]) -> dict[str, Any] | None:
    """An entry's spread over its seeds: the interval of its median where
    there are enough seeds (five), else the range of its seeds, labelled so;
    None for a published row. Ends as strict JSON (a seed that never reached: "inf")."""
    values = seed_values(row)
    if values is None:
        return None
    iv = median_interval(values)
    never = sum(math.isinf(v) for v in values)
    if iv.exists:
        kind, low, high, conf = "median interval", iv.low, iv.high, float(iv.confidence)
    else:
        kind, low, high, conf = "range", min(values), max(values), None
    return {"kind": kind, "low": json_number(low), "high": json_number(high), "confidence": conf, "seeds": len(values), "never_reached": never}


def spread_text(s: dict[str, Any] | None, unit: str) -> str:
    """What the page says of a row's seeds: 'published: one run', 'one seed', or the interval or range."""
    if s is None:
        return "published: one run"
    if s["seeds"] == 1:
        return "one seed: the rule cannot tell it apart from others"

    def end(x):
        value = from_json_number(x)
        return "never" if math.isinf(value) else format_value(value, unit)

    never = f"; {s['never_reached']} did not reach" if s["never_reached"] else ""
    if s["kind"] == "range":
        return f"{s['seeds']} seeds, range {end(s['low'])} to {end(s['high'])}{never}"
    return f"{s['seeds']} seeds, the median's {100 * s['confidence']:.0f}% interval {end(s['low'])} to {end(s['high'])}{never}"


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
        row["spread"] = spread(row)
        row["spread_display"] = spread_text(row["spread"], row["unit"])
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

"""What the audit recomputes from a submission and the checks on it.

Training: time and epochs to the task's threshold from the TSV (the first
row at or above it, as ``dawnpipe.metrics.tta`` defines for our own runs), the cost
from ``costPerHour``, and whether epochs and hours increase. Inference: the
cost of 10,000 items and the price per hour that ``cost`` and ``latency``
imply. Across submissions: identical logs under different names and logs
submitted in parts.
"""

from __future__ import annotations

import math
import re
from typing import Any

from dawnpipe.audit.model import Submission
from dawnpipe.audit.rules import lookup
from dawnpipe.audit.tsvlog import where_lines
from dawnpipe.metrics.tta import time_to_accuracy

_PART = re.compile(r"^(.+)_part(\d+)$")


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _steps(values: list[float]) -> tuple[list[int], list[int]]:
    """Rows (1..n-1) where the value decreases, and where it repeats the previous one."""
    down, same = [], []
    for i in range(1, len(values)):
        a, b = values[i - 1], values[i]
        if b < a:
            down.append(i)
        elif b == a:
            same.append(i)
    return down, same


def check_training(sub: Submission, rules: dict[str, Any]) -> None:
    task, log, f = sub.task, sub.log, sub.tsv
    limit = rules["limits"]["max_listed"]
    epochs, hours = log.columns["epoch"], log.columns["hours"]
    metric = log.columns[task.metric_column]
    tta = time_to_accuracy(epochs, hours, metric, task.threshold)
    lines = log.lines

    hours_down, hours_same = _steps(hours)
    epochs_down, epochs_same = _steps(epochs)

    def at(values: list[float], rows: list[int], step: bool) -> str:
        """'0.3 -> 0.25 on line 7, ...' (step) or '18 on line 21, ...' for the first few rows."""
        shown = [(f"{_fmt(values[i - 1])} -> {_fmt(values[i])}" if step else _fmt(values[i])) + f" on line {lines[i]}" for i in rows[:limit]]
        return ", ".join(shown) + (f" and {len(rows) - limit} more" if len(rows) > limit else "")

    if hours_down:
        before = [i for i in hours_down if tta.reached and i <= tta.row]
        if before:
            f.add(
                "error",
                "log.hours-decrease",
                where_lines([lines[i] for i in before], limit),
                f"cumulative hours decrease ({at(hours, before, True)}) before the threshold is reached: the time to threshold is not well defined",
            )
        else:
            f.add(
                "warning",
                "log.hours-decrease",
                where_lines([lines[i] for i in hours_down], limit),
                f"cumulative hours decrease ({at(hours, hours_down, True)})"
                + (" after the threshold row (the time to threshold is still well defined)" if tta.reached else ""),
            )
    if hours_same:
        f.add(
            "warning",
            "log.hours-repeat",
            where_lines([lines[i] for i in hours_same], limit),
            f"cumulative hours repeat the previous row ({at(hours, hours_same, False)})",
        )
    if epochs_down:
        f.add(
            "warning",
            "log.epoch-decrease",
            where_lines([lines[i] for i in epochs_down], limit),
            f"epoch decreases ({at(epochs, epochs_down, True)})"
            + ("; the time to threshold depends on hours only and is still well defined" if tta.reached and not hours_down else ""),
        )
    if epochs_same:
        f.add(
            "warning",
            "log.epoch-repeat",
            where_lines([lines[i] for i in epochs_same], limit),
            f"epoch repeats the previous row ({at(epochs, epochs_same, False)}): a log written twice for one epoch?"
            + (" The first row at the threshold still defines the time." if tta.reached else ""),
        )
    too_long = [i for i, h in enumerate(hours) if math.isfinite(h) and h > rules["plausible"]["max_hours"]]
    if too_long:
        f.add(
            "error",
            "log.implausible-hours",
            f"{where_lines([lines[i] for i in too_long], limit)}, column hours",
            f"{at(hours, too_long, False)}: hours of training over the plausible {rules['plausible']['max_hours']:g}",
        )
    finite_metric = [m for m in metric if math.isfinite(m)]
    if task.metric_scale == "percent" and finite_metric and max(finite_metric) <= 1.0:
        f.add(
            "warning",
            "log.fraction-not-percent",
            f"column {task.metric_column}",
            f"every value is at most 1 (best {_fmt(max(finite_metric))}): given as a fraction? {task.metric_column} is a percentage 0..100",
        )

    figures = sub.figures
    figures.update(
        threshold=task.threshold,
        metric=task.metric_column,
        reached=tta.reached,
        best_metric=tta.best_metric,
        epochs_logged=epochs[-1] if epochs else None,
        hours_logged=hours[-1] if hours else None,
    )
    if tta.reached and not (math.isfinite(tta.hours) and tta.hours >= 0):
        pass  # no usable time at the threshold row: reported by the log model (missing or negative hours)
    elif tta.reached:
        figures.update(epochs_to_threshold=tta.epoch, hours_to_threshold=tta.hours, threshold_line=lines[tta.row])
        if tta.hours == 0:
            f.add("warning", "log.zero-time", f"line {lines[tta.row]}", "the threshold is reached after 0 hours of training")
    else:
        best = "no value" if tta.best_metric is None else task.format_metric(tta.best_metric)
        reason = (
            f"never reaches the threshold: best {task.metric_column} {best} < {task.format_metric(task.threshold)} "
            f"in {_fmt(epochs[-1])} epochs (did not converge; not ranked)"
        )
        f.add("warning", "log.not-reached", f"column {task.metric_column}", reason)
        sub.notes.append(reason)
    _training_cost(sub, rules)
    _claims(sub, rules)


def _training_cost(sub: Submission, rules: dict[str, Any]) -> None:
    if sub.json is None:
        return
    price = sub.meta.get("costPerHour")
    if price is not None and price < 0:
        return  # reported by the metadata model
    if price is None:
        if sub.doc is not None and "costPerHour" not in sub.doc:
            sub.json.add("info", "json.no-price", "field costPerHour", "not given: no training-cost rank")
        return
    if price > rules["plausible"]["max_cost_per_hour_usd"]:
        sub.json.add(
            "error",
            "json.implausible-price",
            "field costPerHour",
            f"{_fmt(price)} USD per hour is over the plausible {rules['plausible']['max_cost_per_hour_usd']:g}",
        )
        return
    sub.figures["cost_per_hour"] = price
    if sub.figures.get("hours_to_threshold") is not None:
        sub.figures["cost_usd"] = sub.figures["hours_to_threshold"] * price


def _claims(sub: Submission, rules: dict[str, Any]) -> None:
    if sub.doc is None or sub.json is None:
        return
    log, task = sub.log, sub.task
    for claim in rules["claims"]:
        claimed = lookup(sub.doc, claim["field"])
        if claimed is None:
            continue
        where = f"field {claim['field']}"
        if isinstance(claimed, bool) or not isinstance(claimed, (int, float)) or not math.isfinite(claimed):
            sub.json.add("error", "claim.type", where, f"expected a number, got {claimed!r:.40}")
            continue
        threshold = lookup(sub.doc, claim.get("threshold_field", "")) if claim.get("threshold_field") else None
        if threshold is None:
            threshold = task.threshold
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
            sub.json.add("error", "claim.type", f"field {claim['threshold_field']}", f"expected a threshold number, got {threshold!r:.40}")
            continue
        tta = time_to_accuracy(log.columns["epoch"], log.columns["hours"], log.columns[task.metric_column], float(threshold))
        if not tta.reached:
            sub.json.add("error", "claim.disagrees", where, f"claims {_fmt(claimed)} at threshold {threshold:g}, but the log never reaches {threshold:g}")
            continue
        actual = tta.hours if claim["recomputed"] == "hours_to_threshold" else tta.epoch
        if not _close(claimed, actual, rules["tolerance"]["relative"]):
            sub.json.add(
                "error",
                "claim.disagrees",
                where,
                f"claims {_fmt(claimed)}, but the log gives {_fmt(actual)} at threshold {threshold:g} (line {log.lines[tta.row]})",
            )


def _close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-12


def check_inference(sub: Submission, rules: dict[str, Any]) -> None:
    task, f, meta = sub.task, sub.json, sub.meta
    plausible = rules["plausible"]
    # values outside their range are reported by the metadata model; nothing is computed from them
    latency, cost, price = meta.get("latency"), meta.get("cost"), meta.get("costPerHour")
    latency = latency if latency is not None and latency > 0 else None
    cost = cost if cost is not None and cost >= 0 else None
    price = price if price is not None and price >= 0 else None
    accuracy = meta.get(task.inference_accuracy_field)
    figures = sub.figures
    figures.update(threshold=task.threshold, metric=task.inference_accuracy_field, accuracy=accuracy)
    if latency is not None and latency > plausible["max_latency_ms"]:
        f.add("error", "json.implausible-latency", "field latency", f"{_fmt(latency)} ms per item is over the plausible {plausible['max_latency_ms']:g}")
        latency = None
    if price is not None and price > plausible["max_cost_per_hour_usd"]:
        f.add(
            "error", "json.implausible-price", "field costPerHour", f"{_fmt(price)} USD per hour is over the plausible {plausible['max_cost_per_hour_usd']:g}"
        )
        price = None
    if cost is not None and cost > plausible["max_cost_per_item_usd"]:
        f.add("error", "json.implausible-cost", "field cost", f"{_fmt(cost)} USD per item is over the plausible {plausible['max_cost_per_item_usd']:g}")
        cost = None
    if accuracy is not None and 0 <= accuracy <= task.metric_max:
        if accuracy < task.threshold:
            reason = (
                f"{task.inference_accuracy_field} {task.format_metric(accuracy)} is below the threshold "
                f"{task.format_metric(task.threshold)}: a model without the quality is not ranked"
            )
            if task.metric_scale == "percent" and accuracy <= 1.0:
                reason += f" (given as a fraction? {task.inference_accuracy_field} is a percentage 0..100)"
            f.add("warning", "inference.below-threshold", f"field {task.inference_accuracy_field}", reason)
            sub.notes.append(reason)
    items = lookup(sub.doc, rules["inference_items_field"]) if sub.doc is not None else None
    if isinstance(items, (int, float)) and not isinstance(items, bool) and items < task.inference_items:
        reason = (
            f"measured on {items:g} of the {task.inference_items:,} items of the {task.title} inference set "
            f"({rules['inference_items_field']}): not the benchmark; not ranked"
        )
        f.add("warning", "inference.partial-set", f"field {rules['inference_items_field']}", reason)
        sub.notes.append(reason)
    if latency is not None:
        figures["latency_ms"] = latency
    elif sub.doc is not None and "latency" not in sub.doc:
        f.add("info", "inference.no-latency", "field latency", "not given: no latency rank")
    latency_hours = None if latency is None else latency / 3_600_000.0
    if price is not None and latency_hours is not None:
        expected = price * latency_hours
        if cost is not None and not _close(cost, expected, rules["tolerance"]["relative"]):
            f.add("error", "claim.disagrees", "field cost", f"{_fmt(cost)} USD per item disagrees with costPerHour x latency = {_fmt(expected)}")
        elif cost is None:
            cost = expected
    if cost is not None:
        figures["cost_per_item_usd"] = cost
        figures["cost_per_10k_usd"] = cost * 10_000
        if latency_hours:
            implied = cost / latency_hours
            figures["implied_price_per_hour"] = implied
            low, high = plausible["price_per_hour_usd"]["min"], plausible["price_per_hour_usd"]["max"]
            if not low <= implied <= high:
                f.add(
                    "warning",
                    "inference.implausible-price",
                    "fields cost, latency",
                    f"imply {_fmt(implied)} USD per hour (cost / latency in hours), outside the plausible {low:g}..{high:g}: "
                    "cost is USD per item and latency ms per item",
                )
    elif sub.doc is not None and "cost" not in sub.doc and price is None:
        f.add("info", "inference.no-cost", "field cost", "not given: no inference-cost rank")


def check_duplicate_logs(subs: list[Submission]) -> None:
    """Identical logs under different names: the first (by date, then name) is warned, the others are errors."""
    groups: dict[tuple, list[Submission]] = {}
    for sub in subs:
        if sub.kind == "train" and sub.log is not None and sub.tsv is not None:
            key = (sub.task.name, tuple((name, tuple(values)) for name, values in sub.log.columns.items()))
            groups.setdefault(key, []).append(sub)
    for group in groups.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda s: (s.meta.get("timestamp") or "9999", s.source))
        first = group[0]
        others = ", ".join(s.tsv.source for s in group[1:])
        first.tsv.add("warning", "log.duplicate", "file", f"the same log as {others}")
        for sub in group[1:]:
            reason = f"identical to the log of {first.tsv.source}: one run submitted under two names"
            sub.tsv.add("error", "log.duplicate", "file", reason)


def check_parts(subs: list[Submission]) -> None:
    names = {(s.directory, s.kind, s.name) for s in subs}
    for sub in subs:
        m = _PART.match(sub.name)
        if not m:
            continue
        base, part = m.group(1), m.group(2)
        target = sub.json or sub.tsv
        if (sub.directory, sub.kind, base) in names:
            target.add(
                "warning",
                "submission.part",
                "file",
                f"named as part {part} of {base}: another log of the same entry; audited and ranked as a submission of its own",
            )
        else:
            target.add("warning", "submission.part", "file", f"named as part {part} of {base}, which is not here")

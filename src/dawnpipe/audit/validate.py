"""Check every submission against its schemas (``dawnpipe.schemas.tables``)
at once and turn the failure cases into messages on the right file, field
and line.

One frame per schema (all training JSONs; the inference JSONs of a task; the
logs of a task), checked once: the cost does not grow with the number of
files, only with the number of rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from dawnpipe.audit.files import safe_text
from dawnpipe.audit.model import FileAudit
from dawnpipe.audit.tsvlog import where_lines
from dawnpipe.schemas.tables import Schema, TableErrors

_BOUND = re.compile(r"(greater_than_or_equal_to|greater_than|less_than_or_equal_to|less_than)\((.*)\)")
_PHRASE = {"greater_than_or_equal_to": "below", "greater_than": "not above", "less_than_or_equal_to": "above", "less_than": "not below"}


def frame(rows: list[dict[str, Any]], fields: dict[str, tuple[type, bool]]) -> pd.DataFrame:
    """A frame with the model's dtypes whatever the values (all-missing columns included)."""
    data = {}
    for name, (kind, _) in fields.items():
        values = [r.get(name) for r in rows]
        data[name] = pd.Series(values, dtype="float64" if kind is float else "str")
    return pd.DataFrame(data, index=pd.RangeIndex(len(rows)))


def log_frame(columns: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame({k: np.asarray(v, dtype="float64") for k, v in columns.items()})


def failures(model: type[Schema], df: pd.DataFrame) -> pd.DataFrame | None:
    if df.empty:
        return None
    try:
        model.check(df)
    except TableErrors as err:
        return err.cases
    return None


def describe(check: str, column: str, value: Any, task) -> str:
    """A failed check in the benchmark's words."""
    shown = _value(value)
    m = _BOUND.fullmatch(check)
    if m:
        op, bound = m.groups()
        text = f"{shown} is {_PHRASE[op]} {bound}"
        if column == "f1Score":
            if op.startswith("less_than") and isinstance(value, (int, float)) and value <= 100:
                text += ": F1 given in percent? F1 is a fraction 0..1"
        elif column.endswith("Accuracy") and op.startswith("less_than"):
            text += ": accuracies are percent 0..100"
        return text
    if check.startswith("str_length"):
        return "empty"
    if check.startswith("str_matches"):
        return f"{shown} is not a date YYYY-MM-DD"
    if check == "is_a_calendar_date":
        return f"{shown} is not a calendar date"
    if check.startswith("isin"):
        return f"{shown} is not one of {check[len('isin(') : -1]}"
    if check == "has_latency_or_cost":
        return "neither latency nor cost is given (at least one is needed)"
    return f"{shown} fails {check}"


def _value(value: Any) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "the value"
    if isinstance(value, str):
        return repr(safe_text(value[:40]))
    return f"{value:g}" if isinstance(value, float) else repr(value)


def apply_metadata_failures(cases: pd.DataFrame | None, owners: list[tuple[FileAudit, dict, set[str]]], task) -> None:
    """``owners[i]``: (file, JSON object, fields already reported) of frame row i."""
    if cases is None:
        return
    seen: set[tuple[int, str]] = set()  # one message per field (a date can fail two checks)
    for case in cases.itertuples(index=False):
        index, column, check = case.index, case.column, str(case.check)
        if index is None or (isinstance(index, float) and np.isnan(index)):
            continue  # whole-frame failures (dtype) cannot happen: frames are built with the model's dtypes
        f, doc, reported = owners[int(index)]
        # A check on the whole row (latency or cost): one message per row.
        key = (int(index), check if check == "has_latency_or_cost" else str(column))
        if key in seen:
            continue
        seen.add(key)
        if check == "has_latency_or_cost":
            f.add("error", "json.check", "fields latency, cost", describe(check, "", None, task))
            continue
        if column in reported:
            continue
        where = f"field {column}"
        if check == "not_nullable":
            text = "required field missing" if column not in doc else "required field is null"
            f.add("error", "json.missing-field", where, text)
        else:
            f.add("error", "json.check", where, describe(check, str(column), case.failure_case, task))


def apply_log_failures(cases: pd.DataFrame | None, owner_of: Callable[[int], tuple[Any, int]], task, limit: int) -> None:
    """``owner_of(i)`` -> (submission, row within its log) for frame row i."""
    if cases is None:
        return
    grouped: dict[tuple[int, str, str], list[tuple[int, Any]]] = {}
    subs: dict[int, Any] = {}
    for case in cases.itertuples(index=False):
        index = case.index
        if index is None or (isinstance(index, float) and np.isnan(index)):
            continue
        sub, row = owner_of(int(index))
        if (row, str(case.column)) in sub.log.reported:
            continue
        subs[id(sub)] = sub
        grouped.setdefault((id(sub), str(case.column), str(case.check)), []).append((row, case.failure_case))
    for (key, column, check), items in grouped.items():
        sub = subs[key]
        items.sort(key=lambda t: t[0])
        lines = [sub.log.lines[row] for row, _ in items]
        where = f"{where_lines(lines, limit)}, column {column}" if len(lines) > 1 else f"line {lines[0]}, column {column}"
        if check == "not_nullable":
            text = "missing value" if len(items) == 1 else f"missing values ({len(items)} rows)"
        else:
            text = describe(check, column, items[0][1], task)
            if len(items) > 1:
                text = f"{len(items)} rows, e.g. {text}"
        sub.tsv.add("error", "tsv.check", where, text)

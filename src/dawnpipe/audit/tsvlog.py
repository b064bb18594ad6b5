"""The per-epoch TSV of a training submission, read by column name.

Harmless quirks are warnings (columns in another order, blank lines, cells
padded with spaces, extra columns); anything that makes a value unknowable is
an error naming the line and column. Values are range-checked afterwards by
the task's log schema (``dawnpipe.schemas.results.log_model``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

from dawnpipe.audit.files import safe_text
from dawnpipe.audit.model import FileAudit

# Plain decimal numbers only: Python's float() would also take 'nan', 'inf' and '1_000'.
NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


@dataclass
class Log:
    columns: dict[str, list[float]]  # required columns only, NaN where a value is missing or wrong
    lines: list[int]  # file line number of each row
    reported: set[tuple[int, str]] = field(default_factory=set)  # (row, column) already reported


def where_lines(lines: list[int], limit: int) -> str:
    if len(lines) == 1:
        return f"line {lines[0]}"
    shown = ", ".join(str(n) for n in lines[:limit])
    return f"lines {shown}" + (f" and {len(lines) - limit} more" if len(lines) > limit else "")


def parse_tsv(text: str, f: FileAudit, task, limit: int) -> Log | None:
    """Columns epoch, hours and the task's metric columns, by name."""
    required = ["epoch", "hours", *task.log_columns]
    lines = text.split("\n")
    while lines and not lines[-1].strip():  # blank lines at the end are not worth a message
        lines.pop()
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    if start == len(lines):
        f.add("error", "tsv.empty", "file", "empty: no header and no epochs")
        return None
    if start:
        f.add("warning", "tsv.blank-lines", where_lines(list(range(1, start + 1)), limit), "blank line(s) before the header (ignored)")
    header_line = lines[start]
    raw_header = header_line.split("\t")
    header = [c.strip() for c in raw_header]
    if header != raw_header:
        f.add("warning", "tsv.padded-header", f"line {start + 1}", "column names padded with spaces (harmless; stripped)")
    shown = ", ".join(safe_text(c) for c in header[:10])
    if len(header) == 1 and ("," in header_line or " " in header_line.strip() or ";" in header_line):
        f.add("error", "tsv.not-tab-separated", f"line {start + 1}", f"the header {safe_text(header_line[:80])!r} is not tab-separated")
        return None
    dups = sorted(c for c, n in Counter(header).items() if n > 1)
    if dups:
        f.add("error", "tsv.duplicate-column", f"line {start + 1}", f"column(s) {', '.join(safe_text(c) for c in dups)} appear more than once")
        return None
    missing = [c for c in required if c not in header]
    if missing:
        hints = [f"{safe_text(h)!r} for {c!r}" for c in missing for h in header if h.lower() == c.lower()]
        f.add(
            "error",
            "tsv.missing-column",
            f"line {start + 1}",
            f"missing column(s) {', '.join(missing)} (the header has: {shown}; a {task.title} log needs {', '.join(required)})"
            + (f"; names are case-sensitive: {', '.join(hints)}" if hints else ""),
        )
        return None
    extra = [c for c in header if c not in required]
    if extra:
        f.add("warning", "tsv.extra-column", f"line {start + 1}", f"extra column(s) {', '.join(safe_text(c) for c in extra[:5])} (ignored)")
    if [c for c in header if c in required] != required:
        f.add("warning", "tsv.column-order", f"line {start + 1}", f"columns in another order ({shown}) than {', '.join(required)} (harmless; read by name)")

    index = [header.index(c) for c in required]
    width = len(header)
    columns: dict[str, list[float]] = {c: [] for c in required}
    row_lines: list[int] = []
    reported: set[tuple[int, str]] = set()
    blank, padded, ragged, bad = [], [], [], []
    nan = math.nan
    for lineno, line in enumerate(lines[start + 1 :], start + 2):
        if not line.strip():
            blank.append(lineno)
            continue
        cells = line.split("\t")
        if len(cells) != width:
            ragged.append((lineno, len(cells)))
            continue
        row = len(row_lines)
        row_lines.append(lineno)
        for name, i in zip(required, index):
            raw = cells[i]
            cell = raw.strip()
            if cell != raw and lineno not in padded[-1:]:
                padded.append(lineno)
            if not cell:
                columns[name].append(nan)  # the log model reports it (not nullable), unless nullable
                continue
            value = float(cell) if NUMBER.fullmatch(cell) else None
            if value is None or not math.isfinite(value):
                bad.append((lineno, name, cell, value is not None))
                reported.add((row, name))
                columns[name].append(nan)
            else:
                columns[name].append(value)
    if blank:
        f.add("warning", "tsv.blank-lines", where_lines(blank, limit), "blank line(s) among the epochs (ignored)")
    if padded:
        f.add("warning", "tsv.padded-cells", where_lines(padded, limit), "cells padded with spaces (harmless; stripped)")
    for lineno, n in ragged[:limit]:
        f.add("error", "tsv.ragged-row", f"line {lineno}", f"{n} cell(s), but the header has {width} columns")
    if len(ragged) > limit:
        f.add(
            "error", "tsv.ragged-row", where_lines([n for n, _ in ragged[limit:]], limit), f"and {len(ragged) - limit} more rows with the wrong number of cells"
        )
    for lineno, name, cell, overflow in bad[:limit]:
        reason = "is not a finite number" if overflow else "is not a number"
        f.add("error", "tsv.not-a-number", f"line {lineno}, column {name}", f"{safe_text(cell[:40])!r} {reason}")
    if len(bad) > limit:
        f.add("error", "tsv.not-a-number", where_lines([b[0] for b in bad[limit:]], limit), f"and {len(bad) - limit} more cells that are not numbers")
    if not row_lines:
        f.add("error", "tsv.no-epochs", "file", "no epochs logged (only a header)")
        return None
    return Log(columns, row_lines, reported)

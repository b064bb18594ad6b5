"""``audit(paths)``: every file under the paths gets a status and messages.

Steps: find the files of the DAWNBench v1 layout; read each under its size
cap; parse JSON objects and TSV logs (quirks noted); validate all metadata
and all logs with their schemas, one frame per schema; recompute the
benchmark figures and check them; then the checks across submissions
(pairs of JSON and TSV, identical logs, logs in parts).
"""

from __future__ import annotations

import math
import os
from typing import Any

from dawnpipe.audit import checks, validate
from dawnpipe.audit.files import Unreadable, decode_text, find, read_capped
from dawnpipe.audit.metadata import parse_json, typed_fields
from dawnpipe.audit.model import AuditReport, FileAudit, Submission
from dawnpipe.audit.rules import load_rules
from dawnpipe.audit.tsvlog import parse_tsv
from dawnpipe.schemas.results import log_model
from dawnpipe.schemas.submissions import TrainingSubmission, field_types, inference_model
from dawnpipe.tasks import all_tasks


def read_percent_as_fraction(row: dict, task, f) -> None:
    """A fraction metric (SQuAD's F1) given plainly as a percentage (above 1, at
    most 100) is read as the percentage it is, with a warning that says so, and
    ranked: the published DAWNBench leaderboard ranked such an entry. (Training
    logs get the reverse hint: accuracies given as fractions.)"""
    name = task.inference_accuracy_field
    value = row.get(name)
    if task.metric_scale == "fraction" and isinstance(value, float) and 1.0 < value <= 100.0:
        row[name] = value / 100.0
        f.add(
            "warning",
            "inference.percent-not-fraction",
            f"field {name}",
            f"{value:g} is a percentage, not a fraction 0..1: read as {value / 100.0:.4g} (harmless; ranked)",
        )


def audit(paths: list[str], rules: dict[str, Any] | None = None) -> AuditReport:
    rules = rules or load_rules()
    found = find([os.fspath(p) for p in paths])
    subs = _group(found.files)
    for sub in subs:
        _read(sub, rules)
    _pairing(subs)
    _validate(subs, rules)
    for sub in subs:
        if sub.kind == "train" and sub.log is not None:
            checks.check_training(sub, rules)
        elif sub.kind == "inference" and sub.doc is not None:
            checks.check_inference(sub, rules)
    checks.check_duplicate_logs(subs)
    checks.check_parts(subs)
    for sub in subs:
        sub.figures = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in sub.figures.items()}
    return AuditReport(found.files, subs, rules, found.skipped)


def _group(files: list[FileAudit]) -> list[Submission]:
    tasks = all_tasks()
    subs: dict[tuple[str, str, str], Submission] = {}
    for f in files:
        if f.kind == "other":
            continue
        directory, base = os.path.split(f.path)
        name = os.path.splitext(base)[0]
        kind = "inference" if f.kind == "inference" else "train"
        sub = subs.setdefault((directory, kind, name), Submission(kind, tasks[f.task], name, directory))
        if f.kind == "train-tsv":
            sub.tsv = f
        else:
            sub.json = f
    return sorted(subs.values(), key=lambda s: s.source)


def _read(sub: Submission, rules: dict[str, Any]) -> None:
    limits = rules["limits"]
    if sub.json is not None and sub.json.status != "error":
        text = _text(sub.json, limits["max_json_bytes"])
        if text is not None:
            sub.doc = parse_json(text, sub.json)
    if sub.tsv is not None and sub.tsv.status != "error":
        text = _text(sub.tsv, limits["max_tsv_bytes"])
        if text is not None:
            sub.log = parse_tsv(text, sub.tsv, sub.task, limits["max_listed"])


def _text(f: FileAudit, cap: int) -> str | None:
    try:
        data = read_capped(f, cap)
    except Unreadable as e:
        f.add("error", e.code, "file", e.text)
        return None
    return decode_text(data, f)


def _pairing(subs: list[Submission]) -> None:
    for sub in subs:
        if sub.kind != "train":
            continue
        if sub.tsv is None:
            sub.json.add("error", "submission.no-log", "file", f"no training log {sub.name}.tsv beside it (a training submission is a JSON and a TSV)")
        elif sub.json is None:
            sub.tsv.add("error", "submission.no-metadata", "file", f"no {sub.name}.json beside it (a training log needs its metadata)")


def _validate(subs: list[Submission], rules: dict[str, Any]) -> None:
    """All metadata of one model in one frame, all logs of one task in one frame."""
    train_fields = field_types(TrainingSubmission)
    rows, owners = [], []
    by_task: dict[str, list[Submission]] = {}
    for sub in subs:
        if sub.doc is None:
            continue
        if sub.kind == "train":
            row, reported = typed_fields(sub.doc, train_fields, sub.json, rules)
            sub.meta = row
            rows.append(row)
            owners.append((sub.json, sub.doc, reported))
        else:
            by_task.setdefault(sub.task.name, []).append(sub)
    validate.apply_metadata_failures(validate.failures(TrainingSubmission, validate.frame(rows, train_fields)), owners, None)

    for group in by_task.values():
        task = group[0].task
        model = inference_model(task)
        fields = field_types(model)
        rows, owners = [], []
        for sub in group:
            row, reported = typed_fields(sub.doc, fields, sub.json, rules)
            read_percent_as_fraction(row, task, sub.json)
            sub.meta = row
            rows.append(row)
            owners.append((sub.json, sub.doc, reported))
        validate.apply_metadata_failures(validate.failures(model, validate.frame(rows, fields)), owners, task)

    logs: dict[str, list[Submission]] = {}
    for sub in subs:
        if sub.log is not None:
            logs.setdefault(sub.task.name, []).append(sub)
    for group in logs.values():
        task = group[0].task
        columns: dict[str, list[float]] = {c: [] for c in group[0].log.columns}
        starts, owners = [], []
        for sub in group:
            starts.append(len(columns["epoch"]))
            owners.append(sub)
            for name, values in sub.log.columns.items():
                columns[name].extend(values)

        def owner_of(i: int, starts=starts, owners=owners):
            import bisect

            k = bisect.bisect_right(starts, i) - 1
            return owners[k], i - starts[k]

        cases = validate.failures(log_model(task), validate.log_frame(columns))
        validate.apply_log_failures(cases, owner_of, task, rules["limits"]["max_listed"])

"""Audit results for people (a terminal summary) and for tools (JSON, Parquet)."""

from __future__ import annotations

from typing import Any

from dawnpipe.audit.model import AuditReport, FileAudit, Submission
from dawnpipe.display import format_hours, format_ms, format_usd, terminal_safe


def figure_note(sub: Submission, f: FileAudit) -> str:
    """The recomputed figure shown beside a file in the summary table; none
    beside a file with errors (a time from a 200% accuracy would mislead)."""
    if f.status == "error":
        return "not recomputed (errors)"
    try:
        return _figure_note(sub, f)
    except ValueError:  # a figure of a file with errors that cannot be displayed; the messages say why
        return ""


def _figure_note(sub: Submission, f: FileAudit) -> str:
    fig, task = sub.figures, sub.task
    if sub.kind == "train" and f is sub.tsv and "reached" in fig:
        if fig["reached"] and fig.get("hours_to_threshold") is not None:
            return (
                f"{format_hours(fig['hours_to_threshold'])} to {task.format_metric(task.threshold)} "
                f"(epoch {fig['epochs_to_threshold']:g}, line {fig['threshold_line']})"
            )
        best = fig.get("best_metric")
        return "did not converge" + ("" if best is None else f" (best {task.format_metric(best)})")
    if sub.kind == "train" and f is sub.json and fig.get("cost_usd") is not None:
        return f"{format_usd(fig['cost_usd'])} at ${fig['cost_per_hour']:g}/h"
    if sub.kind == "inference":
        parts = []
        if fig.get("latency_ms") is not None:
            parts.append(f"{format_ms(fig['latency_ms'])} ms")
        if fig.get("cost_per_10k_usd") is not None:
            parts.append(f"{format_usd(fig['cost_per_10k_usd'])} per 10,000")
        return ", ".join(parts)
    return ""


def owners(report: AuditReport) -> dict[int, Submission]:
    return {id(f): sub for sub in report.submissions for f in sub.files}


def terminal(report: AuditReport, verbose: bool = False) -> str:
    lines = []
    for f in report.files:
        for m in f.messages:
            if m.severity == "info" and not verbose:
                continue
            where = "" if m.where == "file" else f" {m.where}:"
            lines.append(f"{f.path}:{where} {m.severity}: {m.text}")
    if lines:
        lines.append("")
    by_file = owners(report)
    width = min(72, max((len(f.source) for f in report.files), default=10))
    lines.append(f"{'status':<8} {'file':<{width}}  recomputed")
    for f in report.files:
        sub = by_file.get(id(f))
        note = figure_note(sub, f) if sub is not None else ""
        problems = sum(1 for m in f.messages if m.severity in ("warning", "error"))
        count = f" [{problems} message{'s' if problems != 1 else ''}]" if problems else ""
        lines.append(f"{f.status:<8} {f.source:<{width}}  {note}{count}".rstrip())
    c = report.counts()
    lines.append("")
    lines.append(
        f"audit: {c['files']} files: {c['ok']} ok, {c['warning']} with warnings, {c['error']} with errors"
        + (f"; {report.skipped} other files outside <Task>/train and <Task>/inference not audited" if report.skipped else "")
    )
    # paths, JSON keys, TSV headers and messages quote the submission: shown with control characters escaped
    return "\n".join(terminal_safe(line) for line in lines) + "\n"


def as_json(report: AuditReport, paths: list[str]) -> dict[str, Any]:
    from dawnpipe.runinfo import now_iso

    by_file = owners(report)
    return {
        "generated": now_iso(),
        "paths": paths,
        "summary": report.counts() | {"skipped": report.skipped, "exit_code": report.exit_code},
        "rules": report.rules,
        "files": [
            {
                "path": f.path,
                "source": f.source,
                "task": f.task,
                "kind": f.kind,
                "status": f.status,
                "bytes": f.size,
                "submission": by_file[id(f)].source if id(f) in by_file else None,
                "messages": [m.as_dict() for m in f.messages],
            }
            for f in report.files
        ],
        "submissions": [
            {
                "source": s.source,
                "kind": s.kind,
                "task": s.task.name,
                "name": s.name,
                "status": s.status,
                "rankable": s.valid and not s.notes,
                "files": [f.source for f in s.files],
                "figures": s.figures,
                "notes": s.notes,
                "anchor": s.anchor,
            }
            for s in report.submissions
        ],
    }


def message_table(report: AuditReport):
    import pandas as pd

    from dawnpipe.schemas.results import validate
    from dawnpipe.schemas.submissions import AuditMessages

    rows = []
    for f in report.files:
        base = {"path": f.path, "source": f.source, "task": f.task, "kind": f.kind, "status": f.status}
        if not f.messages:
            rows.append({**base, "severity": None, "code": None, "where": None, "message": None})
        for m in f.messages:
            rows.append({**base, "severity": m.severity, "code": m.code, "where": m.where, "message": m.text})
    columns = ["path", "source", "task", "kind", "status", "severity", "code", "where", "message"]
    frame = pd.DataFrame({c: pd.Series([r[c] for r in rows], dtype="str") for c in columns})
    return validate(AuditMessages, frame, "the audit message table")

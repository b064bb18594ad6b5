"""MLPerf results as leaderboard rows: one table per benchmark (task
``mlperf/<benchmark>``, objective train_time, in minutes), beside the
DAWNBench tables; results without a score are listed as excluded with the
reason."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

PREFIX = "mlperf/"


def board_rows(results) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows, excluded = [], []
    for r in results:
        source = f"{r.submitter}/results/{r.system}/{r.benchmark}"
        if r.score_minutes is None:
            excluded.append({"source": source, "objectives": ["train_time"], "reason": f"MLPerf {r.benchmark}: no score: {r.reason}"})
            continue
        rcp = r.rcp.get("verdict", "")
        rows.append(
            {
                "task": PREFIX + r.benchmark,
                "objective": "train_time",
                "threshold": 0.0,  # MLPerf's quality target, fixed per benchmark by the rules (the page names it, not a number)
                "value": r.score_minutes,
                "unit": "minutes",
                "model": r.benchmark,
                "author": r.submitter,
                "hardware": f"{r.accelerators_count} x {r.accelerator}" if r.accelerator else "",
                "framework": r.framework or "",
                "system": r.system_name or r.system,
                "division": r.division or "",
                "rcp": rcp,
                "rcp_tag": "errors" if r.errors else None,
                "runs": f"{sum(run.compliant for run in r.runs)}/{len(r.runs)}",
                "scaling_factor": r.scaling_factor,
                "timestamp": f"MLPerf Training {r.ruleset}",
                "source": source,
                "columns": {"system": "System", "division": "Division", "runs": "Runs used", "rcp": "Convergence (RCP)"},
            }
        )
    return rows, excluded


def task_view(name: str) -> SimpleNamespace:
    """What the page shows of a ``mlperf/<benchmark>`` table's task."""
    benchmark = name[len(PREFIX) :]
    return SimpleNamespace(
        title=f"MLPerf Training: {benchmark}",
        metric_label="quality",
        target_text="to the benchmark's quality target; score: olympic mean over the runs, in minutes (MLCommons' rules)",
    )
